//! A queue with `launcher: slurm`, driven through the real `queue-manager` and `agent-worker`
//! binaries against a FAKE Slurm (tests/support/fake_slurm.sh: sbatch, squeue, scancel and
//! scontrol that run the batch step here). These tests cover the manager's side — the sbatch
//! line, held submission and release, state mapping, idempotent submission, errors — fast;
//! the real Slurm (slurmctld, slurmd, munge) is tests/system/t_slurm.sh.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use queue_env::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) struct FakeSlurm {
    bin: PathBuf,
    state: PathBuf,
}

impl FakeSlurm {
    fn new(env: &QueueEnv) -> FakeSlurm {
        let bin = env.dir.path().join("slurm-bin");
        let state = env.dir.path().join("slurm-state");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        // A root manager runs sbatch as the job's account (the relay), everything else as root.
        for d in [&bin, &state] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_slurm.sh");
        for c in ["sbatch", "squeue", "scancel", "scontrol", "sinfo"] {
            std::os::unix::fs::symlink(&script, bin.join(c)).unwrap();
        }
        FakeSlurm { bin, state }
    }

    pub(crate) fn calls(&self) -> String {
        std::fs::read_to_string(self.state.join("calls")).unwrap_or_default()
    }

    fn set_down(&self, down: bool) {
        let p = self.state.join("down");
        if down {
            std::fs::write(p, "").unwrap();
        } else {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Whether the manager under test runs its Slurm jobs through the relay (issue 27): a root
/// manager runs each as the job's own account (sbatch as that account, held until recorded,
/// the script on stdin, `--output=` a file of that account's, no store probe); a manager that
/// is not root runs them as itself (the batch step writes the store, gated on its job file).
pub(crate) fn relayed() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The queue of `env` as a Slurm queue polled every second.
pub(crate) fn slurm_queue(env: &QueueEnv, slurm: Value) {
    env.edit_queue(|q| {
        q.config.launcher = Some(agentstore::model::Launcher::Slurm);
        q.config.slurm = Some(serde_json::from_value(slurm).unwrap());
    });
}

/// The queue manager of a test (killed on drop).
pub(crate) type Manager = KillOnDrop;

/// The host's PATH as one folder of links, without Slurm's own client commands: a Slurm
/// installed on the machine running the tests never answers for the fake (hermetic).
fn system_path_without_slurm(env: &QueueEnv) -> PathBuf {
    let dir = env.dir.path().join("system-bin");
    if dir.is_dir() {
        return dir;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if matches!(
                &*n,
                "sbatch" | "squeue" | "scancel" | "scontrol" | "sacct" | "srun" | "sinfo"
            ) {
                continue;
            }
            let link = dir.join(&name);
            if !link.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), link);
            }
        }
    }
    dir
}

pub(crate) fn manager(env: &QueueEnv, bus: &PrivateBus, fake: &FakeSlurm) -> Manager {
    manager_with(env, bus, fake, &[])
}

/// [`manager`] with more environment (e.g. `AGENTSTORE_TEST_FAULT`).
pub(crate) fn manager_with(
    env: &QueueEnv,
    bus: &PrivateBus,
    fake: &FakeSlurm,
    extra: &[(&str, &str)],
) -> Manager {
    let path = format!(
        "{}:{}",
        fake.bin.display(),
        system_path_without_slurm(env).display()
    );
    crate::daemons::queue_manager(&env.root, &env.queue)
        .on(bus)
        .launcher(None)
        .args(["--worker", env!("CARGO_BIN_EXE_agent-worker")])
        .env("PATH", path)
        .env("FAKE_SLURM_DIR", &fake.state)
        .env(
            agentstore::queue::slurm::OUTPUT_DIR_ENV,
            env.dir.path().join("slurm-output"),
        )
        .envs(extra)
        .spawn()
}

pub(crate) fn wait_file(env: &QueueEnv, state: &str, id: &str, secs: u64) -> Value {
    wait_until(
        Duration::from_secs(secs),
        &format!("job {id} in {state}_jobs"),
        || env.job_file(state, id).is_file(),
    );
    env.job(state, id)
}

pub(crate) fn setup() -> (QueueEnv, PrivateBus, FakeSlurm) {
    let env = QueueEnv::new(1);
    let bus = PrivateBus::start();
    let fake = FakeSlurm::new(&env);
    (env, bus, fake)
}

