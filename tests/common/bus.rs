//! A private bus per test (the shared `tests/support/harness.rs`), and orchestratord run as a
//! child process on it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/harness.rs"]
mod harness;

pub use harness::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// orchestratord as a child process on `bus` (so it can be SIGKILLed), logging to stderr.
pub fn spawn_orchestratord(bus: &PrivateBus, root: &Path, extra: &[&str]) -> Child {
    orchestratord_command(bus, root, extra).spawn().unwrap()
}

/// The command [`spawn_orchestratord`] runs, to adjust before spawning.
pub fn orchestratord_command(bus: &PrivateBus, root: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestratord"));
    c.args(["--bus", "session", "--root"])
        .arg(root)
        .args(extra)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    c
}
