//! The queue manager's unit files pass `systemd-analyze verify` (with ExecStart pointed at
//! the freshly built binary, since /usr/bin/queue-manager exists only once packaged).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn queue_manager_units_verify_clean() {
    verify("systemd", &[]);
}

#[test]
fn queue_manager_user_units_verify_clean() {
    verify("systemd/user", &["--user"]);
}

fn verify(folder: &str, flags: &[&str]) {
    let Ok(v) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        panic!("systemd-analyze is missing: apt-get install systemd");
    };
    assert!(v.status.success());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for ext in ["service", "path", "timer"] {
        let text = std::fs::read_to_string(src.join(format!("queue-manager@.{ext}"))).unwrap();
        let text = text.replace(
            "/usr/bin/queue-manager",
            crate::daemons::Daemon::QueueManager.path(),
        );
        // The template and an instance, side by side, as systemd-analyze expects.
        std::fs::write(dir.path().join(format!("queue-manager@.{ext}")), &text).unwrap();
        let inst = dir.path().join(format!("queue-manager@poplar.{ext}"));
        std::fs::write(&inst, &text).unwrap();
        units.push(inst);
    }
    let out = std::process::Command::new("systemd-analyze")
        .args(flags)
        // --user needs a runtime directory even to verify.
        .env("XDG_RUNTIME_DIR", dir.path())
        .arg("verify")
        .args(&units)
        .output()
        .unwrap();
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && msg.trim().is_empty(), "{msg}");
}

/// Both daemons exit 2 when another instance is already running (bus name or store lock
/// held); every unit that restarts them on failure must not restart them for that.
#[test]
fn daemon_units_do_not_restart_on_already_running() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    let mut checked = 0;
    for folder in [base.clone(), base.join("user")] {
        for name in ["agentstore-orchestrator.service", "queue-manager@.service"] {
            let path = folder.join(name);
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            assert!(
                lines.iter().any(|l| l.starts_with("Restart=on-failure")),
                "{}: expected Restart=on-failure",
                path.display()
            );
            assert!(
                lines.iter().any(|l| {
                    l.strip_prefix("RestartPreventExitStatus=")
                        .is_some_and(|v| v.split_whitespace().any(|s| s == "2"))
                }),
                "{}: Restart=on-failure without RestartPreventExitStatus=2 restarts a second \
                 instance every few seconds against the running one",
                path.display()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}
