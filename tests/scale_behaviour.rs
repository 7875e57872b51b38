//! Issue 18 (scale): behaviour that keeps per-event work proportional to the new work, never
//! to the store's history. Checked by behaviour (which files are read, what is reported),
//! never by timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/claude_env.rs"]
mod claude_env;
#[path = "support/queue_env.rs"]
mod queue_env;

use queue_env::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A hang guard, not a timing assertion.
const LONG: Duration = Duration::from_secs(120);

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + LONG;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// orchestratord without D-Bus (inbox and finished jobs only), never idling out.
fn orchestratord(root: &Path, home: &Path) -> Daemon {
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_orchestratord"))
            .args(["--no-bus", "--idle-exit", "0", "--root"])
            .arg(root)
            .env("HOME", home)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

fn finished_job(id: &str) -> Value {
    let mut j = job("noop", json!({}));
    j["id"] = json!(id);
    j["runtime"]["status"] = json!("finished");
    j["runtime"]["output"] = json!("done");
    j
}

fn errors_out(root: &Path) -> String {
    std::fs::read_to_string(root.join("JSONValidation/errors.out")).unwrap_or_default()
}

/// 20,000 finished jobs the handled-log names, each file corrupt: a new finished job is
/// handled, and none of the old files is read (a read would report it in errors.out, as the
/// one corrupt file the log does not name is) or touched; a restart reads none of them either.
#[test]
fn completion_never_rereads_handled_history() {
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let fin = env.dir("finished");
    std::fs::create_dir_all(&fin).unwrap();
    let mut log = String::new();
    for i in 0..20_000 {
        let id = format!("old-{i:05}");
        std::fs::write(fin.join(format!("{id}.json")), "corrupt {").unwrap();
        log.push_str(&format!("{}/{id}\n", env.queue));
    }
    let logdir = env.root.join("logs/handled-jobs");
    std::fs::create_dir_all(&logdir).unwrap();
    // Another machine's log: readers take the union of every machine's file.
    std::fs::write(logdir.join("other-host.log"), log).unwrap();
    // The control: a corrupt finished file nobody handled is read and reported.
    std::fs::write(fin.join("unlogged.json"), "corrupt {").unwrap();

    let d = orchestratord(&env.root, &home);
    wait_until("the unlogged corrupt job reported", || {
        errors_out(&env.root).contains("unlogged")
    });
    let fresh = env.job_file("finished", "fresh-1");
    write_json_atomic_value(&fresh, &finished_job("fresh-1"));
    wait_until("the new job handled", || {
        read_json(&fresh)["runtime"]["handled"] == json!(true)
    });
    let own_log = std::fs::read_dir(&logdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.ends_with("other-host.log"))
        .expect("this machine's handled-log");
    assert!(
        std::fs::read_to_string(&own_log)
            .unwrap()
            .lines()
            .any(|l| l == format!("{}/fresh-1", env.queue)),
        "the handled job is recorded in {}",
        own_log.display()
    );
    drop(d);

    // A restart with one more finished job: the old ones stay unread.
    let second = env.job_file("finished", "fresh-2");
    write_json_atomic_value(&second, &finished_job("fresh-2"));
    let _d = orchestratord(&env.root, &home);
    wait_until("the second job handled after a restart", || {
        read_json(&second)["runtime"]["handled"] == json!(true)
    });
    let errors = errors_out(&env.root);
    assert!(
        !errors.contains("old-"),
        "handled history was read again: {}",
        errors.lines().find(|l| l.contains("old-")).unwrap_or("")
    );
    for i in [0, 9_999, 19_999] {
        assert_eq!(
            std::fs::read_to_string(fin.join(format!("old-{i:05}.json"))).unwrap(),
            "corrupt {"
        );
    }
    // Handled exactly once across the restart: one job_handled event per job (the event is
    // appended just after the flag is written, so wait for it, then look for a second).
    let handled = |id: &str| {
        std::fs::read_dir(env.root.join("logs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("events-"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect::<String>()
            .lines()
            .filter(|l| l.contains("\"job_handled\"") && l.contains(&format!("\"{id}\"")))
            .count()
    };
    wait_until("the job_handled event", || handled("fresh-2") > 0);
    assert_eq!(handled("fresh-1"), 1);
    assert_eq!(handled("fresh-2"), 1);
}

fn write_json_atomic_value(path: &Path, v: &Value) {
    agentstore::store::write_json_atomic(path, v).unwrap();
}

/// A job whose id already exists in finished_jobs/ ends failed under a disambiguated name with
/// an error naming the collision; the earlier job's file is untouched; nothing stays in
/// running_jobs/.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_collision_with_finished_job_ends_failed() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        std::fs::create_dir_all(env.dir("finished")).unwrap();
        let earlier = env.job_file("finished", "dup-1");
        let before = serde_json::to_vec_pretty(&finished_job("dup-1")).unwrap();
        std::fs::write(&earlier, &before).unwrap();
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        env.queue_job("dup-1", &noop(0.0));
        changes.until("dup-1", "failed").await;
        m.stop().await;
        assert_eq!(env.count("running"), 0, "nothing stays in running_jobs/");
        let collided = env.dir("failed").join("dup-1.collision-1.json");
        let doc = read_json(&collided);
        assert_eq!(doc["runtime"]["status"], "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.contains("dup-1 already exists") && err.contains("finished_jobs"),
            "{err}"
        );
        assert_eq!(std::fs::read(&earlier).unwrap(), before);
    })
    .await;
}
