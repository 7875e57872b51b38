//! PRD M3/M4 (§12) through the real queue-manager loop and agent-worker binary: direct
//! launcher, private D-Bus daemon, events awaited through JobStateChanged signals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use agentstore::queue::pidwatch::is_worker_of;
use futures_util::StreamExt;
use queue_env::*;
use serde_json::json;

fn pid_of(v: &serde_json::Value) -> u32 {
    u32::try_from(v["runtime"]["process_id"].as_u64().unwrap()).unwrap()
}

/// M3 tests 1–4 and M4: start resets runtime; the PRD's test-job-001 runs (5 s no-op) and
/// lands in finished_jobs with the no-op output; a stale running job with a dead worker is
/// failed at startup (PRD §11 scenario 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m3_m4_start_reset_and_noop_job() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        env.edit_queue(|q| {
            q.runtime.process_id = Some(1);
            q.runtime.active_jobs = 5;
            q.runtime.queued_jobs = 7;
            q.runtime.last_update = Some("2020-01-01T00:00:00Z".parse().unwrap());
        });
        // A job left "running" by a dead worker of this host.
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        let mut stale = noop(0.0);
        stale["runtime"]["status"] = json!("running");
        stale["runtime"]["process_id"] = json!(dead_pid);
        stale["runtime"]["start_time"] = json!("2025-10-25T10:00:00Z");
        stale["runtime"]["host"] = json!(agentstore::store::hostname());
        agentstore::store::write_json_atomic(&env.job_file("running", "stale-1"), &stale).unwrap();

        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let rt = &env.queue_json()["runtime"];
        assert_eq!(rt["process_id"], json!(std::process::id()), "{rt}");
        assert_eq!(rt["active_jobs"], json!(0), "{rt}");
        assert_eq!(rt["queued_jobs"], json!(0), "{rt}");
        assert_ne!(rt["last_update"], json!("2020-01-01T00:00:00Z"), "{rt}");
        assert_eq!(rt["host"], json!(agentstore::store::hostname()), "{rt}");

        changes.until("stale-1", "failed").await;
        let s = env.job("failed", "stale-1");
        assert_eq!(s["runtime"]["error"], "Worker harness process died");
        assert_eq!(s["runtime"]["status"], "failed");

        // PRD M3 test 2: the job exactly as the PRD writes it (default 5 s no-op).
        std::fs::write(
            env.job_file("queued", "test-job-001"),
            include_str!("fixtures/test-job-001.json"),
        )
        .unwrap();
        let c = changes.until("test-job-001", "running").await;
        assert_eq!(c.old, "queued");
        let running = env.job("running", "test-job-001");
        assert_eq!(running["runtime"]["status"], "running");
        assert!(running["runtime"]["start_time"].is_string());
        assert!(is_worker_of(pid_of(&running), "test-job-001"));
        assert_eq!(env.queue_json()["runtime"]["active_jobs"], json!(1));

        let c = changes.until("test-job-001", "finished").await;
        assert_eq!(c.old, "running");
        let done = env.job("finished", "test-job-001");
        assert_eq!(done["runtime"]["status"], "finished");
        assert_eq!(
            done["runtime"]["output"],
            "No-op job completed successfully"
        );
        assert_eq!(done["runtime"]["error"], json!(null));
        assert!(
            done["runtime"]["finish_time"].as_str().unwrap()
                >= done["runtime"]["start_time"].as_str().unwrap()
        );
        assert_eq!(env.count("running"), 0);
        m.stop().await;
        assert_eq!(env.queue_json()["runtime"]["process_id"], json!(null));
        let events = std::fs::read_dir(env.root.join("logs")).unwrap().count();
        assert!(events >= 2, "events and queue log written");
    })
    .await
}

/// M3 tests 5–6: kill the worker, the job is failed "Worker harness process died".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m3_killed_worker_is_detected() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        env.queue_job("victim", &noop(300.0));
        changes.until("victim", "running").await;
        let pid = pid_of(&env.job("running", "victim"));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        changes.until("victim", "failed").await;
        let j = env.job("failed", "victim");
        assert_eq!(j["runtime"]["error"], "Worker harness process died");
        assert!(j["runtime"]["finish_time"].is_string());
        m.stop().await;
    })
    .await
}

