//! L3 · Tools: the hands, and the guards around them.
//!
//! The model invokes *tools* (`run_command`, `ask_user`, `memory_*`) through tool calls; the
//! code wraps every call in *subsystems* (policy, secret broker, context manager, memory) that
//! the model cannot call or skip. L2 sees exactly two things from here: the schemas
//! ([`Toolbox::schemas`]) and [`Toolbox::execute`].
//!
//! This layer imports nothing from L0, L1 or L2. The working directory, the [`Ask`] channel and
//! the limits are injected by whoever builds the [`Toolbox`].

pub mod ask_user;
pub mod delegate;
pub mod display;
pub mod memory_tools;
pub mod registry;
pub mod run_command;
pub mod sandbox;
pub mod shell_words;
pub mod subsystems;

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

pub use registry::{SessionGrants, Tool, ToolEnv, ToolSchema, Toolbox, ToolsConfig};

/// A boxed, sendable future; the shape of every async method on a trait object here.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool call as the model requested it. Arguments stay raw JSON text until a tool parses them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id that ties the result back to the call.
    pub id: String,
    /// Registered tool name.
    pub name: String,
    /// The arguments as the model wrote them (a JSON object, possibly malformed).
    pub arguments: String,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool ran (a command may still have a non-zero exit code).
    Ok,
    /// The call could not run: unknown tool, bad arguments, spawn failure.
    Error,
    /// Policy or the human said no; `stderr` holds the reason.
    Denied,
    /// The command hit its timeout and was killed.
    TimedOut,
    /// The human cancelled (Ctrl+C at a question); the turn ends here.
    Cancelled,
}

/// The structured outcome of one tool call, after redaction and bounding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolResult {
    /// How the call ended.
    pub status: ToolStatus,
    /// Standard output (or the tool's answer), redacted and bounded.
    pub stdout: String,
    /// Standard error (or the reason for a denial/error), redacted and bounded.
    pub stderr: String,
    /// Exit code of a command, when there is one.
    pub exit_code: Option<i32>,
    /// Whether any output was cut by the context manager.
    pub truncated: bool,
}

impl ToolResult {
    /// A successful result with only an answer.
    pub fn ok(stdout: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Ok,
            stdout: stdout.into(),
            stderr: String::new(),
            exit_code: None,
            truncated: false,
        }
    }

    /// A call that could not run.
    pub fn error(reason: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Error,
            stdout: String::new(),
            stderr: reason.into(),
            exit_code: None,
            truncated: false,
        }
    }

    /// A call refused by policy or by the human.
    pub fn denied(reason: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Denied,
            stdout: String::new(),
            stderr: reason.into(),
            exit_code: None,
            truncated: false,
        }
    }

    /// The human cancelled instead of answering.
    pub fn cancelled() -> Self {
        Self {
            status: ToolStatus::Cancelled,
            ..Self::denied("cancelled by the user")
        }
    }

    /// The text handed back to the model as the tool message: the result as a JSON object.
    pub fn to_model_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| format!("{self:?}"))
    }
}

/// The answer to an [`Ask`] question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskAnswer {
    /// The human answered (one of the options, or free text when there were none).
    Answer(String),
    /// Nobody can answer (headless run); the reason is recorded with the denial.
    Unavailable(String),
    /// Someone (a person, a rule, a deadline) said no and gave this reason, which the model
    /// sees (an unattended job's approval channel).
    Denied(String),
    /// The human cancelled (Ctrl+C) instead of answering.
    Cancelled,
}

/// The single human-in-the-loop channel, passed down from L1.
///
/// Three consumers use it — the L2 iteration budget, the policy's ASK decision and the
/// `ask_user` tool — and none of them knows whether a terminal, a chat or nobody is behind it.
pub trait Ask: Send + Sync {
    /// Ask `question`; `options` are the accepted answers (empty: free text).
    fn ask<'a>(&'a self, question: &'a str, options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer>;

    /// Confirm one tool call the policy asks about. A channel that decides by tool and input
    /// (a job's approvals) uses them; the default asks the question with its options.
    fn confirm<'a>(&'a self, request: &'a Confirmation<'a>) -> BoxFuture<'a, AskAnswer> {
        self.ask(request.question, request.options)
    }
}

/// A tool call the policy asks about, as [`Ask::confirm`] gets it.
#[derive(Debug, Clone, Copy)]
pub struct Confirmation<'a> {
    /// The tool's name (`run_command`, …).
    pub tool: &'a str,
    /// Its arguments (secret values redacted).
    pub input: &'a serde_json::Value,
    /// The question for a person: what would run, and why the policy asks.
    pub question: &'a str,
    /// The accepted answers (`yes`, `no`, maybe `always`).
    pub options: &'a [&'a str],
}

/// An [`Ask`] for unattended runs: it never waits and never says yes.
#[derive(Debug, Clone, Default)]
pub struct Unattended;

impl Ask for Unattended {
    fn ask<'a>(&'a self, _question: &'a str, _options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        Box::pin(async {
            AskAnswer::Unavailable("unattended run: no human to confirm".to_string())
        })
    }
}

/// Runs a task in a fresh sub-agent (an L2/L3 unit of its own) and returns its final text.
///
/// Like [`Ask`], it is built above and passed down: L3 never reaches up to L2. The sub-agent's
/// own tool calls go through the same policy and the same `ask()`.
pub trait Delegate: Send + Sync {
    /// Run `task` to completion; `Err` carries a rendered error.
    fn run<'a>(&'a self, task: &'a str) -> BoxFuture<'a, Result<String, String>>;
}
