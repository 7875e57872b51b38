//! org.agentstore.Queue1 on the bus: the live introspection matches the checked-in XML,
//! callers are authorized by their Unix user, and the system-bus policy file loads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{claude_env, introspection, queue_env};

use queue_env::*;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_introspection_matches_checked_in_xml() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let conn = bus.connect().await;
        let proxy = zbus::fdo::IntrospectableProxy::builder(&conn)
            .destination(agentstore::bus::queue_bus_name(&env.queue))
            .path(agentstore::bus::queue_object_path(&env.queue))
            .build()
            .await
            .unwrap();
        let live = proxy.introspect().await.unwrap();
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("dbus/org.agentstore.Queue1.xml");
        let checked_in = std::fs::read_to_string(&file).unwrap();
        let d = introspection::compare(&checked_in, &live, "org.agentstore.Queue1").unwrap();
        assert!(
            d.is_empty(),
            "dbus/org.agentstore.Queue1.xml does not match the live object:\n{}\n\
             regenerate the interface element with `busctl introspect --xml-interface \
             org.agentstore.Queue.<q> /org/agentstore/Queue/<q>`",
            d.join("\n")
        );
        m.stop().await;
    })
    .await
}

/// `busctl call` as `user` on the private bus; returns (success, stderr).
fn busctl_as(bus: &PrivateBus, uid: u32, gid: u32, queue: &str, args: &[&str]) -> (bool, String) {
    let mut c = std::process::Command::new("busctl");
    c.arg(format!("--address={}", bus.address))
        .arg("call")
        .arg(agentstore::bus::queue_bus_name(queue))
        .arg(agentstore::bus::queue_object_path(queue))
        .arg("org.agentstore.Queue1")
        .args(args)
        .uid(uid)
        .gid(gid);
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Calls are authorized by the caller's Unix user: unknown users are refused, a mapped
/// `user` may not pause, a mapped admin may. (Needs root to call as another uid; as a
/// normal user the caller is the daemon's own account, which is trusted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_authorized_by_unix_user() {
    guarded(async {
        let Some(u) = claude_env::unprivileged_user() else {
            return skip(
                "calls as another Unix user",
                "needs root to call as another uid (only the trusted-caller path would run)",
            );
        };
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        // chenry maps to the test user; make that mapping a plain user first.
        let store = env.store();
        std::fs::write(
            store.user_path("chenry"),
            json!({"id": "chenry", "name": "C", "email": "c@x", "permissions": "admin",
                   "unix_user": "someone-else"})
            .to_string(),
        )
        .unwrap();
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let (ok, err) = busctl_as(&bus, u.uid, u.gid, &env.queue, &["Pause"]);
        assert!(!ok);
        assert!(err.contains("has no document in users/"), "{err}");

        std::fs::write(
            store.user_path("alice"),
            json!({"id": "alice", "name": "A", "email": "a@x", "permissions": "user",
                   "unix_user": u.name})
            .to_string(),
        )
        .unwrap();
        let (ok, err) = busctl_as(&bus, u.uid, u.gid, &env.queue, &["Pause"]);
        assert!(!ok);
        assert!(
            err.contains("Permission denied: only admins can pause"),
            "every PermissionDenied text carries the one prefix: {err}"
        );
        // alice cannot cancel a job of chenry's project...
        let (ok, _) = busctl_as(&bus, 0, 0, &env.queue, &["Pause"]);
        assert!(ok, "root is trusted");
        env.queue_job("theirs", &noop(0.0));
        let (ok, err) = busctl_as(
            &bus,
            u.uid,
            u.gid,
            &env.queue,
            &["CancelJob", "s", "theirs"],
        );
        assert!(!ok);
        // As for a job that is not there: she may not even see it (issue 27).
        assert!(err.contains("job theirs is not queued or running"), "{err}");
        // ...but can cancel one she asked for.
        let mut mine = noop(0.0);
        mine["config"]["user"] = json!("alice");
        env.queue_job("mine", &mine);
        let (ok, err) = busctl_as(&bus, u.uid, u.gid, &env.queue, &["CancelJob", "s", "mine"]);
        assert!(ok, "{err}");
        assert_eq!(
            env.job("failed", "mine")["runtime"]["error"],
            "Job cancelled by alice"
        );

        std::fs::write(
            store.user_path("alice"),
            json!({"id": "alice", "name": "A", "email": "a@x", "permissions": "admin",
                   "unix_user": u.name})
            .to_string(),
        )
        .unwrap();
        let (ok, err) = busctl_as(&bus, u.uid, u.gid, &env.queue, &["Resume"]);
        assert!(ok, "{err}");
        m.stop().await;
    })
    .await
}

