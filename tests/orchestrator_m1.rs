//! PRD §12 M1: orchestratord processes inbox messages (daemon on a private bus, CLI as a
//! separate process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::TestEnv;
use common::bus::{
    Announcements, KillOnDrop, PrivateBus, spawn_orchestratord, wait_for_name, wait_until,
};
use serde_json::Value;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn m1_message(id: &str, command: &str) -> String {
    format!(
        r#"{{
  "correlation_id": "{id}",
  "source": "user",
  "project": "ModelSEEDpy",
  "queue_time": "2025-10-25T10:00:00Z",
  "processed_time": null,
  "command": "{command}",
  "content": {{}},
  "status": "queued",
  "error": null
}}"#
    )
}

fn read(p: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn m1_orchestrator_processes_messages() {
    let env = TestEnv::initialised();
    env.ok(&[
        "add-project",
        "ModelSEEDpy",
        "--directory",
        "/tmp/msp",
        "--owner",
        "chenry",
    ]);
    let bus = PrivateBus::start();
    // Test 1: start; the lock file exists.
    let mut daemon = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    // The name is taken first, then the store lock (a moment later).
    let lock = env.root.join(".orchestrator.lock");
    wait_until(Duration::from_secs(10), "the store lock", || lock.exists());
    let info = read(&lock);
    assert_eq!(info["pid"], daemon.id());

    // Test 2: a second orchestrator fails with "already running".
    let second = crate::daemons::orchestratord(&env.root)
        .on(&bus)
        .idle_exit(None)
        .stderr(std::process::Stdio::piped())
        .command()
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "already running exits 2");
    assert!(String::from_utf8_lossy(&second.stderr).contains("already running"));

    // Tests 3–5: a message file is answered into the outbox and moved to processed_inbox;
    // MessageProcessed announces it once both are done.
    let mut signals = Announcements::subscribe(&bus);
    env.write(
        "messaging/inbox/test-001.json",
        &m1_message("test-001", "list-projects"),
    );
    let out = env.root.join("messaging/outbox/test-001.json");
    signals.processed("test-001", LONG);
    let resp = read(&out);
    assert_eq!(resp["command"], "list-projects", "{resp}");
    assert_eq!(resp["status"], "done", "{resp}");
    assert_eq!(resp["source"], "orchestrator");
    assert_eq!(resp["content"]["result"][0]["id"], "ModelSEEDpy");
    assert!(resp["processed_time"].as_str().unwrap().ends_with('Z'));
    assert!(
        env.root
            .join("messaging/processed_inbox/test-001.json")
            .exists()
    );
    assert!(!env.root.join("messaging/inbox/test-001.json").exists());

    // Test 6: an unknown command gets an error answer.
    env.write(
        "messaging/inbox/test-002.json",
        &m1_message("test-002", "invalid-command"),
    );
    let out2 = env.root.join("messaging/outbox/test-002.json");
    signals.processed("test-002", LONG);
    let resp = read(&out2);
    assert_eq!(resp["status"], "error");
    assert_eq!(resp["error"], "Unknown command: invalid-command");

    // Test 7: stop; the lock file is removed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(daemon.wait().unwrap().success());
    assert!(!lock.exists());

    // The event log recorded what happened.
    let events = std::fs::read_dir(env.root.join("logs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with("events-"));
    let text = std::fs::read_to_string(events.unwrap().path()).unwrap();
    assert!(
        text.contains(&format!("\"host\":\"{}\"", agentstore::store::hostname())),
        "the event file is this machine's: {text}"
    );
    for kind in ["daemon_started", "message_answered", "daemon_stopped"] {
        assert!(text.contains(kind), "{kind} missing from events:\n{text}");
    }
}

#[test]
fn idle_daemon_exits_and_a_later_one_answers_what_arrived_meanwhile() {
    let env = TestEnv::initialised();
    let bus = PrivateBus::start();
    let mut daemon = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "1"]);
    assert!(
        daemon.wait().unwrap().success(),
        "idle exit is a clean exit"
    );
    assert!(!env.root.join(".orchestrator.lock").exists());
    env.write("messaging/inbox/late.json", &m1_message("late", "help"));
    let mut again = spawn_orchestratord(&bus, &env.root, &["--idle-exit", "1"]);
    let out = env.root.join("messaging/outbox/late.json");
    wait_until(LONG, "the late message answered", || out.exists());
    assert_eq!(read(&out)["status"], "done");
    assert!(again.wait().unwrap().success());
}

