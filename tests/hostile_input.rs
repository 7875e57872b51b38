//! Issue 9, the daemon half: hostile documents and hostile callers. Each test recreates one
//! reported defect on a private store (real orchestratord / queue-manager / agent-worker
//! binaries, a private dbus-daemon) and asserts the fixed behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, queue_env};

use agentstore::bus::orchestrator::Orchestrator1Proxy;
use agentstore::orchestrator::{LockError, LockInfo, StoreLock};
use common::TestEnv;
use common::bus::{KillOnDrop, spawn_orchestratord, wait_for_name, wait_until};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

// ---- helpers ------------------------------------------------------------------------------

/// A store with users bob (owner of BobProj, alice collaborating) and alice (owner of
/// AliceProj), and chenry (admin, owner of TestProject).
fn store() -> TestEnv {
    let env = TestEnv::initialised();
    env.ok(&["add-user", "alice", "--name", "Alice", "--email", "a@x"]);
    env.ok(&["add-user", "bob", "--name", "Bob", "--email", "b@x"]);
    for (id, owner, collab) in [
        ("BobProj", "bob", vec!["alice"]),
        ("AliceProj", "alice", vec![]),
        ("TestProject", "chenry", vec![]),
    ] {
        env.write(
            &format!("projects/{id}/project.json"),
            &json!({"id": id, "directory": "/tmp", "create_time": "2025-10-25T10:00:00Z",
                    "update_time": "2025-10-25T10:00:00Z", "owner": owner,
                    "collaborators": collab, "default_queue": "poplar"})
            .to_string(),
        );
    }
    env
}

struct Daemon {
    bus: common::bus::PrivateBus,
    _child: KillOnDrop,
}

fn start(env: &TestEnv) -> Daemon {
    let bus = common::bus::PrivateBus::start();
    let child = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    Daemon {
        bus,
        _child: KillOnDrop(child),
    }
}

impl Daemon {
    /// A client of this orchestratord.
    async fn proxy(&self) -> Orchestrator1Proxy<'static> {
        let conn = self.bus.connect().await;
        Orchestrator1Proxy::new(&conn).await.unwrap()
    }
}

/// Submits `m` and returns the error it is refused with.
async fn refused(p: &Orchestrator1Proxy<'_>, m: &Value) -> String {
    err_text(p.submit(&m.to_string()).await.unwrap_err())
}

fn err_text(e: zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, detail, _) => {
            format!("{} {}", name.as_str(), detail.unwrap_or_default())
        }
        other => panic!("unexpected {other}"),
    }
}

fn msg(user: &str, command: &str, project: &str, content: Value) -> Value {
    json!({"command": command, "user": user, "project": project, "content": content})
}

fn jobs_in(env: &TestEnv, state: &str) -> Vec<PathBuf> {
    let dir = env
        .root
        .join("Queues/poplar/Jobs")
        .join(format!("{state}_jobs"));
    agentstore::store::scan_dir(&dir).unwrap().documents
}

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

// ---- item 1: numbers ----------------------------------------------------------------------

/// A u64::MAX timeout over D-Bus is refused with a reason; the daemon stays up and the next
/// message is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_timeout_over_dbus_is_refused() {
    let env = store();
    let d = start(&env);
    let p = d.proxy().await;
    for t in [json!(18446744073709551615u64), json!(2592001), json!(0)] {
        let m = msg(
            "chenry",
            "research-code",
            "TestProject",
            json!({"timeout": t}),
        );
        let e = refused(&p, &m).await;
        assert!(e.contains("content.timeout"), "{t}: {e}");
    }
    assert!(jobs_in(&env, "queued").is_empty());
    let m = msg(
        "chenry",
        "research-code",
        "TestProject",
        json!({"timeout": 2592000}),
    );
    let r: Value = serde_json::from_str(&p.submit(&m.to_string()).await.unwrap()).unwrap();
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(jobs_in(&env, "queued").len(), 1);
}

// ---- item 11: correlation ids -------------------------------------------------------------