/// The system-bus policy file is accepted by dbus-daemon.
#[test]
fn bus_policy_file_loads() {
    let dir = tempfile::tempdir().unwrap();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("dbus/org.agentstore.Queue.conf");
    let conf = dir.path().join("bus.conf");
    std::fs::write(
        &conf,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:tmpdir=/tmp</listen><auth>EXTERNAL</auth>
<include>{}</include></busconfig>"#,
            policy.display()
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new("dbus-daemon")
        .arg(format!("--config-file={}", conf.display()))
        .args(["--nofork", "--print-address=1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        line.starts_with("unix:"),
        "dbus-daemon rejected the policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The signals of one (running) queue manager, in the order they left it: `JobStateChanged` as
/// `id:old>new`, `PropertiesChanged` of `ActiveJobs` as `ActiveJobs=n`.
async fn ordered_signals(
    bus: &PrivateBus,
    queue: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use futures_util::StreamExt;
    let conn = bus.connect().await;
    let path = agentstore::bus::queue_object_path(queue);
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .path(path)
        .build()
        .unwrap();
    let mut stream = zbus::MessageStream::for_match_rule(rule, &conn, None)
        .await
        .unwrap();
    // JobStateChanged comes only to a connection that asked (issue 27); asked of the running
    // manager before anything is queued, so nothing is replayed out of order.
    agentstore::bus::queue::queue_proxy(&conn, queue)
        .await
        .unwrap()
        .watch_jobs(false)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _conn = &conn;
        while let Some(Ok(m)) = stream.next().await {
            let h = m.header();
            let event = match h.member().map(|m| m.as_str()) {
                Some("JobStateChanged") => {
                    let (id, old, new): (String, String, String) = m.body().deserialize().unwrap();
                    format!("{id}:{old}>{new}")
                }
                Some("PropertiesChanged") => {
                    let (_, changed, _): (
                        String,
                        std::collections::HashMap<String, zbus::OwnedVariant>,
                        Vec<String>,
                    ) = m.body().deserialize().unwrap();
                    match changed.get("ActiveJobs") {
                        Some(v) => format!("ActiveJobs={}", u32::try_from(v).unwrap()),
                        None => continue,
                    }
                }
                _ => continue,
            };
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    rx
}

/// A client that follows a queue by its signals (and a proxy that caches properties from
/// PropertiesChanged) sees the counts of a step before the job moves that step announces:
/// `ActiveJobs=1` before `a:queued>running`, `ActiveJobs=0` before `a:running>finished`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn property_changes_arrive_before_the_job_moves_they_count() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut rx = ordered_signals(&bus, &env.queue).await;
        env.queue_job("a", &noop(0.2));
        let mut seen = Vec::new();
        while !seen.iter().any(|s| s == "a:running>finished") {
            seen.push(rx.recv().await.unwrap());
        }
        let at = |s: &str| seen.iter().position(|x| x == s);
        let (up, start, down, end) = (
            at("ActiveJobs=1"),
            at("a:queued>running"),
            at("ActiveJobs=0"),
            at("a:running>finished"),
        );
        assert!(up.is_some() && start.is_some() && up < start, "{seen:?}");
        assert!(down.is_some() && end.is_some() && down < end, "{seen:?}");
        m.stop().await;
    })
    .await
}
