//! agentstore: a systemd-native queue and runner for AI coding-agent jobs.
//!
//! The library holds everything; the binaries in `src/bin/` are wiring only.
//!
//! `unsafe` is denied crate-wide; the few modules that need a system call with no safe
//! wrapper (`pre_exec` hooks, `pidfd_open`) allow it for themselves, each block with a
//! `SAFETY:` comment.
#![deny(unsafe_code)]

pub mod agent;
pub mod bus;
pub mod cli;
pub mod model;
pub mod notify;
pub mod orchestrator;
pub mod permissions;
pub mod queue;
pub mod schema;
pub mod slackapp;
pub mod store;
pub mod systemd;
pub mod trust;
pub mod web;
pub mod worker;
