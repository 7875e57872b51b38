//! The tool registry: name → JSON schema + executor + policy entry, and the one method L2
//! calls, [`Toolbox::execute`], which runs every call through the subsystems.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::agent::tools::display::visible_line;
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::subsystems::memory::Memory;
use crate::agent::tools::subsystems::policy::{
    Decision, Policy, PolicyConfig, PolicyError, Verdict,
};
use crate::agent::tools::subsystems::secrets::SecretBroker;
use crate::agent::tools::{
    Ask, AskAnswer, BoxFuture, Confirmation, Delegate, ToolCall, ToolResult, ToolStatus,
};
use crate::agent::tools::{ask_user, delegate, memory_tools, run_command};

/// The tools part of the configuration (`config.json` keys).
#[derive(Debug, Clone, Deserialize)]
pub struct ToolsConfig {
    /// Default timeout of `run_command`, seconds.
    #[serde(default = "default_command_timeout")]
    pub command_timeout_secs: u64,
    /// Upper bound the model may request for `run_command`'s timeout, seconds.
    #[serde(default = "default_max_command_timeout")]
    pub max_command_timeout_secs: u64,
    /// Bytes of stdout and of stderr kept in a tool result (head + tail).
    #[serde(default = "default_max_output")]
    pub max_output_bytes: usize,
    /// The policy keys.
    #[serde(flatten)]
    pub policy: PolicyConfig,
}

fn default_command_timeout() -> u64 {
    30
}
fn default_max_command_timeout() -> u64 {
    600
}
fn default_max_output() -> usize {
    16 * 1024
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            command_timeout_secs: default_command_timeout(),
            max_command_timeout_secs: default_max_command_timeout(),
            max_output_bytes: default_max_output(),
            policy: PolicyConfig::default(),
        }
    }
}

/// What a tool's executor may use: injected, never reached for.
pub struct ToolEnv {
    /// The project root; every command runs here.
    pub root: PathBuf,
    /// The human-in-the-loop channel.
    pub ask: Arc<dyn Ask>,
    /// The secret broker.
    pub secrets: SecretBroker,
    /// The project's notes.
    pub memory: Memory,
    /// Limits and policy configuration.
    pub config: ToolsConfig,
    /// Sub-agents for the `delegate` tool; `None` leaves the tool out (sub-agents themselves).
    pub delegate: Option<Arc<dyn Delegate>>,
    /// What the user allowed for the rest of this session (shared with sub-agents; never
    /// written anywhere).
    pub grants: Arc<SessionGrants>,
    /// The kernel confinement of every command `run_command` starts.
    pub sandbox: Arc<crate::agent::tools::sandbox::session::CommandSandbox>,
}

/// Calls the user answered "always" for: kept in memory for the session only. Also whether
/// the session was ended because the model probed a secret (shared with sub-agents).
#[derive(Debug, Default)]
pub struct SessionGrants(
    parking_lot::Mutex<std::collections::BTreeSet<String>>,
    parking_lot::Mutex<Option<String>>,
);

/// The head of the notice shown when a session ends because a call carried a secret.
pub const PROBE_NOTICE: &str = "agentshell ended this session";

impl SessionGrants {
    /// Why the session was ended, if it was.
    pub fn halted(&self) -> Option<String> {
        self.1.lock().clone()
    }
    /// End the session: no further call runs and no further turn starts.
    pub fn halt(&self, notice: String) {
        let mut slot = self.1.lock();
        if slot.is_none() {
            *slot = Some(notice);
        }
    }
    /// Whether `key` was allowed for the session.
    pub fn contains(&self, key: &str) -> bool {
        self.0.lock().contains(key)
    }
    /// Allow `key` for the rest of the session.
    pub fn grant(&self, key: String) {
        self.0.lock().insert(key);
    }
    /// How many shapes are allowed.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }
    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}

/// A tool's schema as sent to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// Tool name.
    pub name: &'static str,
    /// What the tool does, for the model.
    pub description: &'static str,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// One tool: a schema, a policy entry and an executor.
pub trait Tool: Send + Sync {
    /// The schema sent to the model.
    fn schema(&self) -> ToolSchema;
    /// The policy entry: judge the parsed arguments.
    fn classify(&self, args: &Value, policy: &Policy) -> Decision;
    /// A one-line description of the call for the confirmation question, e.g. "Run `ls`".
    fn describe(&self, args: &Value) -> String;
    /// What an "always for this session" answer to this call's question covers, if it may
    /// be given at all (default: never; see `run_command::session_shape`).
    fn session_key(&self, _args: &Value) -> Option<String> {
        None
    }
    /// Run the call. Output is redacted and bounded by the toolbox afterwards.
    fn execute<'a>(&'a self, args: Value, env: &'a ToolEnv) -> BoxFuture<'a, ToolResult>;
}

