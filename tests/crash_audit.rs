//! The audit trail after a kill -9 (issue 34): every answer in the outbox has its one
//! `message_answered` event (and a job its one `job_created`), whatever step of answering a
//! message the orchestrator was killed at. Seen before: an answer with no event after a
//! kill -9 (`failover::after_a_kill_9_two_standbys_starting_together_elect_one` at load ~5):
//! the kill came between writing the answer and appending its record, and the next
//! orchestrator, finding the answer, only moved the message.
//!
//! * `killed_between_the_answer_and_its_record…`: the kill lands exactly there. A lock held
//!   on this machine's events file blocks the orchestrator in its append, right after the
//!   answer is durable; it is killed (SIGKILL) there, the lock let go, a new one started.
//! * `killed_at_any_step…`: a stream of messages while the orchestrator is killed again and
//!   again at arbitrary moments (each run hits different steps: claim, job created, answer
//!   written, recorded, moved); at the end every message has exactly one answer, one
//!   `message_answered` event, and each job one `job_created` event.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use crate::common;
use crate::harness::KillOnDrop;
use crate::wait::wait_until;
use common::TestEnv;
use common::bus::{PrivateBus, orchestratord_command, submit_over, wait_for_name};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(90);
const HOST: &str = "crashhost";

fn start(env: &TestEnv, bus: &PrivateBus) -> KillOnDrop {
    let child = orchestratord_command(bus, &env.root, &["--idle-exit", "0"])
        .env("AGENTSTORE_HOSTNAME", HOST)
        .env("HOME", &env.home)
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// research-code (a job) for even `i`, list-projects for odd.
fn message(i: usize) -> String {
    let command = if i.is_multiple_of(2) {
        "research-code"
    } else {
        "list-projects"
    };
    format!(
        r#"{{"correlation_id":"crash-{i:04}","source":"user","project":"TestProject","queue_time":"2025-10-25T11:{:02}:{:02}Z","processed_time":null,"command":"{command}","content":{{}},"status":"queued","error":null}}"#,
        i / 60 % 60,
        i % 60
    )
}

fn drop_message(root: &Path, i: usize) {
    let inbox = root.join("messaging/inbox");
    let tmp = inbox.join(format!(".crash-{i:04}.json.writing"));
    std::fs::write(&tmp, message(i)).unwrap();
    std::fs::rename(&tmp, inbox.join(format!("crash-{i:04}.json"))).unwrap();
}

fn documents(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Answers (outbox and processed_outbox) per correlation id, with their job ids.
fn answers(root: &Path) -> BTreeMap<String, (usize, Option<String>)> {
    let mut m: BTreeMap<String, (usize, Option<String>)> = BTreeMap::new();
    for dir in ["messaging/outbox", "messaging/processed_outbox"] {
        for n in documents(&root.join(dir)) {
            let v: Value =
                serde_json::from_slice(&std::fs::read(root.join(dir).join(&n)).unwrap()).unwrap();
            let e = m
                .entry(v["correlation_id"].as_str().unwrap().to_string())
                .or_default();
            e.0 += 1;
            e.1 = v["content"]["job_id"].as_str().map(str::to_string);
        }
    }
    m
}

/// (`message_answered` per correlation id, `job_created` per job id) over every events file.
fn events(root: &Path) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let (mut answered, mut created) = (BTreeMap::new(), BTreeMap::new());
    let logs = root.join("logs");
    for e in std::fs::read_dir(&logs).unwrap().filter_map(Result::ok) {
        let n = e.file_name().to_string_lossy().into_owned();
        let events_file = n.starts_with("events-") && n.ends_with(".jsonl") && e.path().is_file();
        if !events_file {
            continue;
        }
        for line in std::fs::read_to_string(logs.join(&n)).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            match e["event"].as_str() {
                Some("message_answered") => {
                    *answered
                        .entry(e["correlation_id"].as_str().unwrap().to_string())
                        .or_insert(0) += 1
                }
                Some("job_created") => {
                    *created
                        .entry(e["job_id"].as_str().unwrap().to_string())
                        .or_insert(0) += 1
                }
                _ => {}
            }
        }
    }
    (answered, created)
}

