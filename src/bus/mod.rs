//! D-Bus: which bus, the service names, and the named errors every interface returns
//! ([`error`]).

pub mod caller;
pub mod error;
pub mod orchestrator;
pub mod queue;

pub use error::BusError;
use std::fmt;

/// Orchestrator well-known name, object path and interface.
pub const ORCHESTRATOR_NAME: &str = "org.agentstore.Orchestrator1";
/// Object path of the orchestrator.
pub const ORCHESTRATOR_PATH: &str = "/org/agentstore/Orchestrator1";
/// Interface of the orchestrator.
pub const ORCHESTRATOR_INTERFACE: &str = "org.agentstore.Orchestrator1";
/// Interface of every queue manager.
pub const QUEUE_INTERFACE: &str = "org.agentstore.Queue1";

/// The well-known name of a queue manager: `org.agentstore.Queue.<name>` (bus names may not
/// contain `-`, so it becomes `_`).
pub fn queue_bus_name(queue: &str) -> String {
    format!("org.agentstore.Queue.{}", queue.replace('-', "_"))
}

/// Object path of a queue manager: `/org/agentstore/Queue/<name>` with `-`/`.` as `_`.
pub fn queue_object_path(queue: &str) -> String {
    format!("/org/agentstore/Queue/{}", queue.replace(['-', '.'], "_"))
}

/// Which bus a daemon or client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum BusKind {
    /// The system bus (packaged services).
    #[default]
    System,
    /// The user's session bus (`systemctl --user`, tests with a private bus).
    Session,
}

impl fmt::Display for BusKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BusKind::System => "system",
            BusKind::Session => "session",
        })
    }
}

impl BusKind {
    /// A connection builder for this bus.
    pub fn builder<'a>(self) -> zbus::connection::Builder<'a> {
        match self {
            BusKind::System => zbus::connection::Builder::system(),
            BusKind::Session => zbus::connection::Builder::session(),
        }
    }

    /// The bus a client should try by default: `AGENTSTORE_BUS` (`system`|`session`), else the
    /// session bus when running as a normal user with one, else the system bus.
    pub fn from_env() -> BusKind {
        match std::env::var("AGENTSTORE_BUS").as_deref() {
            Ok("session") => BusKind::Session,
            Ok("system") => BusKind::System,
            _ => BusKind::System,
        }
    }
}
