//! Wiring: L0's products (root, config, credentials, rules) plus the environment become an L3
//! toolbox and an L2 agent, with L1's `ask()` passed down. Sits above the four layers, like
//! the binary; kept in the library so tests and the job worker can assemble an agent too.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use thiserror::Error;

use crate::agent::bootstrap::{AGENT_DIR, Project};
use crate::agent::core::accounting::{RequestStats, SubagentLedger};
use crate::agent::core::provider::StreamEvent;
use crate::agent::core::provider::model_spec::known_key_vars;
use crate::agent::core::provider::{Provider, ProviderError};
use crate::agent::core::{Agent, CoreConfig, CoreEvents, TurnStop, build_provider};
use crate::agent::tools::sandbox::session::CommandSandbox;
use crate::agent::tools::sandbox::{SandboxError, Support};
use crate::agent::tools::subsystems::memory::Memory;
use crate::agent::tools::subsystems::policy::PolicyError;
use crate::agent::tools::subsystems::secrets::SecretBroker;
use crate::agent::tools::{
    Ask, BoxFuture, Delegate, SessionGrants, ToolCall, ToolEnv, ToolResult, ToolStatus, Toolbox,
    ToolsConfig,
};

/// Overrides the configured model string.
pub const ENV_MODEL: &str = "AGENTSHELL_MODEL";
/// Overrides the configured base URL.
pub const ENV_BASE_URL: &str = "AGENTSHELL_BASE_URL";
/// An API key used whatever the provider (wins over the provider's own variable).
pub const ENV_API_KEY: &str = "AGENTSHELL_API_KEY";
/// Replaces `~/.agentshell`.
pub const ENV_HOME: &str = "AGENTSHELL_HOME";
/// `tracing` filter directive for the log file (default `info`).
pub const ENV_LOG: &str = "AGENTSHELL_LOG";
/// Caps the Landlock ABI the sandbox uses (only lower than the kernel's: `0` shows how
/// agentshell behaves where the kernel cannot confine).
pub const ENV_SANDBOX_ABI: &str = "AGENTSHELL_SANDBOX_ABI";

/// What the kernel enforces of the command sandbox in this environment.
pub fn sandbox_support(env: &BTreeMap<String, String>) -> Support {
    Support::detect(env.get(ENV_SANDBOX_ABI).and_then(|v| v.trim().parse().ok()))
}

