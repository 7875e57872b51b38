//! Issue 27 (item 4 and the lower items of item 5 this module owns): every reader is
//! authorized, and what other machines claim is bounded.
//!
//! - Approval requests are read only through an authorized call (`ListApprovals`): the old
//!   `PendingApprovals` property (readable by any local user) is gone, and the signals carry
//!   ids only, never a job's tool input.
//! - A heartbeat or lock heartbeat from the future is invalid: a manager does not stand down
//!   for it, an orchestrator lock dated 2099 is taken over.
//! - A forged `runtime.host` does not get a job running here failed as "machine lost".
//! - `--after` and `--project` narrowings answer an unknown id and another user's private
//!   one alike (or refuse, as `view-project` does).
//! - A job file whose name is no job id is failed once; an inbox file whose name is not UTF-8
//!   is answered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{approvals_env, queue_env};

use agentstore::model::{Message, MessageStatus};
use agentstore::orchestrator::{LockError, LockInfo, StoreLock};
use agentstore::permissions::Caller;
use approvals_env::{add_users, nobody, owner_uid};
use futures_util::StreamExt;
use queue_env::*;
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::time::Duration;

/// A live stand-in worker for running job `id` (its command line names the job, which is
/// what the manager checks before it re-adopts a running job); killed on drop.
struct FakeWorker(std::process::Child);

