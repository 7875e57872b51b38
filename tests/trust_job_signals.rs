//! Issue 27 (round 3, item 3): `Queue1.JobStateChanged` is no longer broadcast. Before, any
//! local account that added a match rule (`gdbus monitor`, as `nobody`) followed every job of
//! every user — when each private job was queued, started, finished or failed. Now the
//! manager sends the signal only to connections that called `WatchJobs`, each only for the
//! jobs PRD §10 lets its caller see (`view-job`); an account with no user document may not
//! watch at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::trust_signals::{lines_until, monitor_as_nobody};
use crate::{approvals_env, queue_env};

use approvals_env::nobody;
use futures_util::StreamExt;
use queue_env::*;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// Longest wait for one thing a listener should hear.
const LONG: Duration = Duration::from_secs(120);

/// A watcher as Unix account `uid`: a thread of its own switches its own credentials (the
/// kernel's are per thread; glibc's setuid would switch every thread of the test), connects
/// to the bus there (the bus identifies it by the socket's peer credentials), calls
/// `WatchJobs(true)` and sends each `JobStateChanged` it receives as `id:old>new`. The first
/// item is the call's outcome (`ok` or the error).
fn watcher_as(address: &str, queue: &str, uid: u32) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let (address, queue) = (address.to_string(), queue.to_string());
    std::thread::spawn(move || {
        // SAFETY: plain system calls switching this thread's credentials only (the raw
        // syscalls, not glibc's process-wide wrappers).
        let r = unsafe {
            (
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                libc::syscall(libc::SYS_setresgid, uid, uid, uid),
                libc::syscall(libc::SYS_setresuid, uid, uid, uid),
            )
        };
        assert_eq!(r, (0, 0, 0), "switching the watcher thread to uid {uid}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let conn = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .unwrap();
            let proxy = agentstore::bus::queue::queue_proxy(&conn, &queue)
                .await
                .unwrap();
            let mut stream = proxy.receive_job_state_changed().await.unwrap();
            match proxy.watch_jobs(true).await {
                Ok(()) => tx.send("ok".to_string()).unwrap(),
                Err(e) => {
                    let _ = tx.send(e.to_string());
                    return;
                }
            }
            while let Some(sig) = stream.next().await {
                let a = sig.args().unwrap();
                if tx
                    .send(format!("{}:{}>{}", a.id(), a.old(), a.new()))
                    .is_err()
                {
                    break;
                }
            }
        });
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_moves_reach_only_watchers_who_may_see_the_job() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: the listeners run as other Unix users (nobody, daemon)"
    );
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let store = env.store();
        // mallory is `nobody`, an ordinary user, a collaborator of TestProject; SecretProject
        // (chenry's too) is private to her.
        std::fs::write(
            store.user_path("mallory"),
            json!({"id": "mallory", "name": "M", "email": "m@x", "permissions": "user",
                   "unix_user": "nobody"})
            .to_string(),
        )
        .unwrap();
        let now = agentstore::model::Timestamp::now().to_string();
        for (id, collaborators) in [
            ("TestProject", json!(["mallory"])),
            ("SecretProject", json!([])),
        ] {
            std::fs::create_dir_all(store.project_path(id).parent().unwrap()).unwrap();
            std::fs::write(
                store.project_path(id),
                json!({"id": id, "directory": env.work, "create_time": now,
                       "update_time": now, "owner": "chenry", "default_queue": "q1",
                       "collaborators": collaborators})
                .to_string(),
            )
            .unwrap();
        }

        // The manager first, then the test's own watcher (WatchJobs with replay: nothing
        // is lost), so the watch is one awaited call, not a race with the name's arrival.
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let name = agentstore::bus::queue_bus_name(&env.queue);
        let (_monitor, monitor) = monitor_as_nobody(&bus.address, &name);
        lines_until(&monitor, "the monitor's subscription", |l| {
            l.contains("is owned by")
        });
        let mallory = watcher_as(&bus.address, &env.queue, nobody());
        assert_eq!(
            mallory.recv_timeout(LONG).unwrap(),
            "ok",
            "a user may watch the jobs she may see"
        );

        // An account with no user document may not watch at all.
        let o = Command::new("gdbus")
            .args(["call", "--address", &bus.address, "--dest", &name])
            .args([
                "--object-path",
                &agentstore::bus::queue_object_path(&env.queue),
            ])
            .args(["--method", "org.agentstore.Queue1.WatchJobs", "true"])
            .env("HOME", "/")
            .uid(1)
            .gid(1)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("PermissionDenied") && err.contains("no document"),
            "uid 1 (daemon) with no user document watched: {err}"
        );

        let mut private = noop(0.1);
        private["config"]["project"] = json!("SecretProject");
        env.queue_job("private-1", &private);
        env.queue_job("hers-1", &noop(0.1));
        changes.ended("private-1").await;
        let end = changes.ended("hers-1").await;
        assert_eq!(end.new, "finished", "{:?}", changes.seen);

        // mallory hears of the job she may see, every move, and of nothing else.
        let mut heard = Vec::new();
        while !heard
            .iter()
            .any(|h: &String| h == "hers-1:running>finished")
        {
            heard.push(
                mallory
                    .recv_timeout(LONG)
                    .unwrap_or_else(|_| panic!("mallory heard only {heard:?}")),
            );
        }
        assert_eq!(
            heard,
            ["hers-1:queued>running", "hers-1:running>finished"],
            "what mallory heard"
        );
        // (private-1 ended before hers-1 started: one worker.)

        // The monitor as nobody: the manager's broadcasts up to its end, none of them a job's
        // move. Its messages all reach the bus before its name is released.
        m.stop().await;
        let seen = lines_until(&monitor, "the manager's end", |l| {
            l.contains("does not have an owner") || l.contains("has no owner")
        });
        assert!(
            seen.iter().any(|l| l.contains("ActiveJobs")),
            "the monitor saw no broadcast at all (was it listening?): {seen:#?}"
        );
        for l in &seen {
            assert!(
                !l.contains("JobStateChanged") && !l.contains("private-1"),
                "a listener as nobody followed another user's job: {l}"
            );
        }
    })
    .await
}
