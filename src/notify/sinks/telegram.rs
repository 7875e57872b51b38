//! Telegram: `sendMessage` of the Bot API to the user's `notify.telegram_chat_id`, with the
//! token checks and message splitting of agentshell's Telegram client
//! ([`crate::agent::transport::telegram`]). The token is part of the URL: no error carries it.

use super::super::{Delivery, Sink, SinkError, SinkFuture};
use crate::agent::transport::telegram::{split_message, valid_token};
use crate::store::notify_config::TelegramSink;

/// Telegram's limit for one message (UTF-16 units).
const LIMIT: usize = 4096;

/// The Telegram sink.
pub struct Telegram {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Telegram {
    /// The sink as configured.
    pub fn new(cfg: &TelegramSink, http: reqwest::Client) -> Result<Telegram, String> {
        let token = super::super::secrets::secret(
            "telegram",
            cfg.bot_token.as_deref(),
            cfg.bot_token_credential.as_deref(),
        )?;
        if !valid_token(&token) {
            return Err("telegram: the bot token is not of the form 123456:ABC-…".into());
        }
        reqwest::Url::parse(&cfg.api_url)
            .map_err(|e| format!("telegram: api_url {:?}: {e}", cfg.api_url))?;
        Ok(Telegram {
            base: cfg.api_url.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }
}

impl Sink for Telegram {
    fn name(&self) -> &str {
        "telegram"
    }

    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move {
            let user = d.user.as_ref().map(|u| u.id.as_str()).unwrap_or("-");
            let Some(chat) = d
                .user
                .as_ref()
                .and_then(|u| u.notify.as_ref())
                .and_then(|n| n.telegram_chat_id.clone())
            else {
                return Err(SinkError::Permanent(format!(
                    "telegram: user {user} has no notify.telegram_chat_id"
                )));
            };
            let url = format!("{}/bot{}/sendMessage", self.base, self.token);
            for part in split_message(&d.text(), LIMIT) {
                let r = self
                    .http
                    .post(&url)
                    .json(&serde_json::json!({ "chat_id": chat, "text": part }))
                    .send()
                    .await
                    .map_err(super::http_error)?;
                let status = r.status();
                let v: serde_json::Value = r.json().await.map_err(super::http_error)?;
                if v["ok"] != serde_json::Value::Bool(true) {
                    let why = v["description"].as_str().unwrap_or("no description");
                    let msg = format!("telegram: {status}: {why}");
                    return Err(
                        if status.is_client_error() && status.as_u16() != 429 && status != 401 {
                            SinkError::Permanent(msg)
                        } else {
                            SinkError::Transient(msg)
                        },
                    );
                }
            }
            Ok(())
        })
    }
}
