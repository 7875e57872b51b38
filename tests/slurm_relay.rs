//! Issue 27 (round 4): a root queue manager runs a Slurm job as the job's own account and
//! reads the job's end back from that account's output file with the account's rights. The
//! account controls that file: a link there to a root-only file holding a well-formed end must
//! reach nothing (before, a root batch step and a root reader would have taken it).
//!
//! Real parts: queue-manager and agent-worker binaries, a private dbus-daemon, the fake Slurm
//! of tests/slurm.rs, which runs a batch step as the account that submitted it (setpriv) with
//! sbatch's environment, as slurmd does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::claude_env::unprivileged_user;
use crate::queue_env::*;
use crate::slurm::{manager, relayed, setup, slurm_queue, wait_file};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

/// Root only (the relay is a root manager's); CI runs as root.
fn root_or_skip() -> bool {
    if relayed() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the Slurm relay tests need root (CI runs them as root)"
    );
    eprintln!("not root: a manager that is not root runs no relay; nothing to test here");
    false
}

#[test]
fn a_link_at_the_accounts_output_file_reaches_nothing_of_root() {
    if !root_or_skip() {
        return;
    }
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    // A root-only file holding a well-formed end of this very job.
    let secret = env.dir.path().join("root-only");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let canary = secret.join("end.out");
    let mut forged = noop(0.1);
    forged["id"] = json!("r1");
    forged["runtime"]["status"] = json!("finished");
    forged["runtime"]["output"] = json!("ROOT-ONLY-CANARY");
    forged["runtime"]["exit_code"] = json!(0);
    std::fs::write(
        &canary,
        format!("{}{}\n", agentstore::model::relay::END_MARKER, forged),
    )
    .unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::read(&canary).unwrap();
    // The account's output folder, with its file for r1 linked to the canary.
    let u = unprivileged_user().unwrap();
    let out_dir = env.dir.path().join("slurm-output");
    std::fs::create_dir(&out_dir).unwrap();
    std::os::unix::fs::symlink(&canary, out_dir.join(format!("{}-r1.out", env.queue))).unwrap();
    std::os::unix::fs::lchown(
        out_dir.join(format!("{}-r1.out", env.queue)),
        Some(u.uid),
        Some(u.gid),
    )
    .unwrap();
    std::os::unix::fs::chown(&out_dir, Some(u.uid), Some(u.gid)).unwrap();
    let _m = manager(&env, &bus, &fake);
    env.queue_job("r1", &noop(0.1));
    let failed = wait_file(&env, "failed", "r1", 60);
    let text = failed.to_string();
    assert!(!text.contains("ROOT-ONLY-CANARY"), "{text}");
    let err = failed["runtime"]["error"].as_str().unwrap();
    assert!(
        err.contains("Slurm job"),
        "failed from Slurm's record: {err}"
    );
    assert_eq!(
        std::fs::read(&canary).unwrap(),
        before,
        "the canary was written"
    );
    // The next job, with an output file of its own, runs and ends from its own record.
    env.queue_job("r2", &noop(0.1));
    let done = wait_file(&env, "finished", "r2", 60);
    assert_eq!(
        done["runtime"]["output"], "No-op job completed successfully",
        "{done}"
    );
    assert_eq!(done["config"]["project"], "TestProject", "{done}");
}
