//! Writes that cannot conflict across a sync engine (issue 13): every log several machines
//! append to is one file per machine (`<stem>@<host>.<ext>`), readers merge them in time
//! order with the PRD-named files of an older store. Two "machines" are real processes with
//! different `AGENTSTORE_HOSTNAME`s on one store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use crate::harness::KillOnDrop;
use crate::wait::wait_until;
use queue_env::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `queue-manager` for `queue` as machine `host` (no bus, the direct launcher).
fn manager(env: &QueueEnv, queue: &str, host: &str) -> KillOnDrop {
    crate::daemons::queue_manager(&env.root, queue)
        .host(host)
        .spawn()
}

/// `orchestrator ARGS --format json` on machine `host`, parsed.
fn cli_json(env: &QueueEnv, host: &str, args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .args(["--format", "json", "--bus", "none", "--root"])
        .arg(&env.root)
        .env("HOME", env.dir.path())
        .env("AGENTSTORE_HOSTNAME", host)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "orchestrator {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn line_count(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

fn times_in_order(list: &[Value], what: &str) {
    let times: Vec<&str> = list
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap())
        .collect();
    for w in times.windows(2) {
        assert!(
            w[0] <= w[1],
            "{what} out of time order: {} > {}",
            w[0],
            w[1]
        );
    }
}