impl FakeWorker {
    fn start(id: &str) -> FakeWorker {
        FakeWorker(
            std::process::Command::new("sh")
                .args(["-c", "sleep 600; :", id])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for FakeWorker {
    fn drop(&mut self) {
        // The shell and its sleep: the whole group.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.wait();
    }
}

/// `busctl` on the private bus as `uid`: (success, stdout + stderr).
fn busctl_as(bus: &PrivateBus, uid: u32, args: &[&str]) -> (bool, String) {
    let gid = nix::unistd::User::from_uid(uid.into())
        .unwrap()
        .map(|u| u.gid.as_raw())
        .unwrap_or(uid);
    let o = std::process::Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args(args)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// Item 4: `PendingApprovals` showed every job's pending tool call, with its full input, to
/// any local user, and so did the `ApprovalRequested` signal (and the web event stream built
/// on it). Now the requests are read through `ListApprovals`, which shows a caller only the
/// requests of jobs PRD §10 lets them see; the property is gone and the signals carry ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_requests_are_read_only_through_an_authorized_call() {
    guarded(async {
        assert!(
            nix::unistd::geteuid().is_root(),
            "needs root: the test calls the bus as two other Unix users"
        );
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        add_users(&env);
        let secret = "cat /home/bob/.ssh/id_rsa";
        let worker = FakeWorker::start("run-private");
        let mut job = noop(600.0);
        job["config"]["user"] = json!("chenry");
        job["runtime"]["status"] = json!("running");
        job["runtime"]["start_time"] = json!(agentstore::model::Timestamp::now().to_string());
        job["runtime"]["process_id"] = json!(worker.0.id());
        agentstore::store::write_json_atomic(&env.job_file("running", "run-private"), &job)
            .unwrap();
        let m = RunningManager::start(env.manager_config(&bus)).await;

        // Every signal of the queue's interface, as any listener on the bus gets them.
        let conn = bus.connect().await;
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface("org.agentstore.Queue1")
            .build()
            .unwrap();
        let mut signals = zbus::MessageStream::for_match_rule(rule, &conn, None)
            .await
            .unwrap();

        let store = env.store();
        let now = agentstore::model::Timestamp::now();
        let req = agentstore::model::approval::ApprovalRequest {
            request_id: "run-private-a1-0123456789abcdef01234567".into(),
            job_id: "run-private".into(),
            tool: "Bash".into(),
            summary: format!("Bash: {secret}"),
            input: json!({ "command": secret }),
            requested_at: now,
            deadline: now.plus_secs(600),
        };
        store.write_approval_request(&env.queue, &req).unwrap();

        // The signal names the request and nothing of what it asks.
        let sig = loop {
            let msg = signals.next().await.unwrap().unwrap();
            if msg.header().member().map(|m| m.as_str()) == Some("ApprovalRequested") {
                break msg;
            }
        };
        let body = sig.body();
        let (job_id, request_id, deadline): (String, String, String) = body
            .deserialize()
            .expect("ApprovalRequested is (job_id, request_id, deadline)");
        assert_eq!(
            (job_id.as_str(), request_id.as_str()),
            ("run-private", &*req.request_id)
        );
        assert!(deadline.ends_with('Z'), "{deadline}");

        let path = agentstore::bus::queue_object_path(&env.queue);
        let name = agentstore::bus::queue_bus_name(&env.queue);
        // The property any local user could read is gone.
        let (ok, out) = busctl_as(
            &bus,
            nobody(),
            &[
                "get-property",
                &name,
                &path,
                "org.agentstore.Queue1",
                "PendingApprovals",
            ],
        );
        assert!(!ok && !out.contains(secret), "PendingApprovals: {out}");
        // A stranger to the job sees nothing of it; its project's owner sees it whole.
        let list = [
            "call",
            &name,
            &path,
            "org.agentstore.Queue1",
            "ListApprovals",
        ];
        let (ok, out) = busctl_as(&bus, nobody(), &list);
        assert!(ok, "{out}");
        assert!(
            !out.contains(secret) && !out.contains("run-private"),
            "{out}"
        );
        let (ok, out) = busctl_as(&bus, owner_uid(), &list);
        assert!(ok && out.contains(secret), "{out}");

        // An answer from the stranger reads as one to a request that is not there.
        let (ok, err) =
            approvals_env::answer_as(&bus, &env, nobody(), &req.request_id, true, false, "");
        assert!(!ok && err.contains("not waiting"), "{err}");
        let (ok, err2) =
            approvals_env::answer_as(&bus, &env, nobody(), "no-such-a1", true, false, "");
        assert!(!ok && err2.contains("not waiting"), "{err2}");
        m.stop().await;
        drop(worker);
    })
    .await
}

/// Item 5: an orchestrator lock whose heartbeat is dated 2099 (from another host) kept every
/// orchestratord from starting, forever. A heartbeat from beyond the clock skew is stale.
#[test]
fn a_lock_heartbeat_from_the_future_is_stale() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(".orchestrator.lock");
    let write = |heartbeat: &str| {
        let t: agentstore::model::Timestamp = heartbeat.parse().unwrap();
        let info = LockInfo {
            host: "elsewhere".into(),
            pid: 4242,
            started: t,
            heartbeat: t,
            boot_id: None,
            pid_start: None,
            epoch: 0,
        };
        std::fs::write(&path, serde_json::to_vec(&info).unwrap()).unwrap();
    };
    write("2099-01-01T00:00:00Z");
    let l = StoreLock::acquire(&path).expect("a heartbeat from 2099 holds nothing");
    drop(l);
    // A holder a little ahead (clock skew) still holds it.
    write(
        &agentstore::model::Timestamp::now()
            .plus_secs(60)
            .to_string(),
    );
    let e = StoreLock::acquire(&path).unwrap_err();
    assert!(matches!(e, LockError::Held { .. }), "{e}");
}

/// Item 5: a queue manager's heartbeat of another machine dated 2099 (started "first") made
/// this machine's manager stand down for good: it started nothing. Now that heartbeat is
/// skipped as invalid (reported by `list-machines`), and the job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_from_the_future_makes_no_manager_stand_down() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let dir = env.root.join("machines/otherbox");
        std::fs::create_dir_all(&dir).unwrap();
        agentstore::store::write_json_atomic(
            &dir.join("queue-manager.q1.json"),
            &json!({"host": "otherbox", "daemon": "queue-manager", "queue": "q1", "pid": 1,
                    "version": "0.1.0", "started": "2000-01-01T00:00:00Z",
                    "last_seen": "2099-01-01T00:00:00Z", "interval_seconds": 30}),
        )
        .unwrap();
        let machines = env.store().machines();
        assert!(machines.get("otherbox").is_none(), "{machines:?}");
        assert!(
            machines
                .problems
                .iter()
                .any(|p| p.contains("ahead of this machine's clock")),
            "{:?}",
            machines.problems
        );
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        env.queue_job("runs-here", &noop(0.0));
        let c = tokio::time::timeout(Duration::from_secs(20), changes.ended("runs-here"))
            .await
            .expect("the manager stood down for a heartbeat from 2099");
        assert_eq!(c.new, "finished");
        m.stop().await;
    })
    .await
}

