//! Where the store is (PRD §2.1, DESIGN §8): `--root`, then `AGENT_STORE_ROOT`, then
//! `agent_store_root` in the user's `~/.config/agentstore/config.yaml`, else
//! `~/Dropbox/AgentStore`. The system configuration `/etc/agentstore/config.yaml` applies to
//! the packaged system services (`AGENTSTORE_MODE=system`, set by the system units only), and
//! to the CLI of a user who has no store of their own (a lab server's users).

use super::Config;
use crate::model::system_mode;
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

impl std::fmt::Display for RootSource {
    /// Where the root came from, for people: "--root", "AGENT_STORE_ROOT", "agent_store_root
    /// in FILE", "the default (~/Dropbox/AgentStore)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootSource::Flag => f.write_str("--root"),
            RootSource::Env => f.write_str("AGENT_STORE_ROOT"),
            RootSource::ConfigFile(p) => write!(f, "agent_store_root in {}", p.display()),
            RootSource::Default => f.write_str("the default, ~/Dropbox/AgentStore"),
        }
    }
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

/// Who resolves the root: the CLI or a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootUser {
    /// The `orchestrator` CLI: falls back to the system config when the user has no store.
    Cli,
    /// A daemon: per-user unless [`system_mode`].
    Daemon,
}

/// The user's own configuration file: `$XDG_CONFIG_HOME/agentstore/config.yaml`, else
/// `~/.config/agentstore/config.yaml`.
pub fn user_config_path() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home_dir().map(|h| h.join(".config")))
        .map(|d| d.join("agentstore/config.yaml"))
}

fn from_config(cfg: &Path) -> Option<(PathBuf, RootSource)> {
    match Config::load(cfg) {
        Ok(Config {
            agent_store_root: Some(root),
            ..
        }) => Some((
            expand_tilde(&root),
            RootSource::ConfigFile(cfg.to_path_buf()),
        )),
        _ => None,
    }
}

/// Resolves the store root for the CLI (see the module documentation).
pub fn resolve_root(flag: Option<&Path>) -> (PathBuf, RootSource) {
    resolve_root_for(flag, RootUser::Cli)
}

/// Resolves the store root for a daemon: the user's store unless running as the system
/// service; `/etc/agentstore/config.yaml` is read only in system mode.
pub fn resolve_daemon_root(flag: Option<&Path>) -> (PathBuf, RootSource) {
    resolve_root_for(flag, RootUser::Daemon)
}

/// Resolves the store root for `who`.
pub fn resolve_root_for(flag: Option<&Path>, who: RootUser) -> (PathBuf, RootSource) {
    if let Some(p) = flag {
        return (p.to_path_buf(), RootSource::Flag);
    }
    if let Some(env) = std::env::var_os("AGENT_STORE_ROOT").filter(|v| !v.is_empty()) {
        return (expand_tilde(&env.to_string_lossy()), RootSource::Env);
    }
    let system = Path::new(SYSTEM_CONFIG);
    if system_mode()
        && let Some(found) = from_config(system)
    {
        return found;
    }
    if let Some(found) = user_config_path().and_then(|c| from_config(&c)) {
        return found;
    }
    let default = home_dir()
        .unwrap_or_else(|| PathBuf::from("/"))
        .join("Dropbox/AgentStore");
    if who == RootUser::Cli
        && !system_mode()
        && !default.is_dir()
        && let Some(found) = from_config(system)
    {
        return found;
    }
    (default, RootSource::Default)
}
