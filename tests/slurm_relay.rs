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
    // Once the failure is recorded the account's link is removed (by the account: the link,
    // never what it names).
    let link = out_dir.join(format!("{}-r1.out", env.queue));
    wait_until(
        std::time::Duration::from_secs(30),
        "the linked relay file removed",
        || std::fs::symlink_metadata(&link).is_err(),
    );
    assert_eq!(
        std::fs::read(&canary).unwrap(),
        before,
        "the canary changed"
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

/// Issue 35: a root manager's Slurm job gets none of the manager's job keys (`job-env.*`
/// credentials: no way to hand them to the batch step keeps them out of Slurm's files). It is
/// never silent: the job's record carries a warning naming the key and what to do, view-job
/// and the dashboard's job page show it, and the key's value is in no store file, no Slurm
/// file and no batch step's environment.
#[test]
fn a_slurm_job_is_told_the_job_keys_were_not_delivered() {
    if !root_or_skip() {
        return;
    }
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    let creds = env.dir.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    let key = "sk-SLURM-KEY-CANARY-5f1c";
    std::fs::write(creds.join("job-env.OPENAI_API_KEY"), key).unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _m = crate::slurm::manager_with(
        &env,
        &bus,
        &fake,
        &[("CREDENTIALS_DIRECTORY", creds.to_str().unwrap())],
    );
    env.queue_job("k1", &noop(0.1));
    let done = wait_file(&env, "finished", "k1", 60);
    let warnings = done["runtime"]["warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{done:#}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.starts_with("Not delivered: the queue manager's job key OPENAI_API_KEY")
            && w.contains("codex login")
            && w.contains("docs/codex-and-credentials.md"),
        "{w}"
    );
    let view = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .env("AGENT_STORE_ROOT", &env.root)
        .env("COLUMNS", "100")
        .args(["--bus", "none", "view-job", "k1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&view.stdout);
    assert!(view.status.success(), "{text}");
    assert!(
        text.contains("\nWarning\n  Not delivered: the queue manager's job key OPENAI_API_KEY"),
        "{text}"
    );
    // The dashboard's job page says it too.
    let web_home = tempfile::tempdir().unwrap();
    let served = crate::web_env::serve(&env.root, web_home.path(), env.dir.path());
    let page = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "-H"])
        .arg(format!("Authorization: Bearer {}", served.token))
        .arg(format!("http://127.0.0.1:{}/jobs/k1", served.port))
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains(
            r#"<ul id="warnings"><li>Not delivered: the queue manager's job key OPENAI_API_KEY"#
        ),
        "{page}"
    );
    // The value: in nothing the store, Slurm (its scripts, its environments: the fake's state)
    // or the account's output folder holds, all under the test's folder.
    let found = std::process::Command::new("grep")
        .args(["-rlF", "--exclude-dir=credentials", key])
        .arg(env.dir.path())
        .output()
        .unwrap();
    assert_eq!(
        found.status.code(),
        Some(1),
        "the key is in {}",
        String::from_utf8_lossy(&found.stdout)
    );
}

/// Issue 27 (round 5): the relay's files (`<queue>-<job>.out`, `.answers`) stayed in the
/// account's folder for ever. They go once the job's end is recorded, removed by the account:
/// a link the account put at one of them goes, never the root-only file it names; the files
/// of another job and the folder stay.
#[test]
fn the_relay_files_go_once_the_jobs_end_is_recorded_and_only_they() {
    if !root_or_skip() {
        return;
    }
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    let secret = env.dir.path().join("root-only");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let canary = secret.join("answers");
    std::fs::write(&canary, "ROOT-ONLY\n").unwrap();
    let u = unprivileged_user().unwrap();
    let out_dir = env.dir.path().join("slurm-output");
    std::fs::create_dir(&out_dir).unwrap();
    let q = &env.queue;
    let answers = out_dir.join(format!("{q}-g1.answers"));
    std::os::unix::fs::symlink(&canary, &answers).unwrap();
    std::os::unix::fs::lchown(&answers, Some(u.uid), Some(u.gid)).unwrap();
    // Another job's files (of this queue and of another), the account's own.
    let others = [
        out_dir.join(format!("{q}-other.out")),
        out_dir.join(format!("{q}-other.answers")),
        out_dir.join("elsewhere-g1.out"),
    ];
    for f in &others {
        std::fs::write(f, "kept\n").unwrap();
        std::os::unix::fs::chown(f, Some(u.uid), Some(u.gid)).unwrap();
    }
    std::os::unix::fs::chown(&out_dir, Some(u.uid), Some(u.gid)).unwrap();
    let _m = manager(&env, &bus, &fake);
    env.queue_job("g1", &noop(0.1));
    let done = wait_file(&env, "finished", "g1", 60);
    assert_eq!(
        done["runtime"]["output"], "No-op job completed successfully",
        "{done}"
    );
    let out = out_dir.join(format!("{q}-g1.out"));
    wait_until(
        std::time::Duration::from_secs(30),
        "g1's relay files removed",
        || std::fs::symlink_metadata(&out).is_err() && std::fs::symlink_metadata(&answers).is_err(),
    );
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "ROOT-ONLY\n");
    for f in &others {
        assert_eq!(
            std::fs::read_to_string(f).unwrap(),
            "kept\n",
            "{}",
            f.display()
        );
    }
    assert!(out_dir.is_dir());
}

/// The class around the removal: the account replaced its whole relay folder by a link to a
/// root-only folder holding files of the names the manager would remove. Slurm (as the
/// account) cannot open the output there, so the job fails from Slurm's record, and the
/// removal, run as the account, reaches nothing: the root-only files stay as they were.
#[test]
fn a_relay_folder_linked_to_a_root_only_folder_loses_nothing_there() {
    if !root_or_skip() {
        return;
    }
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    let q = &env.queue;
    let secret = env.dir.path().join("root-only");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let kept: Vec<_> = ["h1.out", "h1.answers", "h2.out", "h2.answers"]
        .iter()
        .map(|n| secret.join(format!("{q}-{n}")))
        .collect();
    for f in &kept {
        std::fs::write(f, "ROOT-ONLY\n").unwrap();
    }
    let u = unprivileged_user().unwrap();
    let out_dir = env.dir.path().join("slurm-output");
    std::os::unix::fs::symlink(&secret, &out_dir).unwrap();
    std::os::unix::fs::lchown(&out_dir, Some(u.uid), Some(u.gid)).unwrap();
    let _m = manager(&env, &bus, &fake);
    env.queue_job("h1", &noop(0.1));
    let failed = wait_file(&env, "failed", "h1", 60);
    let err = failed["runtime"]["error"].as_str().unwrap();
    assert!(
        err.contains("Slurm job"),
        "failed from Slurm's record: {err}"
    );
    // A second job's end is settled after the first one's removal ran (one manager task).
    env.queue_job("h2", &noop(0.1));
    wait_file(&env, "failed", "h2", 60);
    for f in &kept {
        assert_eq!(
            std::fs::read_to_string(f).unwrap(),
            "ROOT-ONLY\n",
            "{}",
            f.display()
        );
    }
    assert!(!failed.to_string().contains("ROOT-ONLY"), "{failed}");
}
