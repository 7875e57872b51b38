//! Notifications (issue 31): the notifier `agentstore-notify` delivering the store's notices
//! to Slack (fake Web API), signed webhooks, Telegram (fake Bot API) and the desktop (a real
//! `org.freedesktop.Notifications` server on a private bus), exactly once per sink across
//! kill -9, in order after an outage, with clear records of what could not be delivered; and
//! the CLI (`set-user --notify`, `notify test`, `notifications`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::fake_chat::FakeChat;
use crate::fake_notifications::Notifications;
use crate::harness::KillOnDrop;
use crate::harness::PrivateBus;
use crate::wait::wait_until;
use agentstore::notify::dispatch::Dispatcher;
use agentstore::notify::sinks::desktop::Desktop;
use agentstore::store::Store;
use agentstore::store::notices::{Notice, NoticeKind};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "xoxb-test-7f3a9c-secret";
const SECRET: &str = "hook-secret-42";
/// A hang guard, far above what a loaded machine needs; never a timing assertion.
const LIMIT: Duration = Duration::from_secs(120);

struct Env {
    dir: tempfile::TempDir,
    root: PathBuf,
    chat: FakeChat,
}

impl Env {
    /// A store with users alice (slack + webhook:ci) and bob (webhook:ci, failures only),
    /// and a machine config naming the fake's endpoints; `retry` is the notify.retry section.
    fn new(retry: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("AgentStore");
        let (store, _) = Store::init(&root).unwrap();
        let chat = FakeChat::start(TOKEN, SECRET);
        for (id, sinks, events) in [
            ("alice", json!(["slack", "webhook:ci"]), Value::Null),
            ("bob", json!(["webhook:ci"]), json!(["job_failed"])),
        ] {
            let mut notify = json!({ "sinks": sinks });
            if !events.is_null() {
                notify["events"] = events;
            }
            std::fs::write(
                store.user_path(id),
                json!({"id": id, "name": id, "email": format!("{id}@example.org"),
                       "permissions": if id == "alice" { "admin" } else { "user" },
                       "slack_username": format!("U{}", id.to_uppercase()),
                       "notify": notify})
                .to_string(),
            )
            .unwrap();
        }
        let env = Env { dir, root, chat };
        env.machine_config(retry);
        env
    }

    fn xdg(&self) -> PathBuf {
        self.dir.path().join("xdg")
    }

    fn machine_config(&self, retry: &str) {
        let d = self.xdg().join("agentstore");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.yaml"), self.config_yaml(retry)).unwrap();
    }

    fn config_yaml(&self, retry: &str) -> String {
        format!(
            "notify:\n  poll_interval_ms: 200\n  retry: {retry}\n  slack:\n    api_url: {b}/api\n    bot_token: {TOKEN}\n  telegram:\n    api_url: {b}/tg\n    bot_token: \"123456:ABC-def\"\n  webhooks:\n    ci:\n      url: {b}/hook\n      secret: {SECRET}\n",
            b = self.chat.base
        )
    }

    fn config(&self, retry: &str) -> agentstore::store::notify_config::NotifyConfig {
        agentstore::store::Config::parse(&self.config_yaml(retry), "test")
            .unwrap()
            .notify
    }

    fn store(&self) -> Store {
        Store::open(&self.root).unwrap()
    }