/// Every message 0..n answered once, recorded once, its job (if any) recorded once; nothing
/// left in the inbox.
fn assert_complete(root: &Path, n: usize) {
    let a = answers(root);
    let (answered, created) = events(root);
    for i in 0..n {
        let cid = format!("crash-{i:04}");
        let (count, job) = a.get(&cid).cloned().unwrap_or_default();
        assert_eq!(count, 1, "{cid}: answers {count}");
        assert_eq!(
            answered.get(&cid).copied().unwrap_or(0),
            1,
            "{cid}: message_answered events"
        );
        if i % 2 == 0 {
            let job = job.unwrap_or_else(|| panic!("{cid}: no job in its answer"));
            assert_eq!(
                created.get(&job).copied().unwrap_or(0),
                1,
                "{cid}: job_created events of {job}"
            );
        }
    }
    // Nothing left, not even a claim (`.claim@<host>@<name>`) of a killed process.
    let left: Vec<String> = std::fs::read_dir(root.join("messaging/inbox"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, Vec::<String>::new());
    // One job per research-code message, none made twice.
    let jobs = all_jobs(root);
    assert_eq!(jobs.len(), n.div_ceil(2), "{jobs:?}");
}

/// Every job document in every queue and state.
fn all_jobs(root: &Path) -> Vec<String> {
    let mut jobs = Vec::new();
    for q in std::fs::read_dir(root.join("Queues"))
        .unwrap()
        .filter_map(Result::ok)
    {
        for state in std::fs::read_dir(q.path().join("Jobs"))
            .unwrap()
            .filter_map(Result::ok)
        {
            jobs.extend(documents(&state.path()));
        }
    }
    jobs
}

/// This machine's events file of this month (`logs/events-YYYY-MM@<host>.jsonl`).
fn events_file(root: &Path) -> PathBuf {
    let month = chrono::Utc::now().format("%Y-%m");
    root.join(format!("logs/events-{month}@{HOST}.jsonl"))
}

#[test]
fn killed_between_the_answer_and_its_record_the_record_is_completed_on_restart() {
    use nix::fcntl::{Flock, FlockArg};
    let env = TestEnv::with_test_project();
    let bus = PrivateBus::start();
    let first = start(&env, &bus);
    drop_message(&env.root, 0);
    wait_until(LONG, "crash-0000 answered", || {
        documents(&env.root.join("messaging/processed_inbox")).len() == 1
    });
    // Hold this machine's events file: the next answer is written, then its record waits.
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(events_file(&env.root))
        .unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusive).unwrap();
    drop_message(&env.root, 2);
    let out = env.root.join("messaging/outbox/crash-0002.json");
    wait_until(LONG, "crash-0002's answer written", || out.exists());
    drop(first); // SIGKILL, blocked in the append
    drop(held);
    // The state the kill left: the answer, no record, the message not moved.
    let (answered, _) = events(&env.root);
    assert_eq!(answered.get("crash-0002"), None, "{answered:?}");
    assert!(
        !env.root
            .join("messaging/processed_inbox/crash-0002.json")
            .exists()
    );
    let _second = start(&env, &bus);
    drop_message(&env.root, 3);
    wait_until(LONG, "crash-0002 and 0003 moved", || {
        documents(&env.root.join("messaging/processed_inbox")).len() == 3
    });
    wait_until(LONG, "the records", || {
        let (a, _) = events(&env.root);
        a.contains_key("crash-0002") && a.contains_key("crash-0003")
    });
    // Message 1 was never written: check 0, 2, 3.
    let a = answers(&env.root);
    let (answered, created) = events(&env.root);
    for cid in ["crash-0000", "crash-0002", "crash-0003"] {
        assert_eq!(a.get(cid).map(|x| x.0), Some(1), "{cid}");
        assert_eq!(answered.get(cid), Some(&1), "{cid}: {answered:?}");
    }
    let job = a["crash-0002"].1.clone().unwrap();
    assert_eq!(created.get(&job), Some(&1), "{job}: {created:?}");
}

/// An events file that cannot take the record (a full disk in the soak of issue 34; here a
/// folder in its place, which fails the same append without root or a mount): the answer is
/// written, but the message stays in the inbox until its record is, so no answer is ever
/// left without its `message_answered`. Once the file takes lines again, the next pass
/// records each answer once and moves the messages; nothing is answered twice.
#[test]
fn an_answer_whose_record_cannot_be_written_keeps_its_message_until_it_is() {
    let env = TestEnv::with_test_project();
    let bus = PrivateBus::start();
    let _orchestrator = start(&env, &bus);
    drop_message(&env.root, 0);
    drop_message(&env.root, 1);
    wait_until(LONG, "crash-0000 and 0001 answered", || {
        documents(&env.root.join("messaging/processed_inbox")).len() == 2
    });
    let file = events_file(&env.root);
    let aside = file.with_extension("aside");
    std::fs::rename(&file, &aside).unwrap();
    std::fs::create_dir(&file).unwrap();
    // A job (2) and a listing (3): both answers are written, neither can be recorded.
    drop_message(&env.root, 2);
    drop_message(&env.root, 3);
    wait_until(LONG, "crash-0002 and 0003 answered", || {
        let a = answers(&env.root);
        a.contains_key("crash-0002") && a.contains_key("crash-0003")
    });
    // Each pass that meets them again (the loop's own wake) fails the same way: still here.
    let inbox = env.root.join("messaging/inbox");
    let stays = || {
        documents(&inbox) == ["crash-0002.json", "crash-0003.json"]
            && documents(&env.root.join("messaging/processed_inbox")).len() == 2
    };
    assert!(stays(), "inbox {:?}", documents(&inbox));
    let (answered, _) = events(&env.root);
    assert_eq!(answered.get("crash-0002"), None);
    // Room again: the folder goes, the file comes back.
    std::fs::remove_dir(&file).unwrap();
    std::fs::rename(&aside, &file).unwrap();
    drop_message(&env.root, 4);
    wait_until(LONG, "every message moved", || {
        documents(&env.root.join("messaging/processed_inbox")).len() == 5
    });
    assert_complete(&env.root, 5);
}

