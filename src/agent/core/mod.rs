//! L2 · Core: the brain and the owner of the conversation.
//!
//! Owns the messages and the system prompt (project rules + the memory index from L3), fits
//! the history through L3's context manager before every call, calls the model, drives the
//! cycle and its iteration budget, runs parallel tool calls through L3, and accounts tokens and
//! cost. It never prints, never runs a command and never touches a file; provider and network
//! failures come back as typed errors, never as fake model text.

pub mod accounting;
pub mod config;
pub mod cycle;
pub mod message;
pub mod provider;

pub use config::{CoreConfig, build_provider};
pub use cycle::{Agent, CoreError, CoreEvents, TurnReport, TurnStop};
