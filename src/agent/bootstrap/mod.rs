//! L0 · Bootstrap: runs once, before anything else, and then takes no part in the cycle.
//!
//! It decides the project root (walking up to `.agentshell/`, `--project` overriding, home
//! never a root) *before* writing anything, creates the skeleton (explicitly on `init`,
//! leniently on `run`/`exec`), merges the configuration and installs the file logger. It knows
//! nothing about models, tools or the loop: it produces a root, a JSON config, the credentials
//! and the project rules, and the wiring hands those down.

pub mod config;
pub mod keys;
pub mod logger;
pub mod project;
pub mod trust;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use thiserror::Error;

pub use project::{AGENT_DIR, AgentHome};

/// The provider of the built-in default model (`deepseek/deepseek-chat`), for the trust rule
/// on a project's `model`.
pub const DEFAULT_MODEL_PROVIDER: &str = "deepseek";

/// Bootstrap failed; nothing below has started.
#[derive(Debug, Error)]
pub enum BootstrapError {
    /// Neither `AGENTSHELL_HOME` nor `HOME` is set.
    #[error("neither AGENTSHELL_HOME nor HOME is set")]
    NoHome,
    /// The chosen root is the home directory.
    #[error(
        "{0} is the home directory; its .agentshell is the global config, not a project (use --project or cd into a project)"
    )]
    HomeIsNotAProject(PathBuf),
    /// The chosen root is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// A config file is not a JSON object.
    #[error("config {path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Which path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl BootstrapError {
    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What bootstrap produces.
#[derive(Debug, Clone)]
pub struct Project {
    /// The project root.
    pub root: PathBuf,
    /// Global and project config merged (project wins), before environment overrides.
    pub config: Value,
    /// The user's trusted credentials (`~/.agentshell/.env`).
    pub user_env: BTreeMap<String, String>,
    /// The project's `.env` (may add names, never replace the user's).
    pub project_env: BTreeMap<String, String>,
    /// The project rules: `CLAUDE.md` at the root and `.agentshell/CLAUDE.md`.
    pub rules: String,
    /// Paths the skeleton step created.
    pub created: Vec<PathBuf>,
    /// Keys of the project config ignored because the folder is not trusted.
    pub ignored: Vec<String>,
}

impl Project {
    /// The warning to show when project settings were ignored, naming them and the fix.
    pub fn untrusted_warning(&self) -> Option<String> {
        (!self.ignored.is_empty()).then(|| {
            format!(
                "{} is not trusted: ignored {} from {}/{AGENT_DIR}/config.json (run `agentshell trust` there to allow them)",
                self.root.display(),
                self.ignored.join(", "),
                self.root.display(),
            )
        })
    }
}

/// Decide the root, create the skeleton's missing parts, merge the configuration and read the
/// credentials and rules. The logger is installed separately by the wiring ([`logger::init`]).
pub fn open_project(
    cwd: &Path,
    explicit: Option<&Path>,
    home: &AgentHome,
) -> Result<Project, BootstrapError> {
    let root = project::decide_root(cwd, explicit, home)?;
    let created = project::create_skeleton(&root)?.created;
    let user_config = config::load(&home.config_path())?;
    let project_path = root.join(AGENT_DIR).join("config.json");
    let mut project_config = config::load(&project_path)?;
    let bytes = std::fs::read(&project_path).unwrap_or_default();
    let ignored = if trust::is_trusted(home, &root, &bytes)? {
        Vec::new()
    } else {
        trust::strip_untrusted(&mut project_config, &user_config)
    };
    if !ignored.is_empty() {
        tracing::warn!(root = %root.display(), ignored = ?ignored, "project config not trusted");
    }
    let mut rules = String::new();
    for path in [
        root.join("CLAUDE.md"),
        root.join(AGENT_DIR).join("CLAUDE.md"),
    ] {
        if let Ok(text) = std::fs::read_to_string(&path)
            && !text.trim().is_empty()
        {
            rules.push_str(text.trim());
            rules.push_str("\n\n");
        }
    }
    Ok(Project {
        config: config::merge(user_config, project_config),
        user_env: keys::read_env(&home.env_path())?,
        project_env: keys::read_env(&root.join(".env"))?,
        rules: rules.trim_end().to_string(),
        created,
        ignored,
        root,
    })
}
