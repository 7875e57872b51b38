//! Wiring: L0's products (root, config, credentials, rules) plus the environment become an L3
//! toolbox and an L2 agent, with L1's `ask()` passed down. Sits above the four layers, like
//! the binary; kept in the library so tests and the job worker can assemble an agent too.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use thiserror::Error;

use crate::agent::bootstrap::{AGENT_DIR, Project};
use crate::agent::core::provider::ProviderError;
use crate::agent::core::provider::model_spec::known_key_vars;
use crate::agent::core::{Agent, CoreConfig, build_provider};
use crate::agent::tools::subsystems::memory::Memory;
use crate::agent::tools::subsystems::policy::PolicyError;
use crate::agent::tools::subsystems::secrets::SecretBroker;
use crate::agent::tools::{Ask, ToolEnv, Toolbox, ToolsConfig};

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

/// Whether an environment variable name looks like a credential.
fn is_credential_name(name: &str) -> bool {
    known_key_vars().contains(&name)
        || name == ENV_API_KEY
        || ["_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD"]
            .iter()
            .any(|s| name.ends_with(s))
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

/// Build the toolbox and the agent. Provider keys come from the process environment or the
/// user's `.env` — never from the project's `.env`.
pub fn build_agent(
    project: &Project,
    env: &BTreeMap<String, String>,
    ask: Arc<dyn Ask>,
) -> Result<Agent, WiringError> {
    let config = effective_config(project, env);
    let core: CoreConfig = serde_json::from_value(config.clone())?;
    let tools_config: ToolsConfig = serde_json::from_value(config)?;
    let (secrets, warnings) =
        SecretBroker::new(user_secrets(project, env), project.project_env.clone());
    for w in warnings {
        tracing::warn!("{w}");
    }
    let toolbox = Toolbox::new(ToolEnv {
        root: project.root.clone(),
        ask: Arc::clone(&ask),
        secrets,
        memory: Memory::new(project.root.join(AGENT_DIR)),
        config: tools_config,
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
