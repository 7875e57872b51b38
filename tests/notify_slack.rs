//! The Slack app over Socket Mode (issue 31): a REAL queue manager publishes approval
//! requests of two running jobs, the REAL notifier posts them to the fake Slack with Allow /
//! Always / Deny buttons and holds a Socket Mode WebSocket to it; clicks and `/agentstore`
//! commands arrive as envelopes and are answered through `Queue1.AnswerFor` for the mapped
//! user (the manager applies PRD §10), the message updated with who answered. Refused with a
//! reply to the clicker, never an answer: an unmapped member, a mapped user who may not
//! answer, a button forged to name another job's request, a replayed envelope, a second
//! click on an answered request; and after a `disconnect` the app comes back on a new URL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::TestEnv;
use crate::common::bus::{KillOnDrop, PrivateBus, skip, wait_for_name, wait_until};
use crate::fake_chat::FakeChat;
use crate::fake_slack_socket::{block_action, slash};
use agentstore::notify::sinks::slack::{ACTION_ALLOW, ACTION_DENY};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

const BOT: &str = "xoxb-bot-5e1f-secret";
const APP: &str = "xapp-1-A0FAKE-app-9c2d-secret";
const LIMIT: Duration = Duration::from_secs(120);

/// A stand-in worker the manager re-adopts (it knows its job by the id on its command line),
/// in its own process group, killed whole on drop.
struct FakeWorker(std::process::Child);