/// The configuration could not be turned into an agent.
#[derive(Debug, Error)]
pub enum WiringError {
    /// A key has the wrong type.
    #[error("config: {0}")]
    Config(#[from] serde_json::Error),
    /// A deny pattern is invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The model cannot be reached as configured.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The command sandbox could not be set up.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// The merged config with the environment overrides applied (`AGENTSHELL_MODEL`,
/// `AGENTSHELL_BASE_URL`).
pub fn effective_config(project: &Project, env: &BTreeMap<String, String>) -> Value {
    let mut config = project.config.clone();
    if !config.is_object() {
        config = Value::Object(Default::default());
    }
    for (var, key) in [(ENV_MODEL, "model"), (ENV_BASE_URL, "base_url")] {
        if let Some(v) = env.get(var).filter(|v| !v.is_empty()) {
            config[key] = Value::String(v.clone());
        }
    }
    config
}

/// Whether an environment variable name looks like a credential: a known key variable, or a
/// name with KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH in it
/// (`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `GH_AUTH`), except the agent sockets.
pub fn is_credential_name(name: &str) -> bool {
    if matches!(name, "SSH_AUTH_SOCK" | "XAUTHORITY" | "GPG_AGENT_INFO") {
        return false;
    }
    let upper = name.to_ascii_uppercase();
    known_key_vars().contains(&name)
        || name == ENV_API_KEY
        || [
            "KEY",
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "PASSWD",
            "CREDENTIAL",
            "AUTH",
        ]
        .iter()
        .any(|s| upper.contains(s))
}

/// The user's secrets: `~/.agentshell/.env`, overlaid by credential-like variables of the
/// process environment (which the worker uses to pass keys).
pub fn user_secrets(project: &Project, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut secrets = project.user_env.clone();
    for (k, v) in env {
        if is_credential_name(k) && !v.is_empty() {
            secrets.insert(k.clone(), v.clone());
        }
    }
    secrets
}

/// Build the toolbox and the agent, without sub-agents. Provider keys come from the process
/// environment or the user's `.env` — never from the project's `.env`.
pub fn build_agent(
    project: &Project,
    env: &BTreeMap<String, String>,
    ask: Arc<dyn Ask>,
) -> Result<Agent, WiringError> {
    assemble(project, env, ask, None, Arc::default())
}

/// Like [`build_agent`], plus the `delegate` tool (unless config `"subagents": false`): each
/// delegated task runs in a fresh agent built the same way (without `delegate`), sharing
/// `ask` and reporting its progress to `events`.
pub fn build_agent_with_subagents(
    project: &Project,
    env: &BTreeMap<String, String>,
    ask: Arc<dyn Ask>,
    events: Arc<dyn CoreEvents>,
) -> Result<Agent, WiringError> {
    let config = effective_config(project, env);
    let enabled = config
        .get("subagents")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let limit = |key: &str, default: u64| {
        config
            .get(key)
            .and_then(Value::as_u64)
            .map_or(default, |v| v.min(1000))
    };
    let ledger = Arc::new(SubagentLedger::default());
    let grants: Arc<SessionGrants> = Arc::default();
    let delegate: Option<Arc<dyn Delegate>> = enabled.then(|| {
        Arc::new(SubAgents {
            project: project.clone(),
            env: env.clone(),
            ask: Arc::clone(&ask),
            events,
            ledger: Arc::clone(&ledger),
            grants: Arc::clone(&grants),
            max_total: u32::try_from(limit("max_subagents", DEFAULT_MAX_SUBAGENTS)).unwrap_or(1),
            parallel: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(limit("max_parallel_subagents", DEFAULT_PARALLEL_SUBAGENTS))
                    .unwrap_or(1)
                    .max(1),
            )),
        }) as Arc<dyn Delegate>
    });
    let mut agent = assemble(project, env, ask, delegate, grants)?;
    agent.set_subagent_ledger(ledger);
    Ok(agent)
}

/// Sub-agents one session may start (config `max_subagents`).
pub const DEFAULT_MAX_SUBAGENTS: u64 = 8;
/// Sub-agents running at once (config `max_parallel_subagents`); the others wait.
pub const DEFAULT_PARALLEL_SUBAGENTS: u64 = 2;

fn assemble(
    project: &Project,
    env: &BTreeMap<String, String>,
    ask: Arc<dyn Ask>,
    delegate: Option<Arc<dyn Delegate>>,
    grants: Arc<SessionGrants>,
) -> Result<Agent, WiringError> {
    let config = effective_config(project, env);
    let core: CoreConfig = serde_json::from_value(config.clone())?;
    let tools_config: ToolsConfig = serde_json::from_value(config)?;
    let (secrets, warnings) =
        SecretBroker::new(user_secrets(project, env), project.project_env.clone());
    for w in warnings {
        tracing::warn!("{w}");
    }
    let sandbox = CommandSandbox::new(
        &project.root,
        env.get("HOME")
            .filter(|h| !h.is_empty())
            .map(std::path::Path::new),
        &std::env::temp_dir(),
        sandbox_support(env),
    )?;
    tracing::info!(sandbox = %sandbox.support().describe(), "command sandbox");
    let toolbox = Toolbox::new(ToolEnv {
        sandbox: Arc::new(sandbox),
        root: project.root.clone(),
        ask: Arc::clone(&ask),
        secrets,
        memory: Memory::new(project.root.join(AGENT_DIR)),
        config: tools_config,
        delegate,
        grants,
    })?;
    let key_override = env.get(ENV_API_KEY).filter(|v| !v.is_empty()).cloned();
    let provider = build_provider(&core, key_override, |var| {
        env.get(var)
            .or_else(|| project.user_env.get(var))
            .filter(|v| !v.is_empty())
            .cloned()
    })?;
    tracing::info!(model = %core.model, root = %project.root.display(), "agent assembled");
    Ok(Agent::new(
        provider,
        Arc::new(toolbox),
        ask,
        core,
        project.rules.clone(),
    ))
}

