//! Where the store is: `--root`, then `AGENT_STORE_ROOT`, then `agent_store_root` in
//! `~/.config/agentstore/config.yaml` or `/etc/agentstore/config.yaml`, else
//! `~/Dropbox/AgentStore` (PRD §2.1).

use super::Config;
use std::path::{Path, PathBuf};

/// The system-wide configuration the package installs.
pub const SYSTEM_CONFIG: &str = "/etc/agentstore/config.yaml";

/// How the root was chosen, for `--verbose` and error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootSource {
    /// `--root` on the command line.
    Flag,
    /// The `AGENT_STORE_ROOT` environment variable.
    Env,
    /// `agent_store_root` in this config file.
    ConfigFile(PathBuf),
    /// The PRD default.
    Default,
}

/// The user's home folder.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Expands a leading `~/`.
pub fn expand_tilde(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(p),
    }
}

/// Resolves the store root.
pub fn resolve_root(flag: Option<&Path>) -> (PathBuf, RootSource) {
    if let Some(p) = flag {
        return (p.to_path_buf(), RootSource::Flag);
    }
    if let Some(env) = std::env::var_os("AGENT_STORE_ROOT").filter(|v| !v.is_empty()) {
        return (expand_tilde(&env.to_string_lossy()), RootSource::Env);
    }
    let user_cfg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home_dir().map(|h| h.join(".config")))
        .map(|d| d.join("agentstore/config.yaml"));
    for cfg in user_cfg.into_iter().chain([PathBuf::from(SYSTEM_CONFIG)]) {
        if let Ok(Config {
            agent_store_root: Some(root),
            ..
        }) = Config::load(&cfg)
        {
            return (expand_tilde(&root), RootSource::ConfigFile(cfg));
        }
    }
    let default = home_dir()
        .unwrap_or_else(|| PathBuf::from("/"))
        .join("Dropbox/AgentStore");
    (default, RootSource::Default)
}
