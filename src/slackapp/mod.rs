//! The Slack app over Socket Mode (issue 31): no public URL is needed. The notifier that
//! holds the store's notifier lock (one machine) also holds this connection: it asks
//! `apps.connections.open` for a WebSocket URL with the app-level token, connects, waits for
//! `hello`, acknowledges every envelope by its `envelope_id`, reconnects when Slack says
//! `disconnect` (refresh, link disabled) or the socket drops, and handles:
//!
//! - `interactive` `block_actions` from the Allow / Always allow / Deny buttons that approval
//!   notices carry ([`crate::notify::sinks::slack`]): answered through `Queue1.AnswerFor`, the
//!   path the web uses, for the agentstore user the clicking Slack member maps to, then the
//!   message is updated with who answered ([`actions`]);
//! - `slash_commands`: `/agentstore status|approve|deny …` ([`commands`]), and the job
//!   commands `research-code`, `create-prd`, `list-jobs`, `view-job` asked of orchestratord
//!   for the mapped user ([`jobs`]): a job asked for is answered in a thread of the member's
//!   direct messages with the app, its result posted there when it ends.
//!
//! Who answers: the Slack member id of the click (Slack's word, over our authenticated socket)
//! must be the `slack_username` of exactly one user document — a mapping the user sets, never
//! taken from a payload alone — and the queue manager applies PRD §10 to that user (one home
//! for the rule). What is answered: the queue and request are read from Slack's own copy of
//! the message the button is on (its metadata, written by our bot), and the button's value
//! must name the same. Refused, with a reply only the clicker sees and never an answer: an
//! unmapped or ambiguous member, a member whose user may not answer, a replayed envelope
//! (also after a restart: [`replay`]), an action on a request already answered, a button
//! that does not belong to its message.

pub mod actions;
pub mod commands;
pub mod jobs;
pub mod replay;
pub mod socket;

use crate::model::User;
use crate::notify::sinks::slack_api::SlackApi;
use crate::store::Store;
use crate::store::notify_config::SlackSink;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::time::Duration;

/// The app: its two tokens, the store, the bus it answers on.
pub struct SlackApp {
    /// Web API with the bot token (messages, updates, replies).
    pub bot: SlackApi,
    /// Web API with the app-level token (`apps.connections.open` only).
    pub app: SlackApi,
    /// The store (user documents, approval requests).
    pub store: Store,
    /// The bus the queue managers are on.
    pub conn: zbus::Connection,
    seen: Mutex<replay::Seen>,
    answered: Mutex<HashSet<(String, String)>>,
}

impl SlackApp {
    /// The app as `cfg` configures it (`None`: Socket Mode is not configured); the error
    /// names what is missing, never a token.
    pub fn new(
        cfg: &SlackSink,
        store: Store,
        conn: zbus::Connection,
        timeout: Duration,
    ) -> Result<Option<SlackApp>, String> {
        if !cfg.socket_mode() {
            return Ok(None);
        }
        let http = crate::notify::sinks::http_client(timeout);
        let bot_token = crate::notify::secrets::secret(
            "slack",
            cfg.bot_token.as_deref(),
            cfg.bot_token_credential.as_deref(),
        )?;
        let app_token = crate::notify::secrets::secret(
            "slack app",
            cfg.app_token.as_deref(),
            cfg.app_token_credential.as_deref(),
        )?;
        if !app_token.starts_with("xapp-") {
            return Err("slack app: the app-level token does not start with xapp-".into());
        }
        Ok(Some(SlackApp {
            bot: SlackApi::new("slack", &cfg.api_url, bot_token, http.clone())?,
            app: SlackApi::new("slack app", &cfg.api_url, app_token, http)?,
            seen: Mutex::new(replay::Seen::load(&store)),
            store,
            conn,
            answered: Mutex::new(HashSet::new()),
        }))
    }

    /// Records envelope `id`; false when it was seen before (a replay), also before a
    /// restart ([`replay`]).
    pub fn first_sight(&self, id: &str) -> bool {
        self.seen.lock().first_sight(id)
    }

    /// Whether the message (`channel`, `ts`) was answered through this app.
    fn was_answered(&self, channel: &str, ts: &str) -> bool {
        self.answered
            .lock()
            .contains(&(channel.to_string(), ts.to_string()))
    }

    fn mark_answered(&self, channel: &str, ts: &str) {
        self.answered
            .lock()
            .insert((channel.to_string(), ts.to_string()));
    }

    /// The agentstore user Slack member `member` maps to: the one user document whose
    /// `slack_username` is that member id. The error is the reply to the member.
    pub fn user_for(&self, member: &str) -> Result<User, String> {
        let users = self
            .store
            .users(&mut |e| tracing::warn!("user document skipped for Slack: {e}"))
            .map_err(|e| format!("agentstore cannot read its users: {e}"))?;
        let mut found: Vec<User> = users
            .into_iter()
            .filter(|u| u.slack_username.as_deref() == Some(member))
            .collect();
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(format!(
                "Refused: your Slack account ({member}) is not linked to an agentstore user. Ask for `orchestrator set-user <you> --slack-username {member}`."
            )),
            n => Err(format!(
                "Refused: {n} agentstore users name your Slack account ({member}) as theirs; an administrator must settle which one is you."
            )),
        }
    }
}

/// A D-Bus error as the words a person reads (the queue manager's own message).
pub fn bus_error_text(queue: &str, e: &zbus::Error) -> String {
    bus_error_words(e, &format!("no queue manager serves queue {queue:?}"))
}

/// A D-Bus error as the words a person reads: the daemon's own message, or `absent` when
/// nothing owns the name called.
pub fn bus_error_words(e: &zbus::Error, absent: &str) -> String {
    match e {
        zbus::Error::MethodError(name, msg, _) => {
            let name = name.as_str();
            if name == "org.freedesktop.DBus.Error.ServiceUnknown"
                || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
            {
                return absent.to_string();
            }
            msg.clone().unwrap_or_else(|| name.to_string())
        }
        zbus::Error::FDO(f) => match &**f {
            zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_) => {
                absent.to_string()
            }
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}