#[test]
fn noop_job_runs_through_slurm_with_its_id_recorded() {
    let (env, bus, fake) = setup();
    slurm_queue(
        &env,
        json!({"partition": "debug", "account": "lab", "extra_args": ["--constraint=x"], "poll_seconds": 1}),
    );
    env.edit_queue(|q| {
        q.config.resource_limits = Some(agentstore::model::ResourceLimits {
            memory_max: Some(json!("1G")),
            cpu_quota: Some("200%".into()),
            tasks_max: None,
        })
    });
    let _m = manager(&env, &bus, &fake);
    env.queue_job("s1", &noop(0.5));
    let done = wait_file(&env, "finished", "s1", 60);
    assert_eq!(
        done["runtime"]["output"], "No-op job completed successfully",
        "{done}"
    );
    let sid = done["runtime"]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let calls = fake.calls();
    let sbatch: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("sbatch ") && l.contains("agentstore-s1"))
        .collect();
    assert_eq!(sbatch.len(), 1, "{calls}");
    for want in [
        "--constraint=x",
        "--parsable",
        "--job-name=agentstore-s1",
        "--time=2",
        "--partition=debug",
        "--account=lab",
        "--mem=1G",
        "--cpus-per-task=2",
    ] {
        assert!(sbatch[0].contains(want), "{want} not in {}", sbatch[0]);
    }
    let jobs = fake.state.join("jobs");
    let slurm_job = |what: &str| std::fs::read_to_string(jobs.join(format!("{sid}.{what}")));
    if relayed() {
        // Run as the job's own account: submitted by it, held until the manager recorded
        // it (then released), the batch script on stdin (nothing of the job on a command
        // line), the output in the account's own file, which holds the job's end.
        assert_eq!(slurm_job("user").unwrap().trim(), job_login(), "{calls}");
        assert!(sbatch[0].ends_with(" --hold"), "{}", sbatch[0]);
        assert!(!sbatch[0].contains("--wrap"), "{}", sbatch[0]);
        assert!(
            calls.contains(&format!("scontrol release {sid}")),
            "{calls}"
        );
        let script = slurm_job("wrap").unwrap();
        assert!(script.contains("agent-worker' '--relay'"), "{script}");
        assert!(
            !script.contains("--run-as") && !script.contains("--gate"),
            "{script}"
        );
        let out = env
            .dir
            .path()
            .join(format!("slurm-output/{}-s1.out", env.queue));
        assert!(
            sbatch[0].contains(&format!("--output={}", out.display())),
            "{}",
            sbatch[0]
        );
        // Its end read back (the output above is the step's), the file goes: removed by the
        // account once the end is recorded; the account's folder stays.
        wait_until(
            Duration::from_secs(30),
            "the relay's output file removed after the job's end",
            || std::fs::symlink_metadata(&out).is_err(),
        );
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(out.parent().unwrap()).unwrap().uid();
        assert_eq!(owner, crate::claude_env::unprivileged_user().unwrap().uid);
        assert!(!calls.contains("agentstore-probe"), "{calls}");
    } else {
        assert!(
            sbatch[0].contains("agent-worker' '--root="),
            "{}",
            sbatch[0]
        );
        // No hold: the batch step's gate is the job file naming its Slurm job; nothing to
        // release, and no look-up by name for a job no earlier attempt can have submitted.
        assert!(!sbatch[0].contains("--hold"), "{}", sbatch[0]);
        assert!(!calls.contains("scontrol release"), "{calls}");
        // Nothing the batch step (root, when the manager is) opens for its output lies in
        // the store, where a planted link would send it (issue 27).
        assert!(sbatch[0].contains("--output=/dev/null"), "{}", sbatch[0]);
    }
    let before_sbatch = calls.split(sbatch[0]).next().unwrap();
    assert!(
        !before_sbatch
            .lines()
            .any(|l| l.starts_with("squeue ") && l.contains("agentstore-s1")),
        "{calls}"
    );
    assert!(sid.chars().all(|c| c.is_ascii_digit()), "{sid}");
    assert!(
        !env.root
            .join(format!("logs/slurm-{}-s1.out", env.queue))
            .exists()
    );
}

#[test]
fn timeout_cancel_node_fail_and_a_worker_without_result() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    let _m = manager(&env, &bus, &fake);
    // Our own limit: 2 s, enforced by scancel (Slurm's --time is the backstop).
    let mut slow = noop(60.0);
    slow["config"]["timeout_seconds"] = json!(2);
    env.queue_job("t1", &slow);
    let f = wait_file(&env, "failed", "t1", 60);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.starts_with("Job timeout after") && err.ends_with("(limit: 2s)"),
        "{err}"
    );
    assert!(fake.calls().contains("scancel "), "{}", fake.calls());

    // Slurm ended it with NODE_FAIL (the fake: state set, batch step killed).
    env.queue_job("n1", &noop(60.0));
    let running = wait_file(&env, "running", "n1", 30);
    let sid = running["runtime"]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let jobs = fake.state.join("jobs");
    wait_until(Duration::from_secs(30), "the batch step runs", || {
        jobs.join(format!("{sid}.pid")).exists()
    });
    std::fs::write(jobs.join(format!("{sid}.state")), "NODE_FAIL").unwrap();
    std::fs::write(jobs.join(format!("{sid}.reason")), "NodeDown").unwrap();
    let pid: i32 = std::fs::read_to_string(jobs.join(format!("{sid}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let f = wait_file(&env, "failed", "n1", 60);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.contains("NODE_FAIL") && err.contains("NodeDown"),
        "{err}"
    );

    // The batch step dies before the worker writes a result: failed from Slurm's record.
    std::fs::write(fake.state.join("crash-agentstore-d1"), "").unwrap();
    env.queue_job("d1", &noop(0.1));
    let f = wait_file(&env, "failed", "d1", 60);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.starts_with("Worker harness process died (Slurm job")
            && err.contains("FAILED, exit code 7:0"),
        "{err}"
    );
}

