//! Issue 30, bad input: a task's worktree checkout on a full disk. The queue manager (and so
//! its workers) runs in a private mount namespace where the project folder is a small tmpfs
//! holding the repository, nearly full: checking out the task's branch (a 512 KiB file)
//! fails half-way. The job fails naming the worktree and saying its disk is full; nothing
//! is lost or left half-made (no worktree folder, no task branch, the project's branch and
//! files as they were); once space is freed, `retry-task` runs the task to the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::wait_until;
use crate::daemons::Daemon;
use crate::tasks_worktrees::{LONG, Rig, git, job_id};
use std::path::{Path, PathBuf};

/// Mounts a 4 MiB tmpfs over `$P` (a copy of the repository in it), fills it but for
/// 64 KiB (`.git/fill`), then runs the daemon.
const NAMESPACE: &str = r#"set -e
cp -a "$P" "$COPY"
mount -t tmpfs -o size=4m tmpfs "$P"
cp -a "$COPY/." "$P/"
chown --reference="$COPY" "$P"
chmod --reference="$COPY" "$P"
avail=$(df -k --output=avail "$P" | tail -1)
dd if=/dev/zero of="$P/.git/fill" bs=1k count=$((avail - 64)) 2>/dev/null || true
exec "$@""#;

fn seen_by(pid: u32, p: &Path) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{}", p.display()))
}

#[test]
fn a_worktree_checkout_on_a_full_disk_fails_clearly_and_loses_nothing() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: mounting a tmpfs in a private namespace needs root");
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        return;
    }
    let rig = Rig::new();
    let repo = rig.r.project_dir.clone();
    // A file too big for what is left on the tmpfs (random bytes: git cannot shrink it).
    let big: Vec<u8> = (0..512 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(repo.join("big.bin"), &big).unwrap();
    git(&repo, &["add", "big.bin"]);
    git(&repo, &["commit", "-q", "-m", "big"]);
    let main = git(&repo, &["rev-parse", "main"]).trim().to_string();
    std::fs::write(
        rig.log.join("tasks.txt"),
        serde_json::to_string(
            "```json\n{\"tasks\": [{\"id\": \"solo\", \"title\": \"alone\"}]}\n```",
        )
        .unwrap(),
    )
    .unwrap();
    let _orch = rig.daemon(
        Daemon::Orchestratord,
        &["--idle-exit", "0"],
        "org.agentstore.Orchestrator1",
    );
    let copy = rig.env().dir.path().join("repo-copy");
    let qm = rig.daemon_in(
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            NAMESPACE,
            "sh",
        ],
        &[
            ("P", repo.to_str().unwrap()),
            ("COPY", copy.to_str().unwrap()),
        ],
        Daemon::QueueManager,
        &["--queue", "poplar", "--launcher", "direct"],
        "org.agentstore.Queue.poplar",
    );
    let inside = seen_by(qm.0.id(), &repo);
    assert!(inside.join(".git/fill").is_file(), "the tmpfs is not there");

    rig.prd("prd-f");
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-f"]));
    let running = rig.env().root.join("projects/P/running_prds/prd-f.json");
    wait_until(LONG, "create-tasks handled", || running.is_file());
    assert_eq!(rig.job(&ct)["runtime"]["status"], "finished");
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-f"]);
    let job = rig.task("prd-f", "solo")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(LONG, "the task's job failed", || {
        let s = rig.job(&job)["runtime"]["status"].clone();
        assert_ne!(s, "finished", "the checkout did not fail on the full disk");
        s == "failed"
    });
    let err = rig.job(&job)["runtime"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    let wt = repo.join(".agentstore-worktrees/prd-f/solo");
    assert!(
        err.contains("is full") && err.contains(wt.to_str().unwrap()),
        "{err}"
    );
    // Nothing half-made, nothing lost.
    assert!(
        !inside.join(".agentstore-worktrees/prd-f/solo").exists(),
        "{err}"
    );
    assert_eq!(git(&inside, &["branch", "--list", "agentstore/*"]), "");
    assert_eq!(git(&inside, &["rev-parse", "main"]).trim(), main);
    assert_eq!(std::fs::read(inside.join("big.bin")).unwrap(), big);
    let wts = git(&inside, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        wts.lines().filter(|l| l.starts_with("worktree ")).count(),
        1,
        "{wts}"
    );
    assert_eq!(
        git(&inside, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    let listed = rig.ok(&["list-tasks", "--prd", "prd-f", "--status", "failed"]);
    assert!(listed.contains("prd-f/solo"), "{listed}");

    // Space freed: the task retried runs to the end.
    std::fs::remove_file(inside.join(".git/fill")).unwrap();
    rig.ok(&["retry-task", "prd-f/solo"]);
    let done = rig.env().root.join("projects/P/finished_prds/prd-f.json");
    wait_until(LONG, "the PRD complete after the retry", || done.is_file());
    let tree = git(
        &inside,
        &["ls-tree", "--name-only", "agentstore/prd-f/solo"],
    );
    assert!(tree.lines().any(|l| l == "solo.txt"), "{tree}");
}