/// Two queue managers as two machines (alpha serves q1, beta q2), both running jobs and
/// failing invalid ones at the same time: each machine appends to its own events, errors and queue-log file
/// (no file is written by both, the PRD-named files are not appended to), and `list-events`
/// / `list-errors` show every line of every file — the older store's PRD-named files too —
/// in time order.
#[test]
fn two_machines_append_to_their_own_files_and_the_merged_view_is_complete_and_ordered() {
    let env = QueueEnv::new(4);
    let now = agentstore::model::Timestamp::now();
    let month = now.0.format("%Y-%m").to_string();
    // An older store's PRD-named files, with a line each: read, never lost. The errors line
    // is dated in the future and the events line at the month's start, so a reader that does
    // not order by time puts them in the wrong place.
    let legacy_error = json!({"timestamp": "2099-01-01T00:00:00Z", "type": "job",
        "id": "legacy-error", "error": "from before files were per machine"});
    std::fs::write(
        env.root.join("JSONValidation/errors.out"),
        format!("{legacy_error}\n"),
    )
    .unwrap();
    let legacy_event = json!({"timestamp": format!("{month}-01T00:00:00Z"), "event": "legacy",
        "host": "oldhost", "daemon": "orchestratord", "pid": 1});
    let logs = env.root.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join(format!("events-{month}.jsonl")),
        format!("{legacy_event}\n"),
    )
    .unwrap();
    // A user's own line in the PRD-named queue log.
    std::fs::write(logs.join("queue-q1.log"), "2000-01-01T00:00:00Z old line\n").unwrap();

    let mut q2 = agentstore::model::QueueConfig::defaults("q2");
    q2.worker_count = 4;
    q2.launcher = Some(agentstore::model::Launcher::Direct);
    env.store().add_queue(q2).unwrap();
    let jobs = |q: &str, state: &str| env.root.join(format!("Queues/{q}/Jobs/{state}_jobs"));
    let count = |state: &str| {
        ["q1", "q2"]
            .iter()
            .map(|q| {
                agentstore::store::scan_dir(&jobs(q, state))
                    .map(|s| s.documents.len())
                    .unwrap_or(0)
            })
            .sum::<usize>()
    };
    let (good, bad) = (24, 6);
    for i in 0..good {
        let q = ["q1", "q2"][i % 2];
        agentstore::store::write_json_atomic(
            &jobs(q, "queued").join(format!("ok-{i:02}.json")),
            &noop(0.0),
        )
        .unwrap();
    }
    for i in 0..bad {
        let q = ["q1", "q2"][i % 2];
        std::fs::write(
            jobs(q, "queued").join(format!("bad-{i}.json")),
            r#"{"config": 1}"#,
        )
        .unwrap();
    }
    let alpha = manager(&env, "q1", "alpha");
    let beta = manager(&env, "q2", "beta");
    wait_until(Duration::from_secs(90), "every job to end", || {
        count("finished") + count("failed") == good + bad && count("running") == 0
    });
    // The workers' last events landed (a worker writes its job_finished after the move).
    crate::wait::files(
        &[&env.root.join("logs")],
        crate::wait::LOADED,
        "a job_finished event of every good job",
        || {
            let events = crate::wait::events(&env.root);
            (0..good).all(|i| {
                let id = format!("ok-{i:02}");
                events
                    .iter()
                    .any(|e| e["job_id"] == id.as_str() && e["event"] == "job_finished")
            })
        },
    );
    drop(alpha);
    drop(beta);

    // One file per machine, for each log; the PRD-named files hold only the old lines.
    let log_names = names(&logs);
    for host in ["alpha", "beta"] {
        let q = if host == "alpha" { "q1" } else { "q2" };
        for want in [
            format!("events-{month}@{host}.jsonl"),
            format!("queue-{q}@{host}.log"),
        ] {
            assert!(log_names.contains(&want), "{want} missing in {log_names:?}");
        }
    }
    assert_eq!(line_count(&logs.join(format!("events-{month}.jsonl"))), 1);
    assert_eq!(line_count(&logs.join("queue-q1.log")), 1);
    assert_eq!(line_count(&env.root.join("JSONValidation/errors.out")), 1);
    let err_names: Vec<String> = names(&env.root.join("JSONValidation"))
        .into_iter()
        .filter(|n| n.starts_with("errors"))
        .collect();
    assert!(
        err_names
            .iter()
            .all(|n| ["errors.out", "errors@alpha.out", "errors@beta.out"].contains(&n.as_str())),
        "{err_names:?}"
    );

    // The merged events: every line of every file, in time order.
    let v = cli_json(&env, "gamma", &["list-events"]);
    let events = v["events"].as_array().unwrap();
    assert_eq!(v["unreadable"], json!([]), "{v:#}");
    let on_disk: usize = log_names
        .iter()
        .filter(|n| n.starts_with(&format!("events-{month}")))
        .map(|n| line_count(&logs.join(n)))
        .sum();
    assert_eq!(events.len(), on_disk, "every event line is shown");
    times_in_order(events, "events");
    assert_eq!(
        events[0]["event"], "legacy",
        "the month's first event leads"
    );
    let mut hosts = BTreeMap::<&str, usize>::new();
    for e in events {
        *hosts.entry(e["host"].as_str().unwrap()).or_default() += 1;
    }
    assert!(
        hosts.contains_key("alpha") && hosts.contains_key("beta"),
        "{hosts:?}"
    );
    // Each job ended once, whichever machine ran it.
    for i in 0..good {
        let id = format!("ok-{i:02}");
        let ends = events
            .iter()
            .filter(|e| e["job_id"] == id.as_str() && e["event"] == "job_finished")
            .count();
        assert_eq!(ends, 1, "{id}: {ends} job_finished events");
    }

    // The merged errors: the old line last (it is dated 2099), each invalid job logged.
    let v = cli_json(&env, "gamma", &["list-errors"]);
    let errors = v["errors"].as_array().unwrap();
    let on_disk: usize = err_names
        .iter()
        .map(|n| line_count(&env.root.join("JSONValidation").join(n)))
        .sum();
    assert_eq!(errors.len(), on_disk, "every errors line is shown");
    times_in_order(errors, "errors");
    assert_eq!(errors.last().unwrap()["id"], "legacy-error");
    assert_eq!(errors.last().unwrap()["host"], json!(null));
    for i in 0..bad {
        let id = format!("bad-{i}");
        assert!(
            errors.iter().any(|e| e["id"] == id.as_str()
                && ["alpha", "beta"].contains(&e["host"].as_str().unwrap_or(""))),
            "{id} not in {v:#}"
        );
    }

    // The daemon log read back from both machines and the old file, ordered.
    let store = env.store();
    let lines = store.read_daemon_log("queue-q1.log").unwrap();
    assert_eq!(lines[0].text, "2000-01-01T00:00:00Z old line");
    let from: std::collections::BTreeSet<_> = lines.iter().map(|l| l.host.clone()).collect();
    assert_eq!(
        from,
        [None, Some("alpha".to_string())].into_iter().collect()
    );
    assert!(
        store
            .read_daemon_log("queue-q2.log")
            .unwrap()
            .iter()
            .all(|l| l.host.as_deref() == Some("beta"))
    );
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

fn sweeps(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" sweep: "))
        .count()
}

