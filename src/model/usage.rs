//! Tokens a job's agent used (extension, issue 35): one shape for Claude Code, agentshell
//! and Codex, whatever each prints, so the CLI, the dashboard and the notices show the three
//! the same way. The worker fills it (`worker::accounting`); `runtime.cost_usd` stays the cost.

use serde::{Deserialize, Serialize};

/// Tokens of a whole run: what the model read and what it wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenUsage {
    /// Input tokens, cached ones included (Claude's cache reads and writes, Codex's cached
    /// input): everything the model read.
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from a prompt cache (absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
}