#[test]
fn controller_down_keeps_jobs_queued_and_says_why() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    fake.set_down(true);
    let _m = manager(&env, &bus, &fake);
    env.queue_job("c1", &noop(0.1));
    wait_until(Duration::from_secs(30), "slurm_status", || {
        env.queue_json()["runtime"]["slurm_status"]
            .as_str()
            .is_some_and(|s| s.contains("does not answer"))
    });
    assert!(env.job_file("queued", "c1").is_file());
    fake.set_down(false);
    // The start back-off (2 s, doubling) tries again.
    let f = wait_file(&env, "finished", "c1", 90);
    assert!(f["runtime"]["slurm_job_id"].is_string());
    wait_until(Duration::from_secs(30), "slurm_status cleared", || {
        env.queue_json()["runtime"]["slurm_status"].is_null()
    });
}

/// The queue's `slurm_status` once it contains every one of `words`.
fn wait_status(env: &QueueEnv, words: &[&str]) -> String {
    let mut last = String::new();
    crate::wait::files(
        &[&env.root.join("Queues").join(&env.queue)],
        Duration::from_secs(30),
        &format!("slurm_status naming {words:?}"),
        || {
            last = env.queue_json()["runtime"]["slurm_status"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            words.iter().all(|w| last.contains(w))
        },
    );
    last
}

#[test]
fn an_unknown_partition_or_refused_account_keeps_every_job_queued_and_says_why() {
    let (env, bus, fake) = setup();
    // A typo in the queue's partition: every job would be refused alike. None is failed or
    // submitted; the queue says which setting and what Slurm has.
    slurm_queue(&env, json!({"partition": "nosuch", "poll_seconds": 1}));
    let _m = manager(&env, &bus, &fake);
    env.queue_job("p1", &noop(0.1));
    env.queue_job("p2", &noop(0.1));
    wait_status(
        &env,
        &[
            "queue.json",
            "config.slurm.partition",
            "no partition \"nosuch\"",
            "sinfo lists: debug",
        ],
    );
    assert_eq!(sbatch_count(&fake, "p1") + sbatch_count(&fake, "p2"), 0);
    assert_eq!(env.count("queued"), 2);
    assert_eq!(env.count("failed"), 0);
    // The text listing of queues says it too, under its table.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["--root"])
        .arg(&env.root)
        .arg("list-queues")
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(
            |l| l.starts_with(&format!("{}: Slurm: jobs stay queued", env.queue))
                && l.contains("no partition \"nosuch\"")
        ),
        "{text}"
    );

    // An account sbatch refuses (a controller with accounting): kept queued too, in Slurm's
    // words.
    slurm_queue(
        &env,
        json!({"partition": "debug", "account": "nosuch", "poll_seconds": 1}),
    );
    env.queue_job("p3", &noop(0.1));
    wait_status(&env, &["config.slurm", "Invalid account"]);
    assert_eq!(env.count("queued"), 3, "{}", fake.calls());
    assert_eq!(env.count("failed"), 0);

    // Fixed: every job runs.
    slurm_queue(&env, json!({"partition": "debug", "poll_seconds": 1}));
    env.queue_job("p4", &noop(0.1));
    for id in ["p1", "p2", "p3", "p4"] {
        wait_file(&env, "finished", id, 90);
    }
    wait_until(Duration::from_secs(30), "slurm_status cleared", || {
        env.queue_json()["runtime"]["slurm_status"].is_null()
    });
}