#[test]
fn killed_at_any_step_every_answer_has_one_record() {
    let env = TestEnv::with_test_project();
    let bus = PrivateBus::start();
    let mut n = 0;
    // Eight kills, each at a moment that depends on how far the last run got (a message is
    // dropped, then the kill comes once the outbox has grown by one, or two, …, or at
    // once): different steps of answering each time, on a loaded machine as on an idle one.
    for round in 0..8usize {
        let proc = start(&env, &bus);
        let before = answers(&env.root).len();
        for _ in 0..4 {
            drop_message(&env.root, n);
            n += 1;
        }
        let target = before + round % 4;
        wait_until(LONG, "some answers", || answers(&env.root).len() >= target);
        drop(proc); // SIGKILL
    }
    let _last = start(&env, &bus);
    wait_until(LONG, "every message moved", || {
        documents(&env.root.join("messaging/processed_inbox")).len() == n
    });
    wait_until(LONG, "every record", || events(&env.root).0.len() == n);
    assert_complete(&env.root, n);
}

/// `Submit` over D-Bus, as the soak's writers call it: (success, stdout + stderr).
fn submit_over_bus(address: &str, i: usize) -> (bool, String) {
    submit_over(address, &message(i))
}

/// Whether process `pid` waits for a file lock (`/proc/locks` lists a blocked waiter as
/// `N: -> FLOCK  ADVISORY  WRITE <pid> …`).
fn waits_for_a_lock(pid: u32) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&"->") && f.get(5) == Some(&pid.to_string().as_str())
    })
}

/// The D-Bus path (the soak's "unrecorded" after a kill -9, seen by arch5): a `Submit` wrote
/// its outbox copy, then was killed before its `message_answered`, and nothing ever wrote
/// the record. Now the record comes first: killed while its append waits (the events file
/// held), no answer is left without its record; the caller, who got no reply, submits again
/// with the same correlation id and gets the same job, answered and recorded once.
#[test]
fn a_dbus_submit_killed_before_its_record_leaves_no_answer_without_one() {
    use nix::fcntl::{Flock, FlockArg};
    let env = TestEnv::with_test_project();
    let bus = PrivateBus::start();
    let first = start(&env, &bus);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let (ok, out) = submit_over_bus(&bus.address, 0);
    assert!(ok, "{out}");
    wait_until(LONG, "crash-0000 recorded", || {
        events(&env.root).0.contains_key("crash-0000")
    });
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(events_file(&env.root))
        .unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusive).unwrap();
    let caller = {
        let address = bus.address.clone();
        std::thread::spawn(move || submit_over_bus(&address, 2).0)
    };
    let pid = first.0.id();
    wait_until(LONG, "the Submit waiting for the events file", || {
        waits_for_a_lock(pid)
    });
    // Where the kill lands: after the job was made, in the append of its record.
    let out = env.root.join("messaging/outbox/crash-0002.json");
    assert!(
        !out.exists(),
        "the answer was written before its record: killed now, it would never get one"
    );
    drop(first); // SIGKILL, blocked in the append
    drop(held);
    assert!(!caller.join().unwrap(), "the killed Submit answered");
    let (answered, _) = events(&env.root);
    assert_eq!(answered.get("crash-0002"), None, "{answered:?}");
    // The caller tries again with the same message: one job, one answer, one record each.
    let _second = start(&env, &bus);
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let (ok, out) = submit_over_bus(&bus.address, 2);
    assert!(ok, "{out}");
    wait_until(LONG, "crash-0002's answer and record", || {
        out_exists_with_record(&env.root, "crash-0002")
    });
    let a = answers(&env.root);
    let (answered, created) = events(&env.root);
    for cid in ["crash-0000", "crash-0002"] {
        assert_eq!(a.get(cid).map(|x| x.0), Some(1), "{cid}: {a:?}");
        assert_eq!(answered.get(cid), Some(&1), "{cid}: {answered:?}");
        let job = a[cid].1.clone().unwrap();
        assert_eq!(created.get(&job), Some(&1), "{job}: {created:?}");
    }
    let jobs = all_jobs(&env.root);
    assert_eq!(jobs.len(), 2, "one job per message: {jobs:?}");
}

fn out_exists_with_record(root: &Path, cid: &str) -> bool {
    answers(root).contains_key(cid) && events(root).0.contains_key(cid)
}
