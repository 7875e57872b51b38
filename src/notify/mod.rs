//! Notifications (issue 31): notices the daemons emit ([`crate::store::notices`]) delivered
//! to each user's chosen sinks — desktop, Slack, Telegram, e-mail, signed webhooks — exactly
//! once per notice, user and sink, across restarts and machines.
//!
//! One machine sends: the notifier holds the store lock `.notify.lock` (the orchestrator's
//! lock machinery, [`crate::orchestrator::StoreLock`]), so a second notifier on this or another
//! machine waits as a stand-by. What was sent is recorded in the store, one ledger per
//! machine (`logs/notify-ledger@<host>.jsonl`, [`ledger`]): before each attempt a `begin`
//! line, after it `sent`, `failed` (retried with a bounded backoff) or `dead` (given up, with
//! the reason). A notifier that starts — here after a kill -9, or on another machine after
//! a takeover — reads every machine's ledger and skips what was sent. The one window left, a
//! kill between the sink's acceptance and the `sent` line, is closed per sink: a webhook is
//! sent again with the same `X-Agentstore-Delivery` id (receivers deduplicate on it), Slack
//! is asked first whether the message is already there (`conversations.history`, by the
//! delivery id in the message's metadata); Telegram, e-mail and the desktop have no such
//! handle, and a notice that was in flight there may come twice (never not at all).

pub mod args;
pub mod daemon;
pub mod dispatch;
pub mod ledger;
pub mod route;
pub mod secrets;
pub mod sinks;
pub mod threads;

use crate::model::User;
use crate::store::notices::Notice;
use std::future::Future;
use std::pin::Pin;

/// One delivery: a notice, for one user (or the admins' channel), to one sink.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `<notice id>/<user or "-">/<sink>`: unique, stable, sent as the idempotency key.
    pub key: String,
    /// The notice.
    pub notice: Notice,
    /// Who it is for (`None`: the admins' channel of the sink).
    pub user: Option<User>,
    /// The sink's name (`slack`, `webhook:ci`, …).
    pub sink: String,
    /// True when an earlier attempt may have reached the sink (a `begin` without an end in
    /// the ledger): the sink checks before sending again, where it can.
    pub uncertain: bool,
    /// A reply in the Slack thread the job was asked for in ([`threads`]), instead of a
    /// message of its own.
    pub thread: Option<ThreadReply>,
}

/// A delivery as a reply in a Slack thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadReply {
    /// The thread's first message.
    pub ts: String,
    /// The reply.
    pub text: String,
}

/// The sink-name part of a thread reply's delivery key (the sink itself is `slack`).
pub const SLACK_THREAD: &str = "slack-thread";

impl Delivery {
    /// The key of `notice` for `user` at `sink`.
    pub fn key_for(notice: &str, user: Option<&str>, sink: &str) -> String {
        format!("{notice}/{}/{sink}", user.unwrap_or("-"))
    }

    /// Plain text of the notice: the title, then the body and the details.
    pub fn text(&self) -> String {
        let n = &self.notice;
        let mut t = n.title.clone();
        if !n.body.is_empty() {
            t.push_str("\n\n");
            t.push_str(&n.body);
        }
        let mut details = Vec::new();
        if let (Some(q), Some(j)) = (&n.queue, &n.job_id) {
            details.push(format!("job {j} (queue {q})"));
        }
        if let Some(p) = &n.project {
            details.push(format!("project {p}"));
        }
        if let Some(e) = &n.error {
            details.push(format!("error: {e}"));
        }
        if let Some(c) = n.cost_usd {
            details.push(format!("cost: ${c:.4}"));
        }
        if let Some(d) = &n.deadline {
            details.push(format!("answer by {d}"));
        }
        if let Some(a) = &n.answered_by {
            details.push(format!("answered by {a}"));
        }
        if !details.is_empty() {
            t.push_str("\n\n");
            t.push_str(&details.join("\n"));
        }
        t
    }
}

/// Why a delivery did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// Worth trying again later (the sink is down, slow, rate-limited, or its token was
    /// refused — an administrator may fix it).
    #[error("{0}")]
    Transient(String),
    /// This delivery can never succeed (no address for the user, a refused recipient): it is
    /// recorded as undeliverable at once.
    #[error("{0}")]
    Permanent(String),
}

/// The future a sink returns.
pub type SinkFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'a>>;

/// A place notices go: one implementation per kind of sink.
pub trait Sink: Send + Sync {
    /// Its name (`slack`, `webhook:ci`).
    fn name(&self) -> &str;
    /// Delivers `d`, or says why not. Never logs a secret.
    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a>;
}
