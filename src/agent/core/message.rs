//! The conversation L2 owns: messages in a provider-neutral shape.

use crate::agent::tools::ToolCall;
use crate::agent::tools::subsystems::context::{ContextItem, estimate_tokens};

/// Who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The human (or a context-manager marker).
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// One message of the conversation (also the shape saved in a session file).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// The text (for a tool message: the result as JSON text).
    pub content: String,
    /// Tool calls the model asked for (assistant messages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Set on markers inserted by the context manager.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_marker: bool,
}

impl Message {
    /// A system prompt.
    pub fn system(text: impl Into<String>) -> Self {
        Self::plain(Role::System, text.into())
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::plain(Role::User, text.into())
    }

    /// A model reply, possibly with tool calls.
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls,
            ..Self::plain(Role::Assistant, text.into())
        }
    }

    /// A tool result for call `id`.
    pub fn tool(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(id.into()),
            ..Self::plain(Role::Tool, content.into())
        }
    }

    fn plain(role: Role, content: String) -> Self {
        Self {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_marker: false,
        }
    }
}

impl ContextItem for Message {
    fn size(&self) -> usize {
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| estimate_tokens(&c.arguments) + estimate_tokens(&c.name) + 8)
            .sum();
        estimate_tokens(&self.content) + calls + 4
    }

    fn is_pinned(&self) -> bool {
        self.role == Role::System
    }

    fn is_request(&self) -> bool {
        self.role == Role::User && !self.is_marker
    }

    fn starts_group(&self) -> bool {
        matches!(self.role, Role::User | Role::Assistant)
    }

    fn marker(dropped: usize, tokens: usize) -> Self {
        Self {
            is_marker: true,
            ..Self::user(format!(
                "[context manager: {dropped} earlier messages (about {tokens} tokens) were \
                 removed here to fit the context budget]"
            ))
        }
    }

    fn is_marker(&self) -> bool {
        self.is_marker
    }
}
