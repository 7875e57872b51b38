//! Standby orchestrators (issue 13, failover): two or three real `orchestratord` processes
//! with different `AGENTSTORE_HOSTNAME`s share one store, each "machine" with its own private
//! session bus, while messages keep arriving in the inbox. The active one is paused (SIGSTOP)
//! or killed (SIGKILL) past the lock's stale time; a standby takes over and answers; the
//! paused one, continued, stands down. Every message gets exactly one answer, one
//! `message_answered` event and (for agent commands) one job; none is lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::harness::KillOnDrop;
use crate::wait::wait_until;
use common::TestEnv;
use common::bus::{PrivateBus, orchestratord_command};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// A store with TestProject on the default queue, fast lock and machine heartbeats, and
/// `standby` hosts.
fn store(standby: &[&str]) -> TestEnv {
    store_with_hold(standby, 2)
}

/// [`store`] with `takeover_hold_seconds: hold`.
fn store_with_hold(standby: &[&str], hold: u64) -> TestEnv {
    let env = TestEnv::with_test_project();
    let cfg = env.root.join("config.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let hosts = standby.join(", ");
    let text = text.replacen(
        "orchestrator:\n",
        &format!(
            "orchestrator:\n  standby: [{hosts}]\n  lock_heartbeat_seconds: 1\n  lock_stale_after_seconds: 3\n  takeover_settle_seconds: 1\n  takeover_hold_seconds: {hold}\n"
        ),
        1,
    );
    assert!(text.contains("lock_stale_after_seconds: 3"), "{text}");
    std::fs::write(
        &cfg,
        format!("{text}\nmachines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 3\n"),
    )
    .unwrap();
    env
}

/// One "machine": its bus and its orchestratord.
struct Machine {
    host: &'static str,
    bus: PrivateBus,
    proc: Option<KillOnDrop>,
}

impl Machine {
    fn start(env: &TestEnv, host: &'static str, extra: &[&str]) -> Machine {
        let bus = PrivateBus::start();
        let mut args = if extra.contains(&"--idle-exit") {
            vec![]
        } else {
            vec!["--idle-exit", "0"]
        };
        args.extend_from_slice(extra);
        let child = orchestratord_command(&bus, &env.root, &args)
            .env("AGENTSTORE_HOSTNAME", host)
            .env("HOME", &env.home)
            .spawn()
            .unwrap();
        Machine {
            host,
            bus,
            proc: Some(KillOnDrop(child)),
        }
    }

    fn pid(&self) -> u32 {
        self.proc.as_ref().unwrap().0.id()
    }

    fn signal(&self, s: nix::sys::signal::Signal) {
        self.proc.as_ref().unwrap().signal(s);
    }

    /// The D-Bus `Role`, or None while the name is not owned yet.
    fn role(&self) -> Option<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let conn = self.bus.connect().await;
            let proxy = agentstore::bus::orchestrator::Orchestrator1Proxy::builder(&conn)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .ok()?;
            tokio::time::timeout(Duration::from_secs(5), proxy.role())
                .await
                .ok()?
                .ok()
        })
    }

    fn wait_role(&self, role: &str) {
        wait_until(LONG, &format!("{} to be {role}", self.host), || {
            self.role().as_deref() == Some(role)
        });
    }
}

/// A message: research-code (makes a job) for even `i`, list-projects for odd.
fn message(i: usize) -> String {
    let command = if i.is_multiple_of(2) {
        "research-code"
    } else {
        "list-projects"
    };
    format!(
        r#"{{"correlation_id":"msg-{i:04}","source":"user","project":"TestProject","queue_time":"2025-10-25T10:{:02}:{:02}Z","processed_time":null,"command":"{command}","content":{{}},"status":"queued","error":null}}"#,
        i / 60 % 60,
        i % 60
    )
}