/// Item 5: a running job's `runtime.host` rewritten to name a machine that went silent got
/// the job failed as "machine lost" (and retried: the work ran twice) while it ran here. The
/// manager's heartbeat now says what it runs, and a live machine's word outvotes the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_host_does_not_fail_a_job_running_here() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let cfg = env.root.join("config.yaml");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str(
            "machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 2\n  lost_job_grace_seconds: 2\n",
        );
        std::fs::write(&cfg, text).unwrap();
        // A machine silent since 2020.
        let dir = env.root.join("machines/oldbox");
        std::fs::create_dir_all(&dir).unwrap();
        agentstore::store::write_json_atomic(
            &dir.join("queue-manager.q1.json"),
            &json!({"host": "oldbox", "daemon": "queue-manager", "queue": "q1", "pid": 1,
                    "version": "0.1.0", "started": "2020-01-01T00:00:00Z",
                    "last_seen": "2020-01-01T00:00:00Z", "interval_seconds": 1}),
        )
        .unwrap();
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        env.queue_job("forged-host", &noop(4.0));
        changes.until("forged-host", "running").await;
        let path = env.job_file("running", "forged-host");
        let mut doc = read_json(&path);
        doc["runtime"]["host"] = json!("oldbox");
        agentstore::store::write_json_atomic(&path, &doc).unwrap();
        let c = changes.ended("forged-host").await;
        let end = env.job(&c.new, "forged-host");
        assert_eq!(c.new, "finished", "{end}");
        m.stop().await;
    })
    .await
}

/// A message as `user` (PRD §4.2).
fn message(user: &str, command: &str, project: &str, content: Value) -> Message {
    serde_json::from_value(json!({
        "correlation_id": format!("c-{}", uuid::Uuid::new_v4().simple()), "source": "user",
        "project": project, "queue_time": "2025-10-25T10:00:00Z", "command": command,
        "content": content, "status": "queued", "user": user
    }))
    .unwrap()
}

/// alice and bob (plain users), each owning a private project; bob has a queued job.
fn two_users(env: &QueueEnv) -> (Caller, Caller) {
    let store = env.store();
    let now = agentstore::model::Timestamp::now().to_string();
    for u in ["alice", "bob"] {
        std::fs::write(
            store.user_path(u),
            json!({"id": u, "name": u, "email": format!("{u}@x"), "permissions": "user"})
                .to_string(),
        )
        .unwrap();
        let p = format!("{u}-project");
        std::fs::create_dir_all(store.project_path(&p).parent().unwrap()).unwrap();
        std::fs::write(
            store.project_path(&p),
            json!({"id": p, "directory": env.work, "create_time": now, "update_time": now,
                   "owner": u, "default_queue": "q1"})
            .to_string(),
        )
        .unwrap();
    }
    let mut j = noop(0.0);
    j["config"]["project"] = json!("bob-project");
    j["config"]["user"] = json!("bob");
    env.queue_job("bob-private", &j);
    let who = |u: &str| Caller::User(store.user(u).unwrap());
    (who("alice"), who("bob"))
}

/// Item 5: `--after` took another user's private job id, and an unknown id answered
/// "unknown job": whether an id exists could be probed. Both now get the same answer.
#[test]
fn after_answers_an_unknown_and_a_private_job_alike() {
    let env = QueueEnv::new(1);
    let (alice, bob) = two_users(&env);
    let store = env.store();
    let after = |who: &Caller, user: &str, project: &str, dep: &str| {
        let m = message(
            user,
            "research-code",
            project,
            json!({"task": "t", "jobtype": "noop", "after": [dep]}),
        );
        agentstore::orchestrator::handle(&store, &m, who).response
    };
    let private = after(&alice, "alice", "alice-project", "bob-private");
    let unknown = after(&alice, "alice", "alice-project", "no-such-job");
    assert_eq!(private.status, MessageStatus::Error, "{private:?}");
    assert_eq!(unknown.status, MessageStatus::Error, "{unknown:?}");
    assert_eq!(
        private.error.unwrap().replace("bob-private", "ID"),
        unknown.error.unwrap().replace("no-such-job", "ID")
    );
    // Its owner may wait for it.
    let own = after(&bob, "bob", "bob-project", "bob-private");
    assert_eq!(own.status, MessageStatus::Done, "{own:?}");
    // The same for reading it: another user's private job reads as an unknown one.
    let view = |id: &str| {
        let m = message("alice", "view-job", "alice-project", json!({ "job": id }));
        agentstore::orchestrator::handle(&store, &m, &alice).response
    };
    let (hidden, unknown) = (view("bob-private"), view("no-such-job"));
    assert_eq!(hidden.status, MessageStatus::Error, "{hidden:?}");
    assert_eq!(
        hidden.error.unwrap().replace("bob-private", "ID"),
        unknown.error.unwrap().replace("no-such-job", "ID")
    );
}

