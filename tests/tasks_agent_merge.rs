//! Issue 30's "agent-driven or plain git merge, per queue setting": queue poplar set to
//! `--integration agent`, the REAL Claude Code CLI at every job (the fake model speaking the
//! Anthropic Messages API, one conversation per agent). Two tasks B and C (both after A) each
//! write CHANGELOG: a real conflict in real git when the integration merges the second.
//!
//! First PRD: the integration hands the conflict to Claude Code in the integration worktree
//! with a prompt naming the file and the tasks; the model reads CHANGELOG (markers and all)
//! and writes both lines; the worker finds no marker left, commits the merge, runs the
//! project's check (which wants both lines and no marker) green: the PRD completes, its
//! report naming what the agent resolved. Second PRD: the agent looks and changes nothing —
//! the markers stay, so its result is not taken: the PRD goes to review naming CHANGELOG and
//! the markers, the integration branch is never half-merged, the task is in review.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::claude_env::require_claude;
use crate::common::bus::wait_until;
use crate::fake_model::{Conversation, FakeModel, Reply, Script};
use crate::tasks_worktrees::{LONG, Rig, git, job_id, read};
use serde_json::{Value, json};
use std::path::Path;

/// The project's check: CHANGELOG holds both tasks' lines and no conflict marker.
const CHECK: &str = "#!/bin/sh\ngrep -qx \"left: B's change\" CHANGELOG || { echo 'B lost'; exit 1; }\ngrep -qx \"right: C's change\" CHANGELOG || { echo 'C lost'; exit 1; }\nif grep -qE '^(<<<<<<<|=======|>>>>>>>)' CHANGELOG; then echo 'markers left'; exit 1; fi\necho 'changelog ok'\n";

fn task(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "title": format!("{id}'s part"), "description": format!("Write {id}'s part"),
           "acceptance_criteria": ["the check passes"], "depends_on": deps})
}

fn marker(prd_title: &str, t: &str) -> String {
    format!("Implement task {t} of PRD \"{prd_title}\"")
}

/// Claude Code's Write tool makes `file` in the task's worktree.
fn writes(repo: &Path, prd: &str, t: &str, file: &str, content: &str) -> Vec<Reply> {
    let path = repo
        .join(".agentstore-worktrees")
        .join(prd)
        .join(t)
        .join(file);
    vec![
        Reply::ToolUse {
            name: "Write".into(),
            input: json!({"file_path": path, "content": content}),
            text: Some(format!("Writing {file}.")),
        },
        Reply::text(&format!("Task {t} done.")),
    ]
}

fn prd_doc(id: &str, title: &str, goal: &str) -> String {
    json!({
        "id": id, "project": "P", "title": title, "version": "1.0", "owner": "chenry",
        "status": "queued", "created_time": "2025-10-25T10:00:00Z",
        "update_time": "2025-10-25T10:00:00Z", "content": {"goal": goal}, "jobs": []
    })
    .to_string()
}