/// Writes messages into the inbox (temp file, then rename) every 40 ms until stopped.
struct Writer {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(root: &Path) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicUsize::new(0));
        let inbox = root.join("messaging/inbox");
        let (s, w) = (stop.clone(), written.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let i = w.load(Ordering::SeqCst);
                let tmp = inbox.join(format!(".msg-{i:04}.json.writing"));
                std::fs::write(&tmp, message(i)).unwrap();
                std::fs::rename(&tmp, inbox.join(format!("msg-{i:04}.json"))).unwrap();
                w.store(i + 1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        Writer {
            stop,
            written,
            thread: Some(thread),
        }
    }

    fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// Stops writing; returns how many were written.
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        self.written()
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn documents(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .collect()
}

/// `message_answered` events per correlation id, and per host, across every machine's
/// events file.
fn answered_events(root: &Path) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let (mut by_id, mut by_host) = (BTreeMap::new(), BTreeMap::new());
    let logs = root.join("logs");
    for n in names(&logs) {
        if !(n.starts_with("events-") && n.ends_with(".jsonl")) {
            continue;
        }
        for line in std::fs::read_to_string(logs.join(&n)).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            if e["event"] == "message_answered" {
                *by_id
                    .entry(e["correlation_id"].as_str().unwrap().to_string())
                    .or_insert(0) += 1;
                *by_host
                    .entry(e["host"].as_str().unwrap().to_string())
                    .or_insert(0) += 1;
            }
        }
    }
    (by_id, by_host)
}

/// Waits until all `n` messages are answered and checks that each was answered exactly
/// once: one outbox answer (`done`), one processed message, one `message_answered` event,
/// one job per research-code message, no claim left. Returns answers per host.
fn all_answered_once(env: &TestEnv, n: usize, live: &[&str]) -> BTreeMap<String, usize> {
    let inbox = env.root.join("messaging/inbox");
    let outbox = env.root.join("messaging/outbox");
    wait_until(LONG, "every message answered", || {
        documents(&outbox).len() >= n && documents(&inbox).is_empty()
    });
    // Late duplicates would show up now: the live machines' passes for 2 s more (a paused
    // process finishes its work).
    for host in live {
        orchestrator_passes(env, host, Duration::from_secs(2));
    }
    let expected: Vec<String> = (0..n).map(|i| format!("msg-{i:04}.json")).collect();
    assert_eq!(
        documents(&outbox),
        expected,
        "outbox: one answer per message"
    );
    assert_eq!(
        documents(&env.root.join("messaging/processed_inbox")),
        expected,
        "processed_inbox: each message once"
    );
    let left: Vec<String> = names(&inbox)
        .into_iter()
        .filter(|n| n.starts_with(".claim"))
        .collect();
    assert!(left.is_empty(), "claims left in the inbox: {left:?}");
    for name in &expected {
        let r: Value = serde_json::from_slice(&std::fs::read(outbox.join(name)).unwrap()).unwrap();
        assert_eq!(r["status"], "done", "{name}: {r}");
    }
    let (by_id, by_host) = answered_events(&env.root);
    for i in 0..n {
        let id = format!("msg-{i:04}");
        assert_eq!(by_id.get(&id), Some(&1), "message_answered events of {id}");
    }
    assert_eq!(by_id.len(), n, "answers of messages never sent: {by_id:?}");
    let jobs = documents(&env.root.join("Queues/poplar/Jobs/queued_jobs"));
    assert_eq!(
        jobs.len(),
        n.div_ceil(2),
        "one job per research-code message"
    );
    by_host
}

fn lock(root: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(root.join(".orchestrator.lock")).unwrap()).unwrap()
}

fn list_machines(env: &TestEnv) -> Value {
    let out = env.ok(&["list-machines", "--format", "json", "--bus", "none"]);
    serde_json::from_str(&out).unwrap()
}

fn machine_role(list: &Value, host: &str) -> Option<String> {
    list["machines"]
        .as_array()?
        .iter()
        .find(|m| m["host"] == host)?["orchestrator_role"]
        .as_str()
        .map(str::to_string)
}