/// The registry plus the subsystems around it.
pub struct Toolbox {
    tools: Vec<Box<dyn Tool>>,
    policy: Policy,
    env: ToolEnv,
}

impl Toolbox {
    /// The standard tool set: `run_command`, `ask_user`, `memory_search`, `memory_read`,
    /// `memory_write`, and `delegate` when sub-agents are wired in.
    pub fn new(env: ToolEnv) -> Result<Self, PolicyError> {
        let policy = Policy::new(&env.config.policy, &env.root)?
            .with_secret_values(env.secrets.guarded_values());
        let mut tools: Vec<Box<dyn Tool>> = vec![
            Box::new(run_command::RunCommand::new(
                env.sandbox.support(),
                Policy::new(&env.config.policy, &env.root).ok(),
            )),
            Box::new(ask_user::AskUser),
            Box::new(memory_tools::MemorySearch),
            Box::new(memory_tools::MemoryRead),
            Box::new(memory_tools::MemoryWrite),
        ];
        if env.delegate.is_some() {
            tools.push(Box::new(delegate::DelegateTool));
        }
        Ok(Self { tools, policy, env })
    }

    /// The schemas of all registered tools (all L2 ever learns about them).
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.tools.iter().map(|t| t.schema()).collect()
    }

    /// What the system prompt must carry from this layer: the secret placeholders available
    /// (names only) and the memory index.
    pub fn prompt_context(&self) -> String {
        let mut text = String::new();
        let names = self.env.secrets.names();
        if !names.is_empty() {
            text.push_str(
                "# Secrets\n\nAvailable as placeholders in run_command (command or env): ",
            );
            let list: Vec<String> = names
                .iter()
                .map(|n| format!("{{{{secret:{n}}}}}"))
                .collect();
            text.push_str(&list.join(", "));
            text.push_str(". Values are never shown to you; outputs are redacted.\n\n");
        }
        text.push_str("# Memory index (.agentshell/MEMORY.md)\n\n");
        let index = self.env.memory.index();
        if index.trim().is_empty() {
            text.push_str("(no notes yet; use memory_write to add one)");
        } else {
            text.push_str(index.trim());
            text.push_str("\n\nRead a note with memory_read, search notes with memory_search.");
        }
        text
    }

    /// The project root commands run in.
    pub fn root(&self) -> &std::path::Path {
        &self.env.root
    }

    /// Why the session was ended (a call probed a secret), if it was.
    pub fn halted(&self) -> Option<String> {
        self.env.grants.halted()
    }

    /// Classify, confirm, run, redact and bound one tool call.
    pub async fn execute(&self, call: &ToolCall) -> ToolResult {
        let Some(tool) = self.tools.iter().find(|t| t.schema().name == call.name) else {
            tracing::warn!(tool = %call.name, "unknown tool");
            return ToolResult::error(format!("unknown tool `{}`", call.name));
        };
        let args: Value = if call.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str(&call.arguments) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => return ToolResult::error("arguments must be a JSON object"),
                Err(e) => return ToolResult::error(format!("arguments are not valid JSON: {e}")),
            }
        };
        if let Some(notice) = self.env.grants.halted() {
            return ToolResult::denied(notice);
        }
        // A call whose own text holds a secret (in any form the redactor knows) is a probe:
        // running it would let the redaction of its output answer the guess. Refuse it and end
        // the session, so that at most this one bit leaks.
        let mut texts = Vec::new();
        json_strings(&args, &mut texts);
        if let Some(name) = texts.iter().find_map(|t| self.env.secrets.probe(t)) {
            let notice = format!(
                "{PROBE_NOTICE}: a {} call carried the secret {name} (or an encoding of part of \
                 it) in its own text, which only a model guessing the secret would write; the \
                 call did not run. Check what the model was given (project files, web pages) \
                 before starting a new session.",
                call.name
            );
            tracing::warn!(tool = %call.name, secret = %name, "a call carried a secret: session ended");
            self.env.grants.halt(notice.clone());
            return ToolResult::denied(notice);
        }
        let decision = tool.classify(&args, &self.policy);
        let what = tool.describe(&args);
        let redacted_what = self.env.secrets.redact(&what);
        tracing::info!(tool = %call.name, call = %redacted_what, verdict = ?decision.verdict, reason = %decision.reason, "policy decision");
        match decision.verdict {
            Verdict::Allow => {}
            Verdict::Deny => {
                return ToolResult::denied(format!("denied by policy: {}", decision.reason));
            }
            Verdict::Ask => {
                let grant = (!decision.every_time)
                    .then(|| tool.session_key(&args))
                    .flatten();
                let granted = grant
                    .as_deref()
                    .is_some_and(|k| self.env.grants.contains(k));
                let question = format!(
                    "{}? ({})",
                    visible_line(&redacted_what),
                    visible_line(&self.env.secrets.redact(&decision.reason))
                );
                let options: &[&str] = if grant.is_some() {
                    &["yes", "no", "always"]
                } else {
                    &["yes", "no"]
                };
                let answer = if granted {
                    tracing::info!(call = %redacted_what, "allowed: the user said always for this session");
                    AskAnswer::Answer("yes".to_string())
                } else {
                    let redacted = self.env.secrets.redact(&args.to_string());
                    let input = serde_json::from_str(&redacted)
                        .unwrap_or_else(|_| Value::String(redacted.clone()));
                    self.env
                        .ask
                        .confirm(&Confirmation {
                            tool: &call.name,
                            input: &input,
                            question: &question,
                            options,
                        })
                        .await
                };
                match answer {
                    AskAnswer::Answer(a) if a == "yes" => {
                        tracing::info!(call = %redacted_what, "confirmed by the user");
                    }
                    AskAnswer::Answer(a) if a == "always" && grant.is_some() => {
                        tracing::info!(call = %redacted_what, "confirmed by the user for the rest of the session");
                        if let Some(key) = grant {
                            self.env.grants.grant(key);
                        }
                    }
                    AskAnswer::Answer(_) => {
                        tracing::info!(call = %redacted_what, "declined by the user");
                        return ToolResult::denied(format!(
                            "declined by the user (policy: {})",
                            decision.reason
                        ));
                    }
                    AskAnswer::Unavailable(why) => {
                        tracing::info!(call = %redacted_what, why = %why, "denied: nobody to confirm");
                        return ToolResult::denied(format!(
                            "needs confirmation ({}), denied: {why}",
                            decision.reason
                        ));
                    }
                    AskAnswer::Denied(why) => {
                        tracing::info!(call = %redacted_what, why = %why, "denied");
                        return ToolResult::denied(format!(
                            "needs confirmation ({}), denied: {why}",
                            decision.reason
                        ));
                    }
                    AskAnswer::Cancelled => {
                        tracing::info!(call = %redacted_what, "cancelled by the user");
                        return ToolResult::cancelled();
                    }
                }
            }
        }
        let raw = tool.execute(args, &self.env).await;
        // The output of a call nobody approved holds a guarded secret: the model computed a
        // guess (`tr`, `jq`, arithmetic on a literal) or read one past the policy. Redacting it
        // would answer the guess, so the result never reaches the model: the session ends.
        if decision.verdict == Verdict::Allow
            && let Some(name) = [&raw.stdout, &raw.stderr]
                .iter()
                .find_map(|t| self.env.secrets.guarded_hit(t))
        {
            let notice = format!(
                "{PROBE_NOTICE}: the output of an automatically allowed {} call held the secret \
                 {name} (or part of it in a form redaction knows); it was not shown to the \
                 model, so that redaction cannot answer a guess. Check what the model was given \
                 before starting a new session.",
                call.name
            );
            tracing::warn!(tool = %call.name, secret = %name, "an allowed call printed a secret: session ended");
            self.env.grants.halt(notice.clone());
            return ToolResult::denied(notice);
        }
        let limit = self.env.config.max_output_bytes;
        let stdout = self.env.secrets.redact(&raw.stdout);
        let stderr = self.env.secrets.redact(&raw.stderr);
        let bounded_out = bound(&stdout, limit);
        let bounded_err = bound(&stderr, limit);
        let truncated =
            raw.truncated || bounded_out.len() != stdout.len() || bounded_err.len() != stderr.len();
        let result = ToolResult {
            status: raw.status,
            stdout: bounded_out,
            stderr: bounded_err,
            exit_code: raw.exit_code,
            truncated,
        };
        match result.status {
            ToolStatus::Ok => {
                tracing::info!(tool = %call.name, exit_code = ?result.exit_code, truncated, "tool finished")
            }
            _ => {
                tracing::warn!(tool = %call.name, status = ?result.status, stderr = %result.stderr, "tool failed")
            }
        }
        result
    }
}

/// Every string (keys included) inside a JSON value.
fn json_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| json_strings(v, out)),
        Value::Object(o) => {
            for (k, v) in o {
                out.push(k.clone());
                json_strings(v, out);
            }
        }
        _ => {}
    }
}

/// Read a string argument.
pub(crate) fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}
