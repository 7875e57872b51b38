//! agentstore: a systemd-native queue and runner for AI coding-agent jobs.
//!
//! The library holds everything; the binaries in `src/bin/` are wiring only.

pub mod access;
pub mod agent;
pub mod bus;
pub mod cli;
pub mod model;
pub mod orchestrator;
pub mod queue;
pub mod schema;
pub mod store;
pub mod systemd;
pub mod worker;
