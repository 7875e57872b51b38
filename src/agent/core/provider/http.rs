//! The HTTP part shared by both protocols: a POST with retries and backoff, and chunk reads
//! with an idle timeout.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::agent::core::provider::{ProviderError, ProviderSettings};

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Build the HTTP client (no total timeout: a stream may legitimately run for minutes; the
/// idle timeout is applied per read instead).
pub fn client() -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| ProviderError::Client(e.to_string()))
}

/// An HTTP client built on first use: loading the TLS roots is the most expensive part of
/// start-up, and the prompt should not wait for it.
#[derive(Debug, Default)]
pub struct LazyClient(std::sync::OnceLock<reqwest::Client>);

impl LazyClient {
    /// The client, built now if this is the first call.
    pub fn get(&self) -> Result<&reqwest::Client, ProviderError> {
        if let Some(c) = self.0.get() {
            return Ok(c);
        }
        let built = client()?;
        Ok(self.0.get_or_init(|| built))
    }
}

/// POST `body` as JSON and return the response once its status is a success. 429 and 5xx
/// answers and connection failures are retried with exponential backoff.
pub async fn post_with_retries(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: &Value,
    settings: &ProviderSettings,
) -> Result<reqwest::Response, ProviderError> {
    let mut attempt: u32 = 0;
    loop {
        let send = client.post(url).headers(headers.clone()).json(body).send();
        let outcome = tokio::time::timeout(settings.request_timeout, send).await;
        let retry_after = match outcome {
            Err(_) => {
                return Err(ProviderError::Timeout(
                    settings.request_timeout,
                    "the response",
                ));
            }
            Ok(Err(e)) => {
                let err = ProviderError::Network {
                    url: url.to_string(),
                    message: error_chain(&e),
                };
                if !(e.is_connect() || e.is_request()) || attempt >= settings.max_retries {
                    return Err(err);
                }
                tracing::warn!(attempt, error = %err, "request failed, retrying");
                None
            }
            Ok(Ok(response)) => {
                let status = response.status();
                if status.is_success() {
                    return Ok(response);
                }
                let retryable = status.as_u16() == 429 || status.is_server_error();
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                let body = tokio::time::timeout(settings.request_timeout, response.text())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
                if !retryable || attempt >= settings.max_retries {
                    return Err(ProviderError::Http {
                        status: status.as_u16(),
                        url: url.to_string(),
                        body: body.chars().take(1000).collect(),
                    });
                }
                tracing::warn!(attempt, status = status.as_u16(), "provider busy, retrying");
                retry_after
            }
        };
        let backoff = settings
            .retry_base
            .saturating_mul(2u32.saturating_pow(attempt));
        tokio::time::sleep(retry_after.unwrap_or(backoff)).await;
        attempt += 1;
    }
}

/// The next chunk of the body, or `None` at its end; times out when the stream goes idle.
pub async fn next_chunk(
    response: &mut reqwest::Response,
    settings: &ProviderSettings,
) -> Result<Option<Vec<u8>>, ProviderError> {
    match tokio::time::timeout(settings.request_timeout, response.chunk()).await {
        Err(_) => Err(ProviderError::Timeout(
            settings.request_timeout,
            "the next stream chunk",
        )),
        Ok(Err(e)) => Err(ProviderError::Network {
            url: response.url().to_string(),
            message: error_chain(&e),
        }),
        Ok(Ok(chunk)) => Ok(chunk.map(|b| b.to_vec())),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
