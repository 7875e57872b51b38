//! Benchmark (issue 30): time from `implement-tasks` to every task's job queued, for a PRD
//! of 100 tasks (a layered graph: each task after up to two of the layer before), and the
//! scheduling overhead per task against a peer in the same run: 100 plain agent jobs made
//! one message each through the same router (the cost of a job file without the task graph).
//!
//! Run: `cargo bench --bench tasks_fanout`. `BENCH_TASKS` (default 100) and `BENCH_ROUNDS`
//! (default 5) change the sizes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentstore::model::{Message, Task, TaskStatus, Timestamp};
use agentstore::permissions::Caller;
use agentstore::store::Store;
use std::time::{Duration, Instant};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn message(id: &str, command: &str, content: serde_json::Value) -> Message {
    serde_json::from_value(serde_json::json!({
        "correlation_id": id, "source": "user", "project": "P",
        "queue_time": "2025-10-25T10:00:00Z", "processed_time": null, "command": command,
        "content": content, "status": "queued", "error": null
    }))
    .unwrap()
}

/// A store with project P (owner chenry) and PRD `prd` holding `n` tasks.
fn store(dir: &std::path::Path, n: usize) -> Store {
    let root = dir.join("store");
    Store::init(&root).unwrap();
    std::fs::write(
        root.join("users/chenry.json"),
        r#"{"id":"chenry","name":"C","email":"c@x","permissions":"admin"}"#,
    )
    .unwrap();
    std::fs::create_dir_all(root.join("projects/P")).unwrap();
    let queue = Store::open(&root).unwrap().config().queues_default.clone();
    std::fs::write(
        root.join("projects/P/project.json"),
        serde_json::json!({
            "id": "P", "directory": dir, "git_repository": null,
            "create_time": "2025-10-25T10:00:00Z", "update_time": "2025-10-25T10:00:00Z",
            "description": null, "owner": "chenry", "collaborators": [],
            "code_research_document": null, "default_queue": queue
        })
        .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("projects/P/running_prds")).unwrap();
    std::fs::write(
        root.join("projects/P/running_prds/prd.json"),
        serde_json::json!({
            "id": "prd", "project": "P", "title": "Bench", "version": "1.0", "owner": "chenry",
            "status": "running", "created_time": "2025-10-25T10:00:00Z",
            "update_time": "2025-10-25T10:00:00Z", "content": {}, "jobs": []
        })
        .to_string(),
    )
    .unwrap();
    let store = Store::open(&root).unwrap();
    let width = 10;
    for i in 0..n {
        let layer = i / width;
        let deps: Vec<String> = if layer == 0 {
            Vec::new()
        } else {
            let prev = (layer - 1) * width;
            vec![
                format!("t{:03}", prev + i % width),
                format!("t{:03}", prev + (i + 3) % width),
            ]
        };
        let t = Task {
            schema_version: Some("0.6".into()),
            id: format!("t{i:03}"),
            prd: "prd".into(),
            project: "P".into(),
            title: format!("task {i}"),
            description: "do it".into(),
            acceptance_criteria: vec!["it works".into()],
            depends_on: deps,
            status: TaskStatus::Pending,
            jobs: Vec::new(),
            branch: None,
            commit: None,
            error: None,
            created_time: Timestamp::now(),
            update_time: Timestamp::now(),
        };
        store
            .write_doc(
                agentstore::model::DocKind::Task,
                &store.task_path("P", "prd", &t.id),
                &t,
            )
            .unwrap();
    }
    store
}

fn main() {
    // `cargo nextest run --all-targets` lists the bench's tests: there are none.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_num("BENCH_TASKS", 100);
    let rounds = env_num("BENCH_ROUNDS", 5);
    let mut fan = Vec::new();
    let mut plain = Vec::new();
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), n);
        // implement-tasks → every task's job queued.
        let t0 = Instant::now();
        let out = agentstore::orchestrator::handle(
            &store,
            &message(
                &format!("fan-{round}"),
                "implement-tasks",
                serde_json::json!({"prd": "prd", "jobtype": "noop"}),
            ),
            &Caller::Trusted,
        );
        let took = t0.elapsed();
        assert!(out.error.is_none(), "{:?}", out.error);
        let q = store.config().queues_default.clone();
        let queued = std::fs::read_dir(store.jobs_dir(&q, agentstore::model::JobStatus::Queued))
            .unwrap()
            .count();
        assert!(queued >= n, "only {queued} of {n} jobs queued");
        fan.push(took);
        // The peer: n plain jobs, one message each.
        let t0 = Instant::now();
        for i in 0..n {
            let out = agentstore::orchestrator::handle(
                &store,
                &message(
                    &format!("plain-{round}-{i}"),
                    "research-code",
                    serde_json::json!({"jobtype": "noop"}),
                ),
                &Caller::Trusted,
            );
            assert!(out.error.is_none(), "{:?}", out.error);
        }
        plain.push(t0.elapsed());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (f, p) = (median(&mut fan), median(&mut plain));
    println!("tasks_fanout: {n} tasks, median of {rounds} rounds");
    println!(
        "  implement-tasks → all {n} jobs queued: {:.1} ms",
        f.as_secs_f64() * 1e3
    );
    println!(
        "  peer, {n} plain jobs (one message each): {:.1} ms",
        p.as_secs_f64() * 1e3
    );
    println!(
        "  per task: {:.3} ms fan-out vs {:.3} ms per plain job; overhead per task {:+.3} ms",
        f.as_secs_f64() * 1e3 / n as f64,
        p.as_secs_f64() * 1e3 / n as f64,
        (f.as_secs_f64() - p.as_secs_f64()) * 1e3 / n as f64
    );
}
