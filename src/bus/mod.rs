//! D-Bus: which bus, the service names, and the named errors every interface returns
//! ([`error`]).

pub mod caller;
pub mod error;
pub mod listing;
pub mod notify;
pub mod orchestrator;
pub mod queue;
pub mod watchers;

pub use error::BusError;

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

pub use crate::model::{MODE_ENV, system_mode};
pub use crate::systemd::bus_choice::{Bus, BusChoice, session_bus_available, system_bus_available};
