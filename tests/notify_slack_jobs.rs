//! Job commands from Slack (issue 31), end to end over Socket Mode: REAL orchestratord,
//! queue manager (direct launcher, real agent-worker running `noop` jobs) and notifier on a
//! private bus; the fake Slack speaks the Web API and a real WebSocket.
//!
//! `/agentstore research-code …` from a mapped member opens a thread in their direct
//! messages with the app, queues the job as their user (orchestratord applies PRD §10), and
//! the job's result is posted in that thread exactly once (instead of a direct message of its
//! own). Refused in the thread, with no job: an unmapped member (one whose `user_name` claims
//! a mapped user's name included), a mapped user asking for another user's project.
//! `list-jobs` / `view-job` answer with what §10 lets the mapped user see (their own jobs;
//! an admin all); refused for an unmapped member. Bad input is refused in the ack.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::TestEnv;
use crate::common::bus::{KillOnDrop, PrivateBus, skip, wait_for_name, wait_until};
use crate::fake_chat::FakeChat;
use crate::fake_slack_socket::slash;
use agentstore::store::Store;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

const BOT: &str = "xoxb-bot-77aa-secret";
const APP: &str = "xapp-1-A0FAKE-app-31bb-secret";
const LIMIT: Duration = Duration::from_secs(120);

/// A user mapped to Slack member `member`; their jobs run as the test's own account.
fn user(env: &TestEnv, id: &str, member: &str, notify: Value) {
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .unwrap()
        .unwrap()
        .name;
    let mut doc = json!({"id": id, "name": id, "email": format!("{id}@example.org"),
           "permissions": "user", "slack_username": member, "unix_user": me});
    if !notify.is_null() {
        doc["notify"] = notify;
    }
    std::fs::write(store.user_path(id), doc.to_string()).unwrap();
}

/// The messages of `channel` that start a conversation (not replies), texts in order.
fn top_level(chat: &FakeChat, channel: &str) -> Vec<(String, String)> {
    chat.with(|s| {
        s.slack
            .iter()
            .filter(|m| m.channel == channel && m.thread_ts.is_none())
            .map(|m| (m.ts.clone(), m.text.clone()))
            .collect()
    })
}

/// The replies in thread `ts` of `channel`, in order.
fn replies(chat: &FakeChat, channel: &str, ts: &str) -> Vec<String> {
    chat.with(|s| {
        s.slack
            .iter()
            .filter(|m| m.channel == channel && m.thread_ts.as_deref() == Some(ts))
            .map(|m| m.text.clone())
            .collect()
    })
}

/// Waits for a top-level message of `channel` containing `needle`; its (ts, text).
fn wait_top(chat: &FakeChat, channel: &str, needle: &str) -> (String, String) {
    let mut found = None;
    wait_until(
        LIMIT,
        &format!("a message in {channel} with {needle:?}"),
        || {
            found = top_level(chat, channel)
                .into_iter()
                .find(|(_, t)| t.contains(needle));
            found.is_some()
        },
    );
    found.unwrap()
}

/// Waits for a reply in thread `ts` containing `needle`; its text.
fn wait_reply(chat: &FakeChat, channel: &str, ts: &str, needle: &str) -> String {
    let mut found = None;
    wait_until(
        LIMIT,
        &format!("a reply in {channel}/{ts} with {needle:?}"),
        || {
            found = replies(chat, channel, ts)
                .into_iter()
                .find(|t| t.contains(needle));
            found.is_some()
        },
    );
    found.unwrap()
}

/// Every job file of the store.
fn job_files(env: &TestEnv) -> Vec<String> {
    let mut out = Vec::new();
    for q in std::fs::read_dir(env.root.join("Queues")).unwrap() {
        let jobs = q.unwrap().path().join("Jobs");
        for st in std::fs::read_dir(&jobs).into_iter().flatten() {
            for f in std::fs::read_dir(st.unwrap().path()).into_iter().flatten() {
                let name = f.unwrap().file_name().into_string().unwrap();
                if let Some(id) = name.strip_suffix(".json") {
                    out.push(id.to_string());
                }
            }
        }
    }
    out
}

fn job_doc(env: &TestEnv, q: &str, id: &str) -> Option<Value> {
    ["queued", "running", "finished", "failed"]
        .iter()
        .find_map(|s| {
            std::fs::read_to_string(env.root.join(format!("Queues/{q}/Jobs/{s}_jobs/{id}.json")))
                .ok()
        })
        .map(|t| serde_json::from_str(&t).unwrap())
}