#[test]
fn a_paused_active_orchestrator_is_replaced_by_the_standby_and_stands_down_when_continued() {
    use nix::sys::signal::Signal;
    let env = store(&["alpha", "beta"]);
    let alpha = Machine::start(&env, "alpha", &[]);
    alpha.wait_role("active");
    let beta = Machine::start(&env, "beta", &[]);
    beta.wait_role("standby");
    assert_eq!(lock(&env.root)["host"], "alpha");
    let epoch = lock(&env.root)["epoch"].as_u64().unwrap();

    let writer = Writer::start(&env.root);
    let outbox = env.root.join("messaging/outbox");
    wait_until(LONG, "alpha answering", || documents(&outbox).len() >= 15);
    alpha.signal(Signal::SIGSTOP);
    let stopped_at = writer.written();
    // Past the stale time (3 s) and the settle delay (1 s), beta answers.
    beta.wait_role("active");
    let l = lock(&env.root);
    assert_eq!(l["host"], "beta");
    assert_eq!(l["epoch"].as_u64(), Some(epoch + 1), "{l}");
    wait_until(
        LONG,
        "beta answering messages written after the pause",
        || {
            outbox
                .join(format!("msg-{:04}.json", stopped_at + 20))
                .exists()
        },
    );
    let roles = list_machines(&env);
    assert_eq!(
        machine_role(&roles, "beta").as_deref(),
        Some("active"),
        "{roles:#}"
    );

    // Alpha comes back: it sees the newer lock and stands down, staying up as a standby.
    alpha.signal(Signal::SIGCONT);
    alpha.wait_role("standby");
    assert_eq!(lock(&env.root)["host"], "beta");
    // Both machines' passes for 2 s while messages keep coming.
    for host in ["alpha", "beta"] {
        orchestrator_passes(&env, host, Duration::from_secs(2));
    }
    let n = writer.finish();
    let by_host = all_answered_once(&env, n, &["alpha", "beta"]);
    assert!(
        by_host.get("alpha").is_some_and(|&a| a >= 15),
        "{by_host:?}"
    );
    assert!(by_host.get("beta").is_some_and(|&b| b >= 20), "{by_host:?}");
    assert_eq!(beta.role().as_deref(), Some("active"));
    assert_eq!(alpha.role().as_deref(), Some("standby"));
    let roles = list_machines(&env);
    assert_eq!(
        machine_role(&roles, "alpha").as_deref(),
        Some("standby"),
        "{roles:#}"
    );
    assert_eq!(
        machine_role(&roles, "beta").as_deref(),
        Some("active"),
        "{roles:#}"
    );
    // The alpha process is the one that stood down, still running.
    assert!(Path::new(&format!("/proc/{}", alpha.pid())).exists());
}

#[test]
fn after_a_kill_9_two_standbys_starting_together_elect_one() {
    let env = store(&[]);
    let mut alpha = Machine::start(&env, "alpha", &[]);
    alpha.wait_role("active");
    let writer = Writer::start(&env.root);
    let outbox = env.root.join("messaging/outbox");
    wait_until(LONG, "alpha answering", || documents(&outbox).len() >= 10);
    drop(alpha.proc.take()); // SIGKILL: the lock file stays, naming alpha.
    assert_eq!(lock(&env.root)["host"], "alpha");
    let beta = Machine::start(&env, "beta", &["--standby"]);
    let gamma = Machine::start(&env, "gamma", &["--standby"]);
    wait_until(LONG, "one of beta and gamma active", || {
        [&beta, &gamma]
            .iter()
            .any(|m| m.role().as_deref() == Some("active"))
    });
    // From now on, exactly one is active and the other a standby, sample after sample.
    let winner = lock(&env.root)["host"].as_str().unwrap().to_string();
    assert!(winner == "beta" || winner == "gamma", "{winner}");
    for _ in 0..10 {
        // A call that timed out under load is asked again: no answer is not a role.
        let ask = |m: &Machine| (0..3).find_map(|_| m.role());
        let roles = [ask(&beta), ask(&gamma)];
        let active = roles
            .iter()
            .filter(|r| r.as_deref() == Some("active"))
            .count();
        let standby = roles
            .iter()
            .filter(|r| r.as_deref() == Some("standby"))
            .count();
        assert_eq!((active, standby), (1, 1), "{roles:?}");
        assert_eq!(lock(&env.root)["host"], winner.as_str());
        std::thread::sleep(Duration::from_millis(300));
    }
    let n = writer.finish();
    let by_host = all_answered_once(&env, n, &["beta", "gamma"]);
    let loser = if winner == "beta" { "gamma" } else { "beta" };
    assert!(
        !by_host.contains_key(loser),
        "the standby answered: {by_host:?}"
    );
    assert!(by_host.get(&winner).is_some_and(|&w| w > 0), "{by_host:?}");
}