    fn notifier(&self, stderr: &Path) -> KillOnDrop {
        KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_agentstore-notify"))
                .arg("--root")
                .arg(&self.root)
                .env("XDG_CONFIG_HOME", self.xdg())
                .env("HOME", self.dir.path())
                .env("RUST_LOG", "info")
                .env_remove("AGENTSTORE_MODE")
                .stdout(Stdio::null())
                .stderr(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(stderr)
                        .unwrap(),
                )
                .spawn()
                .unwrap(),
        )
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(args)
            .arg("--root")
            .arg(&self.root)
            .args(["--bus", "none"])
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.xdg())
            .env_remove("AGENTSTORE_MODE")
            .output()
            .unwrap()
    }

    fn pending(&self) -> usize {
        std::fs::read_dir(self.root.join("notifications/pending"))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

/// Emits notice `i` (job_failed of job-NNN) for `user`.
fn emit(store: &Store, i: usize, user: &str) -> Notice {
    let id = format!("job-{i:03}");
    let mut n = Notice::new(
        NoticeKind::JobFailed,
        &format!("q1/{id}"),
        Some(user),
        &format!("Job {id} failed"),
    )
    .job("q1", &id)
    .body("it broke");
    n.error = Some(format!("exit 1 ({i})"));
    n.cost_usd = Some(0.25);
    assert!(store.emit_notice(&n).unwrap());
    n
}

/// The job ids in the titles of `texts`, in order.
fn job_order(texts: impl Iterator<Item = String>) -> Vec<String> {
    texts
        .filter_map(|t| t.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

#[test]
fn a_burst_of_200_with_kill_9_is_delivered_once_per_sink_in_order() {
    let env = Env::new("{first_backoff_ms: 20, max_backoff_ms: 200}");
    let log = env.dir.path().join("notifier.log");
    let mut notifier = env.notifier(&log);
    let store = env.store();
    let emitter = std::thread::spawn(move || {
        (0..200)
            .map(|i| emit(&store, i, "alice").id)
            .collect::<Vec<_>>()
    });
    let mut kills = 0;
    for at in [30, 90, 150] {
        wait_until(LIMIT, &format!("{at} Slack messages"), || {
            env.chat.with(|s| s.slack.len()) >= at
        });
        notifier.signal(nix::sys::signal::Signal::SIGKILL);
        drop(notifier);
        kills += 1;
        notifier = env.notifier(&log);
    }
    let ids = emitter.join().unwrap();
    assert_eq!(ids.len(), 200);
    wait_until(
        LIMIT,
        "200 messages at each sink and nothing pending",
        || {
            env.chat.with(|s| s.slack.len()) >= 200
                && env.chat.hook_deliveries() >= 200
                && env.pending() == 0
        },
    );
    drop(notifier);
    let expected: Vec<String> = (0..200).map(|i| format!("job-{i:03}")).collect();
    env.chat.with(|s| {
        // Slack: exactly once each (an attempt cut by the kill is looked up, not repeated).
        assert_eq!(s.slack.len(), 200, "Slack messages");
        assert_eq!(job_order(s.slack.iter().map(|m| m.text.clone())), expected);
        assert!(s.slack.iter().all(|m| m.channel == "DALICE"));
        assert_eq!(s.bad_signatures, 0);
        // Webhook: each delivery id once, in order; a repeat only of an attempt a kill cut
        // short (same id: receivers deduplicate on it), at most one per kill.
        let mut seen = std::collections::HashSet::new();
        let firsts: Vec<String> = s
            .hooks
            .iter()
            .filter(|h| seen.insert(h.delivery.clone()))
            .map(|h| h.body["notice"]["title"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(job_order(firsts.into_iter()), expected);
        assert!(
            s.hooks.len() - 200 <= kills,
            "{} webhook requests for 200 deliveries and {kills} kills",
            s.hooks.len()
        );
    });
    let delivered = std::fs::read_dir(env.root.join("notifications/delivered"))
        .unwrap()
        .count();
    assert_eq!(delivered, 200);
    // The ledger tells the same: 400 deliveries sent, none failed.
    let out = env.cli(&["notifications", "--limit", "1000", "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["notifications"].as_array().unwrap();
    assert_eq!(rows.len(), 400);
    assert!(rows.iter().all(|r| r["state"] == "sent"), "{rows:?}");
}

/// One machine sends: of two notifiers on one store, one takes the store's notifier lock and
/// delivers, the other stands by; when the sender is killed (-9), the other takes over and
/// delivers the rest. Every notice reaches Slack exactly once.
#[test]
fn of_two_notifiers_one_sends_and_the_other_takes_over_after_a_kill_9() {
    let env = Env::new("{first_backoff_ms: 20, max_backoff_ms: 200}");
    let (log_a, log_b) = (
        env.dir.path().join("notifier-a.log"),
        env.dir.path().join("notifier-b.log"),
    );
    let said = |log: &Path, what: &str| {
        std::fs::read_to_string(log)
            .map(|t| t.contains(what))
            .unwrap_or(false)
    };
    let a = env.notifier(&log_a);
    wait_until(LIMIT, "the first notifier holding the lock", || {
        env.root.join(".notify.lock").exists()
    });
    let b = env.notifier(&log_b);
    wait_until(LIMIT, "the second notifier standing by", || {
        said(&log_b, "notifier standing by")
    });
    let store = env.store();
    for i in 0..40 {
        emit(&store, i, "alice");
    }
    wait_until(LIMIT, "40 Slack messages", || {
        env.chat.with(|s| s.slack.len()) >= 40 && env.pending() == 0
    });
    assert!(
        said(&log_b, "notifier standing by"),
        "the second notifier still stands by"
    );
    a.signal(nix::sys::signal::Signal::SIGKILL);
    drop(a);
    for i in 40..80 {
        emit(&store, i, "alice");
    }
    wait_until(LIMIT, "80 Slack messages and nothing pending", || {
        env.chat.with(|s| s.slack.len()) >= 80 && env.pending() == 0
    });
    drop(b);
    let expected: Vec<String> = (0..80).map(|i| format!("job-{i:03}")).collect();
    env.chat.with(|s| {
        assert_eq!(s.slack.len(), 80, "each notice once at Slack");
        assert_eq!(job_order(s.slack.iter().map(|m| m.text.clone())), expected);
    });
}

#[test]
fn a_sink_down_gets_its_backlog_in_order_when_back() {
    // give_up_after_secs stands for "five minutes down": longer than the outage.
    let env = Env::new("{first_backoff_ms: 20, max_backoff_ms: 100, give_up_after_secs: 300}");
    env.chat.with(|s| s.webhook_down = true);
    let store = env.store();
    for i in 0..30 {
        emit(&store, i, "bob");
    }
    let log = env.dir.path().join("notifier.log");
    let _n = env.notifier(&log);
    wait_until(LIMIT, "the webhook refused several attempts", || {
        env.chat.with(|s| s.hook_refused) >= 5
    });
    // Down: only the first notice is tried (the others wait behind it), nothing is lost.
    let out = env.cli(&["notifications", "--failed", "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["notifications"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["state"], "retrying");
    assert!(
        rows[0]["error"].as_str().unwrap().contains("503"),
        "{rows:?}"
    );
    assert_eq!(env.pending(), 30);
    env.chat.with(|s| s.webhook_down = false);
    wait_until(LIMIT, "the backlog", || {
        env.chat.hook_deliveries() >= 30 && env.pending() == 0
    });
    let expected: Vec<String> = (0..30).map(|i| format!("job-{i:03}")).collect();
    env.chat.with(|s| {
        assert_eq!(s.hooks.len(), 30, "each once");
        let titles = s
            .hooks
            .iter()
            .map(|h| h.body["notice"]["title"].as_str().unwrap().to_string());
        assert_eq!(job_order(titles), expected);
        assert_eq!(s.hooks[0].body["user"], "bob");
        assert_eq!(s.hooks[0].body["notice"]["cost_usd"], 0.25);
    });
}

#[test]
fn a_revoked_slack_token_is_a_clear_error_and_the_other_sinks_go_on() {
    let env = Env::new("{first_backoff_ms: 20, max_backoff_ms: 100, give_up_after_secs: 0}");
    env.chat.with(|s| s.slack_revoked = true);
    let store = env.store();
    for i in 0..5 {
        emit(&store, i, "alice");
    }
    let log = env.dir.path().join("notifier.log");
    let n = env.notifier(&log);
    wait_until(LIMIT, "the webhook deliveries and nothing pending", || {
        env.chat.hook_deliveries() >= 5 && env.pending() == 0
    });
    drop(n);
    assert_eq!(env.chat.with(|s| s.slack.len()), 0);
    let out = env.cli(&["notifications", "--failed", "--format", "json"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["notifications"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{rows:?}");
    for r in rows {
        assert_eq!(r["sink"], "slack");
        assert_eq!(r["state"], "undeliverable");
        assert!(
            r["error"].as_str().unwrap().contains("token_revoked"),
            "{r}"
        );
    }
    // The token is in no record and no log line.
    let mut seen = std::fs::read_to_string(&log).unwrap();
    for e in std::fs::read_dir(env.root.join("logs")).unwrap() {
        seen.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap_or_default());
    }
    assert!(
        seen.contains("token_revoked"),
        "the error is logged: {seen}"
    );
    assert!(!seen.contains(TOKEN), "the token leaked");
    // `notify test` says the same, with exit status 1.
    let out = env.cli(&["notify", "test", "--sink", "slack", "--user", "alice"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("token_revoked") && !err.contains(TOKEN),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_notices_fail_alone_and_an_oversized_one_is_cut_with_where_to_read_it() {
    let env = Env::new("{}");
    let store = env.store();
    let pending = env.root.join("notifications/pending");
    std::fs::create_dir_all(&pending).unwrap();
    // Hostile or broken files among the notices: garbage, an unsafe user, a mismatched id.
    std::fs::write(pending.join("junk.json"), "{ not json").unwrap();
    let mut forged = Notice::new(NoticeKind::JobFailed, "x", Some("alice"), "forged");
    forged.user = Some("../../etc".into());
    std::fs::write(
        pending.join(format!("{}.json", forged.id)),
        serde_json::to_vec(&forged).unwrap(),
    )
    .unwrap();
    let other = Notice::new(NoticeKind::JobFailed, "y", Some("alice"), "renamed");
    std::fs::write(
        pending.join("renamed.json"),
        serde_json::to_vec(&other).unwrap(),
    )
    .unwrap();
    let big = Notice::new(
        NoticeKind::JobFailed,
        "q1/job-big",
        Some("alice"),
        "Job job-big failed",
    )
    .job("q1", "job-big")
    .body(&"x".repeat(7000));
    assert!(store.emit_notice(&big).unwrap());
    assert!(
        !store.emit_notice(&big).unwrap(),
        "a second emit adds nothing"
    );
    let mut d = Dispatcher::new(env.store(), env.config("{}"));
    let r = d.pass().await;
    assert_eq!((r.sent, r.dead, r.completed), (2, 0, 1), "{r:?}");
    env.chat.with(|s| {
        assert_eq!(s.slack.len(), 1);
        let text = &s.slack[0].text;
        assert!(
            text.chars().count() <= 3000,
            "{} chars",
            text.chars().count()
        );
        assert!(text.contains("orchestrator view-job job-big"), "{text}");
        // The webhook gets the whole notice.
        assert_eq!(
            s.hooks[0].body["notice"]["body"].as_str().unwrap().len(),
            7000
        );
    });
    // The bad files are left as they were (nothing lost), never delivered.
    let left: Vec<String> = std::fs::read_dir(&pending)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    // A notice for a user with no address at a sink is recorded as undeliverable, naming why.
    std::fs::write(
        store.user_path("carol"),
        json!({"id": "carol", "name": "c", "email": "c@x", "permissions": "user",
               "notify": {"sinks": ["slack", "telegram", "webhook:nope"]}})
        .to_string(),
    )
    .unwrap();
    emit(&store, 1, "carol");
    let r = d.pass().await;
    assert_eq!((r.sent, r.dead), (0, 3), "{r:?}");
    let errors: Vec<String> = agentstore::notify::ledger::Ledger::entries(&store)
        .unwrap()
        .into_iter()
        .filter_map(|e| e.error)
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("carol has no slack_username")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("carol has no notify.telegram_chat_id")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("webhook:nope is not configured")),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_desktop_sink_reaches_a_notification_server_on_the_session_bus() {
    let env = Env::new("{}");
    let bus = PrivateBus::start();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let _server = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/Notifications",
            Notifications {
                seen: seen.clone(),
                log: None,
            },
        )
        .name("org.freedesktop.Notifications")
        .build()
        .await
        .unwrap();
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .unwrap()
        .unwrap()
        .name;
    let other = if me == "root" { "nobody" } else { "root" };
    let store = env.store();
    for (id, account) in [("dana", me.as_str()), ("eve", other)] {
        std::fs::write(
            store.user_path(id),
            json!({"id": id, "name": id, "email": "d@x", "permissions": "user",
                   "unix_user": account, "notify": {"sinks": ["desktop"]}})
            .to_string(),
        )
        .unwrap();
        emit(&store, 7, id);
    }
    let mut sinks: std::collections::BTreeMap<String, Box<dyn agentstore::notify::Sink>> =
        Default::default();
    sinks.insert("desktop".into(), Box::new(Desktop::at(&bus.address)));
    let mut d = Dispatcher::with_sinks(env.store(), env.config("{}"), sinks);
    let r = d.pass().await;
    assert_eq!((r.sent, r.dead), (1, 1), "{r:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, "agentstore");
    assert_eq!(seen[0].1, "Job job-007 failed");
    assert!(seen[0].2.contains("error: exit 1 (7)"), "{seen:?}");
    let errors: Vec<String> = agentstore::notify::ledger::Ledger::entries(&store)
        .unwrap()
        .into_iter()
        .filter_map(|e| e.error)
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("eve's account") && e.contains("per-user mode")),
        "{errors:?}"
    );
}

/// Quiet hours hold a user's deliveries (the notice waits, nothing is lost) while another
/// user's go out; once the quiet hours are over, the held one is delivered, once. A notice for
/// a user whose document cannot be read waits for it to be fixed (it used to be completed
/// unsent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_hours_hold_a_users_notices_until_they_end() {
    let env = Env::new("{}");
    let bus = PrivateBus::start();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let _server = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/Notifications",
            Notifications {
                seen: seen.clone(),
                log: None,
            },
        )
        .name("org.freedesktop.Notifications")
        .build()
        .await
        .unwrap();
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .unwrap()
        .unwrap()
        .name;
    let store = env.store();
    let now = chrono::Utc::now();
    let hm = |t: chrono::DateTime<chrono::Utc>| t.format("%H:%M").to_string();
    // dana's quiet hours are now (an hour either side, UTC); fred has none.
    let user = |id: &str, quiet: Value| {
        let mut notify = json!({"sinks": ["desktop"]});
        if !quiet.is_null() {
            notify["quiet_hours"] = quiet;
        }
        std::fs::write(
            store.user_path(id),
            json!({"id": id, "name": id, "email": "d@x", "permissions": "user",
                   "unix_user": me, "notify": notify})
            .to_string(),
        )
        .unwrap();
    };
    let quiet_now = json!({"start": hm(now - chrono::Duration::hours(1)),
                           "end": hm(now + chrono::Duration::hours(1)), "utc_offset": "+00:00"});
    user("dana", quiet_now);
    // fred's document is broken at first (quiet_hours must be an object): his notice waits
    // for it to be fixed rather than being dropped unsent.
    std::fs::write(
        store.user_path("fred"),
        json!({"id": "fred", "name": "fred", "email": "f@x", "permissions": "user",
               "unix_user": me, "notify": {"sinks": ["desktop"], "quiet_hours": 7}})
        .to_string(),
    )
    .unwrap();
    emit(&store, 1, "dana");
    emit(&store, 2, "fred");
    let sinks = || {
        let mut s: std::collections::BTreeMap<String, Box<dyn agentstore::notify::Sink>> =
            Default::default();
        s.insert("desktop".into(), Box::new(Desktop::at(&bus.address)));
        s
    };
    let mut d = Dispatcher::with_sinks(env.store(), env.config("{}"), sinks());
    let r = d.pass().await;
    assert_eq!((r.sent, r.waiting, r.dead), (0, 2, 0), "{r:?}");
    assert_eq!(env.pending(), 2, "both notices kept");
    user("fred", Value::Null);
    let r = d.pass().await;
    assert_eq!((r.sent, r.waiting, r.dead), (1, 1, 0), "{r:?}");
    let titles = |seen: &crate::fake_notifications::Seen| {
        seen.lock()
            .unwrap()
            .iter()
            .map(|s| s.1.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(titles(&seen), ["Job job-002 failed"], "fred's goes out");
    assert_eq!(env.pending(), 1, "dana's notice waits, kept");
    // Quiet hours over (dana's now end an hour ago): the held notice goes out, once.
    user(
        "dana",
        json!({"start": hm(now - chrono::Duration::hours(3)),
               "end": hm(now - chrono::Duration::hours(1)), "utc_offset": "+00:00"}),
    );
    let r = d.pass().await;
    assert_eq!((r.sent, r.waiting, r.dead), (1, 0, 0), "{r:?}");
    let r = d.pass().await;
    assert_eq!((r.sent, r.waiting), (0, 0), "{r:?}");
    assert_eq!(
        titles(&seen),
        ["Job job-002 failed", "Job job-001 failed"],
        "dana's after her quiet hours, once"
    );
}

#[test]
fn set_user_notify_test_and_telegram_through_the_cli() {
    let env = Env::new("{}");
    let out = env.cli(&[
        "set-user",
        "bob",
        "--notify",
        "telegram,webhook:ci",
        "--notify-events",
        "job_failed,approval_waiting",
        "--quiet-hours",
        "22:00-07:00+02:00",
        "--telegram-chat-id",
        "4242",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let user: Value =
        serde_json::from_slice(&std::fs::read(env.root.join("users/bob.json")).unwrap()).unwrap();
    assert_eq!(
        user["notify"],
        json!({"sinks": ["telegram", "webhook:ci"], "events": ["job_failed", "approval_waiting"],
               "quiet_hours": {"start": "22:00", "end": "07:00", "utc_offset": "+02:00"},
               "telegram_chat_id": "4242"})
    );
    // The schema accepts what the CLI wrote.
    let out = env.cli(&["validate"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Bad input: named, nothing written.
    for (args, says) in [
        (vec!["--notify", "pager"], "unknown sink \"pager\""),
        (
            vec!["--notify-events", "job_exploded"],
            "unknown event \"job_exploded\"",
        ),
        (vec!["--quiet-hours", "25:00-07:00"], "quiet_hours.start"),
        (vec!["--quiet-hours", "22:00-07:00+99:00"], "utc_offset"),
    ] {
        let mut a = vec!["set-user", "bob"];
        a.extend(args);
        let out = env.cli(&a);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
    let after: Value =
        serde_json::from_slice(&std::fs::read(env.root.join("users/bob.json")).unwrap()).unwrap();
    assert_eq!(after, user);
    // A user may not change another's settings.
    let out = env.cli(&["login", "bob"]);
    assert!(out.status.success());
    let out = env.cli(&["set-user", "alice", "--notify", "none"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("permission denied"));
    // notify test, end to end, through Telegram and the webhook.
    for sink in ["telegram", "webhook:ci"] {
        let out = env.cli(&["notify", "test", "--sink", sink]);
        assert!(
            out.status.success(),
            "{sink}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    env.chat.with(|s| {
        assert_eq!(s.telegram.len(), 1);
        assert_eq!(s.telegram[0].0, "bot123456:ABC-def");
        assert!(
            s.telegram[0].1.starts_with("4242:agentstore test notice"),
            "{:?}",
            s.telegram
        );
        assert_eq!(s.hooks.len(), 1);
        assert_eq!(s.hooks[0].body["notice"]["kind"], "test");
    });
    // bob sees his own deliveries only.
    let out = env.cli(&["notifications", "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["notifications"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r["user"] == "bob" && r["state"] == "sent")
    );
}

#[test]
fn a_failed_job_emits_one_notice_with_its_error_and_cost() {
    let env = crate::queue_env::QueueEnv::new(1);
    let mut j = crate::queue_env::job("noop", json!({}));
    j["runtime"]["status"] = json!("failed");
    j["runtime"]["error"] = json!("Job timeout after 5s (limit: 5s)");
    j["runtime"]["cost_usd"] = json!(1.5);
    let path = env.job_file("failed", "j1");
    std::fs::write(&path, j.to_string()).unwrap();
    let store = env.store();
    store.notice_job_ended("q1", "j1");
    store.notice_job_ended("q1", "j1"); // the worker and its manager both saw the end
    let dir = env.root.join("notifications/pending");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let n: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(n["kind"], "job_failed");
    assert_eq!(n["user"], "chenry", "the project's owner");
    assert_eq!(n["error"], "Job timeout after 5s (limit: 5s)");
    assert_eq!(n["cost_usd"], 1.5);
    assert_eq!(n["job_id"], "j1");
}

/// The notices of `kind` the store holds (pending or delivered): for the tests of the
/// daemons that emit them (machines, task graphs). Read as the notifier reads them: a
/// dot-file is a write in progress (a second emission's temporary copy, linked into place
/// or removed), not a notice.
pub fn notices(root: &Path, kind: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for d in ["pending", "delivered"] {
        let Ok(rd) = std::fs::read_dir(root.join("notifications").join(d)) else {
            continue;
        };
        for e in rd {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if agentstore::store::is_ignored(&name) {
                continue;
            }
            // Gone meanwhile (a temporary copy, or moved to delivered/ by a notifier).
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["kind"] == kind {
                out.push(v);
            }
        }
    }
    out
}
