//! Subsystems: the guards the code runs around every tool call. None is callable by the model.

pub mod commands;
pub mod context;
pub mod git_guard;
pub mod memory;
pub mod policy;
pub mod secrets;
