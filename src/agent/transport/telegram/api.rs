//! The Bot API over HTTP: one method call, retried after the `retry_after` a 429 names, its
//! errors stripped of the URL (it holds the token); `sendDocument` as a multipart form.

use std::time::Duration;

use reqwest::multipart::{Form, Part};
use serde_json::Value;

/// Attempts of one Bot API call that Telegram throttles (429).
const RATE_LIMIT_ATTEMPTS: u32 = 6;
/// Longest `retry_after` honoured in one wait.
const MAX_RETRY_AFTER: u64 = 300;

/// The Bot API over HTTP. Errors never carry the URL (it holds the token).
pub(super) struct BotApi {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    pub(super) token: String,
}

/// What a method is called with.
pub(super) enum Body {
    Json(Value),
    /// `sendDocument`: the chat, a caption, a file name and its contents.
    Document {
        chat_id: i64,
        caption: String,
        name: String,
        contents: Vec<u8>,
    },
}

impl BotApi {
    pub(super) fn redact(&self, text: &str) -> String {
        text.replace(&self.token, "<token>")
    }

    pub(super) async fn call(&self, method: &str, body: &Body) -> Result<Value, String> {
        let url = format!(
            "{}/bot{}/{method}",
            self.base.trim_end_matches('/'),
            self.token
        );
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = match body {
                Body::Json(v) => self.client.post(&url).json(v),
                Body::Document {
                    chat_id,
                    caption,
                    name,
                    contents,
                } => self.client.post(&url).multipart(
                    document_form(*chat_id, caption, name, contents)
                        .map_err(|e| format!("{method}: {e}"))?,
                ),
            };
            let response = request
                .send()
                .await
                .map_err(|e| format!("{method}: {}", self.redact(&e.without_url().to_string())))?;
            let status = response.status().as_u16();
            let answer: Value = response.json().await.map_err(|e| {
                format!(
                    "{method}: HTTP {status}, unreadable answer: {}",
                    self.redact(&e.without_url().to_string())
                )
            })?;
            if answer.get("ok") == Some(&Value::Bool(true)) {
                return Ok(answer.get("result").cloned().unwrap_or(Value::Null));
            }
            let code = answer
                .get("error_code")
                .and_then(Value::as_u64)
                .unwrap_or(u64::from(status));
            let description = answer
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("no description");
            if code == 429 && attempt < RATE_LIMIT_ATTEMPTS {
                let wait = answer
                    .pointer("/parameters/retry_after")
                    .and_then(Value::as_u64)
                    .unwrap_or(1)
                    .clamp(1, MAX_RETRY_AFTER);
                tracing::warn!(method, wait, "telegram rate limit: retrying after {wait} s");
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            return Err(format!(
                "{method}: error {code}: {}",
                self.redact(description)
            ));
        }
    }
}

/// The `sendDocument` form: the chat, the caption and the file (its name cut to characters
/// any client shows as they are).
pub(super) fn document_form(
    chat_id: i64,
    caption: &str,
    name: &str,
    contents: &[u8],
) -> reqwest::Result<Form> {
    let clean_name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let document = Part::bytes(contents.to_vec())
        .file_name(clean_name)
        .mime_str("text/plain; charset=utf-8")?;
    Ok(Form::new()
        .text("chat_id", chat_id.to_string())
        .text("caption", caption.to_string())
        .part("document", document))
}