/// alice reusing bob's correlation id learns nothing about bob's message; bob sending his own
/// again gets his own job (exactly once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_id_reuse_across_users_reveals_nothing() {
    let env = store();
    let d = start(&env);
    let p = d.proxy().await;
    let mut bobs = msg(
        "bob",
        "research-code",
        "BobProj",
        json!({"task": "secret plan"}),
    );
    bobs["correlation_id"] = json!("shared-id-1");
    let r: Value = serde_json::from_str(&p.submit(&bobs.to_string()).await.unwrap()).unwrap();
    let bob_job = r["content"]["job_id"].as_str().unwrap().to_string();
    // bob again: same job, nothing new.
    let again: Value = serde_json::from_str(&p.submit(&bobs.to_string()).await.unwrap()).unwrap();
    assert_eq!(again["content"]["job_id"], json!(bob_job));
    assert_eq!(jobs_in(&env, "queued").len(), 1);

    let mut alices = msg("alice", "research-code", "AliceProj", json!({}));
    alices["correlation_id"] = json!("shared-id-1");
    let e = refused(&p, &alices).await;
    assert!(e.contains("already in use"), "{e}");
    for secret in [
        bob_job.as_str(),
        "BobProj",
        "Queues",
        "poplar",
        "secret",
        "bob",
    ] {
        assert!(!e.contains(secret), "answer leaks {secret:?}: {e}");
    }
    assert_eq!(jobs_in(&env, "queued").len(), 1);

    // The same through the file inbox: bob's answered message, then alice's with his id.
    let mut b2 = msg("bob", "research-code", "BobProj", json!({}));
    b2["correlation_id"] = json!("shared-id-2");
    b2["source"] = json!("user");
    b2["status"] = json!("queued");
    b2["queue_time"] = json!("2025-10-25T10:00:00Z");
    env.write("messaging/inbox/shared-id-2.json", &b2.to_string());
    wait_until(LONG, "bob's answer", || {
        env.root.join("messaging/outbox/shared-id-2.json").exists()
    });
    let mut a2 = b2.clone();
    a2["user"] = json!("alice");
    a2["project"] = json!("AliceProj");
    a2["queue_time"] = json!("2025-10-25T10:00:01Z");
    env.write("messaging/inbox/alice-copy.json", &a2.to_string());
    let dup = env
        .root
        .join("messaging/outbox/shared-id-2.duplicate-1.json");
    wait_until(LONG, "alice's answer", || dup.exists());
    let text = std::fs::read_to_string(&dup).unwrap();
    let ans: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(ans["status"], "error", "{ans}");
    let bobs_answer = read(&env.root.join("messaging/outbox/shared-id-2.json"));
    let bob_job2 = bobs_answer["content"]["job_id"].as_str().unwrap();
    for secret in [bob_job2, "BobProj", "Queues", "outbox"] {
        assert!(!text.contains(secret), "answer leaks {secret:?}: {text}");
    }
    assert_eq!(jobs_in(&env, "queued").len(), 2);
}

// ---- item 12: PRD §10 and permission-widening args --------------------------------------

/// A collaborator may see bob's project but not create jobs in it: D-Bus and inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collaborator_cannot_create_a_job() {
    let env = store();
    let d = start(&env);
    let p = d.proxy().await;
    // She can see it...
    let seen = p
        .submit(
            &msg(
                "alice",
                "view-project",
                "BobProj",
                json!({"project": "BobProj"}),
            )
            .to_string(),
        )
        .await;
    assert!(seen.is_ok(), "{seen:?}");
    // ...but not create a job for it.
    let e = err_text(
        p.submit(&msg("alice", "research-code", "BobProj", json!({})).to_string())
            .await
            .unwrap_err(),
    );
    assert!(e.contains("PermissionDenied") && e.contains("owner"), "{e}");
    let mut m = msg("alice", "research-code", "BobProj", json!({}));
    m["correlation_id"] = json!("alice-inbox-1");
    m["source"] = json!("user");
    m["status"] = json!("queued");
    m["queue_time"] = json!("2025-10-25T10:00:00Z");
    env.write("messaging/inbox/alice-inbox-1.json", &m.to_string());
    let out = env.root.join("messaging/outbox/alice-inbox-1.json");
    wait_until(LONG, "the inbox answer", || out.exists());
    let ans = read(&out);
    assert_eq!(ans["status"], "error", "{ans}");
    assert!(ans["error"].as_str().unwrap().contains("owner"), "{ans}");
    assert!(jobs_in(&env, "queued").is_empty());
    // bob, the owner, can.
    let ok = p
        .submit(&msg("bob", "research-code", "BobProj", json!({})).to_string())
        .await;
    assert!(ok.is_ok(), "{ok:?}");
}

/// Extra args that would widen the agent's permissions are refused unless the queue allows
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_args_cannot_widen_permissions() {
    let env = store();
    let d = start(&env);
    let p = d.proxy().await;
    for args in [
        json!(["--dangerously-skip-permissions"]),
        json!(["--permission-mode", "bypassPermissions"]),
        json!(["--permission-mode=bypassPermissions"]),
        json!(["--allowedTools", "Bash(*)"]),
        json!(["--model", "m", "--add-dir", "/"]),
    ] {
        let m = msg(
            "bob",
            "research-code",
            "BobProj",
            json!({"claude_extra_args": args}),
        );
        let e = refused(&p, &m).await;
        assert!(e.contains("permissions"), "{args}: {e}");
    }
    assert!(jobs_in(&env, "queued").is_empty());
    let ok = msg(
        "bob",
        "research-code",
        "BobProj",
        json!({"claude_extra_args": ["--model", "m1"]}),
    );
    assert!(p.submit(&ok.to_string()).await.is_ok());
    // A queue that allows it.
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let mut q = store.queue("poplar").unwrap();
    q.config.allow_permission_args = Some(true);
    store
        .write_doc(
            agentstore::model::DocKind::Queue,
            &store.queue_path("poplar"),
            &q,
        )
        .unwrap();
    let m = msg(
        "bob",
        "research-code",
        "BobProj",
        json!({"claude_extra_args": ["--permission-mode", "acceptEdits"]}),
    );
    assert!(p.submit(&m.to_string()).await.is_ok());
    assert_eq!(jobs_in(&env, "queued").len(), 2);
}

// ---- item 5: duplicate keys over D-Bus ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_over_dbus_are_refused() {
    let env = store();
    let d = start(&env);
    let p = d.proxy().await;
    let text = r#"{"command": "research-code", "user": "chenry", "user": "alice", "project": "TestProject", "content": {}}"#;
    let e = err_text(p.submit(text).await.unwrap_err());
    assert!(e.contains("duplicate key"), "{e}");
    assert!(jobs_in(&env, "queued").is_empty());
}