#[test]
fn a_resumed_holder_that_is_no_standby_exits_with_status_2() {
    use nix::sys::signal::Signal;
    let env = store(&["beta"]);
    let mut alpha = Machine::start(&env, "alpha", &[]);
    alpha.wait_role("active");
    let beta = Machine::start(&env, "beta", &[]);
    beta.wait_role("standby");
    alpha.signal(Signal::SIGSTOP);
    beta.wait_role("active");
    alpha.signal(Signal::SIGCONT);
    let mut child = alpha.proc.take().unwrap();
    let status = crate::wait::child_exit(&mut child.0, LONG, "alpha to stand down");
    assert_eq!(status.code(), Some(2), "{status:?}");
    assert_eq!(lock(&env.root)["host"], "beta");
    // A message still gets its one answer, from beta.
    env.write("messaging/inbox/msg-0000.json", &message(0));
    let by_host = all_answered_once(&env, 1, &["beta"]);
    assert_eq!(by_host.get("beta"), Some(&1), "{by_host:?}");
}

/// A holder stopped (SIGSTOP, a suspended machine) past its idle time, whose lock was taken
/// over meanwhile, stands down when it wakes (exit 2), never exits as if it were idle (exit 0,
/// which `systemctl status` would report as a clean idle exit): its main loop looks at the
/// lock itself before an idle exit, whether or not its lock thread has looked yet.
#[test]
fn a_holder_stopped_past_its_idle_time_stands_down_instead_of_idling_out() {
    use nix::sys::signal::Signal;
    for _ in 0..2 {
        let env = store(&["beta"]);
        let mut alpha = Machine::start(&env, "alpha", &["--idle-exit", "6"]);
        alpha.wait_role("active");
        let beta = Machine::start(&env, "beta", &[]);
        beta.wait_role("standby");
        alpha.signal(Signal::SIGSTOP);
        let stopped = std::time::Instant::now();
        beta.wait_role("active");
        // Past alpha's idle time (its last work was before it stopped).
        std::thread::sleep(Duration::from_secs(7).saturating_sub(stopped.elapsed()));
        alpha.signal(Signal::SIGCONT);
        let mut child = alpha.proc.take().unwrap();
        let status = crate::wait::child_exit(&mut child.0, LONG, "alpha to end");
        assert_eq!(
            status.code(),
            Some(2),
            "alpha ended {status:?}, not standing down"
        );
        assert_eq!(lock(&env.root)["host"], "beta");
    }
}

#[test]
fn a_message_claimed_by_a_holder_that_went_silent_is_answered_once_by_the_next() {
    let env = store(&[]);
    // gamma held the lock (epoch 4), claimed msg-0000 and went silent mid-message.
    let old = "2020-01-01T00:00:00Z";
    env.write(
        ".orchestrator.lock",
        &format!(
            r#"{{"host":"gamma","pid":4242,"started":"{old}","heartbeat":"{old}","epoch":4}}"#
        ),
    );
    env.write("messaging/inbox/.claim@gamma@msg-0000.json", &message(0));
    env.write("messaging/inbox/msg-0001.json", &message(1));
    let beta = Machine::start(&env, "beta", &["--standby"]);
    beta.wait_role("active");
    let l = lock(&env.root);
    assert_eq!(
        (l["host"].as_str(), l["epoch"].as_u64()),
        (Some("beta"), Some(5)),
        "{l}"
    );
    let by_host = all_answered_once(&env, 2, &["beta"]);
    assert_eq!(by_host.get("beta"), Some(&2), "{by_host:?}");
}

/// Writes `inbox/<id>.json` (temp file, then rename): a list-projects message.
fn put_message(root: &Path, id: &str) {
    let inbox = root.join("messaging/inbox");
    let body = format!(
        r#"{{"correlation_id":"{id}","source":"user","project":"TestProject","queue_time":"2025-10-25T10:00:00Z","processed_time":null,"command":"list-projects","content":{{}},"status":"queued","error":null}}"#
    );
    let tmp = inbox.join(format!(".{id}.json.writing"));
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, inbox.join(format!("{id}.json"))).unwrap();
}

