use super::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An inbox message or outbox response (PRD §4.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Correlates a request with its response; also the file stem.
    pub correlation_id: String,
    /// Who wrote the message.
    pub source: MessageSource,
    /// Project the command is about, if any.
    #[serde(default)]
    pub project: Option<String>,
    /// When the message was written.
    pub queue_time: Timestamp,
    /// When the orchestrator answered it.
    #[serde(default)]
    pub processed_time: Option<Timestamp>,
    /// The command (PRD §5).
    pub command: String,
    /// Command arguments (requests) or results (responses); free-form.
    pub content: Map<String, Value>,
    /// Lifecycle state.
    pub status: MessageStatus,
    /// Error text when `status` is `error`.
    #[serde(default)]
    pub error: Option<String>,
    /// The user the message acts for (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Message author.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageSource {
    /// A person, through the CLI or a file.
    User,
    /// The orchestrator's own responses.
    Orchestrator,
    /// An agent.
    Agent,
}

/// Message lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageStatus {
    /// Waiting in the inbox.
    Queued,
    /// Being handled.
    Processing,
    /// Answered successfully.
    Done,
    /// Answered with an error.
    Error,
}
