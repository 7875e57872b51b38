//! Many machines on one store (issue 13): heartbeats under `machines/`, `list-machines` /
//! `view-machine`, hostile heartbeat files, the running jobs of a machine that stopped
//! reporting failed by another process (never while its heartbeat is fresh), and the silent
//! machine stopping its worker when it comes back. Two "machines" are two real
//! `queue-manager` processes with different `AGENTSTORE_HOSTNAME`s on one store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use crate::harness::KillOnDrop;
use crate::wait::wait_until;
use queue_env::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Fast heartbeats: a beat a second, stale after 2 s, jobs failed after 6 s of silence.
fn fast_machines(root: &Path) {
    let cfg = root.join("config.yaml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(
        "machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 2\n  lost_job_grace_seconds: 6\n",
    );
    std::fs::write(&cfg, text).unwrap();
}

/// `queue-manager` for `env`'s queue as machine `host` (no bus, the direct launcher).
fn manager(env: &QueueEnv, host: &str) -> KillOnDrop {
    crate::daemons::queue_manager(&env.root, &env.queue)
        .host(host)
        .spawn()
}

fn cli(env: &QueueEnv, host: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .arg("--root")
        .arg(&env.root)
        .args(["--bus", "none"])
        .env("HOME", env.dir.path())
        .env("AGENTSTORE_HOSTNAME", host)
        .output()
        .unwrap()
}

