//! Issue 17 end to end through the daemons: orchestratord and queue-manager (direct launcher)
//! as child processes on a private session bus, the CLI submitting and cancelling, the real
//! agent-worker running no-op jobs. Each test owns its HOME, store, runtime dir and bus.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::TestEnv;
use common::bus::{KillOnDrop, PrivateBus, wait_for_name, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

struct Flow {
    env: TestEnv,
    run_dir: PathBuf,
    bus: PrivateBus,
}

fn login() -> String {
    let o = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

impl Flow {
    /// A store with admin chenry (unix_user = whoever runs the test), project P in queue
    /// poplar with `workers` workers, and a private bus.
    fn new(workers: u32) -> Flow {
        let env = TestEnv::empty();
        env.ok(&["init"]);
        env.ok(&[
            "add-user",
            "chenry",
            "--name",
            "C",
            "--email",
            "c@x.org",
            "--permissions",
            "admin",
            "--unix-user",
            &login(),
        ]);
        let run_dir = env.dir.path().join("run");
        let project_dir = env.dir.path().join("project");
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::create_dir_all(&project_dir).unwrap();
        env.ok(&[
            "add-project",
            "P",
            "--directory",
            project_dir.to_str().unwrap(),
            "--owner",
            "chenry",
            "--default-queue",
            "poplar",
        ]);
        env.ok(&[
            "set-queue",
            "poplar",
            "--worker-count",
            &workers.to_string(),
        ]);
        Flow {
            env,
            run_dir,
            bus: PrivateBus::start(),
        }
    }

    fn scope(&self, c: &mut Command) {
        c.env("HOME", &self.env.home)
            .env("AGENT_STORE_ROOT", &self.env.root)
            .env("XDG_RUNTIME_DIR", &self.run_dir)
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", self.run_dir.join("no-system-bus").display()),
            )
            .env("DBUS_SESSION_BUS_ADDRESS", &self.bus.address)
            .env_remove("AGENTSTORE_BUS")
            .env_remove("AGENTSTORE_MODE")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("INVOCATION_ID")
            .env_remove("JOURNAL_STREAM")
            .env("RUST_LOG", "warn");
    }

    fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        self.scope(&mut c);
        c.args(args).output().unwrap()
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
        let d = self.daemon(env!("CARGO_BIN_EXE_orchestratord"), &["--idle-exit", "0"]);
        wait_for_name(&self.bus, "org.agentstore.Orchestrator1");
        d
    }

    fn queue_manager(&self) -> KillOnDrop {
        let d = self.daemon(
            env!("CARGO_BIN_EXE_queue-manager"),
            &["--queue", "poplar", "--launcher", "direct"],
        );
        wait_for_name(&self.bus, "org.agentstore.Queue.poplar");
        d
    }

    fn daemon(&self, bin: &str, args: &[&str]) -> KillOnDrop {
        let mut c = Command::new(bin);
        self.scope(&mut c);
        c.args(args).stdout(Stdio::null()).stderr(Stdio::inherit());
        KillOnDrop(c.spawn().unwrap())
    }

    fn path(&self, state: &str, id: &str) -> PathBuf {
        self.env
            .root
            .join(format!("Queues/poplar/Jobs/{state}_jobs/{id}.json"))
    }

    fn wait_state(&self, id: &str, state: &str) -> Value {
        let p = self.path(state, id);
        wait_until(LONG, &format!("job {id} {state}"), || p.is_file());
        read(&p)
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
    let bad = f.cli(&["research-code", "--project", "P", "--priority", "urgent"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("urgent"),
        "{}",
        text(&bad.stderr)
    );
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
    let o = f.cli(&[
        "research-code",
        "--project",
        "P",
        "--jobtype",
        "noop",
        "--after",
        "no-such-job",
    ]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("unknown job no-such-job") && err.contains("after"),
        "{err}"
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
    let retry = f
        .all_jobs()
        .into_iter()
        .find(|j| j["config"]["retry_of"] == r.as_str())
        .unwrap_or_else(|| panic!("no retry of {r}"));
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
    assert!(
        !f.all_jobs()
            .iter()
            .any(|j| j["config"]["retry_of"] == k.as_str()),
        "a cancelled job was retried"
    );
}
