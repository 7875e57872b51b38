//! The file logger: `.agentshell/logs/agent.log`, every command, decision and error.
//!
//! All layers log through `tracing` macros, so none of them imports this module; only the
//! wiring calls [`init`], after the project root is decided and its skeleton exists.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

use crate::agent::bootstrap::BootstrapError;
use crate::agent::bootstrap::project::AGENT_DIR;

/// Install the global subscriber writing to `<root>/.agentshell/logs/agent.log` (appending).
/// `AGENTSHELL_LOG` takes an `EnvFilter` directive; the default is `info`.
pub fn init(root: &Path, directive: Option<&str>) -> Result<PathBuf, BootstrapError> {
    let dir = root.join(AGENT_DIR).join("logs");
    std::fs::create_dir_all(&dir).map_err(|e| BootstrapError::io("creating", &dir, e))?;
    let path = dir.join("agent.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| BootstrapError::io("opening", &path, e))?;
    let filter = EnvFilter::try_new(directive.unwrap_or("info"))
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive("hyper=warn".parse().unwrap_or_default())
        .add_directive("reqwest=warn".parse().unwrap_or_default());
    // A second init in one process (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
    Ok(path)
}
