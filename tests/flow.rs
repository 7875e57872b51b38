//! Issue 17 end to end through the daemons: orchestratord and queue-manager (direct launcher)
//! as child processes on a private session bus, the CLI submitting and cancelling, the real
//! agent-worker running no-op jobs. Each test owns its HOME, store, runtime dir and bus.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{claude_env, common, fake_model};

use crate::daemons::Daemon;
use common::Researcher;
use common::bus::{KillOnDrop, PrivateBus, wait_for_name, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// A [`Researcher`]'s store and a private bus.
struct Flow {
    r: Researcher,
    bus: PrivateBus,
}

impl std::ops::Deref for Flow {
    type Target = Researcher;
    fn deref(&self) -> &Researcher {
        &self.r
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

impl Flow {
    /// A [`Researcher`]'s store with `workers` workers on queue poplar, and a private bus.
    fn new(workers: u32) -> Flow {
        let r = Researcher::new();
        r.env.ok(&[
            "set-queue",
            "poplar",
            "--worker-count",
            &workers.to_string(),
        ]);
        Flow {
            r,
            bus: PrivateBus::start(),
        }
    }

    fn scope(&self, c: &mut Command) {
        self.r.scope(c, Some(&self.bus.address));
        c.env("AGENT_STORE_ROOT", &self.env.root).env(
            "AGENTSTORE_COMMANDS_DIR",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("share/commands"),
        );
    }

    fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        self.scope(&mut c);
        // Wide enough for every list-jobs column beside a UUID (at 80, PRIORITY is left out).
        c.env("COLUMNS", "160").args(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "orchestrator {args:?}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    /// Runs the CLI with `args`, asserts it failed saying each of `says` on stderr; returns
    /// the stderr.
    fn refused(&self, args: &[&str], says: &[&str]) -> String {
        let o = self.cli(args);
        let err = text(&o.stderr);
        assert!(
            !o.status.success(),
            "orchestrator {args:?} succeeded: {err}"
        );
        for s in says {
            assert!(err.contains(s), "orchestrator {args:?}: {s:?} not in {err}");
        }
        err
    }

    /// Asserts that a no-op research-code job with `extra` options is refused saying each of
    /// `says`.
    fn submit_refused(&self, extra: &[&str], says: &[&str]) {
        let mut args = vec!["research-code", "--project", "P", "--jobtype", "noop"];
        args.extend_from_slice(extra);
        self.refused(&args, says);
    }

    /// Submits a no-op research-code job with `extra` options; returns its id.
    fn submit(&self, extra: &[&str]) -> String {
        let mut args = vec!["research-code", "--project", "P", "--jobtype", "noop"];
        args.extend_from_slice(extra);
        let out = self.ok(&args);
        let first = out.lines().next().unwrap_or_default();
        first
            .strip_prefix("Job queued: ")
            .unwrap_or_else(|| panic!("no job id in {out:?}"))
            .to_string()
    }

    fn orchestratord(&self) -> KillOnDrop {
        let d = self.daemon(Daemon::Orchestratord, &["--idle-exit", "0"]);
        wait_for_name(&self.bus, "org.agentstore.Orchestrator1");
        d
    }

    fn queue_manager(&self) -> KillOnDrop {
        let d = self.daemon(
            Daemon::QueueManager,
            &["--queue", "poplar", "--launcher", "direct"],
        );
        wait_for_name(&self.bus, "org.agentstore.Queue.poplar");
        d
    }

    /// The queue manager, its jobs running the real Claude Code CLI against the fake
    /// Anthropic server at `base_url` (queue poplar's `claude_cli_path` set to it).
    fn queue_manager_with_claude(&self, base_url: &str) -> KillOnDrop {
        let claude = claude_env::require_claude();
        self.env.allow_claude(&claude);
        self.ok(&[
            "set-queue",
            "poplar",
            "--claude-cli-path",
            claude.to_str().unwrap(),
        ]);
        let mut c = crate::daemons::unit_like(Daemon::QueueManager)
            .args(["--queue", "poplar", "--launcher", "direct"])
            .command();
        self.scope(&mut c);
        c.envs(claude_env::claude_env(&self.env.home, base_url));
        let d = KillOnDrop(c.spawn().unwrap());
        wait_for_name(&self.bus, "org.agentstore.Queue.poplar");
        d
    }

    fn daemon(&self, d: Daemon, args: &[&str]) -> KillOnDrop {
        let mut c = crate::daemons::unit_like(d).args(args).command();
        self.scope(&mut c);
        KillOnDrop(c.spawn().unwrap())
    }

    fn path(&self, state: &str, id: &str) -> PathBuf {
        self.env
            .root
            .join(format!("Queues/poplar/Jobs/{state}_jobs/{id}.json"))
    }

    /// Waits for job `id` to reach `state`; fails at once when it ends the other way.
    fn wait_state(&self, id: &str, state: &str) -> Value {
        let p = self.path(state, id);
        let other = match state {
            "finished" => Some(self.path("failed", id)),
            "failed" => Some(self.path("finished", id)),
            _ => None,
        };
        wait_until(LONG, &format!("job {id} {state}"), || {
            if let Some(o) = other.as_ref().filter(|o| o.is_file()) {
                panic!("job {id} ended the other way: {}", read(o));
            }
            p.is_file()
        });
        read(&p)
    }

    /// Asserts that no attempt of job `id` was made (no document is `retry_of` it).
    fn assert_not_retried(&self, id: &str, why: &str) {
        assert!(
            !self
                .all_jobs()
                .iter()
                .any(|j| j["config"]["retry_of"] == id),
            "{why}"
        );
    }

    /// Every job document of the queue, any state.
    fn all_jobs(&self) -> Vec<Value> {
        let mut v = Vec::new();
        for s in ["queued", "running", "finished", "failed"] {
            let d = self.env.root.join(format!("Queues/poplar/Jobs/{s}_jobs"));
            for e in std::fs::read_dir(d).unwrap().flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.ends_with(".json") && !n.starts_with('.') {
                    v.push(read(&e.path()));
                }
            }
        }
        v
    }
}

/// Priority: with one worker, jobs queued low, normal, high (in that order, so the high one is
/// the newest) start high, normal, low; list-jobs shows the priority in text and JSON.
#[test]
fn one_worker_starts_the_highest_priority_first() {
    let f = Flow::new(1);
    let _orch = f.orchestratord();
    let low = f.submit(&["--priority", "low"]);
    let normal = f.submit(&[]);
    let high = f.submit(&["--priority", "high"]);
    f.submit_refused(&["--priority", "urgent"], &["urgent"]);
    for id in [&low, &normal, &high] {
        wait_until(LONG, "job queued", || f.path("queued", id).is_file());
    }
    assert_eq!(read(&f.path("queued", &high))["config"]["priority"], 10);
    assert_eq!(read(&f.path("queued", &low))["config"]["priority"], -10);
    assert_eq!(read(&f.path("queued", &normal))["config"]["priority"], 0);
    let listing = f.ok(&["list-jobs"]);
    let line = |id: &str| {
        listing
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not in {listing}"))
            .to_string()
    };
    assert!(
        listing.lines().next().unwrap().contains("PRIORITY"),
        "{listing}"
    );
    assert!(line(&high).contains(" high "), "{listing}");
    assert!(line(&low).contains(" low "), "{listing}");
    assert!(line(&normal).contains(" normal "), "{listing}");
    let json: Value = serde_json::from_str(&f.ok(&["--format", "json", "list-jobs"])).unwrap();
    let pri = |id: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .unwrap()["config"]["priority"]
            .clone()
    };
    assert_eq!(pri(&high), 10);
    assert_eq!(pri(&normal), 0);

    let _qm = f.queue_manager();
    let starts: Vec<(String, String)> = [&low, &normal, &high]
        .iter()
        .map(|id| {
            let j = f.wait_state(id, "finished");
            (
                j["runtime"]["start_time"].as_str().unwrap().to_string(),
                id.to_string(),
            )
        })
        .collect();
    let mut order = starts.clone();
    order.sort();
    let order: Vec<&str> = order.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(order, [&high, &normal, &low], "{starts:?}");
}

/// Dependencies: A ← B ← C with B failing (its timeout); C fails with "dependency B failed",
/// D (after B, --after-any) runs anyway; unknown ids are refused at submission.
#[test]
fn a_chain_with_a_failure_in_the_middle() {
    let f = Flow::new(2);
    let _orch = f.orchestratord();
    f.submit_refused(
        &["--after", "no-such-job"],
        &["unknown job no-such-job", "after"],
    );
    let a = f.submit(&[]);
    let b = f.submit(&["--after", &a, "--timeout", "1"]);
    let c = f.submit(&["--after", &b]);
    let d = f.submit(&["--after", &format!("{a},{b}"), "--after-any"]);
    let _qm = f.queue_manager();
    let ja = f.wait_state(&a, "finished");
    let jb = f.wait_state(&b, "failed");
    let jc = f.wait_state(&c, "failed");
    let jd = f.wait_state(&d, "finished");
    let t = |j: &Value, k: &str| j["runtime"][k].as_str().unwrap().to_string();
    assert!(t(&jb, "error").starts_with("Job timeout"), "{jb}");
    assert!(
        t(&jb, "start_time") >= t(&ja, "finish_time"),
        "B started before A ended"
    );
    assert_eq!(t(&jc, "error"), format!("dependency {b} failed"));
    assert!(jc["runtime"]["start_time"].is_null(), "C never ran: {jc}");
    assert!(
        t(&jd, "start_time") >= t(&jb, "finish_time"),
        "D started before B ended"
    );

    // `retry B` by hand queues B again and C with it (C failed only because of B); the new C
    // follows B's new attempt: B fails again (same timeout), so C fails again the same way.
    let out = f.ok(&["--format", "json", "retry", &b]);
    let retried: Vec<Value> = serde_json::from_str(&out).unwrap();
    let of: Vec<&str> = retried
        .iter()
        .map(|r| r["retry_of"].as_str().unwrap())
        .collect();
    assert_eq!(of, [b.as_str(), c.as_str()], "{out}");
    let b2 = retried[0]["job_id"].as_str().unwrap();
    let c2 = retried[1]["job_id"].as_str().unwrap();
    let jb2 = f.wait_state(b2, "failed");
    assert_eq!(jb2["config"]["attempt"], 2);
    let jc2 = f.wait_state(c2, "failed");
    assert_eq!(t(&jc2, "error"), format!("dependency {b} failed"));
    assert!(
        t(&jc2, "finish_time") >= t(&jb2, "finish_time"),
        "C2 did not wait for B2"
    );
    f.refused(&["retry", &b], &["already retried"]);
}

/// Retry: a job whose worker is killed with SIGKILL is tried again as a new document
/// (attempt 2, retry_of the first, which stays failed); a cancelled job is not retried.
#[test]
fn a_killed_worker_is_retried_and_a_cancelled_job_is_not() {
    let f = Flow::new(2);
    let _orch = f.orchestratord();
    let _qm = f.queue_manager();
    let r = f.submit(&["--max-attempts", "2"]);
    let running = f.wait_state(&r, "running");
    let pid = i32::try_from(running["runtime"]["process_id"].as_u64().unwrap()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let failed = f.wait_state(&r, "failed");
    assert_eq!(failed["runtime"]["error"], "Worker harness process died");
    // The retry is written before the failure, but it may be starting already: for a few
    // milliseconds a start claim, in no state folder.
    let mut retry = Value::Null;
    wait_until(Duration::from_secs(10), &format!("a retry of {r}"), || {
        if let Some(j) = f
            .all_jobs()
            .into_iter()
            .find(|j| j["config"]["retry_of"] == r.as_str())
        {
            retry = j;
        }
        !retry.is_null()
    });
    assert_eq!(retry["config"]["attempt"], 2);
    let rid = retry["id"].as_str().unwrap().to_string();
    assert_ne!(rid, r);
    let done = f.wait_state(&rid, "finished");
    assert_eq!(
        done["config"]["task_description"],
        failed["config"]["task_description"]
    );
    // History is not rewritten: the first attempt is still the failed document it was.
    assert_eq!(read(&f.path("failed", &r)), failed);

    let k = f.submit(&["--max-attempts", "3"]);
    f.wait_state(&k, "running");
    f.ok(&["cancel-job", &k]);
    let cancelled = f.wait_state(&k, "failed");
    assert!(
        cancelled["runtime"]["error"]
            .as_str()
            .unwrap()
            .starts_with("Job cancelled by"),
        "{cancelled}"
    );
    f.assert_not_retried(&k, "a cancelled job was retried");
    // By hand it may be tried again: a new document, attempt 2, that runs to the end.
    let out = f.ok(&["retry", &k]);
    let k2 = out
        .strip_prefix("Job queued: ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let done = f.wait_state(&k2, "finished");
    assert_eq!(done["config"]["retry_of"], k.as_str());
    assert_eq!(done["config"]["attempt"], 2);
    assert_eq!(read(&f.path("failed", &k)), cancelled);
}

/// A job document ended `days` ago, handled or not.
fn ended_job(days: i64, state: &str, handled: bool) -> Value {
    let end = chrono::Utc::now() - chrono::TimeDelta::days(days);
    let t = end.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut j: Value = serde_json::from_str(include_str!("fixtures/test-job-001.json")).unwrap();
    j["config"]["project"] = "P".into();
    j["config"]["queue_time"] = t.clone().into();
    j["runtime"]["status"] = state.into();
    j["runtime"]["start_time"] = t.clone().into();
    j["runtime"]["finish_time"] = t.into();
    if handled {
        j["runtime"]["handled"] = true.into();
    }
    j
}

/// Archiving: old finished/failed jobs move into archive/YYYY-MM/, recent and unhandled ones
/// stay; --dry-run moves nothing; a second run moves nothing; `list-jobs --archived` shows
/// them and the plain listing no longer does; a job may still wait for an archived one.
#[test]
fn archive_moves_old_ended_jobs_by_month() {
    let f = Flow::new(1);
    let put = |state: &str, id: &str, j: &Value| {
        std::fs::write(f.path(state, id), serde_json::to_vec_pretty(j).unwrap()).unwrap()
    };
    let old_done = ended_job(40, "finished", true);
    put("finished", "old-done", &old_done);
    let mut old_failed = ended_job(45, "failed", false);
    old_failed["config"]["jobtype"] = "noop".into();
    put("failed", "old-failed", &old_failed);
    put(
        "finished",
        "old-unhandled",
        &ended_job(40, "finished", false),
    );
    put("finished", "new-done", &ended_job(3, "finished", true));
    let before = f.ok(&["list-jobs"]);
    assert!(before.contains("old-done"), "{before}");
    let dry = f.ok(&["archive", "--older-than", "30d", "--dry-run"]);
    assert!(dry.contains("2 of 4 ended jobs would move"), "{dry}");
    assert!(
        f.path("finished", "old-done").is_file(),
        "dry run moved a file"
    );
    f.refused(&["archive", "--older-than", "30y"], &["30y"]);

    let out = f.ok(&["archive", "--older-than", "30d"]);
    assert!(out.contains("2 of 4 ended jobs moved"), "{out}");
    assert!(out.contains("1 finished but not yet handled"), "{out}");
    let month = |days: i64| {
        (chrono::Utc::now() - chrono::TimeDelta::days(days))
            .format("%Y-%m")
            .to_string()
    };
    let arch = f.env.root.join("Queues/poplar/Jobs/archive");
    let done = arch.join(month(40)).join("finished_jobs/old-done.json");
    assert!(done.is_file(), "{}", done.display());
    assert_eq!(read(&done), old_done, "moved, not rewritten");
    assert!(
        arch.join(month(45))
            .join("failed_jobs/old-failed.json")
            .is_file()
    );
    assert!(!f.path("finished", "old-done").exists());
    assert!(f.path("finished", "old-unhandled").is_file());
    assert!(f.path("finished", "new-done").is_file());
    let again = f.ok(&["archive", "--older-than", "30d"]);
    assert!(again.contains("0 of 2 ended jobs moved"), "{again}");

    let live = f.ok(&["list-jobs"]);
    assert!(
        !live.contains("old-done") && live.contains("new-done"),
        "{live}"
    );
    let archived = f.ok(&["list-jobs", "--archived"]);
    assert!(
        archived.contains("old-done") && archived.contains("old-failed"),
        "{archived}"
    );
    assert!(!archived.contains("new-done"), "{archived}");
    let json: Value =
        serde_json::from_str(&f.ok(&["--format", "json", "list-jobs", "--archived"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2, "{json}");
    // An archived job is still a job of the store: view-job and logs show it.
    let shown: Value =
        serde_json::from_str(&f.ok(&["--format", "json", "view-job", "old-done"])).unwrap();
    assert_eq!(shown["runtime"]["status"], "finished", "{shown}");
    assert!(f.ok(&["view-job", "old-failed"]).contains("failed"));
    f.ok(&["logs", "old-failed"]);
    // PRD §10: only the project's owner (or an admin) may retry its jobs.
    f.ok(&[
        "add-user",
        "bob",
        "--name",
        "B",
        "--email",
        "b@x.org",
        "--permissions",
        "user",
    ]);
    f.ok(&["login", "bob"]);
    f.refused(
        &["retry", "old-failed"],
        &["only the owner of project P or an admin can retry"],
    );
    f.ok(&["login", "chenry"]);

    let _orch = f.orchestratord();
    let _qm = f.queue_manager();
    let after = f.submit(&["--after", "old-done"]);
    f.wait_state(&after, "finished");
    // ... and may be retried (a new live job) once: its retry's id stays taken after the
    // retry is archived too, so the same attempt is never made twice.
    let out = f.ok(&["--format", "json", "retry", "old-failed"]);
    let retried: Vec<Value> = serde_json::from_str(&out).unwrap();
    let r = retried[0]["job_id"].as_str().unwrap().to_string();
    let done = f.wait_state(&r, "finished");
    assert_eq!(done["config"]["retry_of"], "old-failed");
    wait_until(LONG, "the retry handled", || {
        read(&f.path("finished", &r))["runtime"]["handled"] == true
    });
    // Ended before the cut-off (times have whole seconds): the clock past the second after
    // the retry's end.
    let ended: chrono::DateTime<chrono::Utc> =
        read(&f.path("finished", &r))["runtime"]["finish_time"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
    wait_until(LONG, "the clock a second past the retry's end", || {
        chrono::Utc::now() >= ended + chrono::Duration::seconds(1)
    });
    let moved = f.ok(&["archive", "--older-than", "0s"]);
    assert!(moved.contains(&r), "{moved}");
    f.refused(&["retry", "old-failed"], &["already retried"]);
}

/// A document dropped straight into queued_jobs/ is never checked at submission: one that
/// waits for itself, two that wait for each other and three in a ring fail naming the
/// cycle instead of waiting forever; an `after` entry that is no job id fails the job naming
/// the field; empty ids on the command line are refused, never dropped.
#[test]
fn dependency_cycles_in_dropped_documents_fail_instead_of_waiting() {
    let f = Flow::new(1);
    for after in ["", "a,,b", ","] {
        f.submit_refused(&["--after", after], &["empty job id"]);
    }
    assert_eq!(
        std::fs::read_dir(f.env.root.join("messaging/inbox"))
            .unwrap()
            .count(),
        0,
        "a refused command left a message"
    );
    f.submit_refused(&["--max-attempts", "0"], &["max-attempts"]);

    let drop = |id: &str, after: &[&str]| {
        let mut j = ended_job(0, "queued", false);
        j["id"] = id.into();
        j["config"]["jobtype"] = "noop".into();
        j["config"]["after"] = serde_json::json!(after);
        j["runtime"] = serde_json::json!({"status": "queued", "start_time": null,
            "finish_time": null, "process_id": null, "llm_process_id": null,
            "error": null, "output": null});
        let tmp = f.env.root.join(format!("Queues/poplar/Jobs/.{id}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
        std::fs::rename(&tmp, f.path("queued", id)).unwrap();
    };
    drop("self", &["self"]);
    drop("x", &["y"]);
    drop("y", &["x"]);
    drop("ra", &["rb"]);
    drop("rb", &["rc"]);
    drop("rc", &["ra"]);
    drop("dot", &["../finished_jobs/self"]);
    drop("free", &[]);
    let _orch = f.orchestratord();
    let _qm = f.queue_manager();
    let err = |id: &str| {
        f.wait_state(id, "failed")["runtime"]["error"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(err("self"), "dependency cycle self -> self");
    let ring = [err("ra"), err("rb"), err("rc")];
    assert!(
        ring.iter().any(|e| e.starts_with("dependency cycle ")
            && ["ra", "rb", "rc"].iter().all(|id| e.contains(id))),
        "{ring:?}"
    );
    let pair = [err("x"), err("y")];
    assert!(
        pair.contains(&"dependency cycle x -> y -> x".to_string())
            || pair.contains(&"dependency cycle y -> x -> y".to_string()),
        "{pair:?}"
    );
    let dot = err("dot");
    assert!(
        dot.contains("/config/after/0") && dot.contains("../finished_jobs/self"),
        "{dot}"
    );
    f.wait_state("free", "finished");
}

/// Copies `dir` into a map path → bytes (for before/after comparisons), logs left out.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut m = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if rel.starts_with("logs")
                || (rel.starts_with("JSONValidation")
                    && rel
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("errors")))
            {
                continue;
            }
            if p.is_dir() {
                todo.push(p);
            } else {
                m.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    m
}

/// Turns the store at `root` (made by this build's `init`) into a v0.5 store: no
/// `schema_version` in config.yaml, the previous job and queue schema copies. Returns the
/// config.yaml it wrote.
fn make_v05(root: &Path) -> String {
    let cfg = root.join("config.yaml");
    let yaml = std::fs::read_to_string(&cfg).unwrap();
    let old_yaml: String = yaml
        .lines()
        .filter(|l| !l.starts_with("schema_version") && !l.contains("orchestrator migrate"))
        .map(|l| format!("{l}\n"))
        .collect();
    let old_yaml = old_yaml.trim_end().to_string() + "\n";
    std::fs::write(&cfg, &old_yaml).unwrap();
    for k in ["job", "queue"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("tests/fixtures/v0.5-schemas/{k}.schema.json")),
            root.join(format!("JSONValidation/Schemas/{k}.schema.json")),
        )
        .unwrap();
    }
    old_yaml
}

/// Migration: a v0.5 store (no schema_version, the previous schemas, the PRD's own example
/// job) is read as it is; new fields are refused there with a pointer to `migrate`;
/// `migrate --dry-run` changes nothing; `migrate` upgrades the schema copies, the ended jobs
/// and config.yaml (diffed), a second run changes nothing; a store newer than this build is
/// refused by the daemons and the CLI with a clear message.
#[test]
fn migrate_upgrades_a_v05_store_once_and_newer_stores_are_refused() {
    let f = Flow::new(1);
    let root = f.env.root.clone();
    let cfg = root.join("config.yaml");
    let old_yaml = make_v05(&root);
    let mut prd_job: Value =
        serde_json::from_str(include_str!("fixtures/test-job-001.json")).unwrap();
    prd_job["config"]["project"] = "P".into();
    prd_job["runtime"]["status"] = "finished".into();
    prd_job["runtime"]["finish_time"] = "2025-10-25T10:00:05Z".into();
    std::fs::write(
        f.path("finished", "test-job-001"),
        serde_json::to_vec_pretty(&prd_job).unwrap(),
    )
    .unwrap();

    {
        let _orch = f.orchestratord();
        // The v0.5 store works as it is: the job gets no new field.
        let plain = f.submit(&[]);
        let doc = read(&f.path("queued", &plain));
        assert!(
            doc.get("schema_version").is_none() && doc["config"].get("priority").is_none(),
            "{doc}"
        );
        f.submit_refused(&["--priority", "high"], &["orchestrator migrate"]);
    }
    // As the daemons left it (the completion handler marked it handled).
    let pre = read(&f.path("finished", "test-job-001"));
    let v05 = snapshot(&root);
    let dry = f.ok(&["migrate", "--dry-run"]);
    assert!(dry.contains("store schema 0.5 → 0.6"), "{dry}");
    assert!(
        dry.contains("would upgrade Queues/poplar/Jobs/finished_jobs/test-job-001.json"),
        "{dry}"
    );
    assert_eq!(snapshot(&root), v05, "--dry-run changed the store");

    let out = f.ok(&["migrate"]);
    assert!(
        out.contains("2 schema copies and 1 job documents upgraded"),
        "{out}"
    );
    assert!(out.contains("1 queued/running left as they are"), "{out}");
    let v06 = snapshot(&root);
    let changed: Vec<String> = v06
        .keys()
        .filter(|k| v05.get(*k) != v06.get(*k))
        .map(|k| k.display().to_string())
        .collect();
    assert_eq!(
        changed,
        [
            "JSONValidation/Schemas/job.schema.json",
            "JSONValidation/Schemas/job.schema.json.v0.5.bak",
            "JSONValidation/Schemas/queue.schema.json",
            "JSONValidation/Schemas/queue.schema.json.v0.5.bak",
            "Queues/poplar/Jobs/finished_jobs/test-job-001.json",
            "config.yaml",
        ],
    );
    let job = read(&f.path("finished", "test-job-001"));
    assert_eq!(job["schema_version"], "0.6");
    assert_eq!(job["config"]["priority"], 0);
    let mut without = job.clone();
    without
        .as_object_mut()
        .unwrap()
        .shift_remove("schema_version");
    without["config"]
        .as_object_mut()
        .unwrap()
        .shift_remove("priority");
    assert_eq!(without, pre, "nothing else changed");
    assert_eq!(
        serde_json::to_string(&without).unwrap(),
        serde_json::to_string(&pre).unwrap(),
        "the key order is kept"
    );
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap(),
        format!(
            "{old_yaml}\n# schema version of this store's documents (orchestrator migrate)\nschema_version: \"0.6\"\n"
        )
    );
    let again = f.ok(&["migrate"]);
    assert!(
        again.contains("0 schema copies and 0 job documents upgraded, 1 already current"),
        "{again}"
    );
    assert_eq!(snapshot(&root), v06, "a second migrate changed the store");
    {
        let _orch = f.orchestratord();
        let high = f.submit(&["--priority", "high"]);
        assert_eq!(read(&f.path("queued", &high))["schema_version"], "0.6");
    }

    // A store from the future.
    let y = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("\"0.6\"", "\"0.9\"");
    std::fs::write(&cfg, y).unwrap();
    let runs: [(Daemon, &[&str]); 2] = [
        (Daemon::Orchestratord, &["--idle-exit", "0"]),
        (
            Daemon::QueueManager,
            &["--queue", "poplar", "--launcher", "direct"],
        ),
    ];
    for (bin, args) in runs {
        let mut c = crate::daemons::unit_like(bin)
            .args(args)
            .stderr(Stdio::piped())
            .command();
        f.scope(&mut c);
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{bin:?} ran on a newer store");
        let err = text(&o.stderr);
        assert!(
            err.contains("0.9") && err.contains("newer agentstore") && err.contains("config.yaml"),
            "{bin:?}: {err}"
        );
    }
    f.refused(&["list-jobs"], &["newer agentstore"]);
}

/// The pipeline with the fake Claude (it answers with the prompt it got): four dependent
/// jobs; create-prd's prompt carries the research result, create-tasks and implement-tasks
/// read the PRD the create-prd step made (implement-tasks also the tasks); view-prd shows
/// the chain.
#[test]
fn the_pipeline_feeds_each_step_from_the_one_before() {
    let f = Flow::new(2);
    let fake = common::fake_claude();
    f.ok(&[
        "set-queue",
        "poplar",
        "--claude-cli-path",
        fake.to_str().unwrap(),
    ]);
    let _orch = f.orchestratord();
    let _qm = f.queue_manager();
    let out = f.ok(&["pipeline", "--project", "P", "--task", "Make it fast"]);
    let ids: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Job queued: "))
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 4, "{out}");
    assert!(out.contains(&format!("view-prd {}", ids[1])), "{out}");
    let output = |id: &str| {
        f.wait_state(id, "finished")["runtime"]["output"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let research = output(&ids[0]);
    assert!(research.contains("Make it fast"), "{research}");
    let prd_step = output(&ids[1]);
    assert!(
        prd_step.contains(&format!("Code research (job {})", ids[0])),
        "{prd_step}"
    );
    let tasks = output(&ids[2]);
    assert!(
        tasks.contains("Create implementation tasks for the PRD of: Make it fast"),
        "{tasks}"
    );
    assert!(
        tasks.contains("## document"),
        "the PRD is in the create-tasks prompt: {tasks}"
    );
    // The last step fans out (issue 30): create-tasks' answer (the fake echoes its prompt,
    // whose format example is a one-task list) became a task document, and the step ended
    // naming that task's job, whose prompt is the task with the PRD as context.
    let implement = output(&ids[3]);
    let task_job = implement
        .strip_prefix("Fanned out into 1 task job(s)")
        .and_then(|r| r.split("example-task → ").nth(1))
        .unwrap_or_else(|| panic!("the implement step did not fan out: {implement}"))
        .trim()
        .to_string();
    let task = output(&task_job);
    assert!(
        task.contains("Implement task example-task of PRD") && task.contains("## document"),
        "the task and its PRD are in the task's prompt: {task}"
    );
    let prd_path = f
        .env
        .root
        .join(format!("projects/P/finished_prds/{}.json", ids[1]));
    wait_until(LONG, "the PRD complete", || prd_path.is_file());
    let view = f.ok(&["view-prd", &ids[1]]);
    assert!(view.contains("pipeline:"), "{view}");
    let steps = [
        "research-code",
        "create-prd",
        "create-tasks",
        "implement-tasks",
    ];
    for (step, id) in steps.iter().zip(&ids) {
        assert!(
            view.lines()
                .any(|l| l.contains(step) && l.contains(id.as_str()) && l.contains("finished")),
            "{step} {id} not finished in {view}"
        );
    }
}

/// The pipeline with the REAL Claude Code CLI against the fake Anthropic server: each of the
/// four steps runs its shipped command file (its text is in what the model saw), and each
/// step's prompt carries what the step before it answered (research → PRD → tasks).
#[test]
fn the_pipeline_runs_the_real_claude_code_cli_at_every_step() {
    let answers = [
        "R1 research: the code keeps its data in sqlite",
        "P2 PRD: make the queries fast with an index",
        // create-tasks answers with its task list as one JSON block (issue 30).
        "T3 tasks: 1. add the index 2. test it\n\n```json\n{\"tasks\": [{\"id\": \"add-index\", \"title\": \"Add the index\"}, {\"id\": \"test-it\", \"title\": \"Test it\", \"depends_on\": [\"add-index\"]}]}\n```",
        // The last step fans out into one job per task (issue 30): these are their answers.
        "I4 implemented: index added",
        "I5 tested: the index is used",
    ];
    let server = fake_model::FakeModel::start(
        answers
            .iter()
            .fold(fake_model::Script::new(), |s, a| s.text(a)),
    );
    let f = Flow::new(1);
    let _orch = f.orchestratord();
    let _qm = f.queue_manager_with_claude(&server.base_url());
    let out = f.ok(&["pipeline", "--project", "P", "--task", "Make queries fast"]);
    let ids: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Job queued: "))
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 4, "{out}");
    let step = f.wait_state(&ids[3], "finished");
    let said = step["runtime"]["output"].as_str().unwrap().to_string();
    assert!(said.starts_with("Fanned out into 2 task job(s)"), "{said}");
    let job_of = |t: &str| {
        said.split(&format!("{t} → "))
            .nth(1)
            .and_then(|r| r.split([',', ' ']).next())
            .unwrap_or_else(|| panic!("no job for {t} in {said}"))
            .to_string()
    };
    let jobs = [
        ids[0].clone(),
        ids[1].clone(),
        ids[2].clone(),
        job_of("add-index"),
        job_of("test-it"),
    ];
    for (id, answer) in jobs.iter().zip(answers) {
        let j = f.wait_state(id, "finished");
        let output = j["runtime"]["output"].as_str().unwrap();
        let result: Value = serde_json::from_str(output.trim()).unwrap();
        assert_eq!(result["result"], answer, "{j}");
        assert_eq!(result["is_error"], false, "{j}");
    }
    let loops: Vec<String> = server
        .message_requests()
        .into_iter()
        .filter(|r| r.has_tools())
        .map(|r| r.text())
        .collect();
    assert_eq!(
        loops.len(),
        5,
        "one agent-loop request per step, then one per task: {loops:#?}"
    );
    let commands = [
        "code-researcher",
        "prd-creator",
        "task-creator",
        "task-implementer",
        "task-implementer",
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("share/commands");
    for (i, (cmd, prompt)) in commands.iter().zip(&loops).enumerate() {
        let file = std::fs::read_to_string(dir.join(format!("{cmd}.md"))).unwrap();
        let first = file
            .lines()
            .skip_while(|l| *l != "---")
            .skip(1)
            .skip_while(|l| *l != "---")
            .nth(1)
            .unwrap();
        let first = first.split('$').next().unwrap().trim();
        assert!(
            prompt.contains(first),
            "step {i} ({cmd}) did not get its command file: {prompt}"
        );
        assert!(prompt.contains("Make queries fast"), "step {i}: {prompt}");
        if i >= 3 {
            // create-tasks' answer became task documents (issue 30): each task's job gets
            // its task alone, with the PRD as context.
            let t = ["add-index", "test-it"][i - 3];
            assert!(
                prompt.contains(&format!("Implement task {t} of PRD"))
                    && prompt.contains(answers[1]),
                "task {t} ({cmd}) did not get its task and the PRD: {prompt}"
            );
        } else if i > 0 {
            let before = answers[i - 1];
            assert!(
                prompt.contains(before),
                "step {i} ({cmd}) did not get the answer of the step before ({before:?}): {prompt}"
            );
        }
    }
    let view = f.ok(&["view-prd", &ids[1]]);
    assert!(view.contains(answers[1]), "{view}");
    assert!(view.contains("pipeline:"), "{view}");
}

/// `api_error` retries: a job that asks for them (`--retry-on api_error`) is tried again
/// after the model API failed, and its second attempt finishes; a job with the default
/// policy (every kind but api_error) is not.
#[test]
fn an_api_error_is_retried_only_when_asked() {
    let server = fake_model::FakeModel::start(
        fake_model::Script::new()
            .error(529, "overloaded_error", "Overloaded")
            .text("second attempt worked")
            .error(529, "overloaded_error", "Overloaded"),
    );
    let f = Flow::new(1);
    let _orch = f.orchestratord();
    let _qm = f.queue_manager_with_claude(&server.base_url());
    let claude = |extra: &[&str]| {
        let mut args = vec!["research-code", "--project", "P", "--task", "x"];
        args.extend_from_slice(extra);
        let out = f.ok(&args);
        out.lines()
            .find_map(|l| l.strip_prefix("Job queued: "))
            .unwrap_or_else(|| panic!("no job id in {out:?}"))
            .to_string()
    };
    let a = claude(&["--max-attempts", "2", "--retry-on", "api_error"]);
    let failed = f.wait_state(&a, "failed");
    let err = failed["runtime"]["error"].as_str().unwrap();
    assert!(err.contains("API Error"), "{failed}");
    wait_until(LONG, "the retry of the api_error", || {
        f.all_jobs()
            .iter()
            .any(|j| j["config"]["retry_of"] == a.as_str())
    });
    let retry = f
        .all_jobs()
        .into_iter()
        .find(|j| j["config"]["retry_of"] == a.as_str())
        .unwrap();
    let rid = agentstore::model::flow::retry_id(&a);
    assert_eq!(retry["config"]["attempt"], 2, "{retry}");
    let done = f.wait_state(&rid, "finished");
    assert_eq!(done["config"]["attempt"], 2);
    assert!(
        done["runtime"]["output"]
            .as_str()
            .unwrap()
            .contains("second attempt worked"),
        "{done}"
    );

    let b = claude(&["--max-attempts", "2"]);
    let failed = f.wait_state(&b, "failed");
    assert!(
        failed["runtime"]["error"]
            .as_str()
            .unwrap()
            .contains("API Error"),
        "{failed}"
    );
    // The manager decides a retry as the job ends (the retry document is written before the
    // failed one moves): none was made.
    f.assert_not_retried(&b, "a default policy retried an api_error");
}

/// Pipeline steps through the inbox (no daemon when the CLI ran, or a synced folder that
/// delivers files in any order) arriving last step first: each step waits for the one
/// before it to arrive instead of failing with "dependency … not found in any queue", and
/// the four run in order.
#[test]
fn pipeline_steps_arriving_out_of_order_through_the_inbox_run_in_order() {
    let f = Flow::new(2);
    let fake = common::fake_claude();
    f.ok(&[
        "set-queue",
        "poplar",
        "--claude-cli-path",
        fake.to_str().unwrap(),
    ]);
    // No daemon yet: the CLI checks and writes the four messages into the inbox.
    let out = f.ok(&["pipeline", "--project", "P", "--task", "Make it fast"]);
    let ids: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Job queued: "))
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 4, "{out}");
    let inbox = f.env.root.join("messaging/inbox");
    let held = f.env.dir.path().join("held");
    std::fs::create_dir_all(&held).unwrap();
    let mut by_step = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(&inbox).unwrap().flatten() {
        let msg = read(&e.path());
        let step = msg["content"]["pipeline"]["step"]
            .as_str()
            .unwrap()
            .to_string();
        let to = held.join(e.file_name());
        std::fs::rename(e.path(), &to).unwrap();
        by_step.insert(step, to);
    }
    assert_eq!(by_step.len(), 4, "{by_step:?}");
    let steps = [
        "research-code",
        "create-prd",
        "create-tasks",
        "implement-tasks",
    ];
    let _orch = f.orchestratord();
    let _qm = f.queue_manager();
    let exists = |id: &str| {
        ["queued", "running", "finished", "failed"]
            .iter()
            .any(|s| f.path(s, id).is_file())
    };
    for i in (0..4).rev() {
        let file = &by_step[steps[i]];
        std::fs::rename(file, inbox.join(file.file_name().unwrap())).unwrap();
        wait_until(LONG, &format!("job of step {}", steps[i]), || {
            exists(&ids[i])
        });
        if i > 0 {
            // The manager sees the queued step at once (its folder changed); before the fix
            // it failed it there and then. Its pass over it counts it queued (its runtime):
            // then it still waits.
            let failed = f.path("failed", &ids[i]);
            crate::wait::files(
                &[&f.env.root.join("Queues/poplar"), failed.parent().unwrap()],
                LONG,
                &format!("the manager's pass over step {}", steps[i]),
                || failed.is_file() || queued_jobs(&f.env.root) == 4 - i,
            );
            assert!(
                !f.path("failed", &ids[i]).is_file(),
                "step {} failed waiting for the step before: {}",
                steps[i],
                read(&f.path("failed", &ids[i]))
            );
        }
    }
    let mut last_end = String::new();
    for id in &ids {
        let j = f.wait_state(id, "finished");
        let start = j["runtime"]["start_time"].as_str().unwrap().to_string();
        assert!(
            start >= last_end,
            "{id} started before the step before ended"
        );
        last_end = j["runtime"]["finish_time"].as_str().unwrap().to_string();
    }
}

/// `migrate` on hostile documents: one written by a newer agentstore (never downgraded), a
/// cut-short one, one over the size limit and a symlink to a file outside the store are left
/// byte for byte as they were, each named in a clear error (exit 1), while the plain v0.5
/// job beside them is upgraded. A queued document of a newer schema is refused by the queue
/// manager, naming both versions.
#[test]
fn migrate_leaves_hostile_documents_as_they_are_and_never_downgrades() {
    let f = Flow::new(1);
    make_v05(&f.env.root);
    let plain = ended_job(2, "finished", true);
    std::fs::write(
        f.path("finished", "plain"),
        serde_json::to_vec_pretty(&plain).unwrap(),
    )
    .unwrap();
    let mut future = plain.clone();
    future["schema_version"] = "0.9".into();
    let hostile: [(&str, Vec<u8>); 3] = [
        ("future", serde_json::to_vec_pretty(&future).unwrap()),
        ("broken", b"{\"config\": {\"project\": ".to_vec()),
        ("huge", {
            let mut b = b"{\"id\": \"huge\", \"pad\": \"".to_vec();
            b.resize(17 << 20, b'a');
            b.extend_from_slice(b"\"}");
            b
        }),
    ];
    for (id, bytes) in &hostile {
        std::fs::write(f.path("finished", id), bytes).unwrap();
    }
    let outside = f.env.dir.path().join("outside.json");
    std::fs::write(&outside, b"{\"not\": \"a job\"}").unwrap();
    std::os::unix::fs::symlink(&outside, f.path("finished", "link")).unwrap();

    let o = f.cli(&["migrate"]);
    let out = text(&o.stdout);
    let err = format!("{out}{}", text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = |id: &str| {
        err.lines()
            .find(|l| l.contains(&format!("finished_jobs/{id}.json")))
            .unwrap_or_else(|| panic!("{id} not named: {err}"))
            .to_string()
    };
    assert!(
        line("future").contains("\"0.9\" is newer than this agentstore's (0.6)"),
        "{err}"
    );
    assert!(line("huge").contains("larger than the 16 MiB"), "{err}");
    assert!(line("broken").contains("EOF"), "{err}");
    for (id, bytes) in &hostile {
        assert!(
            std::fs::read(f.path("finished", id)).unwrap() == *bytes,
            "{id} was changed"
        );
    }
    assert!(
        std::fs::symlink_metadata(f.path("finished", "link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&outside).unwrap(), b"{\"not\": \"a job\"}");
    assert_eq!(read(&f.path("finished", "plain"))["schema_version"], "0.6");
    assert!(out.contains("1 job documents upgraded"), "{out}");
    // archive reads the same files: the oversized one is named as such there too.
    let o = f.cli(&["archive", "--older-than", "1d", "--dry-run"]);
    let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(
        all.lines()
            .any(|l| l.contains("finished_jobs/huge.json") && l.contains("larger than the 16 MiB")),
        "{all}"
    );

    // A queued document of a newer schema: refused by the queue manager, naming both.
    let mut q = ended_job(0, "queued", false);
    q["schema_version"] = "0.9".into();
    q["config"]["jobtype"] = "noop".into();
    q["runtime"] = serde_json::json!({"status": "queued", "start_time": null,
        "finish_time": null, "process_id": null, "llm_process_id": null,
        "error": null, "output": null});
    std::fs::write(
        f.path("queued", "from-future"),
        serde_json::to_vec_pretty(&q).unwrap(),
    )
    .unwrap();
    let _orch = f.orchestratord();
    let _qm = f.queue_manager();
    let failed = f.wait_state("from-future", "failed");
    let why = failed["runtime"]["error"].as_str().unwrap();
    assert!(
        why.contains("/schema_version") && why.contains("newer agentstore") && why.contains("0.6"),
        "{why}"
    );
    assert!(
        failed["runtime"]["start_time"].is_null(),
        "it ran: {failed}"
    );
}

/// A hostile store: entries that are a FIFO and a symbolic link out of the store (and a
/// folder named like a document, which scanners pass by as a folder),
/// a state folder and an archive month folder that are links to folders outside. `migrate`
/// (dry or not) and `archive` name each of them as left alone, exit 1, and touch nothing
/// outside the store; before, they passed them by in silence and reported 0 errors.
#[test]
fn migrate_and_archive_name_what_they_will_not_read_instead_of_passing_it_by() {
    let f = Flow::new(1);
    make_v05(&f.env.root);
    let plain = ended_job(40, "finished", true);
    std::fs::write(
        f.path("finished", "plain"),
        serde_json::to_vec_pretty(&plain).unwrap(),
    )
    .unwrap();
    let outside = f.env.dir.path().join("outside");
    std::fs::create_dir_all(outside.join("failed")).unwrap();
    std::fs::create_dir_all(outside.join("month/finished_jobs")).unwrap();
    let old = serde_json::to_vec_pretty(&ended_job(40, "failed", true)).unwrap();
    std::fs::write(outside.join("failed/away.json"), &old).unwrap();
    std::fs::write(outside.join("month/finished_jobs/away2.json"), &old).unwrap();
    std::fs::write(outside.join("secret.json"), &old).unwrap();
    let jobs = f.env.root.join("Queues/poplar/Jobs");
    nix::unistd::mkfifo(
        &f.path("finished", "fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    std::fs::create_dir(f.path("finished", "dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.json"), f.path("finished", "link")).unwrap();
    let failed_dir = jobs.join("failed_jobs");
    for e in std::fs::read_dir(&failed_dir).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    std::fs::remove_dir(&failed_dir).unwrap();
    std::os::unix::fs::symlink(outside.join("failed"), &failed_dir).unwrap();
    // The month `plain` would be archived into.
    let month = plain["runtime"]["finish_time"].as_str().unwrap()[..7].to_string();
    std::fs::create_dir_all(jobs.join("archive")).unwrap();
    std::os::unix::fs::symlink(outside.join("month"), jobs.join("archive").join(&month)).unwrap();
    let before = snapshot(&outside);

    let named = |all: &str, what: &str, says: &str| {
        assert!(
            all.lines().any(|l| l.contains(what) && l.contains(says)),
            "{what} not named with {says:?}:\n{all}"
        );
    };
    // Runs `args`: exit 1, the refused entries and the linked state folder named; the output.
    let names_the_refused = |args: &[&str]| {
        let o = f.cli(args);
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(1), "{args:?}: {all}");
        for id in ["fifo", "link"] {
            named(
                &all,
                &format!("finished_jobs/{id}.json"),
                "not a regular file",
            );
        }
        named(&all, "Jobs/failed_jobs", "cannot be read");
        all
    };
    for args in [&["migrate", "--dry-run"][..], &["migrate"][..]] {
        let all = names_the_refused(args);
        named(&all, &format!("archive/{month}"), "not a month folder");
        assert!(all.contains("4 errors"), "{all}");
    }
    assert_eq!(read(&f.path("finished", "plain"))["schema_version"], "0.6");
    let o = f.cli(&["migrate", "--dry-run", "--format", "json"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["errors"].as_array().unwrap().len(), 4, "{r}");
    names_the_refused(&["archive", "--older-than", "30d", "--dry-run"]);
    // The move into the linked month folder is refused, saying why; the job stays.
    let all = names_the_refused(&["archive", "--older-than", "30d"]);
    named(
        &all,
        &format!("archive/{month}/finished_jobs"),
        "left in place",
    );
    assert!(f.path("finished", "plain").is_file());
    assert!(
        std::fs::symlink_metadata(f.path("finished", "link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        snapshot(&outside),
        before,
        "a file outside the store changed"
    );
}

/// `migrate` killed with SIGKILL half way through a store of 200 ended v0.5 jobs (held there
/// by the debug build's fault hook), then run again, leaves exactly the store an
/// uninterrupted run makes (every file compared).
#[test]
fn migrate_killed_midway_then_run_again_equals_one_uninterrupted_run() {
    const N: usize = 200;
    const HALF: usize = N / 2;
    let f = Flow::new(1);
    make_v05(&f.env.root);
    let dir = f.path("finished", "x").parent().unwrap().to_path_buf();
    for i in 0..N {
        let mut j = ended_job(2, "finished", true);
        j["config"]["task_description"] = format!("job {i}").into();
        std::fs::write(
            dir.join(format!("j{i:04}.json")),
            serde_json::to_vec_pretty(&j).unwrap(),
        )
        .unwrap();
    }
    let twin = f.env.dir.path().join("twin");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&f.env.root)
        .arg(&twin)
        .status()
        .unwrap();
    assert!(cp.success());
    f.ok(&["--root", twin.to_str().unwrap(), "migrate"]);

    let upgraded = || {
        (0..N)
            .filter(|i| {
                std::fs::read(dir.join(format!("j{i:04}.json")))
                    .is_ok_and(|b| b.windows(16).any(|w| w == b"\"schema_version\""))
            })
            .count()
    };
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    f.scope(&mut c);
    let mut child = c
        .env("AGENTSTORE_TEST_FAULT", format!("hold-migrate:{HALF}"))
        .arg("migrate")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(LONG, "half the jobs upgraded", || upgraded() == HALF);
    assert!(child.try_wait().unwrap().is_none(), "migrate did not stop");
    child.kill().unwrap();
    child.wait().unwrap();
    let done = upgraded();
    assert_eq!(done, HALF);
    assert!(
        !std::fs::read_to_string(f.env.root.join("config.yaml"))
            .unwrap()
            .contains("schema_version"),
        "config.yaml was upgraded before the jobs"
    );
    let out = f.ok(&["migrate"]);
    assert!(
        out.contains(&format!(
            "{} job documents upgraded, {done} already current",
            N - done
        )),
        "{out}"
    );
    let (a, b) = (snapshot(&f.env.root), snapshot(&twin));
    assert_eq!(a.len(), b.len());
    for (k, v) in &b {
        assert!(
            a.get(k) == Some(v),
            "{} differs from the uninterrupted run",
            k.display()
        );
    }
}

/// The issue's test: `migrate` on a copy of a v0.5 store made of the PRD's own examples
/// (§4.2 messages, §4.3 project, §4.4 PRD, §4.5 queue, §4.6 job — queued, and the same job
/// ended), with the before/after diff (`diff -ruN`) printed and kept in
/// target/artifacts/migrate-prd-v0.5.diff: outside the schema copies, it adds only
/// `schema_version` and `priority` to the ended job and `schema_version` to config.yaml.
#[test]
fn migrate_on_a_copy_of_the_prds_example_store_shows_its_diff() {
    let env = common::TestEnv::empty();
    env.ok(&["init"]);
    let root = env.root.clone();
    make_v05(&root);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/valid");
    let put = |from: &str, to: &str| {
        let p = root.join(to);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(corpus.join(from), &p).unwrap();
    };
    put("user/chenry.json", "users/chenry.json");
    put(
        "project/prd_4_3_ModelSEEDpy.json",
        "projects/ModelSEEDpy/project.json",
    );
    for d in ["queued_prds", "running_prds", "finished_prds"] {
        std::fs::create_dir_all(root.join("projects/ModelSEEDpy").join(d)).unwrap();
    }
    put(
        "prd/prd_4_4_example.json",
        "projects/ModelSEEDpy/queued_prds/550e8400-e29b-41d4-a716-446655440000.json",
    );
    for d in ["queued", "running", "finished", "failed"] {
        std::fs::create_dir_all(root.join(format!("Queues/poplar/Jobs/{d}_jobs"))).unwrap();
    }
    put("queue/prd_4_5_poplar.json", "Queues/poplar/queue.json");
    put(
        "job/prd_4_6_example.json",
        "Queues/poplar/Jobs/queued_jobs/test-job-001.json",
    );
    let mut ended: Value =
        serde_json::from_slice(&std::fs::read(corpus.join("job/prd_4_6_example.json")).unwrap())
            .unwrap();
    ended["runtime"]["status"] = "finished".into();
    ended["runtime"]["start_time"] = "2025-10-23T22:00:00Z".into();
    ended["runtime"]["finish_time"] = "2025-10-23T22:10:00Z".into();
    ended["runtime"]["output"] = "Documented the key components.".into();
    std::fs::write(
        root.join("Queues/poplar/Jobs/finished_jobs/test-job-000.json"),
        serde_json::to_string_pretty(&ended).unwrap() + "\n",
    )
    .unwrap();
    put(
        "message/prd_4_2_inbox_research_code.json",
        "messaging/processed_inbox/m-001.json",
    );
    put(
        "message/prd_4_2_outbox_response.json",
        "messaging/outbox/m-001.json",
    );
    // The example store is a valid v0.5 store as it is.
    env.ok(&["validate"]);

    let work = env.dir.path();
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    let copy = |to: &str| {
        let ok = Command::new("cp")
            .args(["-a", &name, to])
            .current_dir(work)
            .status()
            .unwrap();
        assert!(ok.success());
    };
    copy("before");
    let out = env.ok(&["migrate"]);
    assert!(
        out.contains("2 schema copies and 1 job documents upgraded"),
        "{out}"
    );
    assert!(out.contains("1 queued/running left as they are"), "{out}");
    let diff = |extra: &[&str]| {
        let o = Command::new("diff")
            .args(["-ruN", "--exclude=logs"])
            .args(extra)
            .args(["before", &name])
            .current_dir(work)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let full = diff(&[]);
    let art = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
    std::fs::create_dir_all(&art).unwrap();
    std::fs::write(art.join("migrate-prd-v0.5.diff"), &full).unwrap();
    let docs = diff(&["--exclude=JSONValidation"]);
    eprintln!("migrate on the PRD's example store, outside the schema copies:\n{docs}");
    let files: Vec<&str> = full
        .lines()
        .filter(|l| l.starts_with("diff "))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("before/")))
        .collect();
    assert_eq!(
        files,
        [
            "JSONValidation/Schemas/job.schema.json",
            "JSONValidation/Schemas/job.schema.json.v0.5.bak",
            "JSONValidation/Schemas/queue.schema.json",
            "JSONValidation/Schemas/queue.schema.json.v0.5.bak",
            "Queues/poplar/Jobs/finished_jobs/test-job-000.json",
            "config.yaml",
        ],
        "{full}"
    );
    let changed: Vec<&str> = docs
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .collect();
    assert_eq!(
        changed,
        [
            "+  \"schema_version\": \"0.6\",",
            "-    \"timeout_seconds\": 1800",
            "+    \"timeout_seconds\": 1800,",
            "+    \"priority\": 0",
            "+",
            "+# schema version of this store's documents (orchestrator migrate)",
            "+schema_version: \"0.6\"",
        ],
        "{docs}"
    );
    env.ok(&["validate"]);
}

/// The commands of issue 17 tell their output and exit status in `--help`, and the
/// orchestrator's man page (generated from the same clap definition) carries the exit status
/// of every command.
#[test]
fn upkeep_and_pipeline_help_tells_exit_status_and_the_man_page_too() {
    let f = Flow::new(1);
    for cmd in ["retry", "archive", "migrate", "pipeline"] {
        let help = f.ok(&[cmd, "--help"]);
        for want in [
            "Exit status:",
            "  0  ",
            "  1  ",
            "  2  a malformed command line",
        ] {
            assert!(help.contains(want), "{cmd} --help lacks {want:?}:\n{help}");
        }
        // `-h` stays short.
        assert!(!f.ok(&[cmd, "-h"]).contains("Exit status:"), "{cmd} -h");
    }
    assert!(
        f.ok(&["archive", "--help"])
            .contains("--format json: the whole report")
    );
    let top = f.ok(&["--help"]);
    assert!(
        top.contains("Exit status:") && top.contains("3  `daemon status`"),
        "{top}"
    );
    use clap::CommandFactory;
    let mut man = Vec::new();
    clap_mangen::Man::new(agentstore::cli::Cli::command())
        .render(&mut man)
        .unwrap();
    let man = String::from_utf8(man).unwrap();
    assert!(man.contains("Exit status:"), "{man}");
}

/// A job being started sits in its start claim (`Queues/<q>/.claimed/<host>/<id>.json`),
/// in no state folder, while its worker is placed: a dependency lookup then finds it queued.
/// A failed job whose retry is being started is not "failed" (its dependants wait for the
/// retry), and a dependency being started is not "not found".
#[test]
fn a_job_in_its_start_claim_is_queued_for_dependency_lookups() {
    use agentstore::queue::flow::{DepState, dependency_state, settled_state};
    let f = Flow::new(1);
    let store = agentstore::store::Store::open(&f.env.root).unwrap();
    let queues = store.queue_ids().unwrap();
    let b = "b-0001";
    let b2 = agentstore::model::flow::retry_id(b);
    std::fs::write(
        f.path("failed", b),
        serde_json::to_vec_pretty(&ended_job(0, "failed", false)).unwrap(),
    )
    .unwrap();
    let claims = f.env.root.join("Queues/poplar/.claimed/some-host");
    std::fs::create_dir_all(&claims).unwrap();
    let mut queued = ended_job(0, "queued", false);
    queued["runtime"] = serde_json::json!({"status": "queued", "start_time": null,
        "finish_time": null, "process_id": null, "llm_process_id": null,
        "error": null, "output": null});
    let claim = claims.join(format!("{b2}.json"));
    std::fs::write(&claim, serde_json::to_vec_pretty(&queued).unwrap()).unwrap();
    let after = vec![b.to_string()];
    assert_eq!(
        settled_state(&store, &queues, b).map(|(s, p)| (s.name(), p)),
        Some(("queued", claim.clone()))
    );
    assert_eq!(
        dependency_state(&store, &after, false, false, false),
        DepState::Waiting
    );
    // The retry moves on to running_jobs/ (the claim gone): still waited for.
    std::fs::rename(&claim, f.path("running", &b2)).unwrap();
    assert_eq!(
        dependency_state(&store, &after, false, false, false),
        DepState::Waiting
    );
    // It fails too: now B has failed for good.
    std::fs::rename(f.path("running", &b2), f.path("failed", &b2)).unwrap();
    assert_eq!(
        dependency_state(&store, &after, false, false, false),
        DepState::Failed(format!("dependency {b} failed"))
    );
    // A claim of the job itself (no retry involved) is queued, never "not found".
    std::fs::write(claims.join("c-0001.json"), b"{}").unwrap();
    assert_eq!(
        dependency_state(&store, &["c-0001".to_string()], false, false, false),
        DepState::Waiting
    );
}

/// The queue manager's count of poplar's queued jobs (its runtime).
fn queued_jobs(root: &Path) -> usize {
    agentstore::store::Store::open(root)
        .ok()
        .and_then(|s| s.queue("poplar").ok())
        .map_or(0, |q| q.runtime.queued_jobs as usize)
}
