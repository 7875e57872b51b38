//! PRD §12 M0 tests 1–7, against the built `orchestrator` binary in a temp store and HOME.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{TestEnv, corpus};
use serde_json::Value;

/// M0 test 1: every valid document in the corpus passes `validate`.
#[test]
fn m0_1_validator_accepts_valid_files() {
    let env = TestEnv::initialised();
    for kind in ["user", "message", "project", "prd", "queue", "job"] {
        let dir = corpus().join("valid").join(kind);
        let out = env.ok(&["validate", "--kind", kind, dir.to_str().unwrap()]);
        assert!(out.contains(" 0 invalid"), "{kind}: {out}");
    }
    assert!(env.error_log().is_empty());
}

/// M0 tests 2 and 3: invalid files are rejected, naming the field, and logged to errors.out.
#[test]
fn m0_2_3_validator_rejects_and_logs() {
    let env = TestEnv::initialised();
    let bad = corpus().join("invalid/job/wrong_enum.json");
    let o = env.run(&["validate", "--kind", "job", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("/runtime/status"), "{out}");
    assert!(out.contains("1 document(s) checked, 1 invalid"), "{out}");
    let log = env.error_log();
    assert_eq!(log.len(), 1, "{log:?}");
    let entry = &log[0];
    assert_eq!(entry["type"], "job");
    assert!(entry["error"].as_str().unwrap().contains("/runtime/status"));
    assert!(entry["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(entry["id"].is_string());
}

/// M0 test 4: `orchestrator help` prints usage listing the PRD's commands.
#[test]
fn m0_4_help() {
    let env = TestEnv::empty();
    let out = env.ok(&["help"]);
    for c in [
        "login",
        "list-users",
        "view-user",
        "list-jobs",
        "view-queue",
        "validate",
        "init",
    ] {
        assert!(out.contains(c), "help lacks {c}: {out}");
    }
    assert!(env.ok(&["--help"]).contains("--format"));
}

/// M0 test 5: login writes ~/.orchestrator_config.json with the PRD §2.3 shape.
#[test]
fn m0_5_login_creates_config() {
    let env = TestEnv::initialised();
    let out = env.ok(&["login", "chenry"]);
    assert!(out.contains("chenry"));
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(env.home.join(".orchestrator_config.json")).unwrap())
            .unwrap();
    assert_eq!(
        cfg,
        serde_json::json!({"username": "chenry", "project": null, "prd": null})
    );
    let err = env.fails(&["login", "nobody"]);
    assert!(err.contains("user not found: nobody"), "{err}");
}

/// M0 test 6: list-users, as a table and as JSON documents.
#[test]
fn m0_6_list_users() {
    let env = TestEnv::initialised();
    let text = env.ok(&["list-users"]);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("EMAIL"),
        "{text}"
    );
    assert!(lines.next().unwrap().starts_with("chenry"), "{text}");
    let json: Value = serde_json::from_str(&env.ok(&["--format", "json", "list-users"])).unwrap();
    assert_eq!(json[0]["id"], "chenry");
    assert_eq!(json[0]["permissions"], "admin");
}

/// M0 test 7: view-user shows the document; an unknown user is a clear error, exit 1.
#[test]
fn m0_7_view_user() {
    let env = TestEnv::initialised();
    let text = env.ok(&["view-user", "chenry"]);
    assert!(
        text.contains("Christopher Henry") && text.contains("chenry@anl.gov"),
        "{text}"
    );
    let json: Value =
        serde_json::from_str(&env.ok(&["view-user", "chenry", "--format", "json"])).unwrap();
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(env.root.join("users/chenry.json")).unwrap())
            .unwrap();
    assert_eq!(json, on_disk);
    assert!(
        env.fails(&["view-user", "ghost"])
            .contains("user not found: ghost")
    );
}