// ---- item 7: the lock ---------------------------------------------------------------------

fn stale_lock(path: &Path) {
    let old: agentstore::model::Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
    let info = LockInfo {
        host: agentstore::store::hostname(),
        pid: 1, // alive (PID reuse after a reboot), but not an orchestrator of this boot
        started: old,
        heartbeat: old,
        boot_id: Some("an-earlier-boot".into()),
        pid_start: Some(1),
        epoch: 0,
    };
    std::fs::write(path, serde_json::to_vec(&info).unwrap()).unwrap();
}

/// 1,000 trials of 4 simultaneous starts over a stale lock in a registered store (the no-link
/// `*at` calls the daemon uses): exactly one holder every time; 250 more on plain paths
/// outside any store.
#[test]
fn lock_simultaneous_starts_never_two_holders() {
    for in_store in [false, true] {
        let d = tempfile::tempdir().unwrap();
        if in_store {
            agentstore::store::safe::register_root(
                d.path(),
                agentstore::store::safe::DEFAULT_LOG_LIMITS,
            );
        }
        let trials = if in_store { 1000 } else { 250 };
        simultaneous_start_trials(&d.path().join(".orchestrator.lock"), trials);
    }
}

fn simultaneous_start_trials(path: &Path, trials: usize) {
    let path = path.to_path_buf();
    for trial in 0..trials {
        stale_lock(&path);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (b, p) = (barrier.clone(), path.clone());
                std::thread::spawn(move || {
                    b.wait();
                    StoreLock::acquire(&p)
                })
            })
            .collect();
        let results: Vec<Result<StoreLock, LockError>> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let holders = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(holders, 1, "trial {trial}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, LockError::Held { .. } | LockError::Unknown { .. }),
                    "trial {trial}: {e}"
                );
            }
        }
        drop(results);
        assert!(!path.exists(), "the holder removes the lock on drop");
    }
}

/// A lock file that is a link (here to a live lock outside the store) is never read through:
/// it is an unknown owner until the link itself is old, then taken over without touching the
/// target.
#[test]
fn lock_link_is_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("store");
    std::fs::create_dir_all(&root).unwrap();
    agentstore::store::safe::register_root(&root, agentstore::store::safe::DEFAULT_LOG_LIMITS);
    let outside = d.path().join("outside.lock");
    let live = StoreLock::acquire(&outside).unwrap();
    let before = std::fs::read(&outside).unwrap();
    let path = root.join(".orchestrator.lock");
    std::os::unix::fs::symlink(&outside, &path).unwrap();
    let e = StoreLock::acquire(&path).unwrap_err();
    assert!(matches!(e, LockError::Unknown { .. }), "{e}");
    let ok = std::process::Command::new("touch")
        .args(["-h", "-d", "2020-01-01T00:00:00Z"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(ok.success());
    let l = StoreLock::acquire(&path).unwrap();
    assert!(!path.symlink_metadata().unwrap().is_symlink());
    assert_eq!(std::fs::read(&outside).unwrap(), before);
    assert_eq!(l.info().pid, std::process::id());
    drop(l);
    assert!(!path.exists());
    assert_eq!(std::fs::read(&outside).unwrap(), before);
    drop(live);
}

/// An empty lock file is held by an unknown owner until it is old; PID reuse after a reboot
/// does not keep a lock alive.
#[test]
fn lock_empty_is_held_until_stale_and_pid_reuse_is_stale() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(".orchestrator.lock");
    std::fs::write(&path, "").unwrap();
    let e = StoreLock::acquire(&path).unwrap_err();
    assert!(matches!(e, LockError::Unknown { .. }), "{e}");
    let old = std::time::SystemTime::now() - Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let l = StoreLock::acquire(&path).unwrap();
    drop(l);
    stale_lock(&path);
    let l = StoreLock::acquire(&path).unwrap();
    // The holder's lock emptied under it: a second starter is still refused.
    std::fs::write(&path, "").unwrap();
    let e = StoreLock::acquire(&path).unwrap_err();
    assert!(
        matches!(e, LockError::Held { .. } | LockError::Unknown { .. }),
        "{e}"
    );
    drop(l);
}

// ---- item 8: one watcher ------------------------------------------------------------------

fn count_dir(p: &str) -> usize {
    std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0)
}

fn inotify_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path())
                .map(|t| t.to_string_lossy().contains("inotify"))
                .unwrap_or(false)
        })
        .count()
}

/// The inodes orchestratord's inotify instances watch (`/proc/PID/fdinfo`).
fn watched_inodes(pid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for l in text.lines().filter(|l| l.starts_with("inotify wd:")) {
            let ino = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("ino:"))
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            out.extend(ino);
        }
    }
    out
}