impl Drop for FakeWorker {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn fake_worker(id: &str) -> FakeWorker {
    use std::os::unix::process::CommandExt;
    FakeWorker(
        Command::new("sh")
            .args(["-c", "sleep 600; :", id])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn user(env: &TestEnv, id: &str, member: &str) {
    let store = agentstore::store::Store::open(&env.root).unwrap();
    std::fs::write(
        store.user_path(id),
        json!({"id": id, "name": id, "email": format!("{id}@example.org"),
               "permissions": "user", "slack_username": member,
               "notify": {"sinks": ["slack"]}})
        .to_string(),
    )
    .unwrap();
}

/// The message posted for request `req`: (channel, ts, its blocks).
fn message_for(chat: &FakeChat, req: &str) -> (String, String, Value) {
    wait_until(LIMIT, &format!("the Slack message of {req}"), || {
        chat.with(|s| {
            s.slack
                .iter()
                .any(|m| m.metadata["event_payload"]["request"] == req)
        })
    });
    chat.with(|s| {
        let m = s
            .slack
            .iter()
            .find(|m| m.metadata["event_payload"]["request"] == req)
            .unwrap();
        (m.channel.clone(), m.ts.clone(), m.blocks.clone())
    })
}

#[test]
fn approvals_and_commands_over_socket_mode_answer_only_for_the_mapped_allowed_user() {
    for tool in ["dbus-daemon", "busctl"] {
        if !crate::common::bus::have(tool) {
            skip("Slack Socket Mode", &format!("{tool} is not installed"));
            return;
        }
    }
    let env = TestEnv::initialised();
    user(&env, "alice", "UALICE");
    user(&env, "bob", "UBOB");
    for (p, owner) in [("Mine", "alice"), ("Theirs", "bob")] {
        env.ok(&["add-project", p, "--directory", "/tmp", "--owner", owner]);
    }
    let q = std::fs::read_dir(env.root.join("Queues"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .next()
        .unwrap();
    // A paused queue: its manager adopts the running jobs and publishes their requests.
    let qp = env.root.join(format!("Queues/{q}/queue.json"));
    let mut qdoc: Value = serde_json::from_str(&std::fs::read_to_string(&qp).unwrap()).unwrap();
    qdoc["runtime"]["paused"] = json!(true);
    std::fs::write(&qp, qdoc.to_string()).unwrap();
    let mut workers = Vec::new();
    for (id, project, owner) in [("run-a", "Mine", "alice"), ("run-b", "Theirs", "bob")] {
        let w = fake_worker(id);
        let mut job: Value =
            serde_json::from_str(&crate::common::noop_job("2026-01-01T00:01:00Z")).unwrap();
        job["config"]["project"] = json!(project);
        job["config"]["user"] = json!(owner);
        job["config"]["timeout_seconds"] = json!(3600);
        job["runtime"]["status"] = json!("running");
        job["runtime"]["start_time"] = json!(agentstore::model::Timestamp::now().to_string());
        job["runtime"]["process_id"] = json!(w.0.id());
        env.write(
            &format!("Queues/{q}/Jobs/running_jobs/{id}.json"),
            &job.to_string(),
        );
        workers.push(w);
    }

    let chat = FakeChat::start(BOT, "unused");
    chat.enable_socket_mode(APP);
    let xdg = env.dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("agentstore")).unwrap();
    std::fs::write(
        xdg.join("agentstore/config.yaml"),
        format!(
            "notify:\n  poll_interval_ms: 200\n  retry: {{first_backoff_ms: 50, max_backoff_ms: 500}}\n  slack:\n    api_url: {}/api\n    bot_token: {BOT}\n    app_token: {APP}\n",
            chat.base
        ),
    )
    .unwrap();
    let bus = PrivateBus::start();
    let _manager = crate::daemons::queue_manager(&env.root, &q)
        .on(&bus)
        .idle_exit(None)
        .env("HOME", &env.home)
        .spawn();
    wait_for_name(&bus, &agentstore::bus::queue_bus_name(&q));
    let log = env.dir.path().join("notifier.log");
    let _notifier = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_agentstore-notify"))
            .arg("--root")
            .arg(&env.root)
            .env("XDG_CONFIG_HOME", &xdg)
            .env("HOME", &env.home)
            .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .env("RUST_LOG", "info")
            .env_remove("AGENTSTORE_MODE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let store = agentstore::store::Store::open(&env.root).unwrap();
    for (job, req) in [
        ("run-a", "run-a-r1"),
        ("run-a", "run-a-r2"),
        ("run-b", "run-b-r1"),
    ] {
        let now = agentstore::model::Timestamp::now();
        store
            .write_approval_request(
                &q,
                &agentstore::model::approval::ApprovalRequest {
                    request_id: req.into(),
                    job_id: job.into(),
                    tool: "Write".into(),
                    summary: format!("Write /tmp/{req}.txt"),
                    input: json!({"file_path": format!("/tmp/{req}.txt"), "content": "x"}),
                    requested_at: now,
                    deadline: serde_json::from_value(json!("2099-01-01T00:00:00Z")).unwrap(),
                },
            )
            .unwrap();
    }
    let (ch, ts, blocks) = message_for(&chat, "run-a-r1");
    assert_eq!(ch, "DALICE", "alice's request goes to alice");
    let buttons: Vec<&str> = blocks[1]["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["action_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        buttons,
        ["agentstore_allow", "agentstore_always", "agentstore_deny"]
    );
    assert_eq!(blocks[1]["elements"][0]["value"], format!("{q}/run-a-r1"));
    let (bch, bts, _) = message_for(&chat, "run-b-r1");
    assert_eq!(bch, "DBOB");
    chat.wait_connections(1);
    let value = format!("{q}/run-a-r1");
    let not_answered = |req: &str| store.approval_answer(&q, req).is_none();
    let mut replies = 0;
    let mut refused = |env_id: &str, member: &str, value: &str, want: &str| {
        chat.socket_send(&block_action(env_id, member, &ch, &ts, ACTION_ALLOW, value));
        assert_eq!(chat.wait_ack(env_id)["envelope_id"], env_id);
        replies += 1;
        let r = chat.wait_ephemeral(replies);
        assert_eq!(r["user"], member, "{r}");
        assert_eq!(r["thread_ts"], ts.as_str(), "{r}");
        let text = r["text"].as_str().unwrap();
        assert!(text.contains(want), "reply {text:?} should say {want:?}");
        assert!(not_answered("run-a-r1"), "a refused click answered: {text}");
    };
    // A Slack member no user document names.
    refused(
        "e-unmapped",
        "UEVE",
        &value,
        "not linked to an agentstore user",
    );
    // bob is mapped, but PRD §10 does not let him answer alice's job (the manager says so).
    refused("e-bob", "UBOB", &value, "Refused for bob");
    // alice's click on her message, with a value forged to name bob's job's request.
    refused(
        "e-forged",
        "UALICE",
        &format!("{q}/run-b-r1"),
        "nothing was answered",
    );
    assert!(not_answered("run-b-r1"));

    // alice allows: answered through the manager as alice, the message says who.
    chat.socket_send(&block_action(
        "e-alice",
        "UALICE",
        &ch,
        &ts,
        ACTION_ALLOW,
        &value,
    ));
    wait_until(LIMIT, "alice's answer", || !not_answered("run-a-r1"));
    let a = store.approval_answer(&q, "run-a-r1").unwrap();
    assert!(a.allow && !a.always);
    assert_eq!(a.by, "alice");
    wait_until(LIMIT, "the message updated", || {
        chat.with(|s| s.slack.iter().any(|m| m.ts == ts && !m.updates.is_empty()))
    });
    chat.with(|s| {
        let m = s.slack.iter().find(|m| m.ts == ts).unwrap();
        assert_eq!(m.updates.len(), 1);
        assert!(
            m.text.contains("Allowed by alice (<@UALICE>)"),
            "{}",
            m.text
        );
        assert!(
            m.blocks.to_string().find("agentstore_allow").is_none(),
            "buttons gone: {}",
            m.blocks
        );
    });
    // The same envelope again (Slack repeats one it thinks unacknowledged): acked, refused.
    chat.socket_send(&block_action(
        "e-alice",
        "UALICE",
        &ch,
        &ts,
        ACTION_DENY,
        &value,
    ));
    wait_until(LIMIT, "the repeated envelope acked", || {
        chat.acks_of("e-alice") == 2
    });
    replies += 1;
    let r = chat.wait_ephemeral(replies);
    assert!(
        r["text"].as_str().unwrap().contains("already handled"),
        "{r}"
    );
    // A new click on the answered request.
    chat.socket_send(&block_action(
        "e-again",
        "UALICE",
        &ch,
        &ts,
        ACTION_DENY,
        &value,
    ));
    replies += 1;
    let r = chat.wait_ephemeral(replies);
    assert!(
        r["text"].as_str().unwrap().contains("already answered"),
        "{r}"
    );
    let a = store.approval_answer(&q, "run-a-r1").unwrap();
    assert!(a.allow, "the first answer stands");
    // bob's own request is his to answer, from his own message.
    chat.socket_send(&block_action(
        "e-bob-own",
        "UBOB",
        &bch,
        &bts,
        ACTION_DENY,
        &format!("{q}/run-b-r1"),
    ));
    wait_until(LIMIT, "bob's answer", || !not_answered("run-b-r1"));
    let a = store.approval_answer(&q, "run-b-r1").unwrap();
    assert!(!a.allow);
    assert_eq!(a.by, "bob");

    // Slack asks for a new connection: the app opens a new URL and goes on.
    chat.socket_disconnect("refresh_requested");
    chat.wait_connections(2);
    assert!(chat.with(|s| s.socket.opens) >= 2);

    // Slash commands, answered in the envelope's ack.
    let command = |id: &str, member: &str, text: &str| -> String {
        chat.socket_send(&slash(id, member, "DALICE", text));
        let ack = chat.wait_ack(id);
        ack["payload"]["text"].as_str().unwrap_or("").to_string()
    };
    let status = command("s-status", "UALICE", "status");
    assert!(status.contains("run-a-r2"), "{status}");
    assert!(
        !status.contains("run-a-r1") && !status.contains("run-b-r1"),
        "{status}"
    );
    let bob_status = command("s-bob", "UBOB", "status");
    assert!(bob_status.contains("no approval waits"), "{bob_status}");
    let t = command("s-bob-deny", "UBOB", &format!("deny {q} run-a-r2 no"));
    assert!(t.contains("Refused for bob"), "{t}");
    assert!(not_answered("run-a-r2"));
    let t = command("s-eve", "UEVE", &format!("approve {q} run-a-r2"));
    assert!(t.contains("not linked"), "{t}");
    let t = command("s-unknown", "UALICE", "frobnicate everything");
    assert!(t.contains("Unknown command \"frobnicate\""), "{t}");
    let t = command("s-bad", "UALICE", &format!("approve {q} ../../etc"));
    assert!(t.contains("must be ids"), "{t}");
    let t = command(
        "s-deny",
        "UALICE",
        &format!("deny {q} run-a-r2 too risky today"),
    );
    assert!(t.contains("Denied request run-a-r2"), "{t}");
    let a = store.approval_answer(&q, "run-a-r2").unwrap();
    assert!(!a.allow);
    assert_eq!(a.by, "alice");
    assert_eq!(a.message, "too risky today");
    // Repeated: refused, the answer stands.
    chat.socket_send(&slash("s-deny", "UALICE", "DALICE", "approve"));
    wait_until(LIMIT, "the repeated command acked", || {
        chat.acks_of("s-deny") == 2
    });
    let t = chat.with(|s| {
        s.socket
            .acks
            .iter()
            .rev()
            .find(|a| a["envelope_id"] == "s-deny")
            .unwrap()["payload"]["text"]
            .as_str()
            .unwrap()
            .to_string()
    });
    assert!(t.contains("already handled"), "{t}");
    // Every envelope was acknowledged, and no token reached the log.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        !logged.contains(BOT) && !logged.contains(APP),
        "a token in the log"
    );
    assert!(logged.contains("slack socket mode: connected"), "{logged}");
    drop(workers);
}
