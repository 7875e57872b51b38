//! Slack over the Web API: `conversations.open` (a direct message from the bot to the user's
//! `slack_username`, a member id), `chat.postMessage` with the delivery key in the message's
//! metadata, and — for a delivery an earlier attempt may have made — `conversations.history`
//! first, so a message already there is not posted twice.
//!
//! Slack shows at most 3000 characters of a text block nicely: a longer notice is cut there,
//! with the command that shows the whole of it. A refused token (`invalid_auth`,
//! `token_revoked`, …) is transient: the notices wait (other sinks go on) until an
//! administrator fixes it or they are given up on; the error never holds the token.

use super::super::{Delivery, Sink, SinkError, SinkFuture};
use crate::store::notify_config::SlackSink;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The most characters a notice takes in one Slack message.
pub const MAX_TEXT: usize = 3000;

/// The metadata event type agentstore's messages carry.
pub const EVENT_TYPE: &str = "agentstore_notice";

/// Slack errors that an administrator fixes (the delivery waits, it is not given up at once).
const TRANSIENT: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "ratelimited",
    "service_unavailable",
    "fatal_error",
    "internal_error",
    "request_timeout",
];

/// The Slack sink.
pub struct Slack {
    base: String,
    token: String,
    channel: Option<String>,
    http: reqwest::Client,
    dms: tokio::sync::Mutex<HashMap<String, String>>,
}

/// Whether `s` is a Slack member id (`U…`/`W…`).
fn is_member_id(s: &str) -> bool {
    s.len() >= 3
        && s.len() <= 32
        && (s.starts_with('U') || s.starts_with('W'))
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// The text of `d` for Slack: cut at [`MAX_TEXT`] with where to read the rest.
pub fn text_for(d: &Delivery) -> String {
    let t = d.text();
    if t.chars().count() <= MAX_TEXT {
        return t;
    }
    let more = match &d.notice.job_id {
        Some(j) => format!("\n… (cut; the whole of it: `orchestrator view-job {j}`)"),
        None => "\n… (cut; the whole of it: `orchestrator notifications`)".to_string(),
    };
    let keep = MAX_TEXT.saturating_sub(more.chars().count());
    let mut out: String = t.chars().take(keep).collect();
    out.push_str(&more);
    out
}

impl Slack {
    /// The sink as configured.
    pub fn new(cfg: &SlackSink, http: reqwest::Client) -> Result<Slack, String> {
        let token = super::super::secrets::secret(
            "slack",
            cfg.bot_token.as_deref(),
            cfg.bot_token_credential.as_deref(),
        )?;
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("slack: the bot token holds white space".into());
        }
        reqwest::Url::parse(&cfg.api_url)
            .map_err(|e| format!("slack: api_url {:?}: {e}", cfg.api_url))?;
        Ok(Slack {
            base: cfg.api_url.trim_end_matches('/').to_string(),
            token,
            channel: cfg.channel.clone(),
            http,
            dms: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Calls Web API `method` with `body`; the answer when `ok` is true.
    async fn call(&self, method: &str, body: Value) -> Result<Value, SinkError> {
        let r = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .map_err(super::http_error)?;
        self.answer(method, r).await
    }

    /// The answer of Web API `method`: its body when `ok` is true, else the error it names.
    async fn answer(&self, method: &str, r: reqwest::Response) -> Result<Value, SinkError> {
        let status = r.status();
        if status.as_u16() == 429 || status.is_server_error() {
            return Err(SinkError::Transient(format!("slack {method}: {status}")));
        }
        let v: Value = r.json().await.map_err(super::http_error)?;
        if v["ok"] == Value::Bool(true) {
            return Ok(v);
        }
        let err = v["error"].as_str().unwrap_or("no error named").to_string();
        let msg = format!("slack {method}: {err}");
        Err(if TRANSIENT.contains(&err.as_str()) {
            SinkError::Transient(msg)
        } else {
            SinkError::Permanent(msg)
        })
    }

    /// The channel a delivery goes to: the user's direct-message channel, or the configured
    /// channel for a notice to no one in particular.
    async fn channel_for(&self, d: &Delivery) -> Result<String, SinkError> {
        let Some(user) = &d.user else {
            return self
                .channel
                .clone()
                .ok_or_else(|| SinkError::Permanent("slack: no notify.slack.channel".into()));
        };
        let Some(member) = user.slack_username.as_deref().filter(|s| !s.is_empty()) else {
            return Err(SinkError::Permanent(format!(
                "slack: user {} has no slack_username",
                user.id
            )));
        };
        if !is_member_id(member) {
            return Err(SinkError::Permanent(format!(
                "slack: user {}'s slack_username {member:?} is not a Slack member id (U…)",
                user.id
            )));
        }
        if let Some(c) = self.dms.lock().await.get(member) {
            return Ok(c.clone());
        }
        let v = self
            .call("conversations.open", json!({ "users": member }))
            .await?;
        let c = v["channel"]["id"]
            .as_str()
            .ok_or_else(|| SinkError::Transient("slack conversations.open: no channel id".into()))?
            .to_string();
        self.dms.lock().await.insert(member.to_string(), c.clone());
        Ok(c)
    }

    /// Whether a message carrying `key` is among the channel's recent messages (a read
    /// method: its arguments go in the query string).
    async fn already_posted(&self, channel: &str, key: &str) -> Result<bool, SinkError> {
        let mut url = reqwest::Url::parse(&format!("{}/conversations.history", self.base))
            .map_err(|e| SinkError::Permanent(format!("slack: {e}")))?;
        url.query_pairs_mut()
            .append_pair("channel", channel)
            .append_pair("limit", "200")
            .append_pair("include_all_metadata", "true");
        let r = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(super::http_error)?;
        let v = self.answer("conversations.history", r).await?;
        Ok(v["messages"].as_array().is_some_and(|ms| {
            ms.iter().any(|m| {
                m["metadata"]["event_type"] == EVENT_TYPE
                    && m["metadata"]["event_payload"]["delivery"] == key
            })
        }))
    }
}

impl Sink for Slack {
    fn name(&self) -> &str {
        "slack"
    }

    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move {
            let channel = self.channel_for(d).await?;
            if d.uncertain && self.already_posted(&channel, &d.key).await? {
                return Ok(());
            }
            self.call(
                "chat.postMessage",
                json!({
                    "channel": channel,
                    "text": text_for(d),
                    "unfurl_links": false,
                    "metadata": {
                        "event_type": EVENT_TYPE,
                        "event_payload": { "delivery": d.key, "kind": d.notice.kind.name() },
                    },
                }),
            )
            .await?;
            Ok(())
        })
    }
}