/// A queue folder that is a link (`Queues/q/Jobs/finished_jobs` → a folder outside the
/// store) is never watched through; the real folders are.
#[test]
fn watcher_never_follows_a_linked_folder() {
    use std::os::unix::fs::MetadataExt;
    let env = store();
    let store = agentstore::store::Store::open(&env.root).unwrap();
    for q in ["linked", "plain"] {
        let mut cfg = agentstore::model::QueueConfig::defaults(q);
        cfg.worker_count = 1;
        store.add_queue(cfg).unwrap();
        std::fs::create_dir_all(store.jobs_dir(q, agentstore::model::JobStatus::Finished)).unwrap();
    }
    let fin = store.jobs_dir("linked", agentstore::model::JobStatus::Finished);
    let _ = std::fs::remove_dir(&fin);
    let outside = env.dir.path().join("outside-finished");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, &fin).unwrap();
    let bus = common::bus::PrivateBus::start();
    let child = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]);
    let pid = child.id();
    let _child = KillOnDrop(child);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let inbox = std::fs::metadata(env.root.join("messaging/inbox"))
        .unwrap()
        .ino();
    let plain = std::fs::metadata(store.jobs_dir("plain", agentstore::model::JobStatus::Finished))
        .unwrap()
        .ino();
    wait_until(Duration::from_secs(10), "the watches", || {
        let w = watched_inodes(pid);
        w.contains(&inbox) && w.contains(&plain)
    });
    let watched = watched_inodes(pid);
    let target = std::fs::metadata(&outside).unwrap().ino();
    assert!(!watched.contains(&target), "watched {watched:?}");
}

