//! Issue 30's "Done when", end to end with the real parts: the REAL Claude Code CLI runs
//! every job (create-tasks and each task) through orchestratord, queue-manager and
//! agent-worker, confined by the queue's default kernel sandbox, with the queue's default
//! permissions (`--permission-mode acceptEdits`); only the model is faked, by the fake model
//! server of tests/support speaking the Anthropic Messages API, one conversation per agent.
//! Real git throughout: a small repository with its own tests.
//!
//! PRD `prd-x` of project P is a diamond (A; B and C after A; D after B and C) and PRD
//! `prd-y` of project Q (a second repository) has one task E after P's D. B and C are seen at
//! work together by the model (each one's first answer waits until the other has asked: if
//! the queue ran them one after the other, the test fails naming the one that never came);
//! E's job waits for D's and starts after it ended. Each task writes its file with Claude
//! Code's Write tool in its own worktree, and the worker commits it on the task's branch.
//! The integration merges the branches in dependency order and runs the project's tests
//! (`sh test.sh`); both PRDs end complete, P's with a report naming every task's commit and
//! the tests' output. Then the same with a deliberate conflict (PRD `prd-c`, whose B and C
//! each create CHANGELOG): the PRD ends in review naming the file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::claude_env::require_claude;
use crate::common::bus::wait_until;
use crate::fake_model::{Conversation, FakeModel, Reply, Script};
use crate::tasks_worktrees::{LONG, Rig, git, job_id, read};
use serde_json::{Value, json};
use std::path::Path;

/// The project's tests: every part of the diamond is there and says so.
const TESTS: &str = "#!/bin/sh\n# The project's tests.\nfail=0\nfor t in A B C D; do\n  if grep -qx \"$t was here\" \"$t.txt\" 2>/dev/null; then echo \"ok $t\"; else echo \"not ok $t\"; fail=1; fi\ndone\n[ $fail = 0 ] && echo \"4 tests passed\"\nexit $fail\n";

/// The create-tasks answer: prose, then the fenced task list.
fn plan(tasks: Value) -> Reply {
    Reply::text(&format!(
        "I read the PRD. The plan:\n\n```json\n{}\n```\n",
        json!({ "tasks": tasks })
    ))
}

fn task(id: &str, title: &str, deps: &[&str]) -> Value {
    json!({"id": id, "title": title, "description": format!("Write {id}'s file"),
           "acceptance_criteria": ["the project's tests pass"], "depends_on": deps})
}

/// The marker of a task's conversation: its job's prompt says this.
fn marker(prd_title: &str, t: &str) -> String {
    format!("Implement task {t} of PRD \"{prd_title}\"")
}

/// A task's agent: Claude Code's Write tool makes `file` in the task's worktree, then done.
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
        Reply::text(&format!("Task {t} done: {file} written.")),
    ]
}

fn prd_doc(id: &str, project: &str, title: &str, goal: &str) -> String {
    json!({
        "id": id, "project": project, "title": title, "version": "1.0", "owner": "chenry",
        "status": "queued", "created_time": "2025-10-25T10:00:00Z",
        "update_time": "2025-10-25T10:00:00Z", "content": {"goal": goal}, "jobs": []
    })
    .to_string()
}

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str()
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .parse()
        .unwrap()
}

