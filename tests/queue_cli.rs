//! The CLI against a running queue manager: live state in list-queues/view-queue,
//! cancel-job over D-Bus, logs from the job file where there is no journal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use queue_env::*;
use serde_json::{Value, json};

fn cli(env: &QueueEnv, bus: &PrivateBus, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .env("AGENT_STORE_ROOT", &env.root)
        .env("HOME", env.dir.path())
        .env("AGENTSTORE_BUS", "session")
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .output()
        .unwrap()
}

fn ok(env: &QueueEnv, bus: &PrivateBus, args: &[&str]) -> String {
    let o = cli(env, bus, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_live_state_cancel_and_logs() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        env.queue_job("q-1", &noop(300.0));
        // No manager on this bus yet, though one reports (another machine, say): cancel-job
        // says so and leaves the job to it. (A queue nobody serves at all: first_day.)
        let store = agentstore::store::Store::open(&env.root).unwrap();
        let hb = agentstore::store::machines::Heartbeat::new("queue-manager", Some("q1"), 30);
        store.write_heartbeat(&hb).unwrap();
        let o = cli(&env, &bus, &["cancel-job", "q-1"]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("queue manager for q1 is not running"), "{err}");

        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        changes.until("q-1", "running").await;
        // Make the file lie: the CLI must show the manager's live numbers.
        env.edit_queue(|q| {
            q.runtime.active_jobs = 9;
            q.runtime.queued_jobs = 9;
        });
        let v: Value =
            serde_json::from_str(&ok(&env, &bus, &["--format", "json", "view-queue", "q1"]))
                .unwrap();
        assert_eq!(v["runtime"]["active_jobs"], json!(1), "{v}");
        assert_eq!(v["runtime"]["queued_jobs"], json!(0), "{v}");
        let v: Value =
            serde_json::from_str(&ok(&env, &bus, &["--format", "json", "list-queues"])).unwrap();
        let q1 = v
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["config"]["id"] == "q1")
            .unwrap();
        assert_eq!(q1["runtime"]["active_jobs"], json!(1), "{v}");

        let text = ok(&env, &bus, &["cancel-job", "q-1"]);
        assert!(text.contains("Cancelled job q-1"), "{text}");
        changes.until("q-1", "failed").await;
        let by = env.job("failed", "q-1")["runtime"]["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(by.starts_with("Job cancelled by "), "{by}");
        let o = cli(&env, &bus, &["cancel-job", "q-1"]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("has already failed"));

        env.queue_job("q-2", &noop(0.2));
        let text = ok(&env, &bus, &["logs", "q-2", "--follow", "60"]);
        if !std::path::Path::new("/run/systemd/journal/socket").exists() {
            assert_eq!(text, "No-op job completed successfully\n");
        }
        m.stop().await;
    })
    .await
}
