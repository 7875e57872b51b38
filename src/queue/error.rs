//! The queue manager's own errors: those that stop it, and the answers to requests
//! (cancel, pause, resume). The front end translates them (`bus::error`); this layer knows
//! no D-Bus error names.

use super::scope;
use crate::store::StoreError;
use std::path::PathBuf;

/// Errors that stop the manager, or refuse a request.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Store access failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another manager of this queue owns the bus name.
    #[error("queue manager for {0} is already running (its D-Bus name is taken)")]
    AlreadyRunning(String),
    /// D-Bus failed.
    #[error("D-Bus: {0}")]
    Bus(#[from] zbus::Error),
    /// The launcher cannot be used.
    #[error(transparent)]
    Scope(#[from] scope::ScopeError),
    /// inotify failed.
    #[error("inotify on {path}: {source}")]
    Watch {
        /// Folder.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A request names a job that is not queued or running here.
    #[error("{0}")]
    NotFound(String),
    /// PRD §10 forbids the request for its caller.
    #[error("Permission denied: {0}")]
    PermissionDenied(String),
    /// A request could not be carried out.
    #[error("{0}")]
    Failed(String),
}