/// The store's copy of the queue schema without its patterns (a store whose schema copy was
/// loosened, by hand or by an older or hostile writer): only the code's own checks remain.
fn loosen_queue_schema(env: &QueueEnv) {
    let p = env.root.join("JSONValidation/Schemas/queue.schema.json");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("pattern");
                m.remove("minimum");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Writes `Queues/<q>/queue.json` with `slurm` and `limits` as they are (no schema check).
fn raw_slurm_queue(env: &QueueEnv, slurm: Value, limits: Value) {
    let p = env.root.join(format!("Queues/{}/queue.json", env.queue));
    let mut q: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    q["config"]["launcher"] = json!("slurm");
    q["config"]["slurm"] = slurm;
    q["config"]["resource_limits"] = limits;
    agentstore::store::write_json_atomic(&p, &q).unwrap();
}

#[test]
fn hostile_slurm_settings_never_reach_sbatch_and_lose_no_job() {
    let (env, bus, fake) = setup();
    loosen_queue_schema(&env);
    let pwned = env.dir.path().join("pwned");
    let p = pwned.display().to_string();
    let cases: Vec<(Value, Value, &str)> = vec![
        // Valid for the schema, yet each would change what runs, as whom or where its files
        // go (a root manager submits as root).
        (
            json!({"extra_args": [format!("--error={p}")]}),
            json!({}),
            "extra_args[0]",
        ),
        (
            json!({"extra_args": ["--constraint=x", "--export=ALL,LD_PRELOAD=/tmp/x.so"]}),
            json!({}),
            "extra_args[1]",
        ),
        (
            json!({"extra_args": ["--array=1-50"]}),
            json!({}),
            "--array",
        ),
        (
            json!({"extra_args": [format!("--wrap=touch {p}")]}),
            json!({}),
            "--wrap",
        ),
        (json!({"extra_args": ["--uid=0"]}), json!({}), "--uid"),
        (
            json!({"extra_args": ["--clusters=other"]}),
            json!({}),
            "--clusters",
        ),
        (json!({"extra_args": ["--hold"]}), json!({}), "--hold"),
        // Scheduling ahead of everyone (issue 27): only an administrator's to give.
        (
            json!({"extra_args": ["--priority=TOP"]}),
            json!({}),
            "--priority",
        ),
        (
            json!({"extra_args": ["--nice=-10000"]}),
            json!({}),
            "--nice=-10000",
        ),
        (json!({"extra_args": ["--nice=-0"]}), json!({}), "--nice=-0"),
        (
            json!({"extra_args": ["--chdir=/root"]}),
            json!({}),
            "--chdir",
        ),
        (json!({"extra_args": ["--gid=0"]}), json!({}), "--gid"),
        (
            json!({"extra_args": ["-e", p.clone()]}),
            json!({}),
            "not a long option",
        ),
        (
            json!({"extra_args": [p.clone()]}),
            json!({}),
            "not a long option",
        ),
        (
            json!({"extra_args": ["--comment=a\n#SBATCH --uid=0"]}),
            json!({}),
            "control character",
        ),
        // Only a loosened schema lets these through: the code checks them too.
        (
            json!({"partition": "debug --wrap=x"}),
            json!({}),
            "config.slurm.partition",
        ),
        (
            json!({"account": "lab;touch x"}),
            json!({}),
            "config.slurm.account",
        ),
        (json!({"qos": ""}), json!({}), "config.slurm.qos"),
        (json!({"gres": "gpu:1\n"}), json!({}), "config.slurm.gres"),
        (json!({"max_in_slurm": 0}), json!({}), "max_in_slurm is 0"),
        (
            json!({"extra_args": vec!["--nodes=1"; 65]}),
            json!({}),
            "65 arguments",
        ),
        (json!({}), json!({"memory_max": "-5"}), "memory_max"),
        (
            json!({}),
            json!({"memory_max": "99999999999999999999999"}),
            "memory_max",
        ),
        (json!({}), json!({"memory_max": 0}), "memory_max"),
        (json!({}), json!({"cpu_quota": "-200%"}), "cpu_quota"),
        (
            json!({}),
            json!({"cpu_quota": "99999999999999999999%"}),
            "cpu_quota",
        ),
    ];
    raw_slurm_queue(&env, cases[0].0.clone(), cases[0].1.clone());
    let _m = manager(&env, &bus, &fake);
    for (i, (slurm, limits, word)) in cases.iter().enumerate() {
        let mut slurm = slurm.clone();
        slurm["poll_seconds"] = json!(1);
        raw_slurm_queue(&env, slurm.clone(), limits.clone());
        // A new job: the manager reads queue.json again at its next pass.
        env.queue_job(&format!("h{i}"), &noop(0.1));
        let status = wait_status(&env, &["jobs stay queued", "queue.json", word]);
        assert!(
            !fake.calls().lines().any(|l| l.starts_with("sbatch ")),
            "case {slurm} {limits}: sbatch was called: {}\nstatus: {status}",
            fake.calls()
        );
    }
    assert!(!pwned.exists());
    assert_eq!(env.count("queued"), cases.len());
    assert_eq!(env.count("failed"), 0);
    // Settings that place and size the job pass; every job kept queued then runs.
    raw_slurm_queue(
        &env,
        json!({"partition": "debug", "extra_args": ["--constraint=x", "--nodes=1", "--exclusive"], "poll_seconds": 1}),
        json!({"memory_max": "1G", "cpu_quota": "100%"}),
    );
    env.queue_job("last", &noop(0.1));
    wait_until(Duration::from_secs(120), "every job finished", || {
        env.count("finished") == cases.len() + 1
    });
    let calls = fake.calls();
    let sbatch = calls
        .lines()
        .find(|l| l.starts_with("sbatch ") && l.contains("agentstore-last"))
        .unwrap();
    assert!(
        sbatch.contains("--constraint=x --nodes=1 --exclusive"),
        "{sbatch}"
    );
}

#[test]
fn sbatch_missing_keeps_jobs_queued_and_says_why() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    std::fs::remove_file(fake.bin.join("sbatch")).unwrap();
    // PATH: only the fake folder (now without sbatch) and the system's without Slurm.
    let _m = manager(&env, &bus, &fake);
    env.queue_job("m1", &noop(0.1));
    wait_until(Duration::from_secs(30), "slurm_status", || {
        env.queue_json()["runtime"]["slurm_status"]
            .as_str()
            .is_some_and(|s| s.contains("sbatch not found"))
    });
    assert!(env.job_file("queued", "m1").is_file());
}