/// queue.json is the user's: the manager writes its runtime to this machine's
/// `Queues/<q>/runtime@<host>.json`, only when it changed. A user's edit of queue.json made
/// between two loops is kept byte for byte (and obeyed), an idle manager rewrites nothing
/// over several loops, and `view-queue` (from another machine) shows the config with the
/// runtime.
#[test]
fn the_runtime_is_written_apart_only_on_change_and_a_users_config_edit_survives() {
    let env = QueueEnv::new(2);
    env.edit_queue(|q| q.config.rest_interval = 1);
    let qf = env.root.join("Queues/q1/queue.json");
    let rt = env.root.join("Queues/q1/runtime@alpha.json");
    let log = env.root.join("logs/queue-q1@alpha.log");
    let mut alpha = manager(&env, "q1", "alpha");
    let pid = alpha.0.id();
    wait_until(Duration::from_secs(30), "the first loop's runtime", || {
        std::fs::read(&rt)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| {
                v["process_id"] == pid && v["host"] == "alpha" && v["last_update"].is_string()
            })
            && sweeps(&log) >= 1
    });

    // The user's edit, between loops, in their own formatting (an editor saving in place).
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&qf).unwrap()).unwrap();
    doc["config"]["worker_count"] = json!(3);
    let user_text = format!("{doc}\n");
    std::fs::write(&qf, &user_text).unwrap();
    // A job changes the runtime twice (one running, then none): both written, to the runtime.
    env.queue_job("j1", &noop(0.0));
    wait_until(Duration::from_secs(30), "j1 to finish", || {
        env.job_file("finished", "j1").exists()
    });
    wait_until(
        Duration::from_secs(10),
        "the runtime to count no running job",
        || {
            std::fs::read(&rt)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|v| v["active_jobs"] == 0 && v["last_update"].is_string())
        },
    );
    assert_eq!(
        std::fs::read_to_string(&qf).unwrap(),
        user_text,
        "queue.json is the user's, byte for byte"
    );
    let shown = cli_json(&env, "gamma", &["view-queue", "q1"]);
    assert_eq!(shown["config"]["worker_count"], 3, "{shown:#}");
    assert_eq!(shown["runtime"]["process_id"], pid, "{shown:#}");
    assert_eq!(shown["runtime"]["host"], "alpha", "{shown:#}");
    let listed = cli_json(&env, "gamma", &["list-queues"]);
    assert!(
        listed
            .to_string()
            .contains(&format!("\"process_id\":{pid}")),
        "{listed:#}"
    );

    // Idle: several loops, nothing rewritten.
    let (m_rt, m_qf, before) = (mtime(&rt), mtime(&qf), std::fs::read(&rt).unwrap());
    let s0 = sweeps(&log);
    wait_until(Duration::from_secs(40), "four idle loops", || {
        sweeps(&log) >= s0 + 4
    });
    assert_eq!(mtime(&rt), m_rt, "an idle manager rewrote its runtime");
    assert_eq!(std::fs::read(&rt).unwrap(), before);
    assert_eq!(mtime(&qf), m_qf, "an idle manager rewrote queue.json");

    // A clean stop says no manager is up, in the runtime; queue.json is still the user's.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(alpha.0.wait().unwrap().success());
    let v: Value = serde_json::from_slice(&std::fs::read(&rt).unwrap()).unwrap();
    assert_eq!(v["process_id"], json!(null), "{v:#}");
    assert_eq!(std::fs::read_to_string(&qf).unwrap(), user_text);
}

/// Two queue managers as two machines serving the SAME queue of one shared store (a shared
/// filesystem: one inode, as a bind mount or NFS, declared by `machines.shared_filesystem`),
/// several workers each, many short jobs
/// queued at once: each job is claimed by exactly one manager before a worker is spawned, so
/// it runs exactly once (one `job_started`, one worker end), ends in `finished_jobs/`, and
/// nothing is doubled (no collision copy in `failed_jobs/`) or left behind.
#[test]
fn two_machines_serving_one_queue_run_each_job_exactly_once() {
    let env = QueueEnv::new(4);
    machines_config(&env.root, "  shared_filesystem: true\n");
    let (_alpha, _beta) = (manager(&env, "q1", "alpha"), manager(&env, "q1", "beta"));
    // Both serve the queue before the jobs arrive, so both see every one of them.
    wait_until(Duration::from_secs(30), "both managers beating", || {
        ["alpha", "beta"].iter().all(|h| {
            env.root
                .join(format!("machines/{h}/queue-manager.q1.json"))
                .is_file()
        })
    });
    let n = 60;
    let ids: Vec<String> = (0..n).map(|i| format!("same-{i:02}")).collect();
    // Each job holds its slot a moment, so neither machine can run them all alone.
    for id in &ids {
        env.queue_job(id, &noop(0.3));
    }
    wait_until(Duration::from_secs(150), "every job ended", || {
        env.count("queued") == 0
            && env.count("running") == 0
            && env.count("finished") + env.count("failed") >= n
    });
    // A late second start would come after the first run ended: both machines' passes for
    // 2 s more.
    for host in ["alpha", "beta"] {
        manager_passes(&env.root, host, "q1", Duration::from_secs(2));
    }
    let failed = names(&env.dir("failed"));
    assert!(failed.is_empty(), "jobs failed or doubled: {failed:?}");
    assert_eq!(env.count("finished"), n);
    assert_eq!(env.count("queued") + env.count("running"), 0);
    let events = events(&env.root);
    let mut starts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &events {
        if e["event"] == "job_started" {
            starts
                .entry(e["job_id"].as_str().unwrap().to_string())
                .or_default()
                .push(e["host"].as_str().unwrap_or("?").to_string());
        }
    }
    let twice: Vec<_> = starts.iter().filter(|(_, h)| h.len() != 1).collect();
    assert!(twice.is_empty(), "jobs started more than once: {twice:?}");
    assert_eq!(starts.len(), n, "every job started once: {starts:?}");
    // Both machines took part (else the test proves nothing about two of them).
    let by_host = |h: &str| starts.values().filter(|v| v[0] == h).count();
    assert!(
        by_host("alpha") > 0 && by_host("beta") > 0,
        "alpha ran {}, beta {}",
        by_host("alpha"),
        by_host("beta")
    );
    for id in &ids {
        let j = env.job("finished", id);
        assert_eq!(j["runtime"]["status"], "finished", "{id}: {j}");
    }
}

