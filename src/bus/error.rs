//! The named D-Bus errors of every `org.agentstore.*` interface, and every translation into
//! them. The layers below report in their own error types (`StoreError`, `RouteError`, …);
//! only this file decides which D-Bus error name and text a caller sees.
//!
//! One rule for texts: a `PermissionDenied` message always starts with `Permission denied: `
//! (PRD §10 wording, the same as the outbox answer of the inbox path), whichever layer
//! refused and whether or not it already wrote the prefix.

use crate::orchestrator::RouteError;
use crate::queue::QueueError;
use crate::store::StoreError;

/// The prefix every `org.agentstore.Error.PermissionDenied` text starts with.
pub const PERMISSION_DENIED: &str = "Permission denied: ";

/// The named errors of `org.agentstore.*` interfaces (`org.agentstore.Error.NotFound`, …).
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.agentstore.Error")]
pub enum BusError {
    /// A transport error.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// A user, project, PRD, queue or job that does not exist.
    NotFound(String),
    /// PRD §10 forbids this for the caller.
    PermissionDenied(String),
    /// The message or document fails validation.
    InvalidMessage(String),
    /// Anything else that went wrong on the daemon's side.
    Failed(String),
    /// The daemon is stopping and did nothing with the call: call again (bus activation
    /// starts the next instance once this one has gone).
    Unavailable(String),
}

/// The D-Bus name of [`BusError::Unavailable`], for callers that retry on it.
pub const UNAVAILABLE: &str = "org.agentstore.Error.Unavailable";

impl BusError {
    /// `PermissionDenied` with `why` behind the one prefix (added once, never twice).
    pub fn permission_denied(why: impl Into<String>) -> BusError {
        let why = why.into();
        if why.starts_with(PERMISSION_DENIED) {
            BusError::PermissionDenied(why)
        } else {
            BusError::PermissionDenied(format!("{PERMISSION_DENIED}{why}"))
        }
    }

    /// The same error with its text in the house style (the `PermissionDenied` prefix), for
    /// errors made by layers that build `BusError` values themselves.
    pub fn normalized(self) -> BusError {
        match self {
            BusError::PermissionDenied(m) => BusError::permission_denied(m),
            other => other,
        }
    }
}

impl From<StoreError> for BusError {
    fn from(e: StoreError) -> BusError {
        match e {
            StoreError::NotFound { .. } => BusError::NotFound(e.to_string()),
            StoreError::BadId { .. } | StoreError::Invalid { .. } => {
                BusError::InvalidMessage(e.to_string())
            }
            other => BusError::Failed(other.to_string()),
        }
    }
}

impl From<crate::permissions::Refused> for BusError {
    fn from(e: crate::permissions::Refused) -> BusError {
        match e {
            crate::permissions::Refused::Store(e) => e.into(),
            crate::permissions::Refused::Denied(why) => BusError::permission_denied(why),
        }
    }
}

impl From<RouteError> for BusError {
    fn from(e: RouteError) -> BusError {
        match e {
            RouteError::NotFound(m) => BusError::NotFound(m),
            RouteError::PermissionDenied(m) => BusError::permission_denied(m),
            RouteError::Invalid(m) => BusError::InvalidMessage(m),
            RouteError::Failed(m) => BusError::Failed(m),
            RouteError::Unavailable(m) => BusError::Unavailable(m),
        }
    }
}

impl From<QueueError> for BusError {
    fn from(e: QueueError) -> BusError {
        match e {
            QueueError::Store(e) => e.into(),
            QueueError::Bus(e) => BusError::ZBus(e),
            QueueError::NotFound(m) => BusError::NotFound(m),
            QueueError::PermissionDenied(m) => BusError::permission_denied(m),
            other => BusError::Failed(other.to_string()),
        }
    }
}

/// A blocking task of the daemon panicked or was cancelled.
impl From<tokio::task::JoinError> for BusError {
    fn from(e: tokio::task::JoinError) -> BusError {
        BusError::Failed(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(e: BusError) -> String {
        match e {
            BusError::PermissionDenied(m) => m,
            other => panic!("not PermissionDenied: {other:?}"),
        }
    }

    #[test]
    fn permission_denied_has_the_prefix_once() {
        assert_eq!(
            text(BusError::permission_denied("only admins can pause a queue")),
            "Permission denied: only admins can pause a queue"
        );
        assert_eq!(
            text(BusError::permission_denied("Permission denied: no sender")),
            "Permission denied: no sender"
        );
        assert_eq!(
            text(BusError::PermissionDenied("job x belongs to another user".into()).normalized()),
            "Permission denied: job x belongs to another user"
        );
        assert_eq!(
            text(RouteError::PermissionDenied("not yours".into()).into()),
            "Permission denied: not yours"
        );
    }
}