#[test]
fn a_conflict_is_resolved_by_the_queues_agent_or_the_prd_goes_to_review() {
    let claude = require_claude();
    let rig = Rig::with_claude(&claude);
    let repo = rig.r.project_dir.clone();
    std::fs::write(repo.join("check.sh"), CHECK).unwrap();
    git(&repo, &["add", "check.sh"]);
    git(&repo, &["commit", "-q", "-m", "the project's check"]);
    let main = git(&repo, &["rev-parse", "main"]).trim().to_string();
    rig.check_command(&["sh", "check.sh"]);
    // The queue setting, as people set it, and view-queue shows it.
    rig.ok(&["set-queue", "poplar", "--integration", "agent"]);
    let shown = rig.ok(&["--format", "json", "view-queue", "poplar"]);
    let q: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(q["config"]["integration"], "agent", "{shown}");
    let text = rig.ok(&["view-queue", "poplar"]);
    assert!(
        text.contains("integration") && text.contains("agent"),
        "{text}"
    );
    let bad = rig.cli(&["set-queue", "poplar", "--integration", "octopus"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("merge"));

    let (good, stuck) = ("Resolved", "Left alone");
    let tree = |prd: &str| {
        repo.join(".agentstore-worktrees")
            .join(prd)
            .join(".integration")
    };
    let changelog = tree("prd-m").join("CHANGELOG");
    let mut script = Script::new()
        // The integration's agent (its prompt names the PRD): reads the conflicted file, then
        // writes both lines without markers.
        .conversation(Conversation::new(
            "Resolve the merge conflict of PRD prd-m's integration",
            vec![
                Reply::ToolUse {
                    name: "Read".into(),
                    input: json!({"file_path": changelog}),
                    text: Some("Reading the conflict.".into()),
                },
                Reply::ToolUse {
                    name: "Write".into(),
                    input: json!({"file_path": changelog,
                                  "content": "left: B's change\nright: C's change\n"}),
                    text: Some("Keeping both lines.".into()),
                },
                Reply::text("Resolved: CHANGELOG keeps both changes."),
            ],
        ))
        // The other PRD's agent looks and changes nothing.
        .conversation(Conversation::new(
            "Resolve the merge conflict of PRD prd-n's integration",
            vec![Reply::text(
                "I cannot tell which line is right; leaving it.",
            )],
        ));
    for (prd, title) in [("prd-m", good), ("prd-n", stuck)] {
        for (t, file, content) in [
            ("A", "base.txt", "base\n"),
            ("B", "CHANGELOG", "left: B's change\n"),
            ("C", "CHANGELOG", "right: C's change\n"),
        ] {
            script = script.conversation(Conversation::new(
                &marker(title, t),
                writes(&repo, prd, t, file, content),
            ));
        }
    }
    for goal in ["GOAL-RESOLVED", "GOAL-LEFT"] {
        let tasks = json!({"tasks": [task("A", &[]), task("B", &["A"]), task("C", &["A"])]});
        script = script.conversation(Conversation::new(
            goal,
            vec![Reply::text(&format!("Plan:\n\n```json\n{tasks}\n```\n"))],
        ));
    }
    let model = FakeModel::start(script);
    let _daemons = rig.serve_poplar_with(&model.base_url());
    let root = rig.env().root.clone();
    let job_failed = |id: &str| {
        let j = rig.job(id);
        if j["runtime"]["status"] == "failed" {
            panic!(
                "job {id} ({}) failed: {}\noutput: {}",
                j["config"]["command"], j["runtime"]["error"], j["runtime"]["output"]
            );
        }
    };
    let run_prd = |prd: &str, title: &str, goal: &str| {
        rig.env().write(
            &format!("projects/P/queued_prds/{prd}.json"),
            &prd_doc(prd, title, goal),
        );
        let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", prd]));
        let running = root.join(format!("projects/P/running_prds/{prd}.json"));
        wait_until(LONG, &format!("{prd}'s tasks written"), || {
            job_failed(&ct);
            running.is_file()
        });
        rig.ok(&["implement-tasks", "--project", "P", "--prd", prd]);
        let done = root.join(format!("projects/P/finished_prds/{prd}.json"));
        let review = root.join(format!("projects/P/review_prds/{prd}.json"));
        wait_until(LONG, &format!("{prd} ended"), || {
            for t in ["A", "B", "C"] {
                if let Some(j) = rig.task(prd, t)["jobs"][0].as_str() {
                    job_failed(j);
                }
            }
            done.is_file() || review.is_file()
        });
        if done.is_file() {
            read(&done)
        } else {
            read(&review)
        }
    };

    // 1. The agent resolves the conflict: merged, checked, complete.
    let prd = run_prd("prd-m", good, "GOAL-RESOLVED");
    let report = &prd["implementation_report"];
    assert_eq!(prd["status"], "complete", "{prd}");
    let integ = &report["integration"];
    assert_eq!(integ["status"], "merged", "{integ}");
    assert_eq!(integ["mode"], "agent", "{integ}");
    let resolved = integ["resolved"].as_array().unwrap();
    assert_eq!(resolved.len(), 1, "{integ}");
    let second = resolved[0]["task"].as_str().unwrap();
    assert!(second == "B" || second == "C", "{integ}");
    assert_eq!(resolved[0]["files"], json!(["CHANGELOG"]), "{integ}");
    assert_eq!(integ["check"]["exit_code"], 0, "{integ}");
    assert!(
        integ["check"]["output"]
            .as_str()
            .unwrap()
            .contains("changelog ok"),
        "{integ}"
    );
    let summary = report["summary"].as_str().unwrap();
    assert!(
        summary.contains("the agent resolved") && summary.contains("CHANGELOG"),
        "{summary}"
    );
    // The model was asked through the real CLI, with a prompt naming the file and the tasks.
    let asked =
        model.conversation_requests("Resolve the merge conflict of PRD prd-m's integration");
    assert!(asked.len() >= 3, "the agent's turns: {}", asked.len());
    let prompt = asked[0].text();
    assert!(prompt.contains("CHANGELOG"), "{prompt}");
    assert!(
        prompt.contains(&format!("task {second} ({second}'s part")),
        "{prompt}"
    );
    // The merge commit on the integration branch: both tasks' parents, both lines.
    let ib = "agentstore/prd-m/integration";
    let head = git(&repo, &["rev-parse", ib]).trim().to_string();
    assert_eq!(integ["commit"], head.as_str());
    assert_eq!(
        resolved[0]["commit"],
        head.as_str(),
        "the last merge was the agent's"
    );
    let parents = git(&repo, &["rev-list", "--parents", "-n", "1", ib]);
    assert_eq!(
        parents.split_whitespace().count(),
        3,
        "a merge commit: {parents}"
    );
    for t in ["A", "B", "C"] {
        let c = rig.task("prd-m", t)["commit"].as_str().unwrap().to_string();
        git(&repo, &["merge-base", "--is-ancestor", &c, ib]);
    }
    assert_eq!(
        git(&repo, &["show", &format!("{ib}:CHANGELOG")]),
        "left: B's change\nright: C's change\n"
    );
    assert!(!tree("prd-m").exists(), "the integration tree is removed");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), main);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // 2. The agent leaves the markers: not taken; review, naming the file and why.
    let prd = run_prd("prd-n", stuck, "GOAL-LEFT");
    assert_eq!(prd["status"], "review", "{prd}");
    let integ = &prd["implementation_report"]["integration"];
    assert_eq!(integ["status"], "conflict", "{integ}");
    assert_eq!(integ["mode"], "agent", "{integ}");
    assert_eq!(integ["conflict_files"], json!(["CHANGELOG"]), "{integ}");
    assert!(integ.get("resolved").is_none(), "{integ}");
    let summary = prd["implementation_report"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("conflict markers are left in CHANGELOG")
            && summary.contains("the agent's resolution was not taken"),
        "{summary}"
    );
    assert!(
        !model
            .conversation_requests("Resolve the merge conflict of PRD prd-n's integration")
            .is_empty(),
        "the agent was asked"
    );
    let bad = integ["conflict_task"].as_str().unwrap();
    assert_eq!(rig.task("prd-n", bad)["status"], "review");
    // Never a half-merge: the new integration branch is gone, the tasks' work kept.
    assert_eq!(
        git(&repo, &["branch", "--list", "agentstore/prd-n/integration"]),
        ""
    );
    for (t, want) in [("B", "left"), ("C", "right")] {
        let text = git(&repo, &["show", &format!("agentstore/prd-n/{t}:CHANGELOG")]);
        assert!(text.starts_with(want), "{t}: {text}");
    }
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), main);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}