/// Appends a `machines:` section to config.yaml: a beat a second, stale after 2 s, plus `extra`.
fn machines_config(root: &Path, extra: &str) {
    let cfg = root.join("config.yaml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 2\n");
    text.push_str(extra);
    std::fs::write(&cfg, text).unwrap();
}

/// The same queue served from two machines of a store NOT declared one filesystem (a sync
/// engine, where a claim's rename is not atomic across machines): the manager that started
/// second stands down — says why once, starts nothing — while the first serves the queue, and
/// takes over (says so) when the first has been silent for the lost-job grace; each job still
/// runs once.
#[test]
fn over_a_sync_engine_the_second_machine_stands_down_until_the_first_is_gone() {
    let env = QueueEnv::new(2);
    // Gone after the lost-job grace (not merely the stale time of 2 s): 6 s here.
    machines_config(&env.root, "  lost_job_grace_seconds: 6\n");
    let alpha = manager(&env, "q1", "alpha");
    wait_until(Duration::from_secs(30), "alpha beating", || {
        env.root
            .join("machines/alpha/queue-manager.q1.json")
            .is_file()
    });
    let _beta = manager(&env, "q1", "beta");
    let said = |event: &str, host: &str| {
        events(&env.root)
            .iter()
            .any(|e| e["event"] == event && e["host"] == host)
    };
    wait_until(Duration::from_secs(30), "beta standing down", || {
        said("queue_served_elsewhere", "beta")
    });
    let text = events(&env.root)
        .into_iter()
        .find(|e| e["event"] == "queue_served_elsewhere")
        .unwrap();
    let detail = text["detail"].as_str().unwrap();
    assert!(
        detail.contains("also served by machine alpha") && detail.contains("shared_filesystem"),
        "{detail}"
    );
    let n = 12;
    for i in 0..n {
        env.queue_job(&format!("a-{i:02}"), &noop(0.0));
    }
    wait_until(Duration::from_secs(60), "alpha ran them", || {
        env.count("finished") == n
    });
    let hosts = |prefix: &str| -> Vec<String> {
        let mut v: Vec<String> = events(&env.root)
            .iter()
            .filter(|e| {
                e["event"] == "job_started"
                    && e["job_id"].as_str().unwrap_or("").starts_with(prefix)
            })
            .map(|e| e["host"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        hosts("a-"),
        vec!["alpha".to_string(); n],
        "while alpha serves"
    );
    // alpha goes away: beta takes the queue over.
    drop(alpha);
    let gone_at = std::time::Instant::now();
    wait_until(Duration::from_secs(30), "beta taking over", || {
        said("queue_served_here", "beta")
    });
    // Not at the stale time: alpha may only be late, or beyond a partition and still starting
    // jobs. The grace runs from alpha's last heartbeat: up to a heartbeat (1 s) and a second
    // of whole-second rounding before the kill.
    assert!(
        gone_at.elapsed() >= Duration::from_secs(4),
        "beta took the queue over {:?} after alpha went silent, before the lost-job grace (6 s)",
        gone_at.elapsed()
    );
    for i in 0..4 {
        env.queue_job(&format!("b-{i:02}"), &noop(0.0));
    }
    wait_until(Duration::from_secs(60), "beta ran them", || {
        env.count("finished") == n + 4
    });
    assert_eq!(hosts("b-"), vec!["beta".to_string(); 4]);
    assert_eq!(env.count("failed"), 0);
}
