//! Browsing a store the user cannot read (the packaged system store is owned by the
//! `agentstore` user, mode 0750): the CLI asks orchestratord over D-Bus, and the daemon maps
//! the caller's Unix user to users/<id>.json and applies PRD §10.
//! Needs root (to run the CLI as `nobody`); CI runs as root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::TestEnv;
use common::bus::KillOnDrop;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

#[test]
fn unreadable_store_is_browsed_over_dbus_as_the_callers_user() {
    if !nix::unistd::getuid().is_root() {
        return common::bus::skip(
            "browsing an unreadable store over D-Bus",
            "needs root to run the CLI as user nobody",
        );
    }
    let env = TestEnv::initialised();
    env.ok(&[
        "add-user",
        "nob",
        "--name",
        "N",
        "--email",
        "n@x",
        "--unix-user",
        "nobody",
    ]);
    env.ok(&[
        "add-project",
        "Mine",
        "--directory",
        "/tmp",
        "--owner",
        "nob",
    ]);
    env.ok(&[
        "add-project",
        "Theirs",
        "--directory",
        "/tmp",
        "--owner",
        "chenry",
    ]);
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o750)).unwrap();
    // A bus every local user may connect to, like the system bus.
    let sock = env.dir.path().join("bus.sock");
    let conf = env.dir.path().join("bus.conf");
    std::fs::write(
        &conf,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>custom</type><listen>unix:path={}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/></policy></busconfig>"#,
            sock.display()
        ),
    )
    .unwrap();
    let mut bus = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", conf.display()))
        .args(["--nofork", "--print-address=1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut addr = String::new();
    let pipe = bus.stdout.take().unwrap();
    let _bus = KillOnDrop(bus);
    BufReader::new(pipe).read_line(&mut addr).unwrap();
    let addr = addr.trim().to_string();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _daemon = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_orchestratord"))
            .args(["--bus", "session", "--idle-exit", "0", "--root"])
            .arg(&env.root)
            .env("DBUS_SESSION_BUS_ADDRESS", &addr)
            .spawn()
            .unwrap(),
    );
    common::bus::wait_until(std::time::Duration::from_secs(30), "orchestratord", || {
        env.root.join(".orchestrator.lock").exists()
    });
    let as_nobody = |args: &[&str]| {
        Command::new("runuser")
            .args([
                "-u",
                "nobody",
                "--",
                "env",
                "HOME=/nonexistent",
                "AGENTSTORE_BUS=session",
            ])
            .arg(format!("DBUS_SESSION_BUS_ADDRESS={addr}"))
            .arg(env!("CARGO_BIN_EXE_orchestrator"))
            .arg("--root")
            .arg(&env.root)
            .args(args)
            .output()
            .unwrap()
    };
    let o = as_nobody(&["list-projects"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("Mine") && !text.contains("Theirs"), "{text}");
    let o = as_nobody(&["list-users"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    let o = as_nobody(&["view-project", "Theirs"]);
    assert_eq!(o.status.code(), Some(1));
    let o = as_nobody(&["--format", "json", "view-project", "Mine"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["owner"], "nob");
    // Reading the files directly really is refused to this user.
    let o = Command::new("runuser")
        .args(["-u", "nobody", "--", "ls"])
        .arg(&env.root)
        .output()
        .unwrap();
    assert!(!o.status.success());
}
