//! agentstore: a systemd-native queue and runner for AI coding-agent jobs.
//!
//! The library holds everything; the binaries in `src/bin/` are wiring only.

pub mod agent;
pub mod bus;
pub mod cli;
pub mod model;
pub mod orchestrator;
pub mod permissions;
pub mod queue;
pub mod schema;
pub mod store;
pub mod systemd;
pub mod worker;

/// The old name of [`permissions`], kept so branches written before the rename still build.
/// New code names `permissions`; the layer test counts `access` as `permissions`.
#[doc(hidden)]
pub use permissions as access;
