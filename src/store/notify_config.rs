//! `notify:` in config.yaml (issue 31): the sinks a machine can deliver to, their endpoints
//! and secrets, the defaults for users who chose nothing, and the retry rules.
//!
//! Endpoints and secrets are authority (where a notice goes, with whose token): the notifier
//! reads this section only from the machine's own configuration
//! (`/etc/agentstore/config.yaml` or `~/.config/agentstore/config.yaml`), never from a store's
//! `config.yaml` (DESIGN §9). A secret is given inline or, better, as the name of a systemd
//! credential (`*_credential`, read from `$CREDENTIALS_DIRECTORY`); it is never logged.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `notify:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// What a user who chose nothing gets.
    pub defaults: NotifyDefaults,
    /// Retries and backoff.
    pub retry: RetryConfig,
    /// How often the notifier looks for new notices, in milliseconds (default 2000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Slack (Web API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackSink>,
    /// Telegram (Bot API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramSink>,
    /// E-mail (SMTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<EmailSink>,
    /// Signed webhooks, by name (a user chooses `webhook:<name>`).
    pub webhooks: BTreeMap<String, WebhookSink>,
}

/// `notify.defaults`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyDefaults {
    /// Default sinks (default: `desktop`).
    pub sinks: Vec<String>,
    /// Default events (default: everything but `job_finished` and `approval_answered`).
    pub events: Vec<String>,
}

impl Default for NotifyDefaults {
    fn default() -> Self {
        NotifyDefaults {
            sinks: vec!["desktop".into()],
            events: [
                "job_failed",
                "approval_waiting",
                "machine_lost",
                "graph_done",
                "graph_blocked",
                "retry_exhausted",
                "test",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// `notify.retry`: a failed delivery is tried again after a backoff that doubles from
/// `first_backoff_ms` up to `max_backoff_ms`, until `give_up_after_secs` have passed since
/// its first failure; then it is recorded as undeliverable. While a sink is failing, later
/// notices wait behind the first one (delivered in order once it is back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// First backoff (default 1000 ms).
    pub first_backoff_ms: u64,
    /// Longest backoff (default 300000 ms: five minutes).
    pub max_backoff_ms: u64,
    /// Give up this long after the first failure (default 86400 s: a day).
    pub give_up_after_secs: u64,
    /// Per-request timeout (default 30 s).
    pub timeout_secs: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            first_backoff_ms: 1000,
            max_backoff_ms: 300_000,
            give_up_after_secs: 86_400,
            timeout_secs: 30,
        }
    }
}

impl RetryConfig {
    /// The wait after the `n`th failure in a row (n ≥ 1), bounded.
    pub fn backoff(&self, n: u32) -> std::time::Duration {
        let first = self.first_backoff_ms.clamp(1, 3_600_000);
        let max = self.max_backoff_ms.clamp(first, 3_600_000);
        let ms = first.saturating_mul(1u64 << n.saturating_sub(1).min(30));
        std::time::Duration::from_millis(ms.min(max))
    }
}

/// `notify.slack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackSink {
    /// Web API base (default `https://slack.com/api`).
    #[serde(default = "slack_api")]
    pub api_url: String,
    /// Bot token (`xoxb-…`), inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token: Option<String>,
    /// Name of the systemd credential holding the bot token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token_credential: Option<String>,
    /// Channel for notices to no one in particular (admins' notices); user notices go to
    /// the user's `slack_username` (a member id: a direct message from the bot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// App-level token (`xapp-…`, scope `connections:write`), inline: with it (or
    /// [`SlackSink::app_token_credential`]) the notifier also holds a Socket Mode connection
    /// and answers approval buttons and `/agentstore` commands (`crate::slackapp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_token: Option<String>,
    /// Name of the systemd credential holding the app-level token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_token_credential: Option<String>,
}

impl SlackSink {
    /// Whether Socket Mode is configured (an app-level token is named).
    pub fn socket_mode(&self) -> bool {
        self.app_token.is_some() || self.app_token_credential.is_some()
    }
}

fn slack_api() -> String {
    "https://slack.com/api".into()
}

/// `notify.telegram`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramSink {
    /// Bot API base (default `https://api.telegram.org`).
    #[serde(default = "telegram_api")]
    pub api_url: String,
    /// Bot token, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token: Option<String>,
    /// Name of the systemd credential holding the bot token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token_credential: Option<String>,
}

fn telegram_api() -> String {
    "https://api.telegram.org".into()
}

/// `notify.email`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSink {
    /// SMTP server.
    pub smtp_host: String,
    /// Its port (default 25).
    #[serde(default = "smtp_port")]
    pub smtp_port: u16,
    /// `none` (a local relay), `starttls` or `tls` (default `starttls`).
    #[serde(default = "starttls")]
    pub security: String,
    /// Sender address.
    pub from: String,
    /// SMTP user, when the server wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Name of the systemd credential holding the SMTP password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_credential: Option<String>,
}

fn smtp_port() -> u16 {
    25
}

fn starttls() -> String {
    "starttls".into()
}

/// `notify.webhooks.<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSink {
    /// Where to POST.
    pub url: String,
    /// HMAC-SHA256 key, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Name of the systemd credential holding the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_credential: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let r = RetryConfig {
            first_backoff_ms: 100,
            max_backoff_ms: 1000,
            ..RetryConfig::default()
        };
        let ms: Vec<u128> = (1..7).map(|n| r.backoff(n).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(r.backoff(u32::MAX).as_millis(), 1000);
    }
}
