//! One flag says which bus (issue 29 item 3): `--bus auto|system|session|none` on every
//! binary. The old spellings of "no bus" (`orchestratord --no-bus`, `orchestrator
//! --no-dbus`) are refused with words that name the flag to use, before anything is read or
//! written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::TestEnv;
use std::process::Command;

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
    let o = Command::new(env!("CARGO_BIN_EXE_orchestratord"))
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
    // And a bus that is not one is refused by clap, naming the choices.
    let o = env.run(&["--bus", "nobus", "list-jobs"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("session"), "{err}");
}
