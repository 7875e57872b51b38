//! Issue 30: `set-task`, `retry-task` and `cancel-task` through the real CLI, orchestratord
//! and a queue manager, on a real git repository. Dependencies are changed before anything
//! runs (a cycle, an unknown task, an empty change refused); a collaborator who may see the
//! project may not change its tasks; a failed task (and the tasks that failed after it) is
//! queued again and the PRD ends complete; a running task is cancelled with its job, then
//! retried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::wait_until;
use crate::tasks_worktrees::{LONG, Rig, job_id, read, text};

fn fails(rig: &Rig, args: &[&str]) -> String {
    let o = rig.cli(args);
    assert!(
        !o.status.success(),
        "orchestrator {args:?} should fail: {}",
        text(&o.stdout)
    );
    text(&o.stderr)
}

fn job_status(rig: &Rig, task: &str) -> String {
    let (prd, t) = task.split_once('/').unwrap();
    let doc = rig.task(prd, t);
    let jobs = doc["jobs"].as_array().unwrap();
    match jobs.last().and_then(|j| j.as_str()) {
        Some(j) => rig.job(j)["runtime"]["status"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        None => String::new(),
    }
}

#[test]
fn tasks_are_changed_retried_and_cancelled_by_their_owner_only() {
    let rig = Rig::new();
    let _daemons = rig.serve_poplar();
    rig.prd("prd-e");
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-e"]));
    let running = rig.env().root.join("projects/P/running_prds/prd-e.json");
    wait_until(LONG, "create-tasks handled", || running.is_file());
    assert_eq!(rig.job(&ct)["runtime"]["status"], "finished");

    // set-task before anything runs: D after B only; bad changes refused, nothing written.
    let out = rig.ok(&["set-task", "prd-e/D", "--depends-on", "B"]);
    assert!(out.contains("depends_on"), "{out}");
    assert_eq!(
        rig.task("prd-e", "D")["depends_on"],
        serde_json::json!(["B"])
    );
    let before = rig.task("prd-e", "A");
    let e = fails(&rig, &["set-task", "prd-e/A", "--depends-on", "D"]);
    assert!(e.contains("cycle"), "{e}");
    let e = fails(&rig, &["set-task", "prd-e/A", "--depends-on", "nope"]);
    assert!(
        e.contains("nope") && e.contains("unknown dependency"),
        "{e}"
    );
    let e = fails(&rig, &["set-task", "prd-e/A"]);
    assert!(e.contains("nothing to change"), "{e}");
    let e = fails(&rig, &["set-task", "prd-e/nope", "--title", "x"]);
    assert!(e.contains("not found"), "{e}");
    assert_eq!(
        rig.task("prd-e", "A"),
        before,
        "a refused change wrote nothing"
    );
    rig.ok(&[
        "set-task",
        "prd-e/A",
        "--description",
        "the base, rewritten",
    ]);
    assert_eq!(rig.task("prd-e", "A")["description"], "the base, rewritten");

    // A collaborator sees the tasks but may not change them; a stranger does not see them.
    for u in ["alice", "mallory"] {
        rig.ok(&[
            "add-user",
            u,
            "--name",
            u,
            "--email",
            "x@x.org",
            "--permissions",
            "user",
        ]);
    }
    let p = rig.env().root.join("projects/P/project.json");
    let mut doc = read(&p);
    doc["collaborators"] = serde_json::json!(["alice"]);
    std::fs::write(&p, doc.to_string()).unwrap();
    rig.ok(&["login", "alice"]);
    assert!(rig.ok(&["view-task", "prd-e/A"]).contains("prd-e"));
    for cmd in [
        vec!["retry-task", "prd-e/A"],
        vec!["cancel-task", "prd-e/A"],
        vec!["set-task", "prd-e/A", "--title", "mine now"],
    ] {
        let e = fails(&rig, &cmd);
        assert!(
            e.contains("Permission denied") && e.contains("only its owner or an admin"),
            "{cmd:?}: {e}"
        );
    }
    rig.ok(&["login", "mallory"]);
    let e = fails(&rig, &["cancel-task", "prd-e/A"]);
    assert!(e.contains("not found"), "{e}");
    rig.ok(&["login", "chenry"]);
    assert_eq!(rig.task("prd-e", "A")["status"], "pending");

    // A fails; B, C and D fail after it.
    std::fs::write(rig.log.join("fail-A"), "").unwrap();
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-e"]);
    wait_until(LONG, "every task's job failed", || {
        ["A", "B", "C", "D"]
            .iter()
            .all(|t| job_status(&rig, &format!("prd-e/{t}")) == "failed")
    });
    let failed = rig.ok(&["list-tasks", "--prd", "prd-e", "--status", "failed"]);
    for t in ["A", "B", "C", "D"] {
        assert!(failed.contains(&format!("prd-e/{t}")), "{failed}");
    }
    // B cannot go before A.
    let e = fails(&rig, &["retry-task", "prd-e/B"]);
    assert!(
        e.contains("prd-e/A is failed") && e.contains("retry it first"),
        "{e}"
    );
    // A retried: it and the three after it are queued again, and the PRD completes.
    std::fs::remove_file(rig.log.join("fail-A")).unwrap();
    let out = rig.ok(&["retry-task", "prd-e/A"]);
    for t in ["A", "B", "C", "D"] {
        assert!(
            out.contains(&format!("Task prd-e/{t} queued again")),
            "{out}"
        );
    }
    let done = rig.env().root.join("projects/P/finished_prds/prd-e.json");
    wait_until(LONG, "the PRD complete after the retry", || {
        for t in ["A", "B", "C", "D"] {
            let s = job_status(&rig, &format!("prd-e/{t}"));
            assert_ne!(s, "failed", "task {t}'s retried job failed");
        }
        done.is_file()
    });
    for t in ["A", "B", "C", "D"] {
        let doc = rig.task("prd-e", t);
        assert_eq!(doc["status"], "done", "{doc}");
        assert_eq!(doc["jobs"].as_array().unwrap().len(), 2, "{doc}");
    }
    assert_eq!(
        read(&done)["implementation_report"]["integration"]["status"],
        "merged"
    );
    let e = fails(&rig, &["cancel-task", "prd-e/A"]);
    assert!(e.contains("done"), "{e}");
    let e = fails(&rig, &["retry-task", "prd-e/A"]);
    assert!(e.contains("nothing to retry"), "{e}");

    // A running task cancelled: its job is cancelled too, the task stays cancelled; then
    // retried, it completes.
    std::fs::write(
        rig.log.join("tasks.txt"),
        serde_json::to_string(
            "```json\n{\"tasks\": [{\"id\": \"solo\", \"title\": \"alone\"}]}\n```",
        )
        .unwrap(),
    )
    .unwrap();
    std::fs::write(rig.log.join("hold-solo"), "").unwrap();
    rig.prd("prd-k");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-k"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-k.json");
    wait_until(LONG, "create-tasks handled", || running.is_file());
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-k"]);
    wait_until(LONG, "solo's agent running", || {
        rig.log.join("held-solo").exists()
    });
    let job = rig.task("prd-k", "solo")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    let out = rig.ok(&["cancel-task", "prd-k/solo"]);
    assert!(
        out.contains("Task prd-k/solo cancelled")
            && out.contains(&format!("its job {job} cancelled")),
        "{out}"
    );
    wait_until(LONG, "the cancelled task's job ended", || {
        rig.job(&job)["runtime"]["status"] == "failed"
    });
    assert_eq!(rig.task("prd-k", "solo")["status"], "cancelled");
    let listed = rig.ok(&["list-tasks", "--prd", "prd-k", "--status", "cancelled"]);
    assert!(listed.contains("prd-k/solo"), "{listed}");
    std::fs::remove_file(rig.log.join("hold-solo")).unwrap();
    rig.ok(&["retry-task", "prd-k/solo"]);
    let done = rig.env().root.join("projects/P/finished_prds/prd-k.json");
    wait_until(LONG, "prd-k complete after the retry", || done.is_file());
    assert_eq!(rig.task("prd-k", "solo")["status"], "done");
}
