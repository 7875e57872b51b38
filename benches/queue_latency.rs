//! Job file written → worker process running, through the real `queue-manager` and
//! `agent-worker` binaries (bench profile): each no-op job is written atomically into
//! queued_jobs/ and the clock stops when its worker prints "Starting no-op job..." (the
//! worker's first line, after the manager's inotify wake-up, validation, fork, job-file
//! write and rename, gate release, and the worker's own store open and job read).
//! Jobs run one at a time so each line belongs to the job just written.
//!
//! `cargo bench --bench queue_latency [-- N]` (default 200 jobs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo nextest run --all-targets` lists every target's tests: this one has none.
    if args.iter().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes --bench; `cargo test --all-targets` does not: a 5-job smoke run.
    let default = if args.iter().any(|a| a == "--bench") {
        200
    } else {
        5
    };
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(default);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("AgentStore");
    let (store, _) = agentstore::store::Store::init(&root).unwrap();
    let mut cfg = agentstore::model::QueueConfig::defaults("bench");
    cfg.worker_count = 1;
    store.add_queue(cfg).unwrap();
    // As root the manager runs jobs as the project owner's account: make that ourselves.
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .unwrap()
        .unwrap()
        .name;
    let now = agentstore::model::Timestamp::now().to_string();
    std::fs::write(
        store.user_path("bench"),
        serde_json::json!({"id": "bench", "name": "B", "email": "b@x", "permissions": "admin",
            "unix_user": me})
        .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(store.project_path("P").parent().unwrap()).unwrap();
    std::fs::write(
        store.project_path("P"),
        serde_json::json!({"id": "P", "directory": "/tmp", "create_time": now,
            "update_time": now, "owner": "bench", "default_queue": "bench"})
        .to_string(),
    )
    .unwrap();
    let queued = store.jobs_dir("bench", agentstore::model::JobStatus::Queued);
    let finished = store.jobs_dir("bench", agentstore::model::JobStatus::Finished);

    let mut manager = Command::new(env!("CARGO_BIN_EXE_queue-manager"))
        .args(["--queue", "bench", "--bus", "none", "--launcher", "direct"])
        .arg("--root")
        .arg(&root)
        .arg("--worker")
        .arg(env!("CARGO_BIN_EXE_agent-worker"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(manager.stdout.take().unwrap()).lines();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("lat-{i:05}");
        let job = serde_json::json!({
            "config": {"project": "P", "working_directory": "/tmp",
                "queue_time": agentstore::model::Timestamp::now().to_string(),
                "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [],
                "task_description": "latency", "supporting_data": {"sleep_seconds": 0},
                "timeout_seconds": 60},
            "runtime": {"status": "queued", "start_time": null, "finish_time": null,
                "process_id": null, "llm_process_id": null, "error": null, "output": null}
        });
        let bytes = serde_json::to_vec(&job).unwrap();
        let tmp = queued.join(format!(".{id}.tmp"));
        std::fs::write(&tmp, &bytes).unwrap();
        let t0 = Instant::now();
        std::fs::rename(&tmp, queued.join(format!("{id}.json"))).unwrap();
        loop {
            let line = lines.next().expect("manager exited").unwrap();
            if line.starts_with("Starting no-op job") {
                samples.push(t0.elapsed());
                break;
            }
        }
        // Wait for this job's end so the next one starts alone.
        loop {
            let line = lines.next().expect("manager exited").unwrap();
            if line.starts_with("Job complete!") {
                break;
            }
        }
        let done = finished.join(format!("{id}.json"));
        while !done.exists() {
            std::thread::yield_now();
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(manager.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = manager.wait();
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "queue_latency: {n} jobs, job file written -> worker running: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.90).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        samples.last().unwrap().as_secs_f64() * 1e3
    );
}
