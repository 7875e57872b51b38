//! Starting `agentstore-web` the way systemd does (listeners on fds 3.., `LISTEN_FDS`,
//! `LISTEN_FDNAMES`, `LISTEN_PID` = the server's own pid), for tests/web_api.rs and
//! tests/web_dashboard.rs. Include as `#[path = "support/web_env.rs"] mod web_env;` next to
//! `mod common;`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::{KillOnDrop, PrivateBus};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// A bus every local user may connect to and call on, like the system bus.
pub const BUS_POLICY: &str = r#"<type>custom</type>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/><allow eavesdrop="true"/></policy>"#;

/// `fd` moved above the range the listeners go to (so dup2 onto 3.. never clobbers one).
fn high(fd: OwnedFd) -> OwnedFd {
    let n = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(100)).unwrap();
    // SAFETY: a fresh descriptor from F_DUPFD_CLOEXEC, owned by no one else.
    unsafe { OwnedFd::from_raw_fd(n) }
}

/// A Unix listener at `path` (world-connectable) and a loopback TCP listener; its port.
pub fn listeners(path: &Path) -> (Vec<OwnedFd>, u16) {
    let u = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = t.local_addr().unwrap().port();
    (vec![high(u.into()), high(t.into())], port)
}

/// Runs `c` with `fds` as descriptors 3.. (inheritable), everything else close-on-exec.
pub fn pass_fds(c: &mut Command, fds: &[OwnedFd]) {
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: only async-signal-safe dup2/fcntl between fork and exec; the sources are all
    // above the targets (see `high`).
    unsafe {
        c.pre_exec(move || {
            for (i, fd) in raw.iter().enumerate() {
                if libc::dup2(*fd, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// agentstore-web on `bus` for the store `root`, with `fds` as its passed listeners.
pub fn spawn_web(
    bus: &PrivateBus,
    root: &Path,
    home: &Path,
    fds: Vec<OwnedFd>,
    names: &str,
    extra: &[&str],
) -> KillOnDrop {
    spawn_web_after(bus, root, home, fds, names, extra, "")
}

/// [`spawn_web`] after the shell command `before` (e.g. `ulimit -n 256;`).
pub fn spawn_web_after(
    bus: &PrivateBus,
    root: &Path,
    home: &Path,
    fds: Vec<OwnedFd>,
    names: &str,
    extra: &[&str],
    before: &str,
) -> KillOnDrop {
    let fds: Vec<OwnedFd> = fds.into_iter().map(high).collect();
    let mut c = Command::new("sh");
    c.args(["-c", &format!("{before} LISTEN_PID=$$ exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_agentstore-web"))
        .args(["--bus", "session", "--root"])
        .arg(root)
        .args(extra)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .env("HOME", home)
        .env("LISTEN_FDS", fds.len().to_string())
        .env("LISTEN_FDNAMES", names)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    pass_fds(&mut c, &fds);
    let child = KillOnDrop(c.spawn().unwrap());
    drop(fds);
    child
}

/// A private bus, orchestratord on it, and agentstore-web with a Unix listener at
/// `dir/http.sock` and a loopback TCP one; its token (made by the server in `home`).
pub struct Served {
    pub bus: PrivateBus,
    pub orchestratord: KillOnDrop,
    pub web: KillOnDrop,
    pub sock: std::path::PathBuf,
    pub port: u16,
    pub token: String,
}

/// Starts [`Served`] for the store `root`.
pub fn serve(root: &Path, home: &Path, dir: &Path) -> Served {
    serve_with(root, home, dir, &[], "")
}

/// [`serve`] with more server arguments `extra`, after the shell command `before`.
pub fn serve_with(root: &Path, home: &Path, dir: &Path, extra: &[&str], before: &str) -> Served {
    let bus = PrivateBus::with_config(BUS_POLICY, &[]);
    let orchestratord = KillOnDrop(crate::common::bus::spawn_orchestratord(
        &bus,
        root,
        &["--idle-exit", "0"],
    ));
    crate::common::bus::wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let sock = dir.join("http.sock");
    let (fds, port) = listeners(&sock);
    let mut args = vec!["--idle-exit", "0"];
    args.extend_from_slice(extra);
    let web = spawn_web_after(&bus, root, home, fds, "http:tcp", &args, before);
    let token_file = home.join(".config/agentstore/web-token");
    // Whole: the server makes the file, then writes the token and a newline.
    crate::common::bus::wait_until(std::time::Duration::from_secs(30), "the web token", || {
        std::fs::read_to_string(&token_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    Served {
        bus,
        orchestratord,
        web,
        sock,
        port,
        token,
    }
}