/// The job id in a "Queued as job X in queue Q" reply.
fn queued_id(reply: &str) -> String {
    reply
        .split("Queued as job ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no job id in {reply:?}"))
        .to_string()
}

/// On a failure, the daemons' logs go to the test's output.
struct LogsOnPanic(Vec<std::path::PathBuf>);

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.0 {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                eprintln!("==== {} ====\n{text}", p.display());
            }
        }
    }
}

#[test]
fn a_slash_command_queues_a_job_as_the_mapped_user_and_its_thread_gets_the_result() {
    for tool in ["dbus-daemon", "busctl"] {
        if !crate::common::bus::have(tool) {
            skip("Slack job commands", &format!("{tool} is not installed"));
            return;
        }
    }
    let env = TestEnv::initialised();
    env.ok(&["set-user", "chenry", "--slack-username", "UCHENRY"]);
    // alice hears of finished jobs in Slack: her job's end must come once, in the thread.
    user(
        &env,
        "alice",
        "UALICE",
        json!({"sinks": ["slack"], "events": ["job_finished", "job_failed"]}),
    );
    user(&env, "bob", "UBOB", Value::Null);
    for (p, owner) in [("Mine", "alice"), ("Theirs", "bob")] {
        let dir = env.dir.path().join(p);
        std::fs::create_dir_all(&dir).unwrap();
        env.ok(&[
            "add-project",
            p,
            "--directory",
            dir.to_str().unwrap(),
            "--owner",
            owner,
        ]);
    }
    let q = std::fs::read_dir(env.root.join("Queues"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .next()
        .unwrap();

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
    let daemon = |bin: &str, args: &[&str], log: &str| {
        KillOnDrop(
            Command::new(bin)
                .args(args)
                .arg("--root")
                .arg(&env.root)
                .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
                .env("HOME", &env.home)
                .env("XDG_CONFIG_HOME", &xdg)
                .env("RUST_LOG", "info")
                .env_remove("AGENTSTORE_MODE")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(env.dir.path().join(log)).unwrap())
                .spawn()
                .unwrap(),
        )
    };
    // The daemons with this HOME and machine configuration, each logging to its own file.
    let logged = |launch: crate::daemons::Launch, log: &str| {
        launch
            .on(&bus)
            .env("HOME", &env.home)
            .env("XDG_CONFIG_HOME", &xdg)
            .env("RUST_LOG", "info")
            .env_remove("AGENTSTORE_MODE")
            .stderr(std::fs::File::create(env.dir.path().join(log)).unwrap())
            .spawn()
    };
    let _orchestratord = logged(
        crate::daemons::orchestratord(&env.root),
        "orchestratord.log",
    );
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let _manager = logged(crate::daemons::queue_manager(&env.root, &q), "manager.log");
    wait_for_name(&bus, &agentstore::bus::queue_bus_name(&q));
    let _notifier = daemon(env!("CARGO_BIN_EXE_agentstore-notify"), &[], "notifier.log");
    let _logs = LogsOnPanic(
        ["orchestratord.log", "manager.log", "notifier.log"]
            .iter()
            .map(|l| env.dir.path().join(l))
            .collect(),
    );
    chat.wait_connections(1);

    let mut n = 0;
    let mut command = |member: &str, text: &str| -> String {
        n += 1;
        let id = format!("c-{n}");
        chat.socket_send(&slash(&id, member, "C0GENERAL", text));
        chat.wait_ack(&id)["payload"]["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };

    // Bad input is refused at once, in the ack; nothing is asked of anyone.
    for (text, want) in [
        ("research-code", "name the project"),
        (
            "research-code Mine --bogus 1 look",
            "unknown option \"--bogus\"",
        ),
        ("research-code ../etc look", "must be an id"),
        ("research-code Mine --jobtype shell look", "is not one of"),
        ("create-prd Mine", "needs what the PRD is about"),
        ("list-jobs everything", "list-jobs [queued"),
    ] {
        let t = command("UALICE", text);
        assert!(t.contains(want), "{text:?}: {t:?} should say {want:?}");
    }
    assert!(
        top_level(&chat, "DALICE").is_empty(),
        "no thread for bad input"
    );

    // alice asks from a channel: the thread opens in her direct messages with the app.
    let jobs_before = job_files(&env).len();
    let t = command(
        "UALICE",
        "research-code Mine --jobtype noop what does main do <!channel>",
    );
    assert!(t.contains("thread of your direct messages"), "{t}");
    let (root, head) = wait_top(&chat, "DALICE", "research-code in project Mine");
    assert!(head.contains("asked by <@UALICE>"), "{head}");
    assert!(
        head.contains("&lt;!channel&gt;") && !head.contains("<!channel>"),
        "what she typed is escaped: {head}"
    );
    let queued = wait_reply(&chat, "DALICE", &root, "Queued as job");
    let a_job = queued_id(&queued);
    assert!(queued.contains("for alice"), "{queued}");
    // (Read as it moves between folders: looked for until one read finds it.)
    let mut doc = None;
    wait_until(LIMIT, "the job in the store", || {
        doc = job_doc(&env, &q, &a_job);
        doc.is_some()
    });
    let doc = doc.unwrap();
    assert_eq!(doc["config"]["user"], "alice", "queued as alice's");
    assert_eq!(doc["config"]["project"], "Mine");
    assert_eq!(doc["config"]["jobtype"], "noop");
    let task = doc["config"]["task_description"].as_str().unwrap();
    assert!(task.ends_with("\n\nwhat does main do <!channel>"), "{task}");
    // Its end, in the thread: how it ended, its result, where the rest is.
    let done = wait_reply(&chat, "DALICE", &root, &format!("Job {a_job} finished"));
    assert!(
        done.contains(agentstore::worker::NOOP_OUTPUT),
        "the result: {done}"
    );
    assert!(done.contains(&format!("view-job {a_job}")), "{done}");
    assert!(
        env.root
            .join(format!("Queues/{q}/Jobs/finished_jobs/{a_job}.json"))
            .is_file()
    );

    // A job that fails: its error, in its own thread.
    command(
        "UALICE",
        "research-code Mine --jobtype claude why is it slow",
    );
    let (root_f, _) = wait_top(
        &chat,
        "DALICE",
        "research-code in project Mine asked by <@UALICE>: why",
    );
    let f_job = queued_id(&wait_reply(&chat, "DALICE", &root_f, "Queued as job"));
    let failed = wait_reply(&chat, "DALICE", &root_f, &format!("Job {f_job} failed"));
    let err = job_doc(&env, &q, &f_job).unwrap()["runtime"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        failed.contains(&format!("Error: {}", &err[..err.len().min(60)])),
        "{failed} / {err}"
    );

    // An unmapped member, whose user_name claims alice's: refused in the thread, no job.
    let mut forged = slash(
        "c-forged",
        "UEVE",
        "C0GENERAL",
        "research-code Mine --jobtype noop x",
    );
    forged["payload"]["user_name"] = json!("alice");
    chat.socket_send(&forged);
    chat.wait_ack("c-forged");
    let (eve_root, _) = wait_top(&chat, "DEVE", "research-code in project Mine");
    let r = wait_reply(&chat, "DEVE", &eve_root, "Refused");
    assert!(r.contains("not linked to an agentstore user"), "{r}");
    // bob is mapped, but Mine is alice's (PRD §10, said by orchestratord): refused, no job.
    command("UBOB", "research-code Mine --jobtype noop look at her code");
    let (bob_root, _) = wait_top(&chat, "DBOB", "research-code in project Mine");
    let r = wait_reply(&chat, "DBOB", &bob_root, "Refused for bob");
    assert!(r.contains("project Mine belongs to alice"), "{r}");
    assert_eq!(job_files(&env).len(), jobs_before + 2, "only alice's jobs");
    // bob's own project: his job, in his thread.
    command("UBOB", "research-code Theirs --jobtype noop his question");
    let (bob_root2, _) = wait_top(&chat, "DBOB", "research-code in project Theirs");
    let b_job = queued_id(&wait_reply(&chat, "DBOB", &bob_root2, "Queued as job"));
    // bob chose no Slack notices: the answer to what he asked comes all the same.
    wait_reply(&chat, "DBOB", &bob_root2, &format!("Job {b_job} finished"));

    // alice's job's end went out exactly once, in the thread only (the ledger says sent).
    wait_until(LIMIT, "the notices delivered", || {
        std::fs::read_dir(env.root.join("notifications/pending"))
            .map(|d| d.count() == 0)
            .unwrap_or(true)
    });
    let ends = |ch: &str, job: &str| {
        chat.with(|s| {
            s.slack
                .iter()
                .filter(|m| m.channel == ch && m.text.contains(&format!("Job {job} finished")))
                .map(|m| m.thread_ts.clone())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(ends("DALICE", &a_job), [Some(root.clone())]);
    assert_eq!(ends("DBOB", &b_job), [Some(bob_root2.clone())]);

    // list-jobs: one's own jobs; an admin sees every one; an unmapped member nothing.
    command("UALICE", "list-jobs");
    let (_, l) = wait_top(&chat, "DALICE", "alice: ");
    assert!(l.contains(&a_job) && !l.contains(&b_job), "{l}");
    command("UBOB", "list-jobs finished");
    let (_, l) = wait_top(&chat, "DBOB", "bob: ");
    assert!(l.contains(&b_job) && !l.contains(&a_job), "{l}");
    command("UCHENRY", "list-jobs");
    let (_, l) = wait_top(&chat, "DCHENRY", "chenry: ");
    assert!(l.contains(&a_job) && l.contains(&b_job), "{l}");
    let t = command("UEVE", "list-jobs");
    assert!(t.contains("not linked"), "{t}");

    // view-job: one's own job; another's is refused as unknown; an admin sees it.
    command("UALICE", &format!("view-job {a_job}"));
    let (_, v) = wait_top(&chat, "DALICE", &format!("Job {a_job} — finished"));
    assert!(
        v.contains("by alice") && v.contains(agentstore::worker::NOOP_OUTPUT),
        "{v}"
    );
    command("UBOB", &format!("view-job {a_job}"));
    let (_, v) = wait_top(&chat, "DBOB", "Refused for bob");
    assert!(v.contains(&a_job) && !v.contains("finished"), "{v}");
    command("UCHENRY", &format!("view-job {a_job}"));
    wait_top(&chat, "DCHENRY", &format!("Job {a_job} — finished"));
    let t = command("UEVE", &format!("view-job {a_job}"));
    assert!(t.contains("not linked"), "{t}");
    assert!(
        top_level(&chat, "DEVE").len() == 1,
        "only the refused thread"
    );

    let logged = std::fs::read_to_string(env.dir.path().join("notifier.log")).unwrap();
    assert!(
        !logged.contains(BOT) && !logged.contains(APP),
        "a token in the log"
    );
}

#[test]
fn a_replayed_envelope_is_refused_after_the_notifier_restarts() {
    if !crate::common::bus::have("dbus-daemon") {
        skip("Slack replay memory", "dbus-daemon is not installed");
        return;
    }
    let env = TestEnv::initialised();
    env.ok(&["set-user", "chenry", "--slack-username", "UCHENRY"]);
    let chat = FakeChat::start(BOT, "unused");
    chat.enable_socket_mode(APP);
    let xdg = env.dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("agentstore")).unwrap();
    std::fs::write(
        xdg.join("agentstore/config.yaml"),
        format!(
            "notify:\n  poll_interval_ms: 200\n  slack:\n    api_url: {}/api\n    bot_token: {BOT}\n    app_token: {APP}\n",
            chat.base
        ),
    )
    .unwrap();
    let bus = PrivateBus::start();
    let notifier = || {
        KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_agentstore-notify"))
                .arg("--root")
                .arg(&env.root)
                .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
                .env("HOME", &env.home)
                .env("XDG_CONFIG_HOME", &xdg)
                .env("RUST_LOG", "warn")
                .env_remove("AGENTSTORE_MODE")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let ack = |id: &str, n: usize| -> String {
        wait_until(LIMIT, &format!("ack #{n} of {id}"), || {
            chat.acks_of(id) >= n
        });
        chat.wait_ack(id)["payload"]["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let first = notifier();
    chat.wait_connections(1);
    chat.socket_send(&slash("r-1", "UCHENRY", "DCHENRY", "status"));
    let t = ack("r-1", 1);
    assert!(t.contains("no approval waits"), "{t}");
    // Slack sends it again while the same process runs: refused.
    chat.socket_send(&slash("r-1", "UCHENRY", "DCHENRY", "status"));
    assert!(ack("r-1", 2).contains("already handled"));
    // kill -9, and a new notifier: the replay is still refused, a new envelope answered.
    drop(first);
    let _second = notifier();
    chat.wait_connections(2);
    chat.socket_send(&slash("r-1", "UCHENRY", "DCHENRY", "status"));
    let t = ack("r-1", 3);
    assert!(t.contains("already handled"), "after a restart: {t}");
    chat.socket_send(&slash("r-2", "UCHENRY", "DCHENRY", "status"));
    let t = ack("r-2", 1);
    assert!(t.contains("no approval waits"), "{t}");
    let kept = std::fs::read_dir(env.root.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("slack-envelopes@"))
        .count();
    assert_eq!(kept, 1, "one file, this machine's");
}

/// A thread reply an attempt may have posted before a kill (`begin` without an end in the
/// ledger) is looked for among the thread's replies: posted again only when it is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_thread_reply_is_looked_up_before_it_is_posted_again() {
    use agentstore::notify::ledger::{Entry, Ledger, Step};
    use agentstore::notify::threads::{SlackThread, save};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("AgentStore");
    let (store, _) = agentstore::store::Store::init(&root).unwrap();
    std::fs::write(
        store.user_path("alice"),
        json!({"id": "alice", "name": "alice", "email": "a@x", "permissions": "user",
               "slack_username": "UALICE",
               "notify": {"sinks": ["slack"], "events": ["job_finished"]}})
        .to_string(),
    )
    .unwrap();
    let chat = FakeChat::start(BOT, "unused");
    let cfg = agentstore::store::Config::parse(
        &format!(
            "notify:\n  slack:\n    api_url: {}/api\n    bot_token: {BOT}\n",
            chat.base
        ),
        "test",
    )
    .unwrap()
    .notify;
    let mut ledger = Ledger::load(&store);
    let mut notices = Vec::new();
    for (i, already) in [(1, true), (2, false)] {
        let (job, cid, ts) = (
            format!("j{i}"),
            format!("c{i}"),
            format!("1700000000.00000{i}"),
        );
        // The thread's first message, and the job that ended.
        chat.with(|s| {
            s.slack.push(crate::fake_chat::SlackMessage {
                channel: "DALICE".into(),
                text: "research-code in project P asked by <@UALICE>".into(),
                metadata: Value::Null,
                ts: ts.clone(),
                blocks: Value::Null,
                updates: Vec::new(),
                thread_ts: None,
            })
        });
        let mut doc: Value =
            serde_json::from_str(&crate::common::noop_job("2026-01-01T00:00:00Z")).unwrap();
        doc["config"]["user"] = json!("alice");
        doc["config"]["correlation_id"] = json!(cid);
        doc["runtime"]["status"] = json!("finished");
        doc["runtime"]["output"] = json!(format!("answer {i}"));
        let path = store.job_path("q1", agentstore::model::JobStatus::Finished, &job);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, doc.to_string()).unwrap();
        save(
            &store,
            &SlackThread {
                correlation_id: cid,
                user: "alice".into(),
                member: "UALICE".into(),
                channel: "DALICE".into(),
                ts: ts.clone(),
                created: agentstore::model::Timestamp::now(),
            },
        )
        .unwrap();
        store.notice_job_ended("q1", &job);
        let notice = agentstore::store::notices::Notice::id_for(
            agentstore::store::notices::NoticeKind::JobFinished,
            &format!("q1/{job}"),
            Some("alice"),
        );
        let key = agentstore::notify::Delivery::key_for(
            &notice,
            Some("alice"),
            agentstore::notify::SLACK_THREAD,
        );
        // An attempt began and was cut short; for j1 its reply reached Slack.
        ledger
            .record(Entry {
                at: agentstore::model::Timestamp::now(),
                key: key.clone(),
                step: Step::Begin,
                kind: "job_finished".into(),
                title: String::new(),
                error: None,
                host: String::new(),
            })
            .unwrap();
        if already {
            chat.with(|s| {
                s.slack.push(crate::fake_chat::SlackMessage {
                    channel: "DALICE".into(),
                    text: format!("Job {job} finished"),
                    metadata: json!({"event_type": "agentstore_notice",
                                     "event_payload": {"delivery": key, "kind": "job_finished"}}),
                    ts: "1700000001.000001".into(),
                    blocks: Value::Null,
                    updates: Vec::new(),
                    thread_ts: Some(ts.clone()),
                })
            });
        }
        notices.push((job, ts));
    }
    let mut d = agentstore::notify::dispatch::Dispatcher::new(Store::open(&root).unwrap(), cfg);
    let r = d.pass().await;
    assert_eq!((r.sent, r.dead, r.failed), (2, 0, 0), "{r:?}");
    assert_eq!(chat.with(|s| s.replies_calls), 2, "both looked up");
    for (job, ts) in &notices {
        let ends: Vec<String> = replies(&chat, "DALICE", ts)
            .into_iter()
            .filter(|t| t.contains(&format!("Job {job} finished")))
            .collect();
        assert_eq!(ends.len(), 1, "{job}: once in its thread: {ends:?}");
    }
    assert!(
        replies(&chat, "DALICE", &notices[1].1)[0].contains("answer 2"),
        "the result"
    );
    assert_eq!(
        top_level(&chat, "DALICE").len(),
        2,
        "no direct message of its own"
    );
    assert_eq!(d.pass().await.sent, 0, "nothing twice");
}