/// Item 5: `list-prds --project <someone else's private project>` answered `[]`; it is refused
/// as `view-project` refuses it (and `list-jobs --project` the same), over every door.
#[test]
fn listings_narrowed_to_a_private_project_are_refused() {
    let env = QueueEnv::new(1);
    let (alice, bob) = two_users(&env);
    let store = env.store();
    for command in ["list-prds", "list-jobs"] {
        let m = message(
            "alice",
            command,
            "bob-project",
            json!({"project": "bob-project"}),
        );
        let r = agentstore::orchestrator::handle(&store, &m, &alice).response;
        assert_eq!(r.status, MessageStatus::Error, "{command}: {r:?}");
        let e = r.error.unwrap();
        assert!(e.contains("belongs to bob"), "{command}: {e}");
        let m = message(
            "bob",
            command,
            "bob-project",
            json!({"project": "bob-project"}),
        );
        let r = agentstore::orchestrator::handle(&store, &m, &bob).response;
        assert_eq!(r.status, MessageStatus::Done, "{command}: {r:?}");
    }
    // The CLI reading the store directly (as root: a trusted caller) still lists it; the
    // same rule as a plain user is what the orchestrator applies above.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args([
            "list-prds",
            "--project",
            "bob-project",
            "--format",
            "json",
            "--bus",
            "none",
            "--root",
        ])
        .arg(&env.root)
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Logged in as alice, the CLI's own reads of the store refuse the same way: the live
    // listing and the archive's (which used to answer an empty list).
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(args)
            .args(["--bus", "none", "--root"])
            .arg(&env.root)
            .env("HOME", env.dir.path())
            .env("XDG_CONFIG_HOME", env.dir.path().join(".config"))
            .output()
            .unwrap()
    };
    let o = cli(&["login", "alice"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for args in [
        &["list-jobs", "--project", "bob-project"][..],
        &["list-jobs", "--archived", "--project", "bob-project"][..],
        &["list-prds", "--project", "bob-project"][..],
    ] {
        let o = cli(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && e.contains("belongs to bob"),
            "{args:?}: {e}"
        );
    }
}

/// Item 5: a job file named with 235 characters (no job id: ids have at most 200 bytes) was
/// tried again and again ("File name too long": the start's probe file took the job's name).
/// It is failed once, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_file_whose_name_is_no_id_is_failed_once() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let long = "j".repeat(235);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        env.queue_job(&long, &noop(0.0));
        let c = tokio::time::timeout(Duration::from_secs(20), changes.ended(&long))
            .await
            .expect("the job file was tried again and again");
        assert_eq!(c.new, "failed");
        let doc = env.job("failed", &long);
        let error = doc["runtime"]["error"].as_str().unwrap();
        assert!(error.contains("Invalid job file name"), "{error}");
        // Once: nothing of it is left to try again.
        assert_eq!(env.count("queued"), 0);
        m.stop().await;
    })
    .await
}

/// Item 5: an inbox file whose name is not UTF-8 was never answered nor reported. It is
/// answered like any message, and kept in processed_inbox/.
#[test]
fn an_inbox_file_whose_name_is_not_utf8_is_answered() {
    use std::os::unix::ffi::OsStrExt;
    let env = QueueEnv::new(1);
    let store = env.store();
    let name = std::ffi::OsStr::from_bytes(b"msg-\xff\xfe.json");
    std::fs::write(
        store.inbox().join(name),
        json!({"correlation_id": "not-utf8-name", "source": "user",
               "queue_time": "2025-10-25T10:00:00Z", "command": "list-queues",
               "content": {}, "status": "queued"})
        .to_string(),
    )
    .unwrap();
    let out = agentstore::orchestrator::process_inbox(&store, 10).unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        store.outbox().join("not-utf8-name.json").is_file(),
        "no answer in the outbox: {out:?}"
    );
    assert!(!store.inbox().join(name).exists());
    assert_eq!(
        std::fs::read_dir(store.processed_inbox()).unwrap().count(),
        1,
        "the message is kept"
    );
}