/// 60 queue add/remove cycles leave orchestratord's fd, inotify and thread counts flat.
#[test]
fn watcher_does_not_leak_on_queue_changes() {
    let env = store();
    let bus = common::bus::PrivateBus::start();
    let child = spawn_orchestratord(
        &bus,
        &env.root,
        &["--idle-exit", "0", "--sweep-interval", "1"],
    );
    let pid = child.id();
    let _child = KillOnDrop(child);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let measure = || {
        (
            count_dir(&format!("/proc/{pid}/fd")),
            count_dir(&format!("/proc/{pid}/task")),
            inotify_fds(pid),
        )
    };
    // Warm up (the first queue change, the blocking pool).
    std::thread::sleep(Duration::from_millis(1500));
    let before = measure();
    for i in 0..60 {
        let q = format!("leak{i}");
        let mut cfg = agentstore::model::QueueConfig::defaults(&q);
        cfg.worker_count = 1;
        store.add_queue(cfg).unwrap();
        std::fs::create_dir_all(store.jobs_dir(&q, agentstore::model::JobStatus::Finished))
            .unwrap();
        std::thread::sleep(Duration::from_millis(60));
        std::fs::remove_dir_all(store.queue_dir(&q)).unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let after = measure();
    assert_eq!(
        after.2, before.2,
        "inotify instances {before:?} → {after:?}"
    );
    assert!(after.0 <= before.0 + 2, "fds {before:?} → {after:?}");
    assert!(after.1 <= before.1 + 4, "threads {before:?} → {after:?}");
    assert_eq!(after.2, 1, "one watcher");
}

// ---- the queue manager: poison documents ---------------------------------------------------

mod qm {
    use super::queue_env::*;
    use serde_json::json;

    /// A job with a u64::MAX timeout and a job with a duplicate `config` key are failed with
    /// a reason; the manager goes on and runs the next job.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn poison_job_files_are_failed_and_the_manager_goes_on() {
        guarded(async {
            let bus = PrivateBus::start();
            let env = QueueEnv::new(1);
            let mut changes = Changes::subscribe(&bus, &env.queue).await;
            let m = RunningManager::start(env.manager_config(&bus)).await;
            let mut huge = noop(0.0);
            huge["config"]["timeout_seconds"] = json!(18446744073709551615u64);
            huge["config"]["queue_time"] = json!("2025-01-01T00:00:00Z");
            env.queue_job("huge", &huge);
            let good = noop(0.0);
            let text = serde_json::to_string(&good).unwrap();
            let dup = text.replacen('{', r#"{"config": "", "#, 1);
            std::fs::write(env.job_file("queued", "dup"), dup).unwrap();
            env.queue_job("good", &good);
            changes.until("huge", "failed").await;
            changes.until("dup", "failed").await;
            changes.until("good", "finished").await;
            let e = env.job("failed", "huge")["runtime"]["error"].to_string();
            assert!(e.contains("timeout_seconds"), "{e}");
            let e = env.job("failed", "dup")["runtime"]["error"].to_string();
            assert!(e.contains("duplicate key"), "{e}");
            assert_eq!(env.count("queued"), 0);
            m.stop().await;
        })
        .await
    }

    /// With a loosened schema in the store (no maximum), the code still refuses the timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loosened_schema_does_not_let_a_huge_timeout_through() {
        guarded(async {
            let bus = PrivateBus::start();
            let env = QueueEnv::new(1);
            let schema = include_str!("../schemas/job.schema.json").replace(
                r#""maximum": 2592000"#,
                r#""maximum": 18446744073709551615"#,
            );
            let dir = env.root.join("JSONValidation/Schemas");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("job.schema.json"), schema).unwrap();
            let mut changes = Changes::subscribe(&bus, &env.queue).await;
            let m = RunningManager::start(env.manager_config(&bus)).await;
            let mut huge = noop(0.0);
            huge["config"]["timeout_seconds"] = json!(18446744073709551615u64);
            env.queue_job("huge", &huge);
            env.queue_job("good", &noop(0.0));
            changes.until("huge", "failed").await;
            changes.until("good", "finished").await;
            let e = env.job("failed", "huge")["runtime"]["error"].to_string();
            assert!(e.contains("between 1 and 2592000 seconds"), "{e}");
            m.stop().await;
        })
        .await
    }

    /// Plants poison markers as a manager killed during a start of `p1` and a re-adoption of
    /// `r1` leaves them (`content` is the marker's text), with `r1` in running_jobs/.
    fn plant_interrupted(env: &QueueEnv, content: &str) -> std::path::PathBuf {
        env.queue_job("p1", &noop(0.0));
        let marks = env
            .root
            .join("Queues/q1/.handling")
            .join(agentstore::store::hostname());
        std::fs::create_dir_all(&marks).unwrap();
        std::fs::write(marks.join("start-p1"), content).unwrap();
        let mut r1 = noop(0.0);
        r1["runtime"]["status"] = json!("running");
        r1["runtime"]["process_id"] = json!(std::process::id());
        r1["runtime"]["host"] = json!(agentstore::store::hostname());
        agentstore::store::write_json_atomic(&env.job_file("running", "r1"), &r1).unwrap();
        std::fs::write(marks.join("adopt-r1"), content).unwrap();
        marks
    }

    /// A manager started on a store with markers planted by [`plant_interrupted`].
    struct Planted {
        _bus: PrivateBus,
        env: QueueEnv,
        marks: std::path::PathBuf,
        changes: Changes,
        m: RunningManager,
    }

    impl Planted {
        async fn start(content: &str) -> Planted {
            let bus = PrivateBus::start();
            let env = QueueEnv::new(1);
            let marks = plant_interrupted(&env, content);
            let changes = Changes::subscribe(&bus, &env.queue).await;
            let m = RunningManager::start(env.manager_config(&bus)).await;
            Planted {
                _bus: bus,
                env,
                marks,
                changes,
                m,
            }
        }
    }

    /// Interrupted attempts (an operator's kill -9 during a start or a re-adoption) with no
    /// crash recorded are forgiven below the cap, one or many: the job is tried again and
    /// runs to the end. Markers of the format before attempts were counted (a bare PID)
    /// count as one attempt.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn interrupted_attempts_below_the_cap_are_tried_again() {
        let below = format!(
            "attempts {}\npid 12345\n",
            agentstore::queue::POISON_ATTEMPTS - 1
        );
        for content in ["attempts 1\npid 12345\n", "12345", below.as_str()] {
            guarded(async {
                let Planted {
                    _bus,
                    env,
                    marks,
                    mut changes,
                    m,
                } = Planted::start(content).await;
                changes.until("p1", "finished").await;
                // r1's worker is not alive: settled as a dead worker, not as poison.
                changes.until("r1", "failed").await;
                let e = env.job("failed", "r1")["runtime"]["error"].to_string();
                assert!(e.contains("Worker harness process died"), "{e}");
                assert!(!e.contains("previous queue manager"), "{e}");
                assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0);
                m.stop().await;
            })
            .await
        }
    }

    /// Interrupted attempts up to the cap fail the job with a reason naming the attempts (a
    /// document that kills the manager in a way no hook sees cannot crash-loop it), and a
    /// marker recording a crash fails the job at once with the panic; the manager goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn capped_interrupted_attempts_or_a_recorded_crash_fail_the_job() {
        let cap = agentstore::queue::POISON_ATTEMPTS;
        let many = format!("attempts {cap}\npid 12345\n");
        let crash = "attempts 1\npid 12345\ncrashed panicked at src/x.rs:1: boom\n";
        for (content, start_err, adopt_err) in [
            (
                many.as_str(),
                format!("starting this job, {cap} attempts in a row"),
                format!("re-adopting this job, {cap} attempts in a row"),
            ),
            (
                crash,
                "crashed while starting this job (panicked at src/x.rs:1: boom)".to_string(),
                "crashed while re-adopting this job (panicked at src/x.rs:1: boom)".to_string(),
            ),
        ] {
            guarded(async {
                let Planted {
                    _bus,
                    env,
                    marks,
                    mut changes,
                    m,
                } = Planted::start(content).await;
                changes.until("p1", "failed").await;
                changes.until("r1", "failed").await;
                let e = env.job("failed", "r1")["runtime"]["error"].to_string();
                assert!(e.contains(&adopt_err), "{e}");
                let e = env.job("failed", "p1")["runtime"]["error"].to_string();
                assert!(e.contains(&start_err), "{e}");
                assert!(!marks.join("start-p1").exists());
                env.queue_job("p2", &noop(0.0));
                changes.until("p2", "finished").await;
                assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0);
                m.stop().await;
            })
            .await
        }
    }

    /// A job whose start was interrupted is started alone, before the batch of the others
    /// (older ones included): if it is the poison, it cannot take innocent jobs with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retried_start_runs_alone_before_the_others() {
        guarded(async {
            let bus = PrivateBus::start();
            let env = QueueEnv::new(3);
            for (id, t) in [
                ("f1", "2025-01-01T00:00:00Z"),
                ("f2", "2025-01-02T00:00:00Z"),
                ("p1", "2025-06-01T00:00:00Z"),
            ] {
                let mut j = noop(0.0);
                j["config"]["queue_time"] = json!(t);
                env.queue_job(id, &j);
            }
            let marks = env
                .root
                .join("Queues/q1/.handling")
                .join(agentstore::store::hostname());
            std::fs::create_dir_all(&marks).unwrap();
            std::fs::write(marks.join("start-p1"), "attempts 1\npid 1\n").unwrap();
            let mut changes = Changes::subscribe(&bus, &env.queue).await;
            let m = RunningManager::start(env.manager_config(&bus)).await;
            for id in ["f1", "f2", "p1"] {
                changes.until(id, "finished").await;
            }
            let order: Vec<&str> = changes
                .seen
                .iter()
                .filter(|c| c.new == "running")
                .map(|c| c.id.as_str())
                .collect();
            assert_eq!(order.first(), Some(&"p1"), "{order:?}");
            assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0);
            m.stop().await;
        })
        .await
    }

    /// Job files written straight into queued_jobs/ get the same checks as jobs the
    /// orchestrator creates: PRD §10 and no permission-widening extra args.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn job_files_cannot_bypass_section_10_or_widen_permissions() {
        guarded(async {
            let bus = PrivateBus::start();
            let env = QueueEnv::new(1);
            let store = env.store();
            std::fs::write(
                store.user_path("alice"),
                json!({"id": "alice", "name": "Alice", "email": "a@x", "permissions": "user"})
                    .to_string(),
            )
            .unwrap();
            let mut changes = Changes::subscribe(&bus, &env.queue).await;
            let m = RunningManager::start(env.manager_config(&bus)).await;
            let mut as_alice = noop(0.0);
            as_alice["config"]["user"] = json!("alice");
            env.queue_job("as-alice", &as_alice);
            let mut wide = noop(0.0);
            wide["config"]["claude_extra_args"] = json!(["--dangerously-skip-permissions"]);
            env.queue_job("wide", &wide);
            let mut owner = noop(0.0);
            owner["config"]["user"] = json!("chenry");
            env.queue_job("owner", &owner);
            changes.until("as-alice", "failed").await;
            changes.until("wide", "failed").await;
            changes.until("owner", "finished").await;
            let e = env.job("failed", "as-alice")["runtime"]["error"].to_string();
            assert!(e.contains("project TestProject belongs to chenry"), "{e}");
            let e = env.job("failed", "wide")["runtime"]["error"].to_string();
            assert!(e.contains("permissions"), "{e}");
            m.stop().await;
        })
        .await
    }
}