#[test]
fn half_written_file_is_not_answered_as_empty() {
    let env = TestEnv::initialised();
    let bus = PrivateBus::start();
    let _daemon = KillOnDrop(spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]));
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let mut signals = Announcements::subscribe(&bus);
    // Open, write half, pause, write the rest: like `cat > inbox/x.json` typed slowly.
    use std::io::Write;
    let path = env.root.join("messaging/inbox/slow.json");
    let text = m1_message("slow", "help");
    let out = env.root.join("messaging/outbox/slow.json");
    let processed = env.root.join("messaging/processed_inbox/slow.json");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&text.as_bytes()[..20]).unwrap();
    f.flush().unwrap();
    // While the file is half written, make the daemon process the inbox now (Sweep returns
    // when it has): a daemon that does not defer open files answers the half as invalid
    // JSON here.
    let sweep = std::process::Command::new("busctl")
        .args(["--address", &bus.address, "call"])
        .args([
            "org.agentstore.Orchestrator1",
            "/org/agentstore/Orchestrator1",
        ])
        .args(["org.agentstore.Orchestrator1", "Sweep"])
        .output()
        .unwrap();
    assert!(
        sweep.status.success(),
        "Sweep: {}",
        String::from_utf8_lossy(&sweep.stderr)
    );
    // (Not `path.exists()`: the daemon's own deferred retry may hold the file under its
    // claim name for a moment, then gives it back.)
    assert!(
        !out.exists() && !processed.exists(),
        "a half-written file was taken: {}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    f.write_all(&text.as_bytes()[20..]).unwrap();
    drop(f);
    signals.processed("slow", LONG);
    assert!(processed.exists() && !path.exists());
    assert_eq!(read(&out)["status"], "done", "{}", read(&out));
    assert_eq!(read(&out)["command"], "help", "{}", read(&out));
}

/// A message that the D-Bus method `Sweep` answers from the inbox is announced like one the
/// loop answers: `MessageProcessed` with its correlation id. (inotify off and an hour-long
/// sweep interval, so only the `Sweep` call can answer it.)
#[test]
fn sweep_announces_what_it_answered() {
    let env = TestEnv::initialised();
    let bus = PrivateBus::start();
    let _daemon = KillOnDrop(spawn_orchestratord(
        &bus,
        &env.root,
        &[
            "--idle-exit",
            "0",
            "--no-inotify",
            "--sweep-interval",
            "3600",
        ],
    ));
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures_util::StreamExt;
        let conn = bus.connect().await;
        let proxy = agentstore::bus::orchestrator::Orchestrator1Proxy::new(&conn)
            .await
            .unwrap();
        let mut processed = proxy.receive_message_processed().await.unwrap();
        // The daemon's own first pass (once it has looked at the store lock) is over before
        // the message is written: a Sweep is answered after it.
        assert_eq!(proxy.sweep().await.unwrap(), 0, "nothing to sweep yet");
        // The daemon's own loop also wakes now and then (heartbeats); when a wake falls
        // between the write and the call, the loop answers the message and announces it,
        // and Sweep (which waits for that pass) finds nothing. Every message is answered
        // and announced once either way; the attempt is repeated until Sweep is the one
        // that answered, which is the case under test.
        let inbox = env.root.join("messaging/inbox");
        let mut swept_by_call = false;
        for attempt in 0..10 {
            let id = format!("swept-{attempt}");
            let tmp = inbox.join(format!(".{id}.json.tmp"));
            std::fs::write(&tmp, m1_message(&id, "list-projects")).unwrap();
            std::fs::rename(&tmp, inbox.join(format!("{id}.json"))).unwrap();
            let n = proxy.sweep().await.unwrap();
            assert!(n <= 1, "Sweep answered {n} messages, only one was there");
            assert!(
                env.root
                    .join(format!("messaging/outbox/{id}.json"))
                    .exists(),
                "Sweep returned before the message written ahead of it was answered"
            );
            let signal = tokio::time::timeout(LONG, processed.next())
                .await
                .expect("no MessageProcessed signal for the answered message")
                .unwrap();
            let args = signal.args().unwrap();
            assert_eq!(args.correlation_id(), &id.as_str());
            if n == 1 {
                swept_by_call = true;
                break;
            }
        }
        assert!(
            swept_by_call,
            "the loop answered before Sweep ten times in a row"
        );
    });
}
