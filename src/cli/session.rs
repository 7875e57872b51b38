//! `~/.orchestrator_config.json` (PRD §2.3): who the CLI user is and what they work on.

use crate::store::{home_dir, write_json_atomic};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The CLI user's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Logged-in user id.
    pub username: Option<String>,
    /// Current project.
    pub project: Option<String>,
    /// Current PRD.
    pub prd: Option<String>,
}

/// Where the state file lives.
pub fn session_path() -> Option<PathBuf> {
    home_dir().map(|h| h.join(".orchestrator_config.json"))
}

impl Session {
    /// Loads the state file; a missing one is the empty session.
    pub fn load() -> Result<Session, String> {
        let Some(path) = session_path() else {
            return Ok(Session::default());
        };
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!(
                    "{}: {e} (fix or delete it, then run `orchestrator login`)",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Session::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Saves the state file atomically.
    pub fn save(&self) -> Result<PathBuf, String> {
        let path =
            session_path().ok_or("HOME is not set; cannot save ~/.orchestrator_config.json")?;
        write_json_atomic(&path, self).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}
