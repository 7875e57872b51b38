//! Issue 30: tasks as documents. `create-tasks` answers become one task document per task
//! (a malformed answer, a cycle, an unknown dependency or a task of a project the asker may
//! not see fail the job, naming why, its answer kept); `implement-tasks` queues one job per
//! task, each after the jobs of the tasks it depends on; a task follows its job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::TestEnv;
use common::bus::{PrivateBus, spawn_orchestratord, wait_for_name, wait_until};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

struct Running {
    bus: PrivateBus,
    daemon: Child,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn start(env: &TestEnv) -> Running {
    let bus = PrivateBus::start();
    let daemon = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    Running { bus, daemon }
}

fn cli(env: &TestEnv, r: &Running, args: &[&str]) -> std::process::Output {
    env.cli()
        .env("AGENTSTORE_BUS", "session")
        .env("DBUS_SESSION_BUS_ADDRESS", &r.bus.address)
        .args(args)
        .output()
        .unwrap()
}

/// A PRD in queued_prds/ of `project`, owned by `owner`.
fn prd(env: &TestEnv, project: &str, id: &str, owner: &str) -> PathBuf {
    env.write(
        &format!("projects/{project}/queued_prds/{id}.json"),
        &json!({
            "id": id, "project": project, "title": format!("PRD {id}"), "version": "1.0",
            "owner": owner, "status": "queued", "created_time": "2025-10-25T10:00:00Z",
            "update_time": "2025-10-25T10:00:00Z", "content": {"goal": "diamond"}, "jobs": []
        })
        .to_string(),
    )
}

/// A project owned by `owner`.
fn project(env: &TestEnv, id: &str, owner: &str) {
    env.write(
        &format!("projects/{id}/project.json"),
        &json!({
            "id": id, "directory": env.dir.path().join(id), "git_repository": null,
            "create_time": "2025-10-25T10:00:00Z", "update_time": "2025-10-25T10:00:00Z",
            "description": null, "owner": owner, "collaborators": [],
            "code_research_document": null, "default_queue": "poplar"
        })
        .to_string(),
    );
}

/// A create-tasks job for `prd` asked by `user`, finished with `answer` the way a worker
/// finishes it (final write, then a rename into finished_jobs/).
fn finished_create_tasks(
    env: &TestEnv,
    id: &str,
    project: &str,
    prd: &str,
    user: &str,
    answer: &str,
) {
    let job = json!({
        "schema_version": "0.6",
        "id": id,
        "config": {
            "project": project, "working_directory": "/tmp", "queue_time": "2025-10-25T10:00:00Z",
            "jobtype": "claude", "claude_command": "task-creator", "claude_extra_args": [],
            "task_description": "Create implementation tasks", "supporting_data": {},
            "timeout_seconds": 60, "queue": "poplar", "command": "create-tasks", "prd": prd,
            "user": user
        },
        "runtime": {
            "status": "finished", "start_time": "2025-10-25T10:00:00Z",
            "finish_time": "2025-10-25T10:05:00Z", "process_id": null, "llm_process_id": null,
            "error": null,
            "output": json!({"type": "result", "is_error": false, "result": answer}).to_string()
        }
    });
    let dir = env.root.join("Queues/poplar/Jobs/finished_jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let tmp = dir.join(format!(".{id}.tmp"));
    std::fs::write(&tmp, job.to_string()).unwrap();
    std::fs::rename(&tmp, dir.join(format!("{id}.json"))).unwrap();
}

fn block(tasks: Value) -> String {
    format!(
        "Here is the plan.\n\n```json\n{}\n```\n",
        json!({ "tasks": tasks })
    )
}

fn task(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "title": format!("Task {id}"), "description": format!("Do {id}"),
           "acceptance_criteria": [format!("{id} works")], "depends_on": deps})
}

/// Waits for job `id` to be handled in finished_jobs/ or moved to failed_jobs/; returns the
/// document and whether it failed.
fn handled(env: &TestEnv, id: &str) -> (Value, bool) {
    let fin = env
        .root
        .join(format!("Queues/poplar/Jobs/finished_jobs/{id}.json"));
    let failed = env
        .root
        .join(format!("Queues/poplar/Jobs/failed_jobs/{id}.json"));
    let mut out = None;
    wait_until(LONG, "the job handled", || {
        if failed.is_file() {
            out = Some((read(&failed), true));
        } else if fin.is_file() && read(&fin)["runtime"]["handled"] == json!(true) {
            out = Some((read(&fin), false));
        }
        out.is_some()
    });
    out.unwrap()
}