fn machines_json(env: &QueueEnv) -> Value {
    let o = cli(env, "alpha", &["list-machines", "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn machine<'a>(list: &'a Value, host: &str) -> &'a Value {
    list["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["host"] == host)
        .unwrap_or_else(|| panic!("no machine {host} in {list:#}"))
}

fn pid_alive(pid: i32) -> bool {
    // A zombie is not alive: read its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn a_silent_machines_job_is_failed_by_the_other_and_stopped_when_it_returns() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    let beta = manager(&env, "beta");
    env.queue_job("j1", &noop(120.0));
    wait_until(Duration::from_secs(30), "j1 running on beta", || {
        env.job_file("running", "j1").exists()
            && env.job("running", "j1")["runtime"]["process_id"].is_number()
    });
    assert_eq!(env.job("running", "j1")["runtime"]["host"], "beta");
    let worker = env.job("running", "j1")["runtime"]["process_id"]
        .as_i64()
        .unwrap() as i32;
    let _alpha = manager(&env, "alpha");
    wait_until(Duration::from_secs(20), "both machines reporting", || {
        let l = machines_json(&env);
        l["machines"].as_array().unwrap().len() == 2
    });
    let l = machines_json(&env);
    assert_eq!(machine(&l, "beta")["state"], "ok");
    assert_eq!(machine(&l, "beta")["queues"], json!(["q1"]));
    assert_eq!(machine(&l, "alpha")["daemons"], json!(["queue-manager@q1"]));

    // Never while the host reports: alpha's passes well past the grace (6 s), the job still
    // runs.
    manager_passes(&env.root, "alpha", &env.queue, Duration::from_secs(8));
    assert!(
        env.job_file("running", "j1").exists(),
        "a live machine's job was failed"
    );

    // beta goes silent (a partition, a suspended laptop): its manager stops, its worker runs.
    beta.signal(nix::sys::signal::Signal::SIGSTOP);
    let silent_at = Instant::now();
    wait_until(Duration::from_secs(10), "beta shown stale", || {
        machine(&machines_json(&env), "beta")["stale"] == true
    });
    let text = String::from_utf8(cli(&env, "alpha", &["list-machines"]).stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("beta") && l.contains("stale for ")),
        "{text}"
    );
    assert!(
        env.job_file("running", "j1").exists(),
        "failed before the grace"
    );
    crate::wait::event_line(
        &env.root,
        Duration::from_secs(30),
        "j1 failed by alpha",
        |e| e["event"] == "job_failed" && e["job_id"] == "j1",
    );
    // The grace (6 s) runs from beta's last heartbeat, which is up to one heartbeat (1 s)
    // before the SIGSTOP and written with whole seconds (up to 1 s earlier still).
    assert!(
        silent_at.elapsed() >= Duration::from_secs(4),
        "failed within the grace"
    );
    let failed = env.job("failed", "j1");
    let error = failed["runtime"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("Machine beta stopped reporting at 20"),
        "{error}"
    );
    assert_eq!(failed["runtime"]["status"], "failed");
    assert!(!env.job_file("running", "j1").exists());
    let ev = events(&env.root);
    assert!(
        ev.iter().any(|e| e["event"] == "job_failed"
            && e["job_id"] == "j1"
            && e["host"] == "alpha"
            && e["detail"] == error),
        "{ev:#?}"
    );
    assert!(
        pid_alive(worker),
        "the worker should still run while beta is silent"
    );

    // beta comes back: it finds its job failed, stops the worker and says why.
    beta.signal(nix::sys::signal::Signal::SIGCONT);
    wait_until(Duration::from_secs(20), "beta's worker stopped", || {
        !pid_alive(worker)
    });
    crate::wait::event_line(
        &env.root,
        Duration::from_secs(10),
        "the stop recorded",
        |e| e["event"] == "job_stopped" && e["job_id"] == "j1" && e["host"] == "beta",
    );
    // A whole pass of each machine after that.
    manager_passes(&env.root, "beta", &env.queue, Duration::ZERO);
    manager_passes(&env.root, "alpha", &env.queue, Duration::ZERO);
    // The job ended once: still failed with the machine's message, nowhere else.
    assert_eq!(env.job("failed", "j1")["runtime"]["error"], error);
    for s in ["queued", "running", "finished"] {
        assert!(!env.job_file(s, "j1").exists(), "j1 reappeared in {s}");
    }
    assert_eq!(env.count("failed"), 1);
    assert_eq!(machine(&machines_json(&env), "beta")["state"], "ok");
}

#[test]
fn a_machine_that_never_reported_is_not_judged_lost() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    let store = env.store();
    // A running job of a host with no heartbeat at all (an older version, a manual file).
    let mut j = noop(1.0);
    j["runtime"]["status"] = json!("running");
    j["runtime"]["host"] = json!("oldhost");
    j["runtime"]["start_time"] = json!("2020-01-01T00:00:00Z");
    agentstore::store::write_json_atomic(&env.job_file("running", "j2"), &j).unwrap();
    let _alpha = manager(&env, "alpha");
    wait_until(Duration::from_secs(20), "alpha reporting", || {
        store.machines().get("alpha").is_some()
    });
    // alpha's passes past its stale time (2 s) and more.
    manager_passes(&env.root, "alpha", &env.queue, Duration::from_secs(3));
    assert!(env.job_file("running", "j2").exists());
    assert!(store.machines().get("oldhost").is_none());
}

#[test]
fn hostile_heartbeat_files_are_reported_and_skipped() {
    let env = QueueEnv::new(1);
    let m = env.root.join("machines");
    std::fs::create_dir_all(m.join("good")).unwrap();
    let now = agentstore::model::Timestamp::now().to_string();
    let beat = |host: &str| {
        json!({"host": host, "daemon": "orchestratord", "pid": 7, "version": "0.1.0",
               "started": now, "last_seen": now, "interval_seconds": 30})
    };
    std::fs::write(m.join("good/orchestratord.json"), beat("good").to_string()).unwrap();
    // Malformed, huge, a link, a claim to be another host, a linked host folder, a file
    // where a folder should be, an unknown field.
    std::fs::write(m.join("good/queue-manager.q1.json"), "{not json").unwrap();
    std::fs::write(m.join("good/big.json"), vec![b' '; 200_000]).unwrap();
    let secret = env.dir.path().join("secret.json");
    std::fs::write(&secret, beat("good").to_string()).unwrap();
    std::os::unix::fs::symlink(&secret, m.join("good/linked.json")).unwrap();
    std::fs::write(m.join("good/liar.json"), beat("other").to_string()).unwrap();
    let mut extra = beat("good");
    extra["surprise"] = json!(1);
    std::fs::write(m.join("good/extra.json"), extra.to_string()).unwrap();
    std::fs::create_dir_all(env.dir.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(env.dir.path().join("elsewhere"), m.join("evil")).unwrap();
    std::fs::write(m.join("flat.json"), beat("flat").to_string()).unwrap();

    let o = cli(&env, "alpha", &["list-machines"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    assert!(out.lines().any(|l| l.starts_with("good")), "{out}");
    assert!(
        !out.contains("evil") && !out.contains("flat") && !out.contains("other"),
        "{out}"
    );
    for (file, why) in [
        ("machines/good/queue-manager.q1.json", "not a heartbeat"),
        ("machines/good/big.json", "limit"),
        ("machines/good/linked.json", "link"),
        ("machines/good/liar.json", "claims host \"other\""),
        ("machines/good/extra.json", "surprise"),
        ("machines/evil", "not a folder"),
        ("machines/flat.json", "not a folder"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(file) && l.contains(why)),
            "no warning naming {file} ({why}) in:\n{err}"
        );
    }
    let j = machines_json(&env);
    assert_eq!(j["machines"].as_array().unwrap().len(), 1);
    assert_eq!(j["problems"].as_array().unwrap().len(), 7, "{j:#}");
    // view-machine: the good one, and a clear error for one that never reported.
    let o = cli(&env, "alpha", &["view-machine", "good", "--format", "json"]);
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["host"], "good");
    assert_eq!(v["heartbeats"][0]["daemon"], "orchestratord");
    let o = cli(&env, "alpha", &["view-machine", "nobody"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("machine nobody has never reported"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The secret behind the link was never touched.
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        beat("good").to_string()
    );
}

/// Writes a heartbeat of `host`'s queue manager for q1, last seen now.
fn beat_now(root: &Path, host: &str) {
    let now = agentstore::model::Timestamp::now().to_string();
    let dir = root.join("machines").join(host);
    std::fs::create_dir_all(&dir).unwrap();
    agentstore::store::write_json_atomic(
        &dir.join("queue-manager.q1.json"),
        &json!({"host": host, "daemon": "queue-manager", "queue": "q1", "pid": 1,
                "version": "0.1.0", "started": now, "last_seen": now, "interval_seconds": 1}),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestratord_signals_stale_machines_and_fails_their_jobs() {
    use futures_util::StreamExt;
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        fast_machines(&env.root);
        beat_now(&env.root, "ghost");
        let mut j = noop(1.0);
        j["runtime"]["status"] = json!("running");
        j["runtime"]["host"] = json!("ghost");
        agentstore::store::write_json_atomic(&env.job_file("running", "j3"), &j).unwrap();
        let conn = bus.connect().await;
        // Uncached: each read asks the daemon, whose state changes before its signal.
        let proxy = agentstore::bus::orchestrator::Orchestrator1Proxy::builder(&conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .unwrap();
        let mut changes = proxy.receive_machine_state_changed().await.unwrap();
        let started = Instant::now();
        let _d = crate::daemons::orchestratord(&env.root)
            .on(&bus)
            .host("alpha")
            .spawn();
        let s = changes.next().await.unwrap();
        let a = s.args().unwrap();
        assert_eq!((a.host, a.stale), ("ghost", true));
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "stale too early"
        );
        assert_eq!(
            proxy.stale_machines().await.unwrap(),
            vec!["ghost".to_string()]
        );
        assert!(
            env.job_file("running", "j3").exists(),
            "failed before the grace"
        );
        let root = env.root.clone();
        tokio::task::spawn_blocking(move || {
            wait_until(
                Duration::from_secs(30),
                "j3 failed by orchestratord",
                || {
                    events(&root).iter().any(|e| {
                        e["event"] == "job_failed" && e["job_id"] == "j3" && e["host"] == "alpha"
                    })
                },
            )
        })
        .await
        .unwrap();
        let failed = env.job("failed", "j3");
        assert!(
            failed["runtime"]["error"]
                .as_str()
                .unwrap()
                .starts_with("Machine ghost stopped reporting at "),
            "{failed:#}"
        );
        assert!(
            events(&env.root)
                .iter()
                .any(|e| e["event"] == "machine_stale")
        );
        // The admins hear of it: one machine_lost notice, for no one in particular.
        let lost = crate::notify::notices(&env.root, "machine_lost");
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!(lost[0]["title"], "Machine ghost stopped reporting");
        assert!(lost[0].get("user").is_none(), "{}", lost[0]);
        // ghost reports again: the signal says so and the property empties.
        beat_now(&env.root, "ghost");
        let s = changes.next().await.unwrap();
        let a = s.args().unwrap();
        assert_eq!((a.host, a.stale), ("ghost", false));
        assert!(proxy.stale_machines().await.unwrap().is_empty());
        // orchestratord's own heartbeat is there, as alpha's.
        let m = env.store().machines();
        assert_eq!(m.get("alpha").unwrap().daemons[0].daemon, "orchestratord");
    })
    .await
}

#[test]
fn sync_engine_conflict_copies_in_the_inbox_are_set_aside_not_answered() {
    let env = QueueEnv::new(1);
    let store = env.store();
    let msg = |cid: &str| {
        json!({"correlation_id": cid, "source": "user", "user": "chenry",
               "queue_time": "2025-10-25T10:00:00Z", "processed_time": null,
               "command": "list-queues", "content": {}, "status": "queued", "error": null})
        .to_string()
    };
    let inbox = store.inbox();
    std::fs::write(inbox.join("m1.json"), msg("m1")).unwrap();
    let copies = [
        "m1.sync-conflict-20251023-101010-ABCDEFG.json",
        "m1_conflict-20251023-101010.json",
        "m1 (conflict 2025-10-23 101010).json",
    ];
    for c in copies {
        std::fs::write(inbox.join(c), msg(&format!("copy-{}", c.len()))).unwrap();
    }
    // Partial files of the engines are left alone.
    std::fs::write(inbox.join(".syncthing.m2.json.tmp"), "{\"half").unwrap();
    std::fs::write(inbox.join("m3.json.part"), "{\"half").unwrap();
    let out = agentstore::orchestrator::process_inbox(&store, 50).unwrap();
    let answered = out
        .iter()
        .filter(|o| matches!(o, agentstore::orchestrator::FileOutcome::Answered(_)))
        .count();
    assert_eq!(answered, 1, "{out:?}");
    let outbox: Vec<_> = std::fs::read_dir(store.outbox())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(outbox, vec!["m1.json".to_string()]);
    for c in copies {
        assert!(
            env.root.join("conflicts/messaging-inbox").join(c).exists(),
            "{c} not set aside"
        );
    }
    assert!(inbox.join(".syncthing.m2.json.tmp").exists());
    assert!(inbox.join("m3.json.part").exists());
}

/// A partitioned machine's worker that finishes after another machine failed its job: the
/// late result never replaces the failed document nor makes a second one (no finished
/// document, nothing back in running_jobs/), and the returning manager leaves it failed.
/// The partition is simulated by stopping beta's manager AND its worker (SIGSTOP); the worker
/// is let go once alpha has failed the job, finishes its sleep at once and tries to end it.
/// Machine beta runs job `id` (a no-op of `secs`); then beta is frozen with its worker (a
/// partition, a suspended laptop) and machine alpha's manager fails the job for beta's
/// silence. Returns beta's manager, the frozen worker's pid, alpha's manager, and the job's
/// running file as beta last wrote it.
fn partitioned_while_running(
    env: &QueueEnv,
    id: &str,
    secs: f64,
) -> (KillOnDrop, i32, KillOnDrop, Vec<u8>) {
    let beta = manager(env, "beta");
    env.queue_job(id, &noop(secs));
    // Running AND released: the manager records job_started after it opened the worker's
    // gate. Stopped between the running record and the release, beta would hold the worker
    // at its gate for the whole partition (seen under load: "the late worker ended" timed
    // out), which is the gate's purpose, not the case under test.
    wait_until(
        Duration::from_secs(30),
        "the job running on beta, released",
        || {
            env.job_file("running", id).exists()
                && env.job("running", id)["runtime"]["process_id"].is_number()
                && events(&env.root)
                    .iter()
                    .any(|e| e["event"] == "job_started" && e["job_id"] == id)
        },
    );
    let running = std::fs::read(env.job_file("running", id)).unwrap();
    let worker = env.job("running", id)["runtime"]["process_id"]
        .as_i64()
        .unwrap() as i32;
    beta.signal(nix::sys::signal::Signal::SIGSTOP);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let alpha = manager(env, "alpha");
    // (claim_lost moves the file first, then writes the failure into it: wait for the write)
    wait_until(Duration::from_secs(40), "the job failed by alpha", || {
        env.job_file("failed", id).exists() && env.job("failed", id)["runtime"]["error"].is_string()
    });
    (beta, worker, alpha, running)
}

#[test]
fn a_late_result_from_a_partitioned_machine_never_replaces_the_failed_document() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    let (beta, worker, _alpha, _) = partitioned_while_running(&env, "late", 3.0);
    let worker_pid = nix::unistd::Pid::from_raw(worker);
    let failed = std::fs::read(env.job_file("failed", "late")).unwrap();
    let error = env.job("failed", "late")["runtime"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.starts_with("Machine beta stopped reporting at "),
        "{error}"
    );
    // The worker runs on (its 3 s are over): it tries to end the job, and must not.
    nix::sys::signal::kill(worker_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    wait_until(Duration::from_secs(30), "the late worker ended", || {
        !pid_alive(worker)
    });
    beta.signal(nix::sys::signal::Signal::SIGCONT);
    // beta's passes for 3 s after it came back.
    manager_passes(&env.root, "beta", &env.queue, Duration::from_secs(3));
    assert_eq!(
        std::fs::read(env.job_file("failed", "late")).unwrap(),
        failed,
        "the failed document was changed"
    );
    for s in ["queued", "running", "finished"] {
        assert!(!env.job_file(s, "late").exists(), "late reappeared in {s}");
    }
    assert_eq!(
        env.count("failed"),
        1,
        "{:?}",
        std::fs::read_dir(env.dir("failed"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    assert_eq!(env.count("finished"), 0);
}

/// In a synced store files arrive in any order (seen in t_sync: a job reached beta before
/// its project's document and failed "project not found"): a young job that names a project
/// not in this copy yet is put off, saying why, and runs once the project arrives.
#[test]
fn a_job_arriving_before_its_project_waits_for_it() {
    let env = QueueEnv::new(1);
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let project = store.project_path("TestProject");
    let away = env.root.join("project-not-synced-yet.json");
    std::fs::rename(&project, &away).unwrap();
    env.queue_job("early", &noop(0.0));
    let _alpha = manager(&env, "alpha");
    // The manager says why in its log (logs/queue-q1@alpha.log).
    wait_until(Duration::from_secs(20), "the start put off", || {
        std::fs::read_dir(env.root.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("queue-"))
            .any(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .contains("project TestProject is not in this copy")
            })
    });
    assert!(env.job_file("queued", "early").exists());
    assert!(!env.job_file("failed", "early").exists());
    std::fs::rename(&away, &project).unwrap();
    wait_until(
        Duration::from_secs(60),
        "the job runs once its project is here",
        || env.job_file("finished", "early").exists(),
    );
}

/// Replaces documents again and again as Syncthing applies another machine's edits, until
/// dropped: the new version written to `.syncthing.<name>.tmp`, the document REMOVED, a pause
/// (an engine preempted on a loaded machine), then the partial renamed over its name.
struct SyncthingReplacing {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl SyncthingReplacing {
    fn start(paths: &[std::path::PathBuf]) -> SyncthingReplacing {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = paths
            .iter()
            .map(|path| {
                let (path, stop) = (path.clone(), stop.clone());
                std::thread::spawn(move || {
                    let bytes = std::fs::read(&path).unwrap();
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    let partial = path.with_file_name(format!(".syncthing.{name}.tmp"));
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::fs::write(&partial, &bytes).unwrap();
                        std::fs::remove_file(&path).unwrap();
                        std::thread::sleep(Duration::from_millis(3));
                        std::fs::rename(&partial, &path).unwrap();
                        n += 1;
                        std::thread::sleep(Duration::from_millis(3));
                    }
                    n
                })
            })
            .collect();
        SyncthingReplacing { stop, threads }
    }

    /// Stops and says how many times each document was replaced.
    fn stop(&mut self) -> Vec<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads
            .drain(..)
            .map(|t| t.join().unwrap_or(0))
            .collect()
    }
}

impl Drop for SyncthingReplacing {
    fn drop(&mut self) {
        self.stop();
    }
}

/// t_sync's "cannot choose the Unix user for project TestProject: project not found": a
/// document that another machine changed is replaced on this copy by a remove and a rename,
/// and a read in between found nothing. Every read of a document being replaced waits for its
/// new version; one that is really missing is still "not found", at once.
#[test]
fn documents_a_sync_engine_is_replacing_are_read_not_missed() {
    let env = QueueEnv::new(1);
    let store = env.store();
    let mut churn =
        SyncthingReplacing::start(&[store.project_path("TestProject"), store.user_path("chenry")]);
    let t0 = Instant::now();
    let mut reads = 0;
    let mut missed = Vec::new();
    while t0.elapsed() < Duration::from_secs(3) {
        if let Err(e) = store.project("TestProject") {
            missed.push(e.to_string());
        }
        if let Err(e) = store.user("chenry") {
            missed.push(e.to_string());
        }
        reads += 2;
    }
    let cycles = churn.stop();
    assert!(
        cycles.iter().all(|&n| n >= 50),
        "the documents were replaced too rarely to prove anything: {cycles:?}"
    );
    assert!(
        missed.is_empty(),
        "{} of {reads} reads missed a document being replaced ({cycles:?} replacements): {:?}",
        missed.len(),
        &missed[..missed.len().min(3)]
    );
    // Really missing: not found, without the wait (a partial of another document beside it
    // does not count).
    std::fs::write(
        store
            .project_path("TestProject")
            .with_file_name(".syncthing.other.json.tmp"),
        b"{}",
    )
    .unwrap();
    let t = Instant::now();
    let e = store.project("Nowhere").unwrap_err();
    assert!(e.to_string().contains("not found"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

/// The same with a real queue manager starting jobs (as root it reads the project to choose
/// the Unix user; every job names its user, so the PRD §10 check reads both documents too)
/// while both documents are being replaced again and again: every job runs, none fails or is
/// put off for long.
#[test]
fn jobs_start_while_their_project_is_being_replaced_by_a_sync_engine() {
    let env = QueueEnv::new(4);
    let store = env.store();
    let n = 30;
    for i in 0..n {
        let mut j = noop(0.0);
        j["config"]["user"] = json!("chenry");
        env.queue_job(&format!("r{i:02}"), &j);
    }
    let mut churn =
        SyncthingReplacing::start(&[store.project_path("TestProject"), store.user_path("chenry")]);
    let _alpha = manager(&env, "alpha");
    crate::wait::files_within(
        &[&env.dir("finished"), &env.dir("failed")],
        Duration::from_secs(60),
        || env.count("finished") + env.count("failed") >= n,
    );
    let cycles = churn.stop();
    let failed: Vec<String> = std::fs::read_dir(env.dir("failed"))
        .unwrap()
        .flatten()
        .map(|e| {
            let j = read_json(&e.path());
            format!(
                "{}: {}",
                e.file_name().to_string_lossy(),
                j["runtime"]["error"]
            )
        })
        .collect();
    assert!(failed.is_empty(), "jobs failed: {failed:?}");
    assert_eq!(
        env.count("finished"),
        n,
        "finished within 60 s while the documents were replaced {cycles:?} times ({} still queued)",
        env.count("queued")
    );
}

/// t_sync: beta died mid-sync, and alpha's copy held its job both in running_jobs/ (failed
/// there by the lost-machine check) and in queued_jobs/ (the delete of beta's move never
/// arrived). Alpha's manager ran the stale queued copy and `retry` called the failed job
/// "queued". A queued file whose job is also in a later state is never started; when that
/// state is an end (finished, failed) the queued copy is removed (the manager says why), and
/// the job is the one in the later state.
#[test]
fn a_stale_queued_copy_of_a_job_that_moved_on_is_never_run() {
    let env = QueueEnv::new(2);
    env.queue_job("moved", &noop(0.0));
    let mut failed = env.job("queued", "moved");
    let now = agentstore::model::Timestamp::now().to_string();
    failed["runtime"]["status"] = json!("failed");
    failed["runtime"]["start_time"] = json!(now);
    failed["runtime"]["finish_time"] = json!(now);
    failed["runtime"]["host"] = json!("beta");
    failed["runtime"]["error"] = json!("Machine beta stopped reporting at 2025-10-25T10:00:00Z");
    std::fs::write(env.job_file("failed", "moved"), failed.to_string()).unwrap();
    env.queue_job("fresh", &noop(0.0));
    let _alpha = manager(&env, "alpha");
    wait_until(Duration::from_secs(60), "the fresh job finished", || {
        env.job_file("finished", "fresh").exists()
    });
    let logs = || queue_logs(&env);
    // The job has ended: its stale queued copy goes (it would otherwise wait for a delete
    // that never comes, and run once the failed job is archived), the ended job stays.
    wait_until(Duration::from_secs(20), "the manager saying why", || {
        logs().contains("job moved: removed its stale queued copy (the job ended, in failed_jobs/)")
    });
    assert!(!env.job_file("queued", "moved").exists());
    assert_eq!(env.job("failed", "moved"), failed);
    assert!(
        !env.job_file("finished", "moved").exists() && !env.job_file("running", "moved").exists(),
        "the stale queued copy ran"
    );
    let out = cli(&env, "alpha", &["retry", "moved"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("retry of moved"),
        "{text}"
    );
}

/// One inbox message answered by two machines (the sync engine kept their store locks apart
/// for longer than the stale time): each made the job, with the same id and correlation id
/// but its own queue time. The first copy ran and finished; the second, arriving queued
/// afterwards, is the same job and never runs again.
#[test]
fn a_second_machines_copy_of_one_messages_job_never_runs_again() {
    let env = QueueEnv::new(2);
    env.queue_job("dup", &noop(0.0));
    let mut first = env.job("queued", "dup");
    first["config"]["correlation_id"] = json!("soak-alpha-0003697");
    first["config"]["queue_time"] = json!("2026-12-02T21:19:39Z");
    let mut second = first.clone();
    second["config"]["queue_time"] = json!("2026-12-02T21:19:36Z");
    let mut done = first.clone();
    done["runtime"]["status"] = json!("finished");
    done["runtime"]["start_time"] = json!("2026-12-02T21:19:39Z");
    done["runtime"]["finish_time"] = json!("2026-12-02T21:19:52Z");
    std::fs::write(env.job_file("finished", "dup"), done.to_string()).unwrap();
    std::fs::write(env.job_file("queued", "dup"), second.to_string()).unwrap();
    env.queue_job("fresh", &noop(0.0));
    let _alpha = manager(&env, "alpha");
    wait_until(Duration::from_secs(60), "the fresh job finished", || {
        env.job_file("finished", "fresh").exists()
    });
    let logs = || queue_logs(&env);
    wait_until(
        Duration::from_secs(20),
        "the manager removing the copy",
        || {
            logs().contains(
                "job dup: removed its stale queued copy (the job ended, in finished_jobs/)",
            )
        },
    );
    assert!(!env.job_file("queued", "dup").exists());
    assert_eq!(
        env.job("finished", "dup"),
        done,
        "the job that ran is kept as it was"
    );
    assert!(
        !env.job_file("running", "dup").exists() && !env.job_file("failed", "dup").exists(),
        "the second copy ran"
    );
}

/// Every queue manager's log of the store, as one text.
fn queue_logs(env: &QueueEnv) -> String {
    std::fs::read_dir(env.root.join("logs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("queue-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>()
}

/// A heartbeat of `host` last seen `last_seen` (an old time: a machine silent for long).
fn beat_at(root: &Path, host: &str, last_seen: &str) {
    let dir = root.join("machines").join(host);
    std::fs::create_dir_all(&dir).unwrap();
    agentstore::store::write_json_atomic(
        &dir.join("queue-manager.q1.json"),
        &json!({"host": host, "daemon": "queue-manager", "queue": "q1", "pid": 1,
                "version": "0.1.0", "started": last_seen, "last_seen": last_seen,
                "interval_seconds": 1}),
    )
    .unwrap();
}

/// `job` as it stands in `state` on machine `host` (`error`: its failure).
fn job_in(job: &Value, status: &str, host: &str, error: Option<&str>) -> Value {
    let mut j = job.clone();
    j["runtime"]["status"] = json!(status);
    j["runtime"]["host"] = json!(host);
    j["runtime"]["start_time"] = json!("2026-01-01T00:00:00Z");
    j["runtime"]["process_id"] = json!(4_000_000);
    if status != "running" {
        j["runtime"]["finish_time"] = json!("2026-01-01T00:01:00Z");
    }
    if let Some(e) = error {
        j["runtime"]["error"] = json!(e);
    }
    j
}

fn stale_copy_events(root: &Path, id: &str) -> Vec<Value> {
    events(root)
        .into_iter()
        .filter(|e| e["event"] == "stale_copy_removed" && e["job_id"] == id)
        .collect()
}

/// Through Syncthing a machine's change that never left it before it died wins over the
/// delete of the other machine's move (a delete vs. a modification keeps the modified
/// file): the running copy of a job failed for that machine's silence comes back beside the
/// failed document (seen in t_sync). It is removed — by whichever process judges lost
/// machines — and never failed a second time; the failed document stays as written.
#[test]
fn a_running_copy_brought_back_beside_the_jobs_end_is_removed_never_failed_again() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    beat_at(&env.root, "beta", "2026-01-01T00:00:00Z");
    let store = env.store();
    let base = noop(1.0);
    // (a) failed for beta's silence + its running copy back.
    let lost = "Machine beta stopped reporting at 2026-01-01T00:00:00Z";
    let w = |state: &str, id: &str, j: &Value| {
        agentstore::store::write_json_atomic(&env.job_file(state, id), j).unwrap()
    };
    w("failed", "a", &job_in(&base, "failed", "beta", Some(lost)));
    w("running", "a", &job_in(&base, "running", "beta", None));
    // (b) finished on beta, whose delete of the running file never came (beta lost).
    let b = noop(2.0);
    w("finished", "b", &job_in(&b, "finished", "beta", None));
    w("running", "b", &job_in(&b, "running", "beta", None));
    // (c) a DIFFERENT job under a used id (another queue time): not a stale copy.
    let mut other = noop(1.0);
    other["config"]["queue_time"] = json!("2025-05-05T05:05:05Z");
    w(
        "finished",
        "c",
        &job_in(&noop(1.0), "finished", "beta", None),
    );
    w("running", "c", &job_in(&other, "running", "beta", None));
    let before: Vec<Vec<u8>> = [("failed", "a"), ("finished", "b"), ("finished", "c")]
        .iter()
        .map(|(s, id)| std::fs::read(env.job_file(s, id)).unwrap())
        .collect();

    let machines = store.machines();
    let lost_jobs = store.fail_lost_jobs("q1", "alpha", &machines);
    let ids: Vec<&str> = lost_jobs.iter().map(|l| l.id.as_str()).collect();
    assert!(
        !env.job_file("running", "a").exists(),
        "a's running copy stays"
    );
    assert!(
        !env.job_file("running", "b").exists(),
        "b's running copy stays"
    );
    assert!(
        !ids.contains(&"a") && !ids.contains(&"b"),
        "failed again: {ids:?}"
    );
    assert!(
        !env.job_file("failed", "b").exists(),
        "b failed beside its end"
    );
    // c is another job: judged as any running job of a lost machine, never removed unread.
    assert!(ids.contains(&"c"), "{ids:?}");
    assert!(env.job_file("failed", "c").exists());
    let after: Vec<Vec<u8>> = [("failed", "a"), ("finished", "b"), ("finished", "c")]
        .iter()
        .map(|(s, id)| std::fs::read(env.job_file(s, id)).unwrap())
        .collect();
    assert_eq!(before, after, "an ended document was changed");
    for id in ["a", "b"] {
        let ev = stale_copy_events(&env.root, id);
        assert_eq!(ev.len(), 1, "{id}: {ev:?}");
        assert!(
            ev[0]["detail"]
                .as_str()
                .unwrap()
                .contains("stale running copy"),
            "{ev:?}"
        );
    }
    // A second pass finds nothing to do.
    assert!(store.fail_lost_jobs("q1", "alpha", &machines).is_empty());
}

/// A lost job is claimed, written failed with its error, and only then moved into
/// `failed_jobs/` (a reader between the steps used to see a failed job with no error). A
/// claim a crash left half-done (`running_jobs/.<id>.lost`, invisible to every scan) is
/// completed by the next sweep: failed, with the machine's error, claimed once.
#[test]
fn a_lost_jobs_claim_left_by_a_crash_is_completed_by_the_next_sweep() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    beat_at(&env.root, "beta", "2026-01-01T00:00:00Z");
    let store = env.store();
    let running = job_in(&noop(1.0), "running", "beta", None);
    let claim = env.job_file("running", "d").with_file_name(".d.lost");
    agentstore::store::write_json_atomic(&claim, &running).unwrap();
    agentstore::store::write_json_atomic(&env.job_file("running", "e"), &running).unwrap();
    // Nothing lists the half-done claim as a job.
    let running_dir = store.jobs_dir("q1", agentstore::model::JobStatus::Running);
    let listed = agentstore::store::scan_dir(&running_dir).unwrap().documents;
    assert_eq!(listed, vec![env.job_file("running", "e")], "{listed:?}");
    let machines = store.machines();
    let lost = store.fail_lost_jobs("q1", "alpha", &machines);
    assert_eq!(
        lost.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        ["e"]
    );
    for id in ["d", "e"] {
        let failed: Value =
            serde_json::from_slice(&std::fs::read(env.job_file("failed", id)).unwrap()).unwrap();
        assert_eq!(failed["runtime"]["status"], "failed", "{id}");
        let error = failed["runtime"]["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("Machine beta stopped reporting at 2026-01-01"),
            "{id}: {error}"
        );
    }
    assert!(!claim.exists());
    let left: Vec<_> = std::fs::read_dir(env.job_file("running", "e").parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Two machines both judged a third lost and each claimed its own copy of the job; the sync
/// engine brought one's failed document beside the other's claim (the soak: one claim
/// retried every 6 s for 80 minutes, "File exists"). The same job: the claim goes, the
/// failure recorded once. Another job under that id: the claim is set aside under
/// `conflicts/`, never lost and never tried again.
#[test]
fn a_lost_jobs_claim_meeting_a_failed_copy_is_settled_once() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    beat_at(&env.root, "beta", "2026-01-01T00:00:00Z");
    let store = env.store();
    let running = job_in(&noop(1.0), "running", "beta", None);
    let failed_here = job_in(
        &noop(1.0),
        "failed",
        "beta",
        Some("Machine beta stopped reporting at 2026-01-01T00:00:00Z"),
    );
    let mut other = noop(2.0);
    other["config"]["task_description"] = "another job under the same id".into();
    let other_failed = job_in(&other, "failed", "beta", Some("something else"));
    let running_dir = env.job_file("running", "x").parent().unwrap().to_path_buf();
    for (id, failed) in [("same", &failed_here), ("other", &other_failed)] {
        agentstore::store::write_json_atomic(&running_dir.join(format!(".{id}.lost")), &running)
            .unwrap();
        agentstore::store::write_json_atomic(&env.job_file("failed", id), failed).unwrap();
    }
    let machines = store.machines();
    for _ in 0..2 {
        store.fail_lost_jobs("q1", "alpha", &machines);
    }
    let left: Vec<_> = std::fs::read_dir(&running_dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let kept: Value =
        serde_json::from_slice(&std::fs::read(env.job_file("failed", "other")).unwrap()).unwrap();
    assert_eq!(
        kept["runtime"]["error"], "something else",
        "the other job is untouched"
    );
    let aside = store
        .root()
        .join("conflicts")
        .join(running_dir.strip_prefix(store.root()).unwrap())
        .join(".other.lost");
    let aside: Value = serde_json::from_slice(&std::fs::read(&aside).unwrap()).unwrap();
    assert_eq!(aside["runtime"]["host"], "beta", "the claim is kept whole");
    assert!(
        !store
            .root()
            .join("conflicts")
            .join(running_dir.strip_prefix(store.root()).unwrap())
            .join(".same.lost")
            .exists(),
        "the same job's second record is not kept"
    );
}

/// The machine judged lost comes back (a partition, a laptop waking) with its worker alive,
/// and its sync engine brought the running copy back: the failure stands. Its own manager
/// removes the copy, stops the worker, and the late worker writes nothing.
#[test]
fn a_machine_back_with_its_running_copy_restored_stops_the_worker_and_keeps_the_failure() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    let (beta, worker, alpha, running) = partitioned_while_running(&env, "back", 30.0);
    let worker_pid = nix::unistd::Pid::from_raw(worker);
    drop(alpha);
    let failed = std::fs::read(env.job_file("failed", "back")).unwrap();
    // beta's sync engine restores the running copy as beta last wrote it.
    let tmp = env.dir("running").join(".restore.tmp");
    std::fs::write(&tmp, &running).unwrap();
    std::fs::rename(&tmp, env.job_file("running", "back")).unwrap();
    nix::sys::signal::kill(worker_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    beta.signal(nix::sys::signal::Signal::SIGCONT);
    wait_until(Duration::from_secs(30), "the copy removed on beta", || {
        !env.job_file("running", "back").exists()
    });
    wait_until(Duration::from_secs(30), "beta stopped its worker", || {
        !pid_alive(worker)
    });
    // beta's passes for 2 s after that.
    manager_passes(&env.root, "beta", &env.queue, Duration::from_secs(2));
    assert_eq!(
        std::fs::read(env.job_file("failed", "back")).unwrap(),
        failed,
        "the failed document was changed"
    );
    for s in ["queued", "running", "finished"] {
        assert!(!env.job_file(s, "back").exists(), "back reappeared in {s}");
    }
    assert_eq!(env.count("failed"), 1);
    assert_eq!(stale_copy_events(&env.root, "back").len(), 1);
}
