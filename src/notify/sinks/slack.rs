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
use super::slack_api::SlackApi;
use crate::store::notices::NoticeKind;
use crate::store::notify_config::SlackSink;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The most characters a notice takes in one Slack message.
pub const MAX_TEXT: usize = 3000;

/// The metadata event type agentstore's messages carry.
pub const EVENT_TYPE: &str = "agentstore_notice";

/// The Slack sink.
pub struct Slack {
    api: SlackApi,
    channel: Option<String>,
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
        Ok(Slack {
            api: SlackApi::new("slack", &cfg.api_url, token, http)?,
            channel: cfg.channel.clone(),
            dms: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The Web API client (the bot token).
    pub fn api(&self) -> &SlackApi {
        &self.api
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
            .api
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
        let v = self
            .api
            .get(
                "conversations.history",
                &[
                    ("channel", channel),
                    ("limit", "200"),
                    ("include_all_metadata", "true"),
                ],
            )
            .await?;
        Ok(v["messages"].as_array().is_some_and(|ms| {
            ms.iter().any(|m| {
                m["metadata"]["event_type"] == EVENT_TYPE
                    && m["metadata"]["event_payload"]["delivery"] == key
            })
        }))
    }
}

impl Slack {
    /// `d` as a reply in thread `t` of the user's direct messages with the app (the channel
    /// is always theirs: a thread record chooses none). A reply an earlier attempt may have
    /// posted is looked for among the thread's replies first.
    async fn reply(
        &self,
        d: &Delivery,
        channel: &str,
        t: &crate::notify::ThreadReply,
    ) -> Result<(), SinkError> {
        if d.uncertain {
            let v = self
                .api
                .get(
                    "conversations.replies",
                    &[
                        ("channel", channel),
                        ("ts", &t.ts),
                        ("limit", "200"),
                        ("include_all_metadata", "true"),
                    ],
                )
                .await?;
            let there = v["messages"].as_array().is_some_and(|ms| {
                ms.iter().any(|m| {
                    m["metadata"]["event_type"] == EVENT_TYPE
                        && m["metadata"]["event_payload"]["delivery"] == d.key.as_str()
                })
            });
            if there {
                return Ok(());
            }
        }
        let text = escape(&crate::store::notices::clip(&t.text, MAX_TEXT));
        self.api
            .call(
                "chat.postMessage",
                json!({
                    "channel": channel,
                    "thread_ts": t.ts,
                    "text": text,
                    "unfurl_links": false,
                    "metadata": metadata(d),
                }),
            )
            .await?;
        Ok(())
    }
}

/// `s` with Slack's three control characters (`&`, `<`, `>`) escaped: text from a job, a
/// user or a document shows as written and mentions nobody.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The action ids of an approval message's buttons: allow, allow always, deny.
pub const ACTION_ALLOW: &str = "agentstore_allow";
/// See [`ACTION_ALLOW`].
pub const ACTION_ALWAYS: &str = "agentstore_always";
/// See [`ACTION_ALLOW`].
pub const ACTION_DENY: &str = "agentstore_deny";

/// The message's metadata: the delivery key, and for an approval the queue, request and job
/// the buttons answer (the Socket Mode app takes them from Slack's copy of the message,
/// never from the click alone).
fn metadata(d: &Delivery) -> Value {
    let n = &d.notice;
    let mut p = json!({ "delivery": d.key, "kind": n.kind.name() });
    for (k, v) in [
        ("queue", &n.queue),
        ("request", &n.request_id),
        ("job", &n.job_id),
    ] {
        if let Some(v) = v {
            p[k] = json!(v);
        }
    }
    json!({ "event_type": EVENT_TYPE, "event_payload": p })
}

/// Block Kit for `d`: its text, and under an approval that waits the Allow / Always allow /
/// Deny buttons (value `<queue>/<request>`).
fn blocks(d: &Delivery, text: &str) -> Option<Value> {
    let n = &d.notice;
    let (NoticeKind::ApprovalWaiting, Some(q), Some(r)) = (n.kind, &n.queue, &n.request_id) else {
        return None;
    };
    let value = format!("{q}/{r}");
    let button = |id: &str, label: &str, style: Option<&str>| {
        let mut b = json!({
            "type": "button", "action_id": id, "value": value,
            "text": { "type": "plain_text", "text": label },
        });
        if let Some(s) = style {
            b["style"] = json!(s);
        }
        b
    };
    Some(json!([
        { "type": "section", "text": { "type": "plain_text", "text": text, "emoji": false } },
        { "type": "actions", "block_id": "agentstore_approval", "elements": [
            button(ACTION_ALLOW, "Allow", Some("primary")),
            button(ACTION_ALWAYS, "Always allow", None),
            button(ACTION_DENY, "Deny", Some("danger")),
        ]},
    ]))
}

impl Sink for Slack {
    fn name(&self) -> &str {
        "slack"
    }

    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move {
            let channel = self.channel_for(d).await?;
            if let Some(t) = &d.thread {
                return self.reply(d, &channel, t).await;
            }
            if d.uncertain && self.already_posted(&channel, &d.key).await? {
                return Ok(());
            }
            let text = text_for(d);
            let mut body = json!({
                "channel": channel,
                "text": text,
                "unfurl_links": false,
                "metadata": metadata(d),
            });
            if let Some(b) = blocks(d, &text) {
                body["blocks"] = b;
            }
            self.api.call("chat.postMessage", body).await?;
            Ok(())
        })
    }
}