// ---- item 10: a full disk ----------------------------------------------------------------------

/// Runs `program args…` in a private mount namespace where `mnt` is a fresh 2 MB tmpfs
/// holding a copy of `store`, filled up to the last byte (`mnt/fill`). The returned child is
/// `program` itself; the test sees the tmpfs through `/proc/<pid>/root`.
fn on_full_disk(
    store: &Path,
    mnt: &Path,
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> std::process::Child {
    std::fs::create_dir_all(mnt).unwrap();
    let script = r#"set -e
mount -t tmpfs -o size=2m tmpfs "$MNT"
cp -a "$SRC/." "$MNT/"
dd if=/dev/zero of="$MNT/fill" bs=4096 2>/dev/null || true
exec "$@""#;
    let mut c = std::process::Command::new("unshare");
    c.args([
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        program,
    ])
    .args(args)
    .env("MNT", mnt)
    .env("SRC", store)
    .env("RUST_LOG", "warn")
    .stdout(std::process::Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// `p` as the process `pid` sees it.
fn seen_by(pid: u32, p: &Path) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{}", p.display()))
}

/// orchestratord starts on a full disk, answers read-only commands over D-Bus, refuses
/// submissions with the reason, and works normally once space is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestratord_serves_read_only_on_a_full_disk() {
    let env = store();
    let mnt = env.dir.path().join("full");
    let bus = common::bus::PrivateBus::start();
    let child = on_full_disk(
        &env.root,
        &mnt,
        crate::daemons::Daemon::Orchestratord.path(),
        &[
            "--bus",
            "session",
            "--idle-exit",
            "0",
            "--root",
            mnt.to_str().unwrap(),
        ],
        &[("DBUS_SESSION_BUS_ADDRESS", &bus.address)],
    );
    let pid = child.id();
    let _child = KillOnDrop(child);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    assert!(
        seen_by(pid, &mnt.join("fill")).exists(),
        "the tmpfs is full"
    );
    let conn = bus.connect().await;
    let p = Orchestrator1Proxy::new(&conn).await.unwrap();
    let list = p
        .submit(&msg("chenry", "list-projects", "TestProject", json!({})).to_string())
        .await
        .unwrap();
    assert!(list.contains("BobProj"), "{list}");
    let e = err_text(
        p.submit(&msg("chenry", "research-code", "TestProject", json!({})).to_string())
            .await
            .unwrap_err(),
    );
    assert!(
        e.contains("read-only") && e.contains("No space left"),
        "{e}"
    );
    std::fs::remove_file(seen_by(pid, &mnt.join("fill"))).unwrap();
    wait_until(LONG, "the lock taken once space is free", || {
        seen_by(pid, &mnt.join(".orchestrator.lock")).exists()
    });
    let r: Value = serde_json::from_str(
        &p.submit(&msg("chenry", "research-code", "TestProject", json!({})).to_string())
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(r["status"], "done", "{r}");
}

/// The queue manager on a full disk: no worker is started while the job cannot be written
/// (no relaunch loop); once space is back the job runs; a worker that dies because the disk
/// filled up while it ran gets the disk error recorded, not "Worker harness process died".
#[test]
fn queue_manager_backs_off_and_records_the_disk_error() {
    let env = queue_env::QueueEnv::new(1);
    env.edit_queue(|q| q.config.rest_interval = 1);
    env.queue_job("j1", &queue_env::noop(0.0));
    let launches = env.dir.path().join("launches");
    let wrapper = env.dir.path().join("worker-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho launch >> '{}'\nexec '{}' \"$@\"\n",
            launches.display(),
            env!("CARGO_BIN_EXE_agent-worker")
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = env.dir.path().join("full");
    let m = mnt.to_str().unwrap();
    let child = on_full_disk(
        &env.root,
        &mnt,
        crate::daemons::Daemon::QueueManager.path(),
        &[
            "--queue",
            "q1",
            "--bus",
            "none",
            "--launcher",
            "direct",
            "--root",
            m,
            "--worker",
            wrapper.to_str().unwrap(),
        ],
        &[],
    );
    let pid = child.id();
    let _child = KillOnDrop(child);
    let jobs = |state: &str, id: &str| {
        seen_by(
            pid,
            &mnt.join(format!("Queues/q1/Jobs/{state}_jobs/{id}.json")),
        )
    };
    wait_until(LONG, "the manager up", || jobs("queued", "j1").exists());
    std::thread::sleep(Duration::from_secs(8));
    let n = std::fs::read_to_string(&launches)
        .unwrap_or_default()
        .lines()
        .count();
    assert!(n <= 1, "{n} worker launches on a full disk");
    assert!(jobs("queued", "j1").exists());
    let fill = seen_by(pid, &mnt.join("fill"));
    std::fs::remove_file(&fill).unwrap();
    wait_until(LONG, "j1 finished once space is back", || {
        jobs("finished", "j1").exists()
    });

    // The disk fills up while a job runs, and stays full until its worker has ended (so the
    // end falls inside, however slow the machine): the job is 6 s of work, the disk full
    // well before that.
    agentstore::store::write_json_atomic(&jobs("queued", "j2"), &queue_env::noop(6.0)).unwrap();
    let mut worker = 0;
    wait_until(LONG, "j2 running with its worker", || {
        worker = std::fs::read(jobs("running", "j2"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|j| j["runtime"]["process_id"].as_i64())
            .unwrap_or(0);
        worker > 0
    });
    let running_since = std::time::Instant::now();
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=4096"])
        .arg(format!("of={}", fill.display()))
        .stderr(std::process::Stdio::null())
        .status();
    assert!(
        running_since.elapsed() < Duration::from_secs(6),
        "filling the disk took {:?}: the job may have ended before it was full",
        running_since.elapsed()
    );
    assert!(
        jobs("running", "j2").exists(),
        "j2 ended before the disk was full"
    );
    wait_until(LONG, "j2's worker ended on the full disk", || {
        // Gone, or a zombie its manager has not reaped yet.
        std::fs::read_to_string(format!("/proc/{worker}/stat")).map_or(true, |st| {
            st.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    });
    std::fs::remove_file(&fill).unwrap();
    wait_until(LONG, "j2 ended", || {
        jobs("failed", "j2").exists() || jobs("finished", "j2").exists()
    });
    // (Seen once in a loaded run and not explained: failed_jobs/j2.json present, then not
    // found when read at once after, then present again. Read it once it reads.)
    let mut j2 = Value::Null;
    wait_until(LONG, "j2's ended document readable", || {
        j2 = ["failed", "finished"]
            .iter()
            .find_map(|s| {
                let b = std::fs::read(jobs(s, "j2")).ok()?;
                serde_json::from_slice(&b).ok()
            })
            .unwrap_or(Value::Null);
        !j2.is_null()
    });
    assert_eq!(
        j2["runtime"]["status"], "failed",
        "j2 did not fail on the full disk: {j2}"
    );
    let e = j2["runtime"]["error"].to_string();
    assert!(e.contains("No space left on device"), "{e}");
}

/// inotify exhausted at start (no instances left, in a private user namespace so nothing
/// else is touched): orchestratord polls instead of exiting, and answers the inbox.
#[test]
fn orchestratord_polls_when_inotify_is_exhausted() {
    let env = store();
    let bus = common::bus::PrivateBus::start();
    let child = std::process::Command::new("unshare")
        .args(["-U", "-r", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_inotify_instances && exec \"$@\"")
        .args(["sh", crate::daemons::Daemon::Orchestratord.path()])
        .args([
            "--bus",
            "session",
            "--idle-exit",
            "0",
            "--sweep-interval",
            "1",
        ])
        .arg("--root")
        .arg(&env.root)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _child = KillOnDrop(child);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let mut m = msg("chenry", "list-projects", "TestProject", json!({}));
    m["correlation_id"] = json!("polled-1");
    m["source"] = json!("user");
    m["status"] = json!("queued");
    m["queue_time"] = json!("2025-10-25T10:00:00Z");
    env.write("messaging/inbox/polled-1.json", &m.to_string());
    let out = env.root.join("messaging/outbox/polled-1.json");
    wait_until(LONG, "the inbox answered by polling", || out.exists());
    assert_eq!(read(&out)["status"], "done");
}

// ---- the queue manager killed or crashing mid-start (the real binary) ---------------------

/// The queue-manager binary on `env` (no bus, direct launcher), with the debug-build test
/// hook `AGENTSTORE_TEST_FAULT` set to `fault` when given; its stderr goes to `manager.log`.
fn queue_manager(env: &queue_env::QueueEnv, fault: Option<&str>) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.dir.path().join("manager.log"))
        .unwrap();
    let mut launch = crate::daemons::queue_manager(&env.root, "q1")
        .idle_exit(None)
        .args(["--worker", env!("CARGO_BIN_EXE_agent-worker")])
        .env_remove("AGENTSTORE_TEST_FAULT")
        .stderr(log);
    if let Some(f) = fault {
        launch = launch.env("AGENTSTORE_TEST_FAULT", f);
    }
    launch.command().spawn().unwrap()
}

fn kill9(child: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
}

fn marker(env: &queue_env::QueueEnv, name: &str) -> PathBuf {
    env.root
        .join("Queues/q1/.handling")
        .join(agentstore::store::hostname())
        .join(name)
}

/// A manager SIGKILLed again and again while it starts the same job (more times than the
/// old poison rule's 2) is an external kill, not the job's fault: the job is tried again
/// each time and finally runs.
#[test]
fn manager_killed_repeatedly_while_starting_a_job_does_not_fail_it() {
    let env = queue_env::QueueEnv::new(1);
    env.edit_queue(|q| q.config.rest_interval = 1);
    env.queue_job("p1", &queue_env::noop(0.0));
    let mark = marker(&env, "start-p1");
    for k in 1..=5 {
        let mut m = queue_manager(&env, Some("hold-start:p1"));
        wait_until(LONG, &format!("start attempt {k} of p1"), || {
            std::fs::read_to_string(&mark).is_ok_and(|t| t.contains(&format!("attempts {k}\n")))
        });
        kill9(&mut m);
    }
    assert!(env.job_file("queued", "p1").exists());
    let m = KillOnDrop(queue_manager(&env, None));
    wait_until(LONG, "p1 finished", || {
        env.job_file("finished", "p1").exists()
    });
    assert_eq!(env.count("failed"), 0);
    assert!(!mark.exists());
    drop(m);
}

/// A job whose start really crashes the manager (a panic, recorded by the manager's panic
/// hook in that job's marker) is failed at the next start with the panic named; a job of
/// the same batch whose start was merely cut short is not failed, and the queue goes on.
#[test]
fn a_job_that_crashes_the_manager_is_failed_with_the_panic_and_only_it() {
    let env = queue_env::QueueEnv::new(2);
    env.edit_queue(|q| q.config.rest_interval = 1);
    let mut first = queue_env::noop(0.0);
    first["config"]["queue_time"] = json!("2025-01-01T00:00:00Z");
    env.queue_job("innocent", &first);
    let mut second = queue_env::noop(0.0);
    second["config"]["queue_time"] = json!("2025-01-02T00:00:00Z");
    env.queue_job("poison", &second);
    let mut m = queue_manager(&env, Some("panic-start:poison"));
    let status = m.wait().unwrap();
    assert!(
        !status.success(),
        "the manager should have crashed: {status}"
    );
    let text = std::fs::read_to_string(marker(&env, "start-poison")).unwrap();
    assert!(text.contains("crashed panicked at"), "{text}");
    assert!(marker(&env, "start-innocent").exists());

    let m = KillOnDrop(queue_manager(&env, None));
    wait_until(LONG, "poison failed", || {
        env.job_file("failed", "poison").exists()
    });
    wait_until(LONG, "innocent finished", || {
        env.job_file("finished", "innocent").exists()
    });
    let e = env.job("failed", "poison")["runtime"]["error"].to_string();
    assert!(e.contains("crashed while starting this job"), "{e}");
    assert!(e.contains("injected fault at start of job poison"), "{e}");
    env.queue_job("after", &queue_env::noop(0.0));
    wait_until(LONG, "the queue goes on", || {
        env.job_file("finished", "after").exists()
    });
    assert_eq!(env.count("failed"), 1);
    drop(m);
}

/// A manager killed after it put a job in running_jobs/ but before it released the gated
/// worker: the worker never ran the job, so it puts it back into queued_jobs/ and the next
/// manager runs it (it used to be failed "Worker harness process died").
#[test]
fn manager_killed_before_releasing_the_worker_leaves_the_job_to_run() {
    let env = queue_env::QueueEnv::new(1);
    env.edit_queue(|q| q.config.rest_interval = 1);
    env.queue_job("j1", &queue_env::noop(0.0));
    let mut m = queue_manager(&env, Some("hold-release:j1"));
    wait_until(LONG, "j1 placed in running_jobs", || {
        env.job_file("running", "j1").exists()
    });
    let pid = env.job("running", "j1")["runtime"]["process_id"]
        .as_u64()
        .unwrap();
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the gated worker runs"
    );
    kill9(&mut m);
    wait_until(LONG, "j1 given back", || {
        env.job_file("queued", "j1").exists()
    });
    let j = env.job("queued", "j1");
    assert_eq!(j["runtime"]["status"], "queued", "{j}");
    assert!(j["runtime"]["process_id"].is_null(), "{j}");
    assert!(!env.job_file("running", "j1").exists());
    let m = KillOnDrop(queue_manager(&env, None));
    wait_until(LONG, "j1 finished", || {
        env.job_file("finished", "j1").exists()
    });
    assert_eq!(env.count("failed"), 0);
    drop(m);
}