/// The start marker a manager leaves on disk while it hands `id` to Slurm (poison.rs).
fn start_marker(env: &QueueEnv, id: &str) {
    let dir = env
        .root
        .join(format!("Queues/{}/.handling", env.queue))
        .join(agentstore::store::hostname());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("start-{id}")), "attempts 1\npid 1\n").unwrap();
}

fn sbatch_count(fake: &FakeSlurm, id: &str) -> usize {
    fake.calls()
        .lines()
        .filter(|l| l.starts_with("sbatch ") && l.contains(&format!("--job-name=agentstore-{id} ")))
        .count()
}

#[test]
fn a_job_held_by_an_earlier_manager_is_taken_over_not_submitted_again() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    // A manager (of the version that submitted held) died after sbatch, before recording:
    // Slurm holds agentstore-k1 and the manager's start marker is on disk.
    start_marker(&env, "k1");
    let worker = env!("CARGO_BIN_EXE_agent-worker");
    let out = std::process::Command::new(fake.bin.join("sbatch"))
        .env("FAKE_SLURM_DIR", &fake.state)
        .env(
            agentstore::queue::slurm::OUTPUT_DIR_ENV,
            env.dir.path().join("slurm-output"),
        )
        .args([
            "--parsable",
            "--hold",
            "--job-name=agentstore-k1",
            &format!(
                "--wrap=exec '{worker}' '--root={}' '--queue={}' -- k1",
                env.root.display(),
                env.queue
            ),
        ])
        .output()
        .unwrap();
    let sid = String::from_utf8(out.stdout).unwrap().trim().to_string();
    env.queue_job("k1", &noop(0.1));
    let _m = manager(&env, &bus, &fake);
    let f = wait_file(&env, "finished", "k1", 60);
    assert_eq!(f["runtime"]["slurm_job_id"], json!(sid));
    assert_eq!(
        sbatch_count(&fake, "k1"),
        1,
        "submitted twice: {}",
        fake.calls()
    );
    assert!(
        fake.calls().contains(&format!("scontrol release {sid}")),
        "{}",
        fake.calls()
    );
}

#[test]
fn kill_9_while_sbatch_answers_submits_each_job_once() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    // sbatch accepts the jobs at once but answers 3 s later: the manager is killed before
    // it can record any Slurm job id. The batch steps already run and wait at their gate.
    std::fs::write(fake.state.join("sbatch-delay"), "3").unwrap();
    // Queued before the manager starts: its first pass submits all five in one batch (jobs
    // queued one by one while it runs could split into two, the first answered before the
    // second is accepted, on a loaded machine).
    let ids: Vec<String> = (1..=5).map(|i| format!("k{i}")).collect();
    for id in &ids {
        env.queue_job(id, &noop(0.1));
    }
    let mut m = manager(&env, &bus, &fake);
    wait_until(
        Duration::from_secs(30),
        "all five accepted by sbatch",
        || ids.iter().all(|id| sbatch_count(&fake, id) == 1),
    );
    m.0.kill().unwrap();
    m.0.wait().unwrap();
    drop(m);
    for id in &ids {
        assert!(
            env.job_file("queued", id).is_file(),
            "{id} left queued_jobs"
        );
    }
    std::fs::remove_file(fake.state.join("sbatch-delay")).unwrap();
    let _m2 = manager(&env, &bus, &fake);
    for id in &ids {
        let f = wait_file(&env, "finished", id, 60);
        assert_eq!(
            f["runtime"]["output"], "No-op job completed successfully",
            "{f}"
        );
        assert_eq!(
            sbatch_count(&fake, id),
            1,
            "{id} submitted twice: {}",
            fake.calls()
        );
    }
    // The successor looked them up by name (one squeue for the batch) before any sbatch.
    let calls = fake.calls();
    assert!(
        calls
            .lines()
            .any(|l| l.starts_with("squeue ") && l.contains("agentstore-k")),
        "{calls}"
    );
}