/// Builds the provider for another model string with the same configuration and keys
/// (`/model NAME` in the terminal).
pub fn model_switcher(
    project: &Project,
    env: &BTreeMap<String, String>,
) -> impl Fn(&str) -> Result<Box<dyn Provider>, String> + Send + Sync + 'static {
    let project = project.clone();
    let env = env.clone();
    move |model: &str| {
        let mut config = effective_config(&project, &env);
        config["model"] = Value::String(model.to_string());
        let core: CoreConfig = serde_json::from_value(config).map_err(|e| e.to_string())?;
        let key_override = env.get(ENV_API_KEY).filter(|v| !v.is_empty()).cloned();
        build_provider(&core, key_override, |var| {
            env.get(var)
                .or_else(|| project.user_env.get(var))
                .filter(|v| !v.is_empty())
                .cloned()
        })
        .map_err(|e| e.to_string())
    }
}

/// Builds and runs sub-agents for the `delegate` tool.
struct SubAgents {
    project: Project,
    env: BTreeMap<String, String>,
    ask: Arc<dyn Ask>,
    events: Arc<dyn CoreEvents>,
    ledger: Arc<SubagentLedger>,
    grants: Arc<SessionGrants>,
    max_total: u32,
    parallel: Arc<tokio::sync::Semaphore>,
}

/// A sub-agent's events: passed on, and its model calls and refusals written to the ledger.
struct LedgerEvents<'a> {
    inner: &'a dyn CoreEvents,
    ledger: &'a SubagentLedger,
}

impl CoreEvents for LedgerEvents<'_> {
    fn stream(&self, event: &StreamEvent) {
        self.inner.stream(event);
    }
    fn request_done(&self, stats: &RequestStats) {
        self.ledger.add_request(stats);
        self.inner.request_done(stats);
    }
    fn tool_call(&self, call: &ToolCall) {
        self.inner.tool_call(call);
    }
    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        if matches!(result.status, ToolStatus::Denied | ToolStatus::Cancelled) {
            self.ledger.add_denial(call, &result.stderr);
        }
        self.inner.tool_result(call, result);
    }
}

impl Delegate for SubAgents {
    fn run<'a>(&'a self, task: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            if !self.ledger.try_start(self.max_total) {
                return Err(format!(
                    "the session's limit of {} sub-agents is reached (config max_subagents)",
                    self.max_total
                ));
            }
            let _slot = self
                .parallel
                .acquire()
                .await
                .map_err(|e| format!("sub-agent slots: {e}"))?;
            tracing::info!(%task, "sub-agent started");
            let mut agent = assemble(
                &self.project,
                &self.env,
                Arc::clone(&self.ask),
                None,
                Arc::clone(&self.grants),
            )
            .map_err(|e| e.to_string())?;
            let events = LedgerEvents {
                inner: self.events.as_ref(),
                ledger: &self.ledger,
            };
            let report = agent.run_turn(task, &events).await;
            tracing::info!(calls = report.model_calls, "sub-agent finished");
            match report.result {
                Ok(TurnStop::Answered) => Ok(report.text),
                Ok(TurnStop::BudgetDeclined) => Err("stopped at the iteration budget".into()),
                Ok(TurnStop::Cancelled) => Err("cancelled by the user".into()),
                Ok(TurnStop::Halted) => Err(report.text),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// Core events written to the log only (for sub-agents of headless runs).
pub struct LoggedEvents;

impl CoreEvents for LoggedEvents {
    fn stream(&self, _event: &StreamEvent) {}
    fn request_done(&self, stats: &RequestStats) {
        tracing::info!(
            input_tokens = stats.usage.input_tokens,
            output_tokens = stats.usage.output_tokens,
            "sub-agent model call"
        );
    }
    fn tool_call(&self, call: &ToolCall) {
        tracing::info!(tool = %call.name, "sub-agent tool call");
    }
    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        tracing::info!(tool = %call.name, status = ?result.status, "sub-agent tool result");
    }
}
