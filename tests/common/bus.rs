//! A private `dbus-daemon --session` per test, and orchestratord run in-process on it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A private session bus; killed on drop.
pub struct PrivateBus {
    child: Child,
    /// `DBUS_SESSION_BUS_ADDRESS` of this bus.
    pub address: String,
}

impl PrivateBus {
    /// Starts `dbus-daemon --session --nofork --print-address`.
    pub fn start() -> PrivateBus {
        let mut child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon not found: apt-get install dbus (.ci/run does)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line.trim().to_string();
        assert!(
            address.starts_with("unix:"),
            "dbus-daemon printed {address:?}"
        );
        PrivateBus { child, address }
    }

    /// A zbus connection to this bus.
    pub async fn connect(&self) -> zbus::Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .unwrap()
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// orchestratord as a child process on `bus` (so it can be SIGKILLed), logging to stderr.
pub fn spawn_orchestratord(bus: &PrivateBus, root: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_orchestratord"))
        .args(["--bus", "session", "--root"])
        .arg(root)
        .args(extra)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Waits (up to `limit`) until `cond` holds, checking every 20 ms. A hang guard, not a timing
/// assertion: the limit is far above what any healthy run needs.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `name` has an owner on `bus`.
pub fn wait_for_name(bus: &PrivateBus, name: &str) {
    let addr = bus.address.clone();
    let name = name.to_string();
    wait_until(
        Duration::from_secs(30),
        &format!("{name} on the bus"),
        || {
            Command::new("busctl")
                .args(["--address", &addr, "status", &name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        },
    );
}

/// Kills and reaps a child process when dropped, so a failing test leaves nothing running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