#[test]
fn a_batch_step_whose_job_is_never_recorded_does_not_run_the_worker() {
    let (env, _bus, fake) = setup();
    // The batch step as the manager submits it, with a gate of 1 s (the real one waits
    // GATE_SECONDS) for a job file that never names its Slurm job.
    let running = env.job_file("running", "g1");
    std::fs::create_dir_all(running.parent().unwrap()).unwrap();
    std::fs::write(&running, r#"{"runtime": {"slurm_job_id": "1234"}}"#).unwrap();
    let marker = env.dir.path().join("worker-ran");
    let script = agentstore::queue::slurm::batch_script(
        &running,
        &["touch".to_string(), marker.display().to_string()],
    )
    .replace(
        &format!("-gt {} ", agentstore::queue::slurm::GATE_SECONDS * 5),
        "-gt 5 ",
    );
    let run = |sid: &str| {
        std::process::Command::new("sh")
            .args(["-c", &script])
            .env("SLURM_JOB_ID", sid)
            .env("PATH", system_path_without_slurm(&env))
            .output()
            .unwrap()
    };
    // Another Slurm job (123, a prefix of 1234) is not this one: it gives up, exit 3.
    let out = run("123");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was never recorded"),
        "{out:?}"
    );
    assert!(!marker.exists(), "the worker ran without its record");
    // Its own id recorded: the worker runs.
    let out = run("1234");
    assert!(out.status.success(), "{out:?}");
    assert!(marker.exists());
    drop(fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_manager_readopts_by_id_and_cancel_uses_scancel() {
    guarded(async {
        let (env, bus, fake) = setup();
        slurm_queue(&env, json!({"poll_seconds": 1}));
        let mut m = manager(&env, &bus, &fake);
        env.queue_job("r1", &noop(120.0));
        let running = wait_file(&env, "running", "r1", 30);
        let sid = running["runtime"]["slurm_job_id"]
            .as_str()
            .unwrap()
            .to_string();
        // kill -9 of the manager; its successor re-adopts the job by its Slurm id.
        m.0.kill().unwrap();
        m.0.wait().unwrap();
        drop(m);
        let m2 = manager(&env, &bus, &fake);
        // The successor's own runtime (its pid: the killed one's last word said active 1
        // too) counts the job active once it has re-adopted it; it took the bus name before
        // it wrote anything.
        let pid = m2.0.id();
        tokio::task::block_in_place(|| {
            crate::wait::files(
                &[&env.root.join("Queues").join(&env.queue)],
                crate::wait::LOADED,
                "the successor counting the re-adopted job active",
                || {
                    let rt = &env.queue_json()["runtime"];
                    rt["process_id"] == pid && rt["active_jobs"] == 1
                },
            )
        });
        let conn = bus.connect().await;
        let p = agentstore::bus::queue::queue_proxy(&conn, &env.queue)
            .await
            .unwrap();
        p.cancel_job("r1").await.unwrap();
        let f = wait_file(&env, "failed", "r1", 60);
        let err = f["runtime"]["error"].as_str().unwrap();
        assert!(err.starts_with("Job cancelled by"), "{err}");
        let calls = fake.calls();
        assert!(
            calls.contains(&format!("scancel --name=agentstore-r1 {sid}")),
            "{calls}"
        );
        assert_eq!(
            calls
                .lines()
                .filter(|l| l.starts_with("sbatch ") && l.contains("--job-name=agentstore-r1"))
                .count(),
            1,
            "{calls}"
        );
    })
    .await
}

#[test]
fn a_store_the_nodes_cannot_see_holds_the_jobs_and_says_why() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    // A heartbeat each second: the manager's passes are awaited below.
    let cfg = env.root.join("config.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap() + "machines:\n  heartbeat_seconds: 1\n";
    std::fs::write(&cfg, text).unwrap();
    // The probe job "runs elsewhere": its file never appears here.
    std::fs::write(fake.state.join("crash-agentstore-probe-q1"), "").unwrap();
    let _m = manager(&env, &bus, &fake);
    env.queue_job("u1", &noop(0.1));
    if relayed() {
        // A batch step run as the job's account reads nothing of the store: no probe, and
        // the jobs run whether the nodes see the store or not.
        env.queue_job("u2", &noop(0.1));
        wait_file(&env, "finished", "u1", 30);
        wait_file(&env, "finished", "u2", 30);
        assert!(
            !fake.calls().contains("agentstore-probe"),
            "{}",
            fake.calls()
        );
        return;
    }
    // The first job went out with the probe; once the probe's verdict is in, nothing more.
    wait_until(Duration::from_secs(30), "slurm_status", || {
        env.queue_json()["runtime"]["slurm_status"]
            .as_str()
            .is_some_and(|s| s.contains("is not shared with the compute nodes"))
    });
    env.queue_job("u2", &noop(0.1));
    // The manager's pass over u2 holds it (its runtime counts it queued), and its passes
    // for 3 s more leave it so.
    wait_until(crate::wait::LOADED, "u2 counted queued", || {
        env.queue_json()["runtime"]["queued_jobs"] == 1
    });
    manager_passes(
        &env.root,
        &agentstore::store::hostname(),
        &env.queue,
        Duration::from_secs(3),
    );
    assert!(env.job_file("queued", "u2").is_file(), "u2 was submitted");
    assert!(!fake.calls().contains("agentstore-u2"), "{}", fake.calls());
}

#[test]
fn a_job_beyond_the_partition_fails_at_once_instead_of_pending_forever() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"partition": "short", "poll_seconds": 1}));
    // Partition short: MaxTime 2 min, nodes of 2 CPUs and 1000 MB (another partition, and
    // the default one, are larger).
    std::fs::write(
        fake.state.join("sinfo"),
        "big*|infinite|64|512000\nshort|2:00|2|1000\nshort|2:00|2|1000\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let _m = manager(&env, &bus, &fake);
    // timeout_seconds 300 → sbatch --time=6 > 2 min.
    let mut long = noop(0.1);
    long["config"]["timeout_seconds"] = json!(300);
    env.queue_job("x1", &long);
    let f = wait_file(&env, "failed", "x1", 30);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.contains("--time=6")
            && err.contains("partition short's MaxTime is 2 min")
            && err.contains("pend forever"),
        "{err}"
    );
    // Within it (115 s + 5 s grace = 2 min): runs.
    let mut fits = noop(0.1);
    fits["config"]["timeout_seconds"] = json!(115);
    env.queue_job("x2", &fits);
    wait_file(&env, "finished", "x2", 60);
    // More CPUs than a node of the partition has.
    env.edit_queue(|q| {
        q.config.resource_limits = Some(agentstore::model::ResourceLimits {
            memory_max: None,
            cpu_quota: Some("400%".into()),
            tasks_max: None,
        })
    });
    env.queue_job("x3", &noop(0.1));
    let f = wait_file(&env, "failed", "x3", 30);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.contains("--cpus-per-task=4") && err.contains("has 2 CPUs"),
        "{err}"
    );
    // More memory than a node has.
    env.edit_queue(|q| {
        q.config.resource_limits = Some(agentstore::model::ResourceLimits {
            memory_max: Some(json!("2G")),
            cpu_quota: None,
            tasks_max: None,
        })
    });
    env.queue_job("x4", &noop(0.1));
    let f = wait_file(&env, "failed", "x4", 30);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.contains("--mem=2048M") && err.contains("has 1000M"),
        "{err}"
    );
    let calls = fake.calls();
    for id in ["x1", "x3", "x4"] {
        assert_eq!(sbatch_count(&fake, id), 0, "{id} went to sbatch: {calls}");
    }
    // The partition's limits are read once a minute, not per job.
    let allowed = 1 + started.elapsed().as_secs() / 60;
    let n = calls.lines().filter(|l| l.starts_with("sinfo ")).count() as u64;
    assert!(n >= 1 && n <= allowed, "{n} sinfo calls: {calls}");
}

