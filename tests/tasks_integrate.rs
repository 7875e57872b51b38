//! Issue 30's integration step when it cannot end green: two tasks editing the same lines of
//! the same file (a real merge conflict in real git) put the PRD in `review`, naming the
//! conflicting task and file, with the integration branch never half-merged and the tasks'
//! branches kept; then a PRD whose merge is clean but whose project check fails goes to
//! `review` with the check's exit status and output. (The green case, the diamond merged and
//! checked, is the end of tasks_worktrees' diamond test.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::wait_until;
use crate::tasks_worktrees::{LONG, Rig, git, job_id, read};

/// The agent's answer to create-tasks: A; B and C after A (no task after both).
fn fork() -> String {
    let list = "Plan:\n```json\n{\"tasks\": [{\"id\": \"A\", \"title\": \"base\", \"depends_on\": []}, {\"id\": \"B\", \"title\": \"left\", \"depends_on\": [\"A\"]}, {\"id\": \"C\", \"title\": \"right\", \"depends_on\": [\"A\"]}]}\n```";
    serde_json::to_string(list).unwrap()
}

fn one_task() -> String {
    let list =
        "```json\n{\"tasks\": [{\"id\": \"solo\", \"title\": \"alone\", \"depends_on\": []}]}\n```";
    serde_json::to_string(list).unwrap()
}

#[test]
fn a_conflict_or_a_red_check_puts_the_prd_in_review_naming_what_failed() {
    let rig = Rig::new();
    let _daemons = rig.serve_poplar();
    let repo = rig.r.project_dir.clone();
    let main = git(&repo, &["rev-parse", "main"]).trim().to_string();
    std::fs::write(rig.log.join("tasks.txt"), fork()).unwrap();
    // Every task rewrites README's one line: B and C (both from A) conflict.
    std::fs::write(rig.log.join("edit-README"), "").unwrap();
    rig.prd("prd-c");
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-c"]));
    let running = rig.env().root.join("projects/P/running_prds/prd-c.json");
    wait_until(LONG, "create-tasks handled", || running.is_file());
    assert_eq!(rig.job(&ct)["runtime"]["status"], "finished");
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-c"]);
    let review = rig.env().root.join("projects/P/review_prds/prd-c.json");
    wait_until(LONG, "the PRD in review", || {
        for t in ["A", "B", "C"] {
            if let Some(j) = rig.task("prd-c", t)["jobs"][0].as_str().map(|j| rig.job(j))
                && j["runtime"]["status"] == "failed"
            {
                panic!("task {t}'s job failed: {}", j["runtime"]["error"]);
            }
        }
        assert!(
            !rig.env()
                .root
                .join("projects/P/finished_prds/prd-c.json")
                .exists(),
            "a conflicting PRD was called complete"
        );
        review.is_file()
    });
    let prd = read(&review);
    assert_eq!(prd["status"], "review");
    let integ = &prd["implementation_report"]["integration"];
    assert_eq!(integ["status"], "conflict", "{prd}");
    // A merges; the second of B and C is the one that conflicts, in README.
    let bad = integ["conflict_task"].as_str().unwrap().to_string();
    assert!(bad == "B" || bad == "C", "{integ}");
    assert_eq!(integ["conflict_files"], serde_json::json!(["README"]));
    let summary = prd["implementation_report"]["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("task {bad}")) && summary.contains("README"),
        "{summary}"
    );
    let task = rig.task("prd-c", &bad);
    assert_eq!(task["status"], "review", "{task}");
    assert!(task["error"].as_str().unwrap().contains("README"), "{task}");
    // Never a half-merge: the integration branch, new, is gone (nothing merged is kept).
    assert_eq!(
        git(&repo, &["branch", "--list", "agentstore/prd-c/integration"]),
        "",
        "a half-merged integration branch was left"
    );
    // The tasks' branches keep their commits; the project's branch and tree are untouched.
    for t in ["A", "B", "C"] {
        let doc = rig.task("prd-c", t);
        let b = format!("agentstore/prd-c/{t}");
        assert_eq!(
            git(&repo, &["rev-parse", &b]).trim(),
            doc["commit"].as_str().unwrap()
        );
    }
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), main);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(
        !repo
            .join(".agentstore-worktrees/prd-c/.integration")
            .exists()
    );
    // view-prd shows it in review to its owner.
    let shown = rig.ok(&["view-prd", "prd-c"]);
    assert!(shown.contains("review"), "{shown}");
    // The owner is told the graph is blocked (issue 31), once, saying what failed.
    let blocked = crate::notify::notices(&rig.env().root, "graph_blocked");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert!(
        blocked[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("PRD prd-c: blocked at integration/"),
        "{blocked:?}"
    );
    assert!(
        blocked[0]["body"].as_str().unwrap().contains("README"),
        "{blocked:?}"
    );

    // A clean merge with a red check: review, with the check's status and output.
    std::fs::remove_file(rig.log.join("edit-README")).unwrap();
    std::fs::write(rig.log.join("tasks.txt"), one_task()).unwrap();
    rig.check_command(&["sh", "-c", "echo 2 tests failed >&2; exit 3"]);
    rig.prd("prd-r");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-r"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-r.json");
    wait_until(LONG, "create-tasks handled", || running.is_file());
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-r"]);
    let review = rig.env().root.join("projects/P/review_prds/prd-r.json");
    wait_until(LONG, "the PRD in review", || {
        if let Some(j) = rig.task("prd-r", "solo")["jobs"][0]
            .as_str()
            .map(|j| rig.job(j))
            && j["runtime"]["status"] == "failed"
        {
            panic!("the task's job failed: {}", j["runtime"]["error"]);
        }
        review.is_file()
    });
    let prd = read(&review);
    let integ = &prd["implementation_report"]["integration"];
    assert_eq!(integ["status"], "check_failed", "{prd}");
    assert_eq!(integ["check"]["exit_code"], 3);
    assert!(
        integ["check"]["output"]
            .as_str()
            .unwrap()
            .contains("2 tests failed"),
        "{integ}"
    );
    // The merge itself is kept on the integration branch for the person to look at.
    let ib = "agentstore/prd-r/integration";
    let tree = git(&repo, &["ls-tree", "--name-only", ib]);
    assert!(tree.lines().any(|l| l == "solo.txt"), "{tree}");
    assert_eq!(rig.task("prd-r", "solo")["status"], "done");
}
