//! The one test toolkit every integration test shares: a private `dbus-daemon` with a policy,
//! waiting on a condition, killing children on drop, and skipping — which fails under CI.
//!
//! It is compiled once per test binary, as `common::bus::harness` (`mod common;`, which
//! re-exports it; `tests/support/queue_env.rs` re-exports it from there too, so a test using
//! queue_env declares `mod common;` beside it). A test that wants nothing else may include it
//! alone: `#[path = "support/harness.rs"] mod harness;`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A session-type bus any local user may connect to, call on and own names on: what the
/// tests need to call as another Unix user, and to watch signals.
pub const OPEN_POLICY: &str = r#"  <type>session</type>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>"#;

/// A private `dbus-daemon` on a socket in its own temp folder; killed on drop.
pub struct PrivateBus {
    child: Child,
    /// The bus address (`DBUS_SESSION_BUS_ADDRESS` for clients and daemons).
    pub address: String,
    _dir: tempfile::TempDir,
}

impl PrivateBus {
    /// A bus with [`OPEN_POLICY`].
    pub fn start() -> PrivateBus {
        PrivateBus::with_config(OPEN_POLICY, &[])
    }

    /// A bus with `body` inside `<busconfig>` (policies, `<type>`, `<servicedir>`); `env` is
    /// passed to the services it activates. The socket's folder is world-searchable so
    /// processes run as other users can connect.
    pub fn with_config(body: &str, env: &[(&str, &Path)]) -> PrivateBus {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let conf = dir.path().join("bus.conf");
        let socket = dir.path().join("bus_socket");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
{body}
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut c = Command::new("dbus-daemon");
        c.arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c
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
        PrivateBus {
            child,
            address,
            _dir: dir,
        }
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

// The waits (`tests/support/wait.rs`), here for the tests that take them from the harness.
pub use crate::wait::wait_until;

/// Waits until `name` has an owner on `bus` (awaited: [`crate::wait::name_on`]).
pub fn wait_for_name(bus: &PrivateBus, name: &str) {
    crate::wait::name_on(&bus.address, name)
}

/// `Submit(message)` to orchestratord on the bus at `address`, with busctl (`--json=short`;
/// a call may wait up to 120 s): whether it succeeded, and its stdout then stderr.
pub fn submit_over(address: &str, message: &str) -> (bool, String) {
    let o = Command::new("busctl")
        .args([
            "--address",
            address,
            "--json=short",
            "--timeout=120",
            "call",
            "org.agentstore.Orchestrator1",
            "/org/agentstore/Orchestrator1",
            "org.agentstore.Orchestrator1",
            "Submit",
            "s",
            message,
        ])
        .output()
        .expect("busctl");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// Kills and reaps a child process when dropped (continued first, in case the test stopped
/// it), so a failing test leaves nothing running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl KillOnDrop {
    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.0.id() as i32)
    }

    /// Sends `s` to the child.
    pub fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), s).unwrap();
    }
}

/// True when running under CI: `CI` is set to anything but empty, `0` or `false` (GitHub,
/// GitLab and `.ci/run` set `CI=true`/`CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// This check cannot run here (a tool or privilege is missing). Outside CI: a `SKIPPED` note
/// on stderr, and the caller returns. Under CI it panics, so CI can never pass by skipping.
pub fn skip(what: &str, why: &str) {
    assert!(
        !in_ci(),
        "{what} cannot run here ({why}), and CI is set: under CI a skipped test fails \
         (install what is missing, or run as root as .ci/run does)"
    );
    eprintln!("SKIPPED {what}: {why}");
}

/// Whether `cmd` is on PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