#[test]
fn a_workers_end_is_seen_at_once_not_at_the_next_poll() {
    let (env, bus, fake) = setup();
    // A quiet queue is polled once a minute: the end must come from running_jobs/ itself.
    // A relayed job's end is in its account's file, read when Slurm says it ended: the next
    // poll (poll_seconds 3 here) and the settling grace.
    let poll = if relayed() { 3 } else { 60 };
    slurm_queue(&env, json!({ "poll_seconds": poll }));
    let _m = manager(&env, &bus, &fake);
    env.queue_job("e1", &noop(3.0));
    wait_until(Duration::from_secs(30), "e1 counted active", || {
        env.queue_json()["runtime"]["active_jobs"] == json!(1)
    });
    wait_file(&env, "finished", "e1", 30);
    let ended = std::time::Instant::now();
    wait_until(
        Duration::from_secs(10),
        "e1 no longer counted active",
        || env.queue_json()["runtime"]["active_jobs"] == json!(0),
    );
    assert!(ended.elapsed() < Duration::from_secs(10));
    drop(fake);
}

#[test]
fn a_panic_while_handling_the_sbatch_answer_fails_only_that_job() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    env.queue_job("p1", &noop(0.1));
    env.queue_job("p2", &noop(0.1));
    // The manager panics once sbatch answered for p2, before it recorded the submission.
    let mut m = manager_with(
        &env,
        &bus,
        &fake,
        &[("AGENTSTORE_TEST_FAULT", "panic-submit:p2")],
    );
    let status = crate::wait::child_exit(&mut m.0, crate::wait::LOADED, "the manager to crash");
    assert!(!status.success(), "{status:?}");
    drop(m);
    let _m2 = manager(&env, &bus, &fake);
    let f = wait_file(&env, "failed", "p2", 60);
    let err = f["runtime"]["error"].as_str().unwrap();
    assert!(
        err.starts_with("The queue manager crashed while starting this job")
            && err.contains("injected fault at submit of job p2"),
        "{err}"
    );
    // The other job of the batch is not blamed: it runs, submitted once.
    let done = wait_file(&env, "finished", "p1", 60);
    assert_eq!(
        done["runtime"]["output"],
        "No-op job completed successfully"
    );
    assert_eq!(sbatch_count(&fake, "p1"), 1, "{}", fake.calls());
    assert_eq!(sbatch_count(&fake, "p2"), 1, "{}", fake.calls());
    // p2's batch step waits at its gate (it gives up after GATE_SECONDS): stop it here.
    let jobs = fake.state.join("jobs");
    for e in std::fs::read_dir(&jobs).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "name")
            && std::fs::read_to_string(&p).unwrap() == "agentstore-p2"
            && let Ok(pid) = std::fs::read_to_string(p.with_extension("pid"))
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(-pid.trim().parse::<i32>().unwrap()),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A job file in `running_jobs/` whose `runtime.slurm_job_id` names another Slurm job (a
/// forged or stale file): the manager never takes that job's state for this job's, and
/// `cancel-job` of it never cancels the other Slurm job (the root manager's scancel carries
/// the job's own name); the job fails saying Slurm does not list it under its own name.
/// Before, the cancel ran `scancel <that id>`: any Slurm job of the cluster could be cancelled
/// by writing its id into a job file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_job_id_naming_another_slurm_job_never_touches_it() {
    guarded(async {
        let (env, bus, fake) = setup();
        slurm_queue(&env, json!({"poll_seconds": 1}));
        // Someone else's Slurm job, running.
        let out = std::process::Command::new(fake.bin.join("sbatch"))
            .args(["--parsable", "--job-name=victim", "--wrap=sleep 120"])
            .env("FAKE_SLURM_DIR", &fake.state)
            .env(
                agentstore::queue::slurm::OUTPUT_DIR_ENV,
                env.dir.path().join("slurm-output"),
            )
            .output()
            .unwrap();
        let victim = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let state = fake.state.join(format!("jobs/{victim}.state"));
        wait_until(Duration::from_secs(10), "the victim runs", || {
            std::fs::read_to_string(&state).is_ok_and(|s| s == "RUNNING")
        });
        let mut forged = noop(60.0);
        forged["runtime"]["status"] = json!("running");
        forged["runtime"]["start_time"] = json!(agentstore::model::Timestamp::now().to_string());
        forged["runtime"]["host"] = json!(agentstore::store::hostname());
        forged["runtime"]["slurm_job_id"] = json!(victim);
        agentstore::store::write_json_atomic(&env.job_file("running", "f1"), &forged).unwrap();
        let _m = manager(&env, &bus, &fake);
        wait_for_name(&bus, &agentstore::bus::queue_bus_name(&env.queue));
        let conn = bus.connect().await;
        let p = agentstore::bus::queue::queue_proxy(&conn, &env.queue)
            .await
            .unwrap();
        // At once, while the adopted job is followed (it is settled 3 s after Slurm is seen
        // not to list it).
        p.cancel_job("f1").await.unwrap();
        let f = wait_file(&env, "failed", "f1", 60);
        let err = f["runtime"]["error"].as_str().unwrap();
        assert!(
            err.starts_with("Job cancelled by")
                || err.contains("no longer listed by squeue as agentstore-f1"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "RUNNING");
        let calls = fake.calls();
        let scancels: Vec<&str> = calls
            .lines()
            .filter(|l| l.starts_with("scancel "))
            .collect();
        assert!(
            !scancels.is_empty(),
            "the cancel reached no scancel: {calls}"
        );
        assert!(
            scancels
                .iter()
                .all(|l| l.starts_with("scancel --name=agentstore-f1 ")),
            "{calls}"
        );
        let _ = std::process::Command::new(fake.bin.join("scancel"))
            .arg(&victim)
            .env("FAKE_SLURM_DIR", &fake.state)
            .env(
                agentstore::queue::slurm::OUTPUT_DIR_ENV,
                env.dir.path().join("slurm-output"),
            )
            .status();
    })
    .await
}

/// Issue 27: `logs/` replaced by a link to a folder the store's writer chose (root's own, in
/// the report): nothing a root Slurm job writes — the shared-store probe, the batch step's
/// output — is created there or anywhere through the store; the job still runs. Before,
/// the probe's `echo ok > <store>/logs/.slurm-probe-…` and `--output=<store>/logs/…` wrote
/// through the link as root.
#[test]
fn nothing_slurm_writes_goes_through_a_linked_logs_folder() {
    let (env, bus, fake) = setup();
    slurm_queue(&env, json!({"poll_seconds": 1}));
    let outside = env.dir.path().join("root-only");
    std::fs::create_dir(&outside).unwrap();
    let logs = env.root.join("logs");
    std::fs::rename(&logs, env.dir.path().join("logs-away")).unwrap();
    std::os::unix::fs::symlink(&outside, &logs).unwrap();
    let _m = manager(&env, &bus, &fake);
    env.queue_job("l1", &noop(0.1));
    wait_file(&env, "finished", "l1", 60);
    let calls = fake.calls();
    assert!(
        !calls.contains("echo ok >") && !calls.contains(&format!("--output={}", logs.display())),
        "{calls}"
    );
    let planted: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(planted.is_empty(), "written through the link: {planted:?}");
}