/// A partition, as the new holder sees it: the old holder went silent (stopped here), so
/// the standby takes over; the messages that were in the inbox then may have been answered
/// beyond the partition. They wait for the hold (the old holder's answer arriving through the
/// sync engine ends the wait for one of them); a message that arrives after the take-over is
/// answered once the fence ends (the old holder, stopped here, is never seen standing down, so
/// after the stale time and a heartbeat), long before the hold.
#[test]
fn after_a_take_over_the_messages_the_old_holder_may_have_answered_wait_for_the_hold() {
    use nix::sys::signal::Signal;
    const HOLD: u64 = 40;
    let env = store_with_hold(&["alpha", "beta"], HOLD);
    let alpha = Machine::start(&env, "alpha", &[]);
    alpha.wait_role("active");
    let beta = Machine::start(&env, "beta", &[]);
    beta.wait_role("standby");
    let (inbox, outbox) = (
        env.root.join("messaging/inbox"),
        env.root.join("messaging/outbox"),
    );
    let processed = env.root.join("messaging/processed_inbox");
    // Alpha stops (beyond a partition, as far as beta can tell) with two messages unanswered.
    // Beta takes over 2 s after this at the earliest (alpha's last heartbeat is at most 1 s
    // old, the stale time is 3 s), so the hold ends HOLD + 2 s after it at the earliest.
    let stopped = std::time::Instant::now();
    alpha.signal(Signal::SIGSTOP);
    put_message(&env.root, "held-1");
    put_message(&env.root, "held-2");
    beta.wait_role("active");
    // Alpha's answer to held-1 arrives (as the sync engine would bring it): answered, moved.
    let answer = r#"{"correlation_id":"held-1","source":"orchestrator","project":"TestProject","queue_time":"2025-10-25T10:00:00Z","processed_time":"2025-10-25T10:00:01Z","command":"list-projects","content":{},"status":"done","error":null}"#;
    std::fs::write(outbox.join("held-1.json"), answer).unwrap();
    std::fs::rename(inbox.join("held-1.json"), processed.join("held-1.json")).unwrap();
    // A message written after the take-over is answered at once, while held-2 waits.
    put_message(&env.root, "fresh-1");
    wait_until(
        LONG,
        "beta answering the message written after the take-over",
        || outbox.join("fresh-1.json").exists(),
    );
    let early = stopped.elapsed();
    if early < Duration::from_secs(HOLD - 5) {
        assert!(
            inbox.join("held-2.json").exists() && !outbox.join("held-2.json").exists(),
            "held-2 was there at the take-over: it waits for the hold ({HOLD} s); fresh-1 answered {:?} after alpha stopped; inbox {:?}",
            early,
            names(&inbox)
        );
    }
    // When the hold ends, beta answers held-2 itself (alpha never did).
    wait_until(
        Duration::from_secs(HOLD) + LONG,
        "held-2 answered when the hold ended",
        || outbox.join("held-2.json").exists(),
    );
    assert!(
        stopped.elapsed() >= Duration::from_secs(HOLD),
        "held-2 was answered {:?} after alpha stopped, before the hold of {HOLD} s could end",
        stopped.elapsed()
    );
    let (by_id, _) = answered_events(&env.root);
    assert_eq!(
        by_id.get("held-1"),
        None,
        "held-1 was answered by alpha: {by_id:?}"
    );
    assert_eq!(by_id.get("held-2"), Some(&1), "{by_id:?}");
    assert_eq!(by_id.get("fresh-1"), Some(&1), "{by_id:?}");
    alpha.signal(Signal::SIGCONT);
    alpha.wait_role("standby");
}

/// Awaits two heartbeat passes of `host`'s orchestratord, the first `span` from now.
fn orchestrator_passes(env: &TestEnv, host: &str, span: Duration) {
    crate::wait::passes(&env.root, host, "orchestratord.json", span);
}