#[test]
fn a_diamond_becomes_task_documents_and_fans_out_after_its_dependencies() {
    let env = TestEnv::with_test_project();
    let prd_path = prd(&env, "TestProject", "prd-d", "chenry");
    let r = start(&env);
    let answer = block(json!([
        task("D", &["B", "C"]),
        task("B", &["A"]),
        task("C", &["A"]),
        task("A", &[])
    ]));
    finished_create_tasks(&env, "ct-1", "TestProject", "prd-d", "chenry", &answer);
    let (job, failed) = handled(&env, "ct-1");
    assert!(!failed, "{job}");
    let running = env
        .root
        .join("projects/TestProject/running_prds/prd-d.json");
    wait_until(LONG, "the PRD running", || running.is_file());
    assert!(!prd_path.exists());
    assert_eq!(
        read(&running)["content"]["tasks"],
        json!(["A", "B", "C", "D"]),
        "the PRD lists its tasks in dependency order"
    );
    let tdir = env.root.join("projects/TestProject/tasks/prd-d");
    for t in ["A", "B", "C", "D"] {
        let p = tdir.join(format!("{t}.json"));
        env.cli()
            .args(["validate", "--kind", "task", p.to_str().unwrap()])
            .output()
            .unwrap();
        let doc = read(&p);
        assert_eq!(doc["status"], "pending");
        assert_eq!(doc["prd"], "prd-d");
        assert_eq!(doc["title"], format!("Task {t}"));
    }

    // Fan-out: one job per task, each after its dependencies' jobs.
    let o = cli(
        &env,
        &r,
        &[
            "implement-tasks",
            "--project",
            "TestProject",
            "--prd",
            "prd-d",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let task_job = |t: &str| -> String {
        let d = read(&tdir.join(format!("{t}.json")));
        d["jobs"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    };
    let jobs: Vec<String> = ["A", "B", "C", "D"].iter().map(|t| task_job(t)).collect();
    let queued = |id: &str| {
        read(
            &env.root
                .join(format!("Queues/poplar/Jobs/queued_jobs/{id}.json")),
        )
    };
    let after = |id: &str| -> Vec<String> {
        let mut a: Vec<String> = queued(id)["config"]["after"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        a.sort();
        a
    };
    assert!(after(&jobs[0]).is_empty());
    assert_eq!(after(&jobs[1]), vec![jobs[0].clone()]);
    assert_eq!(after(&jobs[2]), vec![jobs[0].clone()]);
    let mut bc = vec![jobs[1].clone(), jobs[2].clone()];
    bc.sort();
    assert_eq!(after(&jobs[3]), bc);
    let d = queued(&jobs[3]);
    assert_eq!(d["config"]["command"], "implement-task");
    assert_eq!(
        d["config"]["supporting_data"]["task"]["branch"],
        "agentstore/prd-d/D"
    );
    let prompt = d["config"]["task_description"].as_str().unwrap();
    assert!(
        prompt.contains("Do D") && prompt.contains("D works"),
        "{prompt}"
    );
    assert!(
        prompt.contains("diamond"),
        "the PRD is the task's context: {prompt}"
    );
    assert!(!prompt.contains("Do A"), "only its own task: {prompt}");
    assert_eq!(read(&tdir.join("A.json"))["status"], "ready");
    assert_eq!(read(&tdir.join("D.json"))["status"], "pending");
    // list-tasks and view-task show them.
    let ready = env.ok(&["list-tasks", "--prd", "prd-d", "--status", "ready"]);
    assert!(
        ready.contains("prd-d/A") && !ready.contains("prd-d/B"),
        "{ready}"
    );
    let all: Value = serde_json::from_str(&env.ok(&[
        "--format",
        "json",
        "list-tasks",
        "--project",
        "TestProject",
    ]))
    .unwrap();
    assert_eq!(all.as_array().unwrap().len(), 4, "{all}");
    let d_view = env.ok(&["view-task", "prd-d/D"]);
    assert!(d_view.contains("agentstore/prd-d/D"), "{d_view}");
    let bad = env.fails(&["list-tasks", "--status", "started"]);
    assert!(bad.contains("not a task state"), "{bad}");
    let prd_jobs = read(&running)["jobs"].clone();
    for j in &jobs {
        assert!(
            prd_jobs.as_array().unwrap().contains(&json!(j)),
            "provenance {j}"
        );
    }

    // The same message again (another implement-tasks) queues nothing twice for a task
    // that has a live job: a second fan-out is refused for A (its job is queued) — it
    // queues new jobs only for tasks without a live one.
    let count = || {
        std::fs::read_dir(env.root.join("Queues/poplar/Jobs/queued_jobs"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    };
    assert_eq!(count(), 4);

    // A task follows its job: A's job finished → A done.
    let from = env
        .root
        .join(format!("Queues/poplar/Jobs/queued_jobs/{}.json", jobs[0]));
    let mut j = read(&from);
    j["runtime"]["status"] = json!("finished");
    j["runtime"]["start_time"] = json!("2025-10-25T10:00:00Z");
    j["runtime"]["finish_time"] = json!("2025-10-25T10:05:00Z");
    j["runtime"]["output"] = json!("A done");
    j["runtime"]["commit"] = json!("0123456789abcdef0123456789abcdef01234567");
    let dir = env.root.join("Queues/poplar/Jobs/finished_jobs");
    std::fs::write(dir.join(".a.tmp"), j.to_string()).unwrap();
    std::fs::rename(dir.join(".a.tmp"), dir.join(format!("{}.json", jobs[0]))).unwrap();
    std::fs::remove_file(&from).unwrap();
    wait_until(LONG, "task A done", || {
        read(&tdir.join("A.json"))["status"] == "done"
    });
    assert_eq!(
        read(&tdir.join("A.json"))["commit"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    assert!(running.is_file(), "the PRD waits for its other tasks");
}

#[test]
fn bad_task_lists_fail_the_job_naming_why_and_keep_the_answer() {
    let env = TestEnv::with_test_project();
    env.ok(&[
        "add-user",
        "alice",
        "--name",
        "Alice",
        "--email",
        "a@x.org",
        "--permissions",
        "user",
    ]);
    project(&env, "Mine", "alice");
    project(&env, "Theirs", "chenry");
    prd(&env, "Theirs", "prd-theirs", "chenry");
    env.write(
        "projects/Theirs/tasks/prd-theirs/T.json",
        &json!({
            "schema_version": "0.6", "id": "T", "prd": "prd-theirs", "project": "Theirs",
            "title": "T", "description": "", "acceptance_criteria": [], "depends_on": [],
            "status": "pending", "jobs": [], "created_time": "2025-10-25T10:00:00Z",
            "update_time": "2025-10-25T10:00:00Z"
        })
        .to_string(),
    );
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "malformed",
            "1. do it\n2. test it".to_string(),
            "not valid JSON",
        ),
        (
            "wrong-field",
            block(json!([{"id": "a", "title": 7}])),
            "/tasks/0",
        ),
        (
            "cycle",
            block(json!([
                task("a", &["c"]),
                task("b", &["a"]),
                task("c", &["b"])
            ])),
            "cycle",
        ),
        (
            "self",
            block(json!([task("a", &["a"])])),
            "depends on itself",
        ),
        (
            "unknown",
            block(json!([task("a", &["zz"])])),
            "unknown dependency",
        ),
        ("bad-id", block(json!([task("../x", &[])])), "../x"),
        (
            "dup",
            block(json!([task("a", &[]), task("a", &[])])),
            "appears twice",
        ),
        (
            "hidden",
            block(json!([task("a", &["prd-theirs/T"])])),
            "may see",
        ),
        (
            "missing-prd",
            block(json!([task("a", &["nope/T"])])),
            "may see",
        ),
    ];
    let _r = start(&env);
    for (i, (name, answer, expect)) in cases.iter().enumerate() {
        let prd_id = format!("prd-{name}");
        let prd_path = prd(&env, "Mine", &prd_id, "alice");
        let id = format!("ct-{i}");
        finished_create_tasks(&env, &id, "Mine", &prd_id, "alice", answer);
        let (job, failed) = handled(&env, &id);
        assert!(failed, "{name}: accepted: {job}");
        let err = job["runtime"]["error"].as_str().unwrap();
        assert!(err.contains(expect), "{name}: {err}");
        assert!(err.contains("task list was refused"), "{name}: {err}");
        assert_eq!(
            job["runtime"]["output"],
            json!(json!({"type": "result", "is_error": false, "result": answer}).to_string()),
            "{name}: the raw answer is kept"
        );
        assert!(prd_path.is_file(), "{name}: the PRD stays queued");
        assert!(
            !env.root
                .join(format!("projects/Mine/tasks/{prd_id}"))
                .exists(),
            "{name}: no task written"
        );
    }
    // Alice sees her PRDs' tasks, never those of a project she may not see.
    env.ok(&["login", "alice"]);
    let hers = env.ok(&["list-tasks"]);
    assert!(!hers.contains("prd-theirs"), "{hers}");
    let hidden = env.fails(&["view-task", "prd-theirs/T"]);
    assert!(hidden.contains("not found"), "{hidden}");
    env.ok(&["login", "chenry"]);
    assert!(
        env.ok(&["view-task", "prd-theirs/T"])
            .contains("prd-theirs")
    );
    // An admin may depend on the other project's task.
    let prd_path = prd(&env, "Mine", "prd-admin", "alice");
    finished_create_tasks(
        &env,
        "ct-admin",
        "Mine",
        "prd-admin",
        "chenry",
        &block(json!([task("a", &["prd-theirs/T"])])),
    );
    let (job, failed) = handled(&env, "ct-admin");
    assert!(!failed, "{job}");
    wait_until(LONG, "the PRD running", || !prd_path.exists());
    let a = read(&env.root.join("projects/Mine/tasks/prd-admin/a.json"));
    assert_eq!(a["depends_on"], json!(["prd-theirs/T"]));
}