/// M3 test 7: worker_count 2 with 5 jobs: never more than 2 running, all finish, oldest
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m3_worker_count_is_enforced() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        // Queued while the manager is down, so all 5 compete at once.
        for i in 0..5 {
            let mut j = noop(0.3);
            j["config"]["queue_time"] = json!(format!("2025-10-25T10:00:0{}Z", 5 - i));
            env.queue_job(&format!("job-{i}"), &j);
        }
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut running = 0i32;
        let mut max = 0;
        let mut finished = 0;
        let mut starts = Vec::new();
        while finished < 5 {
            let c = changes.next().await;
            match (c.old.as_str(), c.new.as_str()) {
                ("queued", "running") => {
                    running += 1;
                    starts.push(c.id.clone());
                }
                ("running", "finished") => {
                    running -= 1;
                    finished += 1;
                }
                other => panic!("unexpected change {other:?} for {}", c.id),
            }
            max = max.max(running);
            assert!(running <= 2, "{running} running after {:?}", changes.seen);
            assert!(env.count("running") <= 2, "folder snapshot on {c:?}");
        }
        assert_eq!(max, 2, "both slots were used");
        assert_eq!(
            starts,
            ["job-4", "job-3", "job-2", "job-1", "job-0"],
            "oldest queue_time first"
        );
        assert_eq!(env.count("finished"), 5);
        m.stop().await;
    })
    .await
}

/// M3 test 8: a job over its timeout is killed and failed with the PRD's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m3_timeout_kills_and_fails() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut j = noop(300.0);
        j["config"]["timeout_seconds"] = json!(2);
        env.queue_job("slow", &j);
        changes.until("slow", "running").await;
        let pid = pid_of(&env.job("running", "slow"));
        changes.until("slow", "failed").await;
        let f = env.job("failed", "slow");
        let err = f["runtime"]["error"].as_str().unwrap();
        assert!(
            err.starts_with("Job timeout after ") && err.ends_with("s (limit: 2s)"),
            "{err}"
        );
        let secs: u64 = err["Job timeout after ".len()..]
            .split('s')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(secs >= 2, "{err}");
        assert!(!is_worker_of(pid, "slow"), "worker killed");
        m.stop().await;
    })
    .await
}

/// A restarted manager re-adopts a job that is still running instead of failing it, and
/// sees it finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m3_restart_readopts_running_job() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let first = RunningManager::start(env.manager_config(&bus)).await;
        // Long enough to outlive a manager restart (milliseconds), short enough to finish.
        env.queue_job("long", &noop(5.0));
        changes.until("long", "running").await;
        let pid = pid_of(&env.job("running", "long"));
        first.stop().await;
        assert!(is_worker_of(pid, "long"), "the worker outlives its manager");

        let second = RunningManager::start(env.manager_config(&bus)).await;
        assert_eq!(
            env.queue_json()["runtime"]["active_jobs"],
            json!(1),
            "re-adopted"
        );
        assert!(env.job_file("running", "long").is_file());
        let c = changes.until("long", "finished").await;
        assert_eq!(c.old, "running");
        assert_eq!(
            env.job("finished", "long")["runtime"]["output"],
            "No-op job completed successfully"
        );
        second.stop().await;
    })
    .await
}

/// Pause holds new jobs back; CancelJob fails a queued and a running job; Resume restarts
/// starting; properties follow over D-Bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_cancel_over_dbus() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let p = changes.proxy.clone();
        assert_eq!(p.worker_count().await.unwrap(), 2);
        assert!(!p.paused().await.unwrap());

        let conn = bus.connect().await;
        let cached = agentstore::bus::queue::Queue1Proxy::builder(&conn)
            .destination(agentstore::bus::queue_bus_name(&env.queue))
            .path(agentstore::bus::queue_object_path(&env.queue))
            .build()
            .await
            .unwrap();
        let mut queued = cached.receive_queued_jobs_changed().await;
        p.pause().await.unwrap();
        assert!(p.paused().await.unwrap());
        env.queue_job("held", &noop(0.0));
        loop {
            let v = queued.next().await.unwrap().get().await.unwrap();
            if v == 1 {
                break;
            }
        }
        assert!(
            env.job_file("queued", "held").is_file(),
            "paused: not started"
        );
        assert_eq!(env.queue_json()["runtime"]["paused"], json!(true));

        p.cancel_job("held").await.unwrap();
        let c = changes.until("held", "failed").await;
        assert_eq!(c.old, "queued");
        let err = env.job("failed", "held")["runtime"]["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(err.starts_with("Job cancelled by "), "{err}");

        let e = p.cancel_job("no-such-job").await.unwrap_err();
        assert!(
            e.to_string().contains("org.agentstore.Error.NotFound"),
            "{e}"
        );

        p.resume().await.unwrap();
        env.queue_job("long", &noop(300.0));
        changes.until("long", "running").await;
        let pid = pid_of(&env.job("running", "long"));
        p.cancel_job("long").await.unwrap();
        changes.until("long", "failed").await;
        let err = env.job("failed", "long")["runtime"]["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(err.starts_with("Job cancelled by "), "{err}");
        assert!(!is_worker_of(pid, "long"));
        m.stop().await;
    })
    .await
}

/// A second manager of the same queue refuses to start: the bus name is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_manager_is_refused() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let e = agentstore::bus::queue::start_manager(env.manager_config(&bus))
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("already running"), "{e}");
        m.stop().await;
    })
    .await
}
