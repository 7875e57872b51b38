//! A generic signed webhook: `POST <url>` with the notice as JSON, signed with HMAC-SHA256.
//!
//! Headers: `X-Agentstore-Delivery` (the delivery key: the same on every retry, so a
//! receiver deduplicates on it), `X-Agentstore-Timestamp` (Unix seconds) and
//! `X-Agentstore-Signature: sha256=<hex>` over `<timestamp>.<body>` (a receiver checks it and
//! the timestamp's age, so a captured request cannot be replayed later). A 2xx answer is
//! delivered; 4xx other than 408/429 is permanent (the receiver refuses it); anything else is
//! tried again.

use super::super::{Delivery, Sink, SinkError, SinkFuture};
use crate::store::notify_config::WebhookSink;
use hmac::{KeyInit, Mac};

/// One configured webhook.
pub struct Webhook {
    name: String,
    url: reqwest::Url,
    key: Vec<u8>,
    http: reqwest::Client,
}

/// `sha256=<hex>` of `<timestamp>.<body>` under `key` (`None` only if the MAC refused the
/// key, which HMAC never does).
pub fn signature(key: &[u8], timestamp: i64, body: &[u8]) -> Option<String> {
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    Some(format!("sha256={}", data_encoding::HEXLOWER.encode(&bytes)))
}

impl Webhook {
    /// The webhook `name` as configured.
    pub fn new(name: &str, cfg: &WebhookSink, http: reqwest::Client) -> Result<Webhook, String> {
        let url =
            reqwest::Url::parse(&cfg.url).map_err(|e| format!("{name}: url {:?}: {e}", cfg.url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{name}: url must be http or https"));
        }
        let key = super::super::secrets::secret(
            name,
            cfg.secret.as_deref(),
            cfg.secret_credential.as_deref(),
        )?;
        Ok(Webhook {
            name: name.to_string(),
            url,
            key: key.into_bytes(),
            http,
        })
    }
}

impl Sink for Webhook {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move {
            let body = serde_json::to_vec(&serde_json::json!({
                "delivery": d.key,
                "user": d.user.as_ref().map(|u| u.id.clone()),
                "notice": d.notice,
                "text": d.text(),
            }))
            .map_err(|e| SinkError::Permanent(e.to_string()))?;
            let ts = chrono::Utc::now().timestamp();
            let sig = signature(&self.key, ts, &body)
                .ok_or_else(|| SinkError::Permanent(format!("{}: cannot sign", self.name)))?;
            let r = self
                .http
                .post(self.url.clone())
                .header("content-type", "application/json")
                .header("x-agentstore-delivery", &d.key)
                .header("x-agentstore-timestamp", ts.to_string())
                .header("x-agentstore-signature", sig)
                .body(body)
                .send()
                .await
                .map_err(super::http_error)?;
            let status = r.status();
            if status.is_success() {
                Ok(())
            } else if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 429 {
                Err(SinkError::Permanent(format!(
                    "{}: the receiver refused it ({status})",
                    self.name
                )))
            } else {
                Err(SinkError::Transient(format!("{}: {status}", self.name)))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signature_matches_openssl() {
        // printf '1700000000.{}' | openssl dgst -sha256 -hmac k
        assert_eq!(
            super::signature(b"k", 1_700_000_000, b"{}").as_deref(),
            Some("sha256=c6ef4734033cee2367414a0939385eca0397754aa7a59716da7463a9298b5146")
        );
    }
}
