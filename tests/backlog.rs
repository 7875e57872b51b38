//! Issue 33 (performance, backlog): a backlog of finished jobs nobody handled yet (a machine
//! back after a long time offline, a synced folder delivering a batch) is handled a batch at
//! a time with grouped durability, off the inbox's path. Checked by behaviour, never by
//! timing: an inbox message is answered while the backlog is still being handled, and
//! orchestratord killed (SIGKILL) again and again in the middle of grouped writes leaves
//! every job whole, handled once, recorded once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use queue_env::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A hang guard, not a timing assertion.
const LONG: Duration = Duration::from_secs(300);

fn orchestratord(root: &Path, home: &Path) -> KillOnDrop {
    crate::daemons::orchestratord(root)
        .env("HOME", home)
        .spawn()
}

/// A finished job nobody handled yet, its output naming it.
fn finished_job(id: &str) -> Value {
    let mut j = job("noop", json!({}));
    j["runtime"]["status"] = json!("finished");
    j["runtime"]["output"] = json!(format!("output of {id}"));
    j
}

/// `n` unhandled finished jobs `b-00000`…, written directly (as a sync engine delivers them).
fn backlog(env: &QueueEnv, n: usize) -> Vec<String> {
    let fin = env.dir("finished");
    std::fs::create_dir_all(&fin).unwrap();
    (0..n)
        .map(|i| {
            let id = format!("b-{i:05}");
            std::fs::write(
                fin.join(format!("{id}.json")),
                serde_json::to_vec(&finished_job(&id)).unwrap(),
            )
            .unwrap();
            id
        })
        .collect()
}

fn handled_logs(root: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(root.join("logs/handled-jobs")) {
        Ok(d) => d
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Every line of every handled-log, counted.
fn logged(root: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in handled_logs(root) {
        for l in std::fs::read_to_string(p).unwrap_or_default().lines() {
            *out.entry(l.to_string()).or_default() += 1;
        }
    }
    out
}

fn logged_count(root: &Path) -> usize {
    handled_logs(root)
        .iter()
        .map(|p| {
            std::fs::read(p)
                .unwrap_or_default()
                .iter()
                .filter(|b| **b == b'\n')
                .count()
        })
        .sum()
}

/// An inbox message written while orchestratord works through 4,000 unhandled finished
/// jobs is answered before the backlog is done: the inbox never waits on completion
/// handling. The backlog is then handled whole.
#[test]
fn the_inbox_is_answered_while_a_backlog_is_handled() {
    const N: usize = 4_000;
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let ids = backlog(&env, N);
    let _d = orchestratord(&env.root, &home);
    // The backlog is under way: its first batch is recorded.
    wait_until(LONG, "the first batch of the backlog recorded", || {
        logged_count(&env.root) > 0
    });
    let inbox = env.root.join("messaging/inbox");
    let answer = env.root.join("messaging/outbox/during-backlog.json");
    let msg = json!({"correlation_id": "during-backlog", "source": "user", "project": null,
                     "queue_time": "2025-10-25T10:00:00Z", "processed_time": null,
                     "command": "list-queues", "content": {}, "status": "queued",
                     "error": null});
    agentstore::store::write_json_atomic(&inbox.join("during-backlog.json"), &msg).unwrap();
    wait_until(LONG, "the answer", || answer.exists());
    let at_answer = logged_count(&env.root);
    assert!(
        at_answer < N,
        "the message was answered only after the whole backlog ({at_answer} of {N} handled)"
    );
    assert_eq!(read_json(&answer)["status"], "done");
    wait_until(LONG, "the whole backlog handled", || {
        logged_count(&env.root) >= N
    });
    let log = logged(&env.root);
    for id in [&ids[0], &ids[N / 2], &ids[N - 1]] {
        assert_eq!(log.get(&format!("{}/{id}", env.queue)), Some(&1), "{id}");
        let j = env.job("finished", id);
        assert_eq!(j["runtime"]["handled"], json!(true), "{id}");
        assert_eq!(j["runtime"]["output"], json!(format!("output of {id}")));
    }
}

/// orchestratord killed with SIGKILL as soon as each grouped write of a 3,000-job backlog
/// is recorded, and started again, until the backlog is done: at least one kill lands in
/// the middle of the backlog; afterwards every job is whole (its output kept, valid JSON,
/// `runtime.handled` set), in its folder once, recorded once in the handled-log, and has at
/// most one `job_handled` event (a flag on disk is never handled again; a batch cut off
/// before its sync is handled once, by the next process).
#[test]
fn kills_in_the_middle_of_grouped_writes_lose_nothing_and_repeat_nothing() {
    const N: usize = 3_000;
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let ids = backlog(&env, N);
    let mut kills_mid_backlog = 0;
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(
            runs < 200,
            "the backlog never finished across {runs} restarts"
        );
        let before = logged_count(&env.root);
        let d = orchestratord(&env.root, &home);
        wait_until(LONG, "a batch recorded (or the backlog done)", || {
            logged_count(&env.root) > before || logged_count(&env.root) >= N
        });
        let at_kill = logged_count(&env.root);
        drop(d); // SIGKILL, wherever the next batch is
        if at_kill >= N {
            break;
        }
        kills_mid_backlog += 1;
    }
    assert!(
        kills_mid_backlog >= 1,
        "no kill landed in the middle of the backlog ({runs} runs)"
    );
    // A last run after the kills: whatever a kill cut off is handled now.
    let _d = orchestratord(&env.root, &home);
    let fin = env.dir("finished");
    wait_until(LONG, "every job recorded after the last restart", || {
        logged(&env.root).len() >= N
    });
    let log = logged(&env.root);
    let twice: Vec<_> = log.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "recorded twice: {twice:?}");
    let mut handled_events: BTreeMap<String, usize> = BTreeMap::new();
    for e in events(&env.root) {
        if e["event"] == "job_handled" {
            *handled_events
                .entry(e["job_id"].as_str().unwrap_or("").to_string())
                .or_default() += 1;
        }
    }
    for id in &ids {
        assert_eq!(log.get(&format!("{}/{id}", env.queue)), Some(&1), "{id}");
        let j: Value =
            serde_json::from_slice(&std::fs::read(fin.join(format!("{id}.json"))).unwrap())
                .unwrap_or_else(|e| panic!("{id}: not whole after the kills: {e}"));
        assert_eq!(j["runtime"]["handled"], json!(true), "{id}");
        assert_eq!(
            j["runtime"]["output"],
            json!(format!("output of {id}")),
            "{id}"
        );
        assert!(
            handled_events.get(id).copied().unwrap_or(0) <= 1,
            "{id} handled twice"
        );
    }
    // Nothing else in the folder but dot-prefixed temp files a kill cut off (scanners skip
    // them; the next start removes them once stale).
    let names: Vec<String> = std::fs::read_dir(&fin)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(names.len(), N, "finished_jobs/ holds exactly the jobs");
}