#[test]
fn a_prd_becomes_merged_work_through_real_claude_code_in_parallel_worktrees() {
    let claude = require_claude();
    let rig = Rig::with_claude(&claude);
    let repo = rig.r.project_dir.clone();
    std::fs::write(repo.join("test.sh"), TESTS).unwrap();
    git(&repo, &["add", "test.sh"]);
    git(&repo, &["commit", "-q", "-m", "the project's tests"]);
    let main = git(&repo, &["rev-parse", "main"]).trim().to_string();
    rig.check_command(&["sh", "test.sh"]);
    let qdir = rig.env().dir.path().join("project-q");
    std::fs::create_dir_all(&qdir).unwrap();
    git(&qdir, &["init", "-q", "-b", "main"]);
    std::fs::write(qdir.join("README"), "project q\n").unwrap();
    git(&qdir, &["add", "README"]);
    git(&qdir, &["commit", "-q", "-m", "start"]);

    let (dia, after, con) = ("Diamond", "After the diamond", "Conflict");
    let mut script = Script::new();
    // The tasks' conversations first: their prompts hold their PRD's goal too.
    for t in ["A", "B", "C", "D"] {
        let mut c = Conversation::new(
            &marker(dia, t),
            writes(
                &repo,
                "prd-x",
                t,
                &format!("{t}.txt"),
                &format!("{t} was here\n"),
            ),
        );
        c = match t {
            // A starts when the test says (once E is queued behind D).
            "A" => c.wait_for(&["go"]),
            "B" => c.wait_for(&[&marker(dia, "C")]),
            "C" => c.wait_for(&[&marker(dia, "B")]),
            _ => c,
        };
        script = script.conversation(c);
    }
    script = script.conversation(Conversation::new(
        &marker(after, "E"),
        writes(&qdir, "prd-y", "E", "E.txt", "E was here\n"),
    ));
    for (t, file, content) in [
        ("A", "base.txt", "base\n"),
        ("B", "CHANGELOG", "left: B's change\n"),
        ("C", "CHANGELOG", "right: C's change\n"),
    ] {
        script = script.conversation(Conversation::new(
            &marker(con, t),
            writes(&repo, "prd-c", t, file, content),
        ));
    }
    for (goal, tasks) in [
        (
            "GOAL-DIAMOND",
            json!([
                task("A", "base", &[]),
                task("B", "left", &["A"]),
                task("C", "right", &["A"]),
                task("D", "top", &["B", "C"])
            ]),
        ),
        ("GOAL-AFTER-D", json!([task("E", "after D", &["prd-x/D"])])),
        (
            "GOAL-CONFLICT",
            json!([
                task("A", "base", &[]),
                task("B", "left", &["A"]),
                task("C", "right", &["A"])
            ]),
        ),
    ] {
        script = script.conversation(Conversation::new(goal, vec![plan(tasks)]));
    }
    let model = FakeModel::start(script);
    let _daemons = rig.serve_poplar_with(&model.base_url());
    rig.ok(&[
        "add-project",
        "Q",
        "--directory",
        qdir.to_str().unwrap(),
        "--owner",
        "chenry",
        "--default-queue",
        "poplar",
    ]);
    let root = rig.env().root.clone();
    rig.env().write(
        "projects/P/queued_prds/prd-x.json",
        &prd_doc("prd-x", "P", dia, "GOAL-DIAMOND"),
    );
    rig.env().write(
        "projects/Q/queued_prds/prd-y.json",
        &prd_doc("prd-y", "Q", after, "GOAL-AFTER-D"),
    );
    let job_failed = |id: &str| {
        let j = rig.job(id);
        if j["runtime"]["status"] == "failed" {
            panic!(
                "job {id} ({}) failed: {}\noutput: {}",
                j["config"]["command"], j["runtime"]["error"], j["runtime"]["output"]
            );
        }
    };

    // create-tasks, by Claude Code: P's diamond, then Q's task after P's D.
    for (project, prd) in [("P", "prd-x"), ("Q", "prd-y")] {
        let ct = job_id(&rig.ok(&["create-tasks", "--project", project, "--prd", prd]));
        let running = root.join(format!("projects/{project}/running_prds/{prd}.json"));
        wait_until(LONG, &format!("{prd}'s tasks written"), || {
            job_failed(&ct);
            running.is_file()
        });
        assert_eq!(rig.job(&ct)["runtime"]["exit_code"], 0);
    }
    assert_eq!(
        read(&root.join("projects/P/running_prds/prd-x.json"))["content"]["tasks"],
        json!(["A", "B", "C", "D"])
    );
    let e_doc = || read(&root.join("projects/Q/tasks/prd-y/E.json"));
    assert_eq!(e_doc()["depends_on"], json!(["prd-x/D"]));

    // implement-tasks for both; E's job waits for D's.
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-x"]);
    rig.ok(&["implement-tasks", "--project", "Q", "--prd", "prd-y"]);
    let job_of = |prd: &str, t: &str| -> String {
        let doc = if prd == "prd-y" {
            e_doc()
        } else {
            rig.task(prd, t)
        };
        doc["jobs"][0].as_str().unwrap().to_string()
    };
    let (d_job, e_job) = (job_of("prd-x", "D"), job_of("prd-y", "E"));
    assert_eq!(
        rig.job(&e_job)["config"]["after"],
        json!([d_job]),
        "E's job waits for D's"
    );
    assert!(model.conversation_requests(&marker(dia, "D")).is_empty());
    model.open("go");
    let p_done = root.join("projects/P/finished_prds/prd-x.json");
    let q_done = root.join("projects/Q/finished_prds/prd-y.json");
    let all = [
        ("prd-x", "A"),
        ("prd-x", "B"),
        ("prd-x", "C"),
        ("prd-x", "D"),
        ("prd-y", "E"),
    ];
    wait_until(LONG, "both PRDs complete", || {
        for (prd, t) in all {
            job_failed(&job_of(prd, t));
        }
        for review in [
            root.join("projects/P/review_prds/prd-x.json"),
            root.join("projects/Q/review_prds/prd-y.json"),
        ] {
            assert!(
                !review.exists(),
                "{}",
                std::fs::read_to_string(&review).unwrap()
            );
        }
        p_done.is_file() && q_done.is_file()
    });

    // B and C were at work together: each asked the model before the other's last turn.
    let seqs = |t: &str| -> Vec<usize> {
        model
            .conversation_requests(&marker(dia, t))
            .iter()
            .map(|r| r.seq)
            .collect()
    };
    let (b, c) = (seqs("B"), seqs("C"));
    assert!(b.len() >= 2 && c.len() >= 2, "B {b:?}, C {c:?}");
    assert!(
        b[0] < *c.last().unwrap() && c[0] < *b.last().unwrap(),
        "B {b:?} and C {c:?} did not overlap"
    );
    // E started once D had ended (a task of another project waits for the one it needs).
    let (d, e) = (rig.job(&d_job), rig.job(&e_job));
    assert!(
        time(&e["runtime"]["start_time"]) >= time(&d["runtime"]["finish_time"]),
        "E started {}, D ended {}",
        e["runtime"]["start_time"],
        d["runtime"]["finish_time"]
    );
    assert!(seqs("D").last().unwrap() < &model.conversation_requests(&marker(after, "E"))[0].seq);

    // Each task committed on its own branch, holding its work and what it depends on only.
    let mut commits = Vec::new();
    for (t, files) in [
        ("A", vec!["A.txt"]),
        ("B", vec!["A.txt", "B.txt"]),
        ("C", vec!["A.txt", "C.txt"]),
        ("D", vec!["A.txt", "B.txt", "C.txt", "D.txt"]),
    ] {
        let doc = rig.task("prd-x", t);
        assert_eq!(doc["status"], "done", "{doc}");
        let branch = format!("agentstore/prd-x/{t}");
        assert_eq!(doc["branch"], branch.as_str());
        let head = git(&repo, &["rev-parse", &branch]).trim().to_string();
        assert_eq!(doc["commit"], head.as_str());
        let tree = git(&repo, &["ls-tree", "--name-only", &branch]);
        let txt: Vec<&str> = tree.lines().filter(|l| l.ends_with(".txt")).collect();
        assert_eq!(txt, files, "{branch}: {tree}");
        let shown = git(&repo, &["show", &format!("{branch}:{t}.txt")]);
        assert_eq!(shown, format!("{t} was here\n"));
        let job = rig.job(doc["jobs"][0].as_str().unwrap());
        assert_eq!(job["runtime"]["commit"], head.as_str());
        assert_eq!(job["config"]["jobtype"], "claude");
        assert!(
            job["runtime"]["sandbox"].is_string(),
            "the task ran confined: {job}"
        );
        commits.push(head);
    }
    let e = e_doc();
    assert_eq!(e["status"], "done", "{e}");
    let e_tree = git(&qdir, &["ls-tree", "--name-only", "agentstore/prd-y/E"]);
    assert_eq!(e_tree.lines().collect::<Vec<_>>(), ["E.txt", "README"]);
    assert_eq!(
        e["commit"],
        git(&qdir, &["rev-parse", "agentstore/prd-y/E"]).trim()
    );

    // The integration: merged in dependency order, the project's tests run on it, green.
    let prd = read(&p_done);
    assert_eq!(prd["status"], "complete");
    let report = &prd["implementation_report"];
    for (i, t) in ["A", "B", "C", "D"].iter().enumerate() {
        let item = report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["task"] == *t)
            .unwrap_or_else(|| panic!("{t} not in {report}"));
        assert_eq!(item["commit"], commits[i].as_str(), "{report}");
    }
    let integ = &report["integration"];
    assert_eq!(integ["status"], "merged", "{report}");
    let order: Vec<&str> = integ["merged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        order == ["A", "B", "C", "D"] || order == ["A", "C", "B", "D"],
        "{order:?}"
    );
    assert_eq!(integ["check"]["command"], json!(["sh", "test.sh"]));
    assert_eq!(integ["check"]["exit_code"], 0, "{integ}");
    assert!(
        integ["check"]["output"]
            .as_str()
            .unwrap()
            .contains("4 tests passed"),
        "{integ}"
    );
    let ib = "agentstore/prd-x/integration";
    assert_eq!(integ["commit"], git(&repo, &["rev-parse", ib]).trim());
    for c in &commits {
        git(&repo, &["merge-base", "--is-ancestor", c, ib]);
    }
    // The project's own branch and tree are as they were.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), main);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(
        read(&q_done)["implementation_report"]["integration"]["status"],
        "merged"
    );

    // The same with a deliberate conflict: B and C each create CHANGELOG.
    rig.env().write(
        "projects/P/queued_prds/prd-c.json",
        &prd_doc("prd-c", "P", con, "GOAL-CONFLICT"),
    );
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-c"]));
    let running = root.join("projects/P/running_prds/prd-c.json");
    wait_until(LONG, "prd-c's tasks written", || {
        job_failed(&ct);
        running.is_file()
    });
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-c"]);
    let review = root.join("projects/P/review_prds/prd-c.json");
    wait_until(LONG, "prd-c in review", || {
        for t in ["A", "B", "C"] {
            job_failed(&job_of("prd-c", t));
        }
        assert!(
            !root.join("projects/P/finished_prds/prd-c.json").exists(),
            "a conflicting PRD was called complete"
        );
        review.is_file()
    });
    let prd = read(&review);
    assert_eq!(prd["status"], "review");
    let integ = &prd["implementation_report"]["integration"];
    assert_eq!(integ["status"], "conflict", "{prd}");
    assert_eq!(integ["conflict_files"], json!(["CHANGELOG"]), "{integ}");
    let bad = integ["conflict_task"].as_str().unwrap();
    assert!(bad == "B" || bad == "C", "{integ}");
    let summary = prd["implementation_report"]["summary"].as_str().unwrap();
    assert!(summary.contains("CHANGELOG"), "{summary}");
    assert_eq!(rig.task("prd-c", bad)["status"], "review");
    let shown = rig.ok(&["view-prd", "prd-c"]);
    assert!(shown.contains("review"), "{shown}");
    // Never a half-merge: no integration branch; the tasks' branches keep their work.
    assert_eq!(
        git(&repo, &["branch", "--list", "agentstore/prd-c/integration"]),
        ""
    );
    for (t, want) in [("B", "left"), ("C", "right")] {
        let text = git(&repo, &["show", &format!("agentstore/prd-c/{t}:CHANGELOG")]);
        assert!(text.starts_with(want), "{t}: {text}");
    }
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), main);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}
