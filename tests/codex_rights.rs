//! A Codex job's command file is read with the job account's rights (issue 35, DESIGN §9):
//! a root worker putting the user's `.claude/commands/<x>.md` into Codex's prompt must not
//! follow the user's symbolic link to a file only root may read. Needs root (to be the
//! worker that switches) and the `nobody` account.

use crate::harness;
use agentstore::model::Job;
use agentstore::worker::codex;
use agentstore::worker::runas::RunAs;
use std::os::unix::fs::PermissionsExt;

fn job(command: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "config": {"project": "p", "working_directory": "/tmp", "queue_time": "2026-12-02T00:00:00Z",
            "jobtype": "codex", "claude_command": command, "claude_extra_args": [],
            "task_description": "the task", "supporting_data": {}, "timeout_seconds": 60},
        "runtime": {"status": "queued", "start_time": null, "finish_time": null,
            "process_id": null, "llm_process_id": null, "error": null, "output": null}
    }))
    .unwrap()
}

#[test]
fn codex_command_files_are_read_with_the_jobs_rights() {
    if !nix::unistd::geteuid().is_root() {
        harness::skip(
            "codex_rights",
            "needs root (a worker that switches accounts)",
        );
        return;
    }
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let account = RunAs {
        name: "nobody".into(),
        uid: nobody.uid.as_raw(),
        gid: nobody.gid.as_raw(),
        home: nobody.dir.clone(),
        shell: nobody.shell.clone(),
        groups: vec![nobody.gid.as_raw()],
    };
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root's secret, 0600 in a folder the account may pass through.
    let secret = d.path().join("secret");
    std::fs::write(&secret, "ROOT-ONLY-SECRET-7f3a\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The account's home: one honest command and one link to the secret.
    let home = d.path().join("home");
    let commands = home.join(".claude/commands");
    std::fs::create_dir_all(&commands).unwrap();
    for p in [&home, &home.join(".claude"), &commands] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(commands.join("honest.md"), "Do this: $ARGUMENTS\n").unwrap();
    std::fs::set_permissions(
        commands.join("honest.md"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, commands.join("steal.md")).unwrap();
    let cwd = d.path().join("project");
    std::fs::create_dir_all(&cwd).unwrap();

    // The account's own file: its text is the prompt.
    let p = codex::prompt(&job("honest"), &home, &cwd, Some(&account)).unwrap();
    assert!(p.contains("Do this: the task"), "{p}");
    // The link to root's file: refused, naming the file and the account, without its text.
    let e = codex::prompt(&job("steal"), &home, &cwd, Some(&account)).unwrap_err();
    assert!(
        e.contains("steal.md") && e.contains("nobody") && e.contains("Permission denied"),
        "{e}"
    );
    assert!(!e.contains("ROOT-ONLY-SECRET"), "{e}");
    // What the check stops: the worker's own rights (no account to switch to) read it.
    let own = codex::prompt(&job("steal"), &home, &cwd, None).unwrap();
    assert!(own.contains("ROOT-ONLY-SECRET-7f3a"), "{own}");
    // A FIFO put in its place (after the command was found) is refused at once instead of
    // blocking the worker.
    std::fs::remove_file(commands.join("steal.md")).unwrap();
    nix::unistd::mkfifo(
        &commands.join("steal.md"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let e = agentstore::worker::read_as::read_to_string_as(
        &commands.join("steal.md"),
        Some(&account),
        1024,
    )
    .unwrap_err();
    assert!(e.contains("not a regular file"), "{e}");
}