#[test]
fn not_found_errors_for_every_kind() {
    let env = TestEnv::initialised();
    for (args, msg) in [
        (vec!["view-project", "nope"], "project not found: nope"),
        (vec!["view-prd", "nope"], "prd not found: nope"),
        (vec!["view-queue", "nope"], "queue not found: nope"),
        (vec!["view-job", "nope"], "job not found: nope"),
        (
            vec!["list-jobs", "--project", "nope"],
            "project not found: nope",
        ),
        (
            vec!["list-prds", "--project", "nope"],
            "project not found: nope",
        ),
        (vec!["view-user", "../etc"], "invalid user id"),
    ] {
        let err = env.fails(&args);
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

#[test]
fn missing_store_is_explained() {
    let env = TestEnv::empty();
    let err = env.fails(&["list-users"]);
    assert!(
        err.contains("no AgentStore") && err.contains("orchestrator init"),
        "{err}"
    );
}

#[test]
fn init_is_idempotent_and_complete() {
    let env = TestEnv::empty();
    env.ok(&["init"]);
    for p in [
        "config.yaml",
        "messaging/inbox",
        "messaging/processed_inbox",
        "messaging/outbox",
        "messaging/processed_outbox",
        "users",
        "projects",
        "Queues/poplar/queue.json",
        "Queues/poplar/Jobs/queued_jobs",
        "Queues/poplar/Jobs/running_jobs",
        "Queues/poplar/Jobs/finished_jobs",
        "Queues/poplar/Jobs/failed_jobs",
        "JSONValidation/Schemas/job.schema.json",
        "JSONValidation/errors.out",
        "logs",
    ] {
        assert!(env.root.join(p).exists(), "{p} missing");
    }
    std::fs::write(env.root.join("users/keep.json"), "{}").unwrap();
    assert!(env.ok(&["init"]).contains("already complete"));
    assert_eq!(
        std::fs::read_to_string(env.root.join("users/keep.json")).unwrap(),
        "{}"
    );
}

#[test]
fn unknown_config_key_names_the_key() {
    let env = TestEnv::initialised();
    env.write(
        "config.yaml",
        "queues_default: poplar\norchestrator:\n  polling_intervall: 3\n",
    );
    let err = env.fails(&["list-queues"]);
    assert!(
        err.contains("polling_intervall") && err.contains("config.yaml"),
        "{err}"
    );
}

#[test]
fn projects_queues_prds_and_jobs_browse() {
    let env = TestEnv::initialised();
    env.ok(&[
        "add-queue",
        "oak",
        "--worker-count",
        "3",
        "--launcher",
        "direct",
        "--memory-max",
        "2G",
    ]);
    env.ok(&[
        "add-project",
        "TestProject",
        "--directory",
        "/tmp/testproject",
        "--owner",
        "chenry",
    ]);
    let err = env.fails(&[
        "add-project",
        "X",
        "--directory",
        "/tmp",
        "--owner",
        "ghost",
    ]);
    assert!(err.contains("user not found: ghost"), "{err}");
    let err = env.fails(&[
        "add-project",
        "Y",
        "--directory",
        "/tmp",
        "--owner",
        "chenry",
        "--default-queue",
        "elm",
    ]);
    assert!(err.contains("queue not found: elm"), "{err}");
    let prd = std::fs::read_to_string(corpus().join("valid/prd/prd_4_4_example.json")).unwrap();
    let prd = prd.replace("ModelSEEDpy", "TestProject");
    env.write(
        "projects/TestProject/queued_prds/550e8400-e29b-41d4-a716-446655440000.json",
        &prd,
    );
    for (q, id, t) in [
        ("poplar", "job-b", "2025-10-25T10:00:02Z"),
        ("oak", "job-a", "2025-10-25T10:00:01Z"),
    ] {
        env.write(
            &format!("Queues/{q}/Jobs/queued_jobs/{id}.json"),
            &common::noop_job(t),
        );
    }
    let jobs = env.ok(&["list-jobs"]);
    let ids: Vec<&str> = jobs
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ids, ["job-a", "job-b"], "oldest first:\n{jobs}");
    assert!(env.ok(&["list-jobs", "--queue", "oak"]).contains("job-a"));
    assert!(!env.ok(&["list-jobs", "--queue", "oak"]).contains("job-b"));
    assert_eq!(
        env.ok(&["list-jobs", "--status", "running"])
            .lines()
            .count(),
        1
    );
    let json: Value = serde_json::from_str(&env.ok(&["list-jobs", "--format", "json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    assert_eq!(json[0]["id"], "job-a");
    assert!(env.ok(&["list-prds"]).contains("Improve FBA performance"));
    assert!(
        env.ok(&["view-prd", "550e8400-e29b-41d4-a716-446655440000"])
            .contains("queued")
    );
    let queues = env.ok(&["list-queues"]);
    assert!(
        queues.contains("oak") && queues.contains("poplar"),
        "{queues}"
    );
    let q: Value =
        serde_json::from_str(&env.ok(&["view-queue", "oak", "--format", "json"])).unwrap();
    assert_eq!(q["config"]["launcher"], "direct");
    assert_eq!(q["config"]["resource_limits"]["memory_max"], "2G");
    env.ok(&["login", "chenry"]);
    env.ok(&["set-project", "TestProject"]);
    env.ok(&["set-prd", "550e8400-e29b-41d4-a716-446655440000"]);
    let s: Value =
        serde_json::from_slice(&std::fs::read(env.home.join(".orchestrator_config.json")).unwrap())
            .unwrap();
    assert_eq!(s["project"], "TestProject");
    assert_eq!(s["prd"], "550e8400-e29b-41d4-a716-446655440000");
    for l in env.ok(&["list-projects"]).lines().chain(jobs.lines()) {
        assert!(l.chars().count() <= 80, "wider than 80: {l:?}");
    }
}

#[test]
fn user_role_sees_only_own_things() {
    let env = TestEnv::initialised();
    env.ok(&["add-user", "alice", "--name", "Alice", "--email", "a@x"]);
    env.ok(&[
        "add-project",
        "Theirs",
        "--directory",
        "/tmp/t",
        "--owner",
        "chenry",
    ]);
    env.ok(&[
        "add-project",
        "Mine",
        "--directory",
        "/tmp/m",
        "--owner",
        "alice",
    ]);
    env.ok(&["login", "alice"]);
    assert!(env.fails(&["list-users"]).contains("permission denied"));
    assert!(
        env.fails(&["view-user", "chenry"])
            .contains("permission denied")
    );
    env.ok(&["view-user", "alice"]);
    assert!(
        env.fails(&["view-project", "Theirs"])
            .contains("permission denied")
    );
    let projects = env.ok(&["list-projects"]);
    assert!(
        projects.contains("Mine") && !projects.contains("Theirs"),
        "{projects}"
    );
    env.ok(&["login", "chenry"]);
    assert!(env.ok(&["list-projects"]).contains("Theirs"));
}
