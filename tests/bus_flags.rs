//! One flag says which bus (issue 29 item 3): `--bus auto|system|session|none|ADDRESS` on
//! every binary, parsed into the one `Bus` type. The old spellings of "no bus" (`orchestratord --no-bus`, `orchestrator
//! --no-dbus`) are refused with words that name the flag to use, before anything is read or
//! written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::TestEnv;
use crate::harness::{KillOnDrop, PrivateBus, wait_for_name};
use std::process::{Command, Stdio};

const NEW: &str = "use --bus none";

fn refused(o: &std::process::Output, flag: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{flag} was accepted: {err}");
    assert!(
        err.contains(&format!("{flag} was removed")) && err.contains(NEW),
        "{flag}: {err}"
    );
}

#[test]
fn the_removed_no_bus_flags_are_refused_naming_bus_none() {
    let env = TestEnv::initialised();
    let inbox = env.root.join("messaging/inbox");
    let before = std::fs::read_dir(&inbox).unwrap().count();
    // The CLI, wherever the flag stands (it was global), and with an agent command that
    // would otherwise write the inbox.
    for args in [
        &["--no-dbus", "list-jobs"][..],
        &["list-queues", "--no-dbus"][..],
        &[
            "--no-dbus",
            "research-code",
            "--project",
            "P",
            "--task",
            "t",
        ][..],
    ] {
        refused(&env.run(args), "--no-dbus");
    }
    assert_eq!(std::fs::read_dir(&inbox).unwrap().count(), before);
    // The daemon exits at once instead of serving.
    let o = Command::new(crate::daemons::Daemon::Orchestratord.path())
        .args(["--no-bus", "--idle-exit", "1", "--root"])
        .arg(&env.root)
        .env("HOME", &env.home)
        .output()
        .unwrap();
    refused(&o, "--no-bus");
    assert_eq!(o.status.code(), Some(2));
    // The flag that replaced them works: the same listing answers.
    let o = env.run(&["--bus", "none", "list-jobs"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // And a bus that is not one is refused by clap, naming the choices, by every binary
    // that takes the flag.
    let o = env.run(&["--bus", "nobus", "list-jobs"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("session"), "{err}");
    for bin in [
        crate::daemons::Daemon::Orchestratord.path(),
        crate::daemons::Daemon::QueueManager.path(),
        env!("CARGO_BIN_EXE_agentstore-web"),
        env!("CARGO_BIN_EXE_agentstore-notify"),
    ] {
        let o = Command::new(bin)
            .args(["--bus", "nobus", "--root"])
            .arg(&env.root)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bin}: {err}");
        assert!(
            err.contains("'nobus' is no bus") && err.contains("D-Bus address"),
            "{bin}: {err}"
        );
    }
}

/// A bus named by its address (`--bus unix:path=…`) is the one the daemon serves on and the
/// one the CLI calls, with no session bus in either's environment: the request goes over
/// D-Bus (the job is made before the CLI returns, the answer is filed as delivered).
#[test]
fn a_bus_named_by_its_address_is_served_and_called_there() {
    let env = TestEnv::with_test_project();
    env.ok(&["login", "chenry"]);
    let bus = PrivateBus::start();
    let _daemon = KillOnDrop(
        Command::new(crate::daemons::Daemon::Orchestratord.path())
            .args(["--bus", &bus.address, "--idle-exit", "0", "--root"])
            .arg(&env.root)
            .env("HOME", &env.home)
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("AGENTSTORE_BUS")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let o = env
        .cli()
        .args(["--bus", &bus.address, "--verbose"])
        .args(["research-code", "--project", "TestProject"])
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("AGENTSTORE_BUS")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("Job queued: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no job id in {out:?} ({err})"));
    assert!(
        env.root
            .join(format!("Queues/poplar/Jobs/queued_jobs/{id}.json"))
            .exists(),
        "job {id} was not made by the time the CLI returned: {err}"
    );
    let delivered = std::fs::read_dir(env.root.join("messaging/processed_outbox"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .any(|t| t.contains(id));
    assert!(delivered, "no delivered answer for job {id}: {err}");
}
