//! PRD §12 M2 (job creation), completion handling (§6.5), the crash test and PRD §10
//! permissions over D-Bus. Daemon on a private bus; the CLI as a separate process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use agentstore::bus::orchestrator::Orchestrator1Proxy;
use common::TestEnv;
use common::bus::{PrivateBus, spawn_orchestratord, submit_over, wait_for_name, wait_until};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.ends_with(".json") && !n.starts_with('.')
                })
                .count()
        })
        .unwrap_or(0)
}

/// A store with the PRD's M2 TestProject and poplar queue (worker_count 2).
fn m2_store() -> TestEnv {
    TestEnv::with_test_project()
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

fn cli_on(env: &TestEnv, bus: &PrivateBus, args: &[&str]) -> std::process::Output {
    env.cli()
        .env("AGENTSTORE_BUS", "session")
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn m2_job_creation() {
    let env = m2_store();
    let r = start(&env);
    // Test 3: research-code prints "Job queued: <uuid>".
    let o = cli_on(&env, &r.bus, &["research-code", "--project", "TestProject"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let id = out
        .trim()
        .strip_prefix("Job queued: ")
        .expect(&out)
        .to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    // Test 4: the job file is in the project's default queue.
    let path = env
        .root
        .join(format!("Queues/poplar/Jobs/queued_jobs/{id}.json"));
    let job = read(&path);
    assert_eq!(job["config"]["project"], "TestProject");
    assert_eq!(job["config"]["working_directory"], "/tmp/testproject");
    assert_eq!(job["config"]["jobtype"], "claude");
    assert_eq!(job["config"]["claude_command"], "code-researcher");
    assert_eq!(job["config"]["timeout_seconds"], 1800);
    assert_eq!(
        job["config"]["supporting_data"]["project_directory"],
        "/tmp/testproject"
    );
    assert_eq!(job["runtime"]["status"], "queued");
    // Test 5: it validates.
    env.ok(&["validate", path.to_str().unwrap()]);
    // Test 6: --queue oak fails: "Queue not found: oak".
    let o = cli_on(
        &env,
        &r.bus,
        &[
            "research-code",
            "--project",
            "TestProject",
            "--queue",
            "oak",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Queue not found: oak"));
    // The --queue override goes to an existing queue.
    env.ok(&["add-queue", "oak"]);
    let o = cli_on(
        &env,
        &r.bus,
        &[
            "research-code",
            "--project",
            "TestProject",
            "--queue",
            "oak",
        ],
    );
    let id2 = String::from_utf8(o.stdout)
        .unwrap()
        .trim()
        .replace("Job queued: ", "");
    assert!(
        env.root
            .join(format!("Queues/oak/Jobs/queued_jobs/{id2}.json"))
            .exists()
    );
    // Test 7: through the inbox (as from another machine), the outbox answer has job_id,
    // queue and job_path; --follow waits for it.
    let o = cli_on(
        &env,
        &r.bus,
        &[
            "--bus",
            "none",
            "--follow",
            "60",
            "--format",
            "json",
            "research-code",
            "--project",
            "TestProject",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let resp: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(resp["status"], "done");
    assert_eq!(resp["content"]["queue"], "poplar");
    let jp = resp["content"]["job_path"].as_str().unwrap();
    assert!(env.root.join(jp).exists(), "{jp}");
    assert_eq!(resp["content"]["job_id"].as_str().unwrap().len(), 36);
    // The answered response was moved to processed_outbox by the CLI.
    let cid = resp["correlation_id"].as_str().unwrap();
    assert!(
        env.root
            .join(format!("messaging/processed_outbox/{cid}.json"))
            .exists()
    );
    assert_eq!(count(&env.root.join("Queues/poplar/Jobs/queued_jobs")), 2);
}

#[test]
fn queue_selection_order_and_errors() {
    let env = m2_store();
    let r = start(&env);
    let submit = |content: Value, project: &str| {
        let msg = json!({"command": "research-code", "project": project, "content": content});
        cli_on(&env, &r.bus, &["--format", "json", "daemon", "status"]); // keeps daemon warm
        submit_over(&r.bus.address, &msg.to_string())
    };
    let (ok, out) = submit(json!({"queue": "nope"}), "TestProject");
    assert!(!ok && out.contains("Queue not found: nope"), "{out}");
    // A project whose default queue is gone.
    let mut p = read(&env.root.join("projects/TestProject/project.json"));
    p["default_queue"] = json!("gone");
    std::fs::write(
        env.root.join("projects/TestProject/project.json"),
        p.to_string(),
    )
    .unwrap();
    let (ok, out) = submit(json!({}), "TestProject");
    assert!(
        !ok && out.contains("Project queue not found: gone"),
        "{out}"
    );
    let (ok, out) = submit(json!({}), "Missing");
    assert!(!ok && out.contains("Project not found: Missing"), "{out}");
    let (ok, out) = submit(json!({"queue": "poplar"}), "TestProject");
    assert!(ok, "{out}");
}

/// Finishes a job the way agent-worker does: final write, then a rename into finished_jobs/.
fn finish(env: &TestEnv, queue: &str, id: &str, result: &str) {
    let from = env
        .root
        .join(format!("Queues/{queue}/Jobs/queued_jobs/{id}.json"));
    let mut job = read(&from);
    job["runtime"]["status"] = json!("finished");
    job["runtime"]["start_time"] = json!("2025-10-25T10:00:00Z");
    job["runtime"]["finish_time"] = json!("2025-10-25T10:05:00Z");
    job["runtime"]["output"] =
        json!(json!({"type": "result", "is_error": false, "result": result}).to_string());
    let tmp = env
        .root
        .join(format!("Queues/{queue}/Jobs/finished_jobs/.{id}.tmp"));
    std::fs::write(&tmp, job.to_string()).unwrap();
    std::fs::rename(
        &tmp,
        env.root
            .join(format!("Queues/{queue}/Jobs/finished_jobs/{id}.json")),
    )
    .unwrap();
    std::fs::remove_file(&from).unwrap();
}

fn job_id(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .replace("Job queued: ", "")
}

#[test]
fn completion_handlers_update_projects_and_prds_once() {
    let env = m2_store();
    let docdir = env.dir.path().join("proj");
    std::fs::create_dir_all(&docdir).unwrap();
    let mut p = read(&env.root.join("projects/TestProject/project.json"));
    p["code_research_document"] = json!(docdir.join("RESEARCH.md"));
    std::fs::write(
        env.root.join("projects/TestProject/project.json"),
        p.to_string(),
    )
    .unwrap();
    let r = start(&env);

    // research-code → update_time bumped. The document is the job's to write (on the compute
    // host, as its user: tests/usermode.rs); a job finished here without a worker leaves
    // none, and the orchestrator writes none.
    let id = job_id(&cli_on(
        &env,
        &r.bus,
        &["research-code", "--project", "TestProject"],
    ));
    let queued = read(
        &env.root
            .join(format!("Queues/poplar/Jobs/queued_jobs/{id}.json")),
    );
    assert_eq!(
        queued["config"]["supporting_data"]["code_research_document"],
        json!(docdir.join("RESEARCH.md")),
        "the job carries the project's document path"
    );
    finish(&env, "poplar", &id, "# Architecture\nIt works.");
    let doc = docdir.join("RESEARCH.md");
    let fin = env
        .root
        .join(format!("Queues/poplar/Jobs/finished_jobs/{id}.json"));
    wait_until(LONG, "handled flag", || {
        read(&fin)["runtime"]["handled"] == json!(true)
    });
    assert!(!doc.exists(), "the orchestrator wrote {}", doc.display());
    assert_ne!(
        read(&env.root.join("projects/TestProject/project.json"))["update_time"],
        "2025-10-25T10:00:00Z"
    );

    // create-prd → a PRD in queued_prds/ named by the job.
    let id = job_id(&cli_on(
        &env,
        &r.bus,
        &[
            "create-prd",
            "--project",
            "TestProject",
            "--task",
            "Faster FBA",
        ],
    ));
    finish(&env, "poplar", &id, "# Faster FBA\n\nGoals: 10x.");
    let prd = env
        .root
        .join(format!("projects/TestProject/queued_prds/{id}.json"));
    wait_until(LONG, "PRD created", || prd.exists());
    let doc = read(&prd);
    assert_eq!(doc["title"], "Faster FBA");
    assert_eq!(doc["jobs"], json!([id]));
    env.ok(&["validate", prd.to_str().unwrap()]);

    // create-tasks → job id in the PRD at once (provenance), then PRD running.
    let prd_id = id;
    let t = job_id(&cli_on(
        &env,
        &r.bus,
        &["create-tasks", "--project", "TestProject", "--prd", &prd_id],
    ));
    assert!(
        read(&prd)["jobs"].as_array().unwrap().contains(&json!(t)),
        "provenance at creation"
    );
    // Issue 30: the tasks come back as a JSON block, one task document each.
    finish(
        &env,
        "poplar",
        &t,
        "1. do it\n```json\n{\"tasks\": [{\"id\": \"do-it\", \"title\": \"Do it\"}]}\n```",
    );
    let running = env
        .root
        .join(format!("projects/TestProject/running_prds/{prd_id}.json"));
    wait_until(LONG, "PRD running", || running.exists());
    assert_eq!(read(&running)["status"], "running");
    assert!(!prd.exists());

    // implement-tasks → one job per task; the last task done → PRD complete with the report.
    let i = job_id(&cli_on(
        &env,
        &r.bus,
        &[
            "implement-tasks",
            "--project",
            "TestProject",
            "--prd",
            &prd_id,
        ],
    ));
    finish(&env, "poplar", &i, "All done.");
    let done = env
        .root
        .join(format!("projects/TestProject/finished_prds/{prd_id}.json"));
    wait_until(LONG, "PRD complete", || done.exists());
    let d = read(&done);
    assert_eq!(d["status"], "complete");
    assert_eq!(d["implementation_report"]["tasks"][0]["task"], "do-it");
    assert_eq!(d["implementation_report"]["tasks"][0]["status"], "done");
    assert_eq!(d["implementation_report"]["tasks"][0]["jobs"], json!([i]));
    assert_eq!(d["jobs"].as_array().unwrap().len(), 3);
    // Handled once: the handled flag is set on every finished job.
    let fin_dir = env.root.join("Queues/poplar/Jobs/finished_jobs");
    wait_until(LONG, "all handled", || {
        std::fs::read_dir(&fin_dir)
            .unwrap()
            .filter_map(Result::ok)
            .all(|e| {
                e.file_name().to_string_lossy().starts_with('.')
                    || read(&e.path())["runtime"]["handled"] == json!(true)
            })
    });
}

fn agent_message(i: usize) -> String {
    let (command, content) = if i.is_multiple_of(2) {
        ("research-code", "{}")
    } else {
        ("list-projects", "{}")
    };
    format!(
        r#"{{"correlation_id":"msg-{i:04}","source":"user","project":"TestProject","queue_time":"2025-10-25T10:{:02}:{:02}Z","processed_time":null,"command":"{command}","content":{content},"status":"queued","error":null}}"#,
        i / 60 % 60,
        i % 60
    )
}

#[test]
fn crash_test_500_messages_sigkill_restart_exactly_once() {
    let env = m2_store();
    for i in 0..500 {
        env.write(
            &format!("messaging/inbox/msg-{i:04}.json"),
            &agent_message(i),
        );
    }
    let outbox = env.root.join("messaging/outbox");
    let bus = PrivateBus::start();
    // Kill it mid-work several times, each time after it has answered more.
    for threshold in [40, 120, 230, 350, 460] {
        let mut d = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]);
        wait_until(LONG, "progress before the kill", || {
            count(&outbox) >= threshold
        });
        d.kill().unwrap(); // SIGKILL
        d.wait().unwrap();
    }
    // The lock of a dead process on this host is stale; the last run finishes the work.
    let mut d = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]);
    wait_until(LONG, "all 500 answered", || {
        count(&outbox) == 500 && count(&env.root.join("messaging/inbox")) == 0
    });
    d.kill().unwrap();
    d.wait().unwrap();
    // A clean start removes the temp files that the kills left behind (once they are old
    // enough not to belong to a live writer: age them instead of waiting).
    for dir in [
        outbox.clone(),
        env.root.join("Queues/poplar/Jobs/queued_jobs"),
    ] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.to_string_lossy().ends_with(".tmp") {
                let ok = std::process::Command::new("touch")
                    .args(["-d", "1 hour ago"])
                    .arg(&p)
                    .status()
                    .unwrap();
                assert!(ok.success());
            }
        }
    }
    let mut d = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "1"]);
    assert!(d.wait().unwrap().success());
    let dot_files = std::fs::read_dir(&outbox)
        .unwrap()
        .chain(std::fs::read_dir(env.root.join("Queues/poplar/Jobs/queued_jobs")).unwrap())
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".tmp")
        })
        .count();
    assert_eq!(dot_files, 0, "stale temp files left after a clean start");
    assert_eq!(count(&outbox), 500);
    assert_eq!(count(&env.root.join("messaging/processed_inbox")), 500);
    // 250 research-code messages → exactly 250 jobs, one per message.
    let jobs = env.root.join("Queues/poplar/Jobs/queued_jobs");
    assert_eq!(count(&jobs), 250);
    let mut cids = std::collections::HashSet::new();
    for e in std::fs::read_dir(&jobs).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue; // a temp file of a write the kill interrupted: never a document
        }
        let j = read(&e.path());
        assert!(cids.insert(j["config"]["correlation_id"].as_str().unwrap().to_string()));
    }
    for i in 0..500 {
        let r = read(&outbox.join(format!("msg-{i:04}.json")));
        assert_eq!(r["status"], "done", "{r}");
    }
    // No temp files left behind where scanners could trip on them... they are dot-files,
    // which scanners ignore; the documents themselves are all whole.
    env.ok(&["validate"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_follow_prd_section_10_over_dbus() {
    let env = m2_store();
    env.ok(&["add-user", "alice", "--name", "Alice", "--email", "a@x"]);
    env.ok(&[
        "add-project",
        "AliceProj",
        "--directory",
        "/tmp/a",
        "--owner",
        "alice",
    ]);
    let r = start(&env);
    let conn = r.bus.connect().await;
    let p = Orchestrator1Proxy::new(&conn).await.unwrap();
    let call = |user: &str, command: &str, content: Value| {
        json!({"command": command, "user": user, "content": content}).to_string()
    };
    let err_name = |e: zbus::Error| match e {
        zbus::Error::MethodError(name, detail, _) => {
            format!("{} {}", name.as_str(), detail.unwrap_or_default())
        }
        other => panic!("unexpected {other}"),
    };
    // A user cannot list users, view another user, or see another user's project.
    let e = err_name(
        p.submit(&call("alice", "list-users", json!({})))
            .await
            .unwrap_err(),
    );
    assert!(
        e.starts_with("org.agentstore.Error.PermissionDenied"),
        "{e}"
    );
    let e = err_name(
        p.submit(&call("alice", "view-user", json!({"user": "chenry"})))
            .await
            .unwrap_err(),
    );
    assert!(
        e.starts_with("org.agentstore.Error.PermissionDenied"),
        "{e}"
    );
    let e = err_name(
        p.submit(&call(
            "alice",
            "view-project",
            json!({"project": "TestProject"}),
        ))
        .await
        .unwrap_err(),
    );
    assert!(
        e.starts_with("org.agentstore.Error.PermissionDenied"),
        "{e}"
    );
    // …nor create jobs in it, nor see its jobs.
    let msg = json!({"command": "research-code", "user": "alice", "project": "TestProject", "content": {}});
    let e = err_name(p.submit(&msg.to_string()).await.unwrap_err());
    assert!(
        e.starts_with("org.agentstore.Error.PermissionDenied"),
        "{e}"
    );
    let admin_job: Value = serde_json::from_str(
        &p.submit(&json!({"command": "research-code", "user": "chenry", "project": "TestProject", "content": {}}).to_string())
            .await
            .unwrap(),
    )
    .unwrap();
    let jid = admin_job["content"]["job_id"].as_str().unwrap();
    let mine: Value = serde_json::from_str(
        &p.submit(&json!({"command": "research-code", "user": "alice", "project": "AliceProj", "content": {}}).to_string())
            .await
            .unwrap(),
    )
    .unwrap();
    let jobs: Value = serde_json::from_str(
        &p.submit(&call("alice", "list-jobs", json!({})))
            .await
            .unwrap(),
    )
    .unwrap();
    let ids: Vec<&str> = jobs["content"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [mine["content"]["job_id"].as_str().unwrap()]);
    let e = err_name(
        p.submit(&call("alice", "view-job", json!({"job": jid})))
            .await
            .unwrap_err(),
    );
    // A job alice may not see reads as one that does not exist (issue 27).
    assert!(e.starts_with("org.agentstore.Error.NotFound"), "{e}");
    let projects: Value = serde_json::from_str(
        &p.submit(&call("alice", "list-projects", json!({})))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(projects["content"]["result"].as_array().unwrap().len(), 1);
    // An admin can do all of it.
    for (c, content) in [
        ("list-users", json!({})),
        ("view-user", json!({"user": "alice"})),
        ("view-project", json!({"project": "AliceProj"})),
        ("view-job", json!({"job": jid})),
    ] {
        p.submit(&call("chenry", c, content)).await.unwrap();
    }
    let jobs: Value = serde_json::from_str(
        &p.submit(&call("chenry", "list-jobs", json!({})))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(jobs["content"]["result"].as_array().unwrap().len(), 2);
    // Unknown users and unknown commands get named errors.
    let e = err_name(
        p.submit(&call("mallory", "help", json!({})))
            .await
            .unwrap_err(),
    );
    assert!(e.starts_with("org.agentstore.Error.NotFound"), "{e}");
    let e = err_name(
        p.submit(&call("chenry", "frobnicate", json!({})))
            .await
            .unwrap_err(),
    );
    assert!(
        e.starts_with("org.agentstore.Error.InvalidMessage")
            && e.contains("Unknown command: frobnicate"),
        "{e}"
    );
    let e = err_name(p.submit("{not json").await.unwrap_err());
    assert!(e.starts_with("org.agentstore.Error.InvalidMessage"), "{e}");
    assert_eq!(p.jobs_created().await.unwrap(), 2);
}
