//! What can go wrong handling one message ([`RouteError`]: each kind maps to one outbox error
//! text and one named D-Bus error; the mapping is `bus::error`, this layer knows nothing of
//! D-Bus), and why the daemon stops ([`DaemonError`]: here rather than in `daemon`, so the
//! service, the standby and the front ends name it without using the daemon).

use crate::store::StoreError;

/// Why a message could not be handled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// A user, project, PRD, queue or job that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// PRD §10 forbids it.
    #[error("Permission denied: {0}")]
    PermissionDenied(String),
    /// The message is malformed, fails its schema, or names an unknown command.
    #[error("{0}")]
    Invalid(String),
    /// Anything else (I/O, a missing tool).
    #[error("{0}")]
    Failed(String),
    /// The daemon is stopping (an idle exit, a restart) and takes no new work: nothing was
    /// done, and the same call to the next instance is safe.
    #[error("{0}")]
    Unavailable(String),
}

impl From<crate::permissions::Refused> for RouteError {
    fn from(e: crate::permissions::Refused) -> RouteError {
        match e {
            crate::permissions::Refused::Store(e) => e.into(),
            crate::permissions::Refused::Denied(why) => RouteError::PermissionDenied(why),
        }
    }
}

impl From<crate::permissions::Denied> for RouteError {
    fn from(d: crate::permissions::Denied) -> RouteError {
        RouteError::PermissionDenied(d.to_string())
    }
}

impl From<StoreError> for RouteError {
    fn from(e: StoreError) -> RouteError {
        match &e {
            StoreError::NotFound { kind, id } => {
                // PRD wording: "Project not found: X", "Queue not found: X".
                let mut k = kind.to_string();
                if k == "prd" {
                    k = "PRD".into();
                } else if let Some(f) = k.get(0..1) {
                    k = format!("{}{}", f.to_uppercase(), &k[1..]);
                }
                RouteError::NotFound(format!("{k} not found: {id}"))
            }
            StoreError::BadId { .. } | StoreError::Invalid { .. } => {
                RouteError::Invalid(e.to_string())
            }
            _ => RouteError::Failed(e.to_string()),
        }
    }
}

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another orchestrator holds the bus name or the store lock.
    #[error("{0}")]
    AlreadyRunning(String),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// D-Bus failed.
    #[error("D-Bus: {0}")]
    Bus(#[from] zbus::Error),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}
