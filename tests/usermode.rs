//! The PRD's own mode (issue 11): a researcher running the daemons and the CLI as themselves,
//! with the session bus when there is one and without any bus when there is none. Each test
//! owns its HOME, store, runtime dir and (private) bus; the system bus is pointed at a socket
//! that does not exist, so nothing on the host can change the outcome.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::daemons::Daemon;
use common::bus::{KillOnDrop, PrivateBus, submit_over, wait_for_name, wait_until};
use common::{Researcher, login};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// Which bus a process of the test sees.
#[derive(Clone, Copy)]
enum Sees<'a> {
    /// No session bus and no system bus.
    Nothing,
    /// This private bus as its session bus.
    Bus(&'a PrivateBus),
}

/// The per-test environment: a [`Researcher`]'s store (project P, queue poplar), HOME, and
/// a runtime dir without a bus socket.
struct User(Researcher);

impl std::ops::Deref for User {
    type Target = Researcher;
    fn deref(&self) -> &Researcher {
        &self.0
    }
}

impl User {
    fn new() -> User {
        User(Researcher::new())
    }

    /// Sets the bus-related environment of `c` to what `sees` says, nothing inherited.
    fn scope(&self, c: &mut Command, sees: Sees<'_>) {
        let bus = match sees {
            Sees::Nothing => None,
            Sees::Bus(b) => Some(b.address.as_str()),
        };
        self.0.scope(c, bus);
    }

    /// The CLI on `root` (AGENT_STORE_ROOT), seeing `sees`.
    fn cli(&self, root: &Path, sees: Sees<'_>, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        self.scope(&mut c, sees);
        c.env("AGENT_STORE_ROOT", root).args(args);
        c.output().unwrap()
    }

    /// A daemon binary, with the store from AGENT_STORE_ROOT (as a user unit would), no
    /// `--bus` flag: the default must just work.
    fn daemon(&self, d: Daemon, root: &Path, sees: Sees<'_>, args: &[&str]) -> KillOnDrop {
        KillOnDrop(self.daemon_cmd(d, root, sees, args).spawn().unwrap())
    }

    /// The command [`User::daemon`] runs, to add to before spawning it.
    fn daemon_cmd(&self, d: Daemon, root: &Path, sees: Sees<'_>, args: &[&str]) -> Command {
        let mut c = crate::daemons::unit_like(d).args(args).command();
        self.scope(&mut c, sees);
        c.env("AGENT_STORE_ROOT", root);
        c
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn job_id(o: &Output) -> String {
    let out = text(&o.stdout);
    let first = out.lines().next().unwrap_or_default();
    let id = first.strip_prefix("Job queued: ").unwrap_or_else(|| {
        panic!(
            "no 'Job queued: ' line in {out:?} (stderr {})",
            text(&o.stderr)
        )
    });
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    id.to_string()
}

fn json_files(dir: &Path) -> Vec<String> {
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

/// Issue 11, first bullet: a plain user with no system bus and no session bus. Before, both
/// daemons exited 1 (system bus socket) and the CLI failed the same way; now they run without
/// a bus, the CLI falls back to the inbox, and the job goes all the way through.
#[test]
fn no_bus_at_all_daemons_run_and_the_cli_uses_the_inbox() {
    let u = User::new();
    let root = u.env.root.clone();
    let mut orch = u.daemon(
        Daemon::Orchestratord,
        &root,
        Sees::Nothing,
        &["--idle-exit", "0"],
    );
    let mut qm = u.daemon(
        Daemon::QueueManager,
        &root,
        Sees::Nothing,
        &["--queue", "poplar", "--launcher", "direct"],
    );
    let o = u.cli(
        &root,
        Sees::Nothing,
        &[
            "research-code",
            "--project",
            "P",
            "--jobtype",
            "noop",
            "--follow",
            "120",
        ],
    );
    assert!(
        orch.0.try_wait().unwrap().is_none(),
        "orchestratord exited without a bus"
    );
    assert!(
        qm.0.try_wait().unwrap().is_none(),
        "queue-manager exited without a bus"
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = job_id(&o);
    assert_eq!(
        text(&o.stdout),
        format!("Job queued: {id}\nJob {id}: finished\n  its result: orchestrator view-job {id}\n")
    );
    assert!(
        root.join(format!("Queues/poplar/Jobs/finished_jobs/{id}.json"))
            .exists()
    );
    let _ = &u.project_dir;
}

/// Issue 11, second bullet: the CLI never sends to a daemon serving another store. A daemon
/// on S answers on the session bus; the CLI on S2 writes S2's inbox; the CLI on S uses it.
#[test]
fn the_cli_talks_only_to_a_daemon_of_its_own_store() {
    let u = User::new();
    let s = u.env.root.clone();
    let s2 = u.env.dir.path().join("Store2");
    // S2: a copy of the same set-up, in another folder.
    for args in Researcher::commands(&u.project_dir) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = u.cli(&s2, Sees::Nothing, &args);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let bus = PrivateBus::start();
    let _orch = u.daemon(
        Daemon::Orchestratord,
        &s,
        Sees::Bus(&bus),
        &["--idle-exit", "0"],
    );
    wait_for_name(&bus, "org.agentstore.Orchestrator1");

    // The default bus choice, and the session bus named explicitly: both skip S's daemon.
    for (n, args) in [
        &["research-code", "--project", "P"][..],
        &["--bus", "session", "research-code", "--project", "P"][..],
    ]
    .into_iter()
    .enumerate()
    {
        let o = u.cli(&s2, Sees::Bus(&bus), args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let id = job_id(&o);
        let inbox = json_files(&s2.join("messaging/inbox"));
        assert_eq!(
            inbox.len(),
            n + 1,
            "the message belongs in S2's inbox: {inbox:?}"
        );
        assert!(
            json_files(&s.join("Queues/poplar/Jobs/queued_jobs")).is_empty(),
            "{args:?}: a job landed in the daemon's store S"
        );
        assert!(json_files(&s.join("messaging/inbox")).is_empty());
        // The id printed is the id the orchestrator of S2 will give the job.
        assert!(
            inbox
                .iter()
                .any(|f| agentstore::orchestrator::job_id_for(f.trim_end_matches(".json")) == id),
            "{id} is not derived from any of {inbox:?}"
        );
    }

    // The CLI on S itself goes over D-Bus: the job is in S at once, nothing in the inbox,
    // and the answer is in processed_outbox (the audit trail; delivered).
    let o = u.cli(&s, Sees::Bus(&bus), &["research-code", "--project", "P"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = job_id(&o);
    assert!(
        s.join(format!("Queues/poplar/Jobs/queued_jobs/{id}.json"))
            .exists()
    );
    assert!(json_files(&s.join("messaging/inbox")).is_empty());
    let answers: Vec<Value> = json_files(&s.join("messaging/processed_outbox"))
        .iter()
        .map(|f| {
            serde_json::from_slice(
                &std::fs::read(s.join("messaging/processed_outbox").join(f)).unwrap(),
            )
            .unwrap()
        })
        .collect();
    assert!(
        answers
            .iter()
            .any(|a| a["content"]["job_id"] == id.as_str() && a["status"] == "done"),
        "no answer for job {id} in processed_outbox: {answers:?}"
    );
    // A submission by another D-Bus client leaves its answer in the outbox, as a file
    // submission would; errors too.
    for (cid, project, status) in [("audit-1", "P", "done"), ("audit-2", "Nope", "error")] {
        let msg = serde_json::json!({"correlation_id": cid, "command": "research-code", "project": project});
        let _ = submit_over(&bus.address, &msg.to_string());
        let path = s.join(format!("messaging/outbox/{cid}.json"));
        let answer: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        assert_eq!(answer["status"], status, "{answer}");
        assert_eq!(answer["source"], "orchestrator", "{answer}");
    }
}

/// PRD §5.3 on both paths: the same stdout, stderr message and exit code whether the
/// daemon answers over D-Bus or the CLI writes the inbox (checked locally from the store).
#[test]
fn inbox_and_dbus_paths_answer_the_same() {
    let u = User::new();
    let root = u.env.root.clone();
    let bus = PrivateBus::start();
    let missing_venvman = u.env.dir.path().join("no/venvman");
    let mut c = u.daemon_cmd(
        Daemon::Orchestratord,
        &root,
        Sees::Bus(&bus),
        &["--idle-exit", "0"],
    );
    c.env("AGENTSTORE_VENVMAN", &missing_venvman);
    let _orch = KillOnDrop(c.spawn().unwrap());
    wait_for_name(&bus, "org.agentstore.Orchestrator1");

    let run = |sees: Sees<'_>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        u.scope(&mut c, sees);
        c.env("AGENT_STORE_ROOT", &root)
            .env("AGENTSTORE_VENVMAN", &missing_venvman)
            .args(args);
        c.output().unwrap()
    };
    let cases: [&[&str]; 4] = [
        &["research-code", "--project", "Nope"],
        &["research-code", "--project", "P", "--queue", "oak"],
        &["create-tasks", "--project", "P", "--prd", "no-such-prd"],
        &["create-environment", "--project", "P"],
    ];
    for args in cases {
        let over_bus = run(Sees::Bus(&bus), args);
        let inbox = run(Sees::Nothing, args);
        assert_eq!(over_bus.status.code(), Some(1), "{args:?} over D-Bus");
        assert_eq!(
            inbox.status.code(),
            over_bus.status.code(),
            "{args:?}: inbox {} / D-Bus {}",
            text(&inbox.stderr),
            text(&over_bus.stderr)
        );
        assert_eq!(text(&inbox.stderr), text(&over_bus.stderr), "{args:?}");
        assert_eq!(text(&inbox.stdout), text(&over_bus.stdout), "{args:?}");
        assert!(!text(&inbox.stderr).trim().is_empty(), "{args:?}");
    }
    // The messages are the PRD's.
    assert!(
        text(&run(Sees::Nothing, cases[0]).stderr).contains("Project not found: Nope"),
        "project"
    );
    assert!(text(&run(Sees::Nothing, cases[1]).stderr).contains("Queue not found: oak"));
    assert!(text(&run(Sees::Nothing, cases[3]).stderr).contains("venvman not installed"));
    // Nothing was written for the refused commands.
    assert!(json_files(&root.join("messaging/inbox")).is_empty());

    // Accepted: the same line on both paths, and the inbox's id is the job id the daemon
    // uses once it reads the inbox.
    let ok = &["research-code", "--project", "P"];
    let over_bus = run(Sees::Bus(&bus), ok);
    let inbox = run(Sees::Nothing, ok);
    assert!(over_bus.status.success() && inbox.status.success());
    let (a, b) = (job_id(&over_bus), job_id(&inbox));
    assert_eq!(text(&over_bus.stdout), format!("Job queued: {a}\n"));
    assert_eq!(text(&inbox.stdout), format!("Job queued: {b}\n"));
    // The running daemon picks the inbox message up (inotify) and makes exactly that job.
    wait_until(LONG, "the inbox job", || {
        root.join(format!("Queues/poplar/Jobs/queued_jobs/{b}.json"))
            .exists()
    });
    // --follow on the inbox path: the answer, then the job state (no queue manager: still
    // queued when the time is up), exit 0 as over D-Bus.
    let over_bus = run(
        Sees::Bus(&bus),
        &["--follow", "1", "research-code", "--project", "P"],
    );
    let inbox = run(
        Sees::Nothing,
        &["--follow", "5", "research-code", "--project", "P"],
    );
    for (o, secs) in [(&over_bus, 1), (&inbox, 5)] {
        assert!(o.status.success(), "{}", text(&o.stderr));
        let id = job_id(o);
        assert_eq!(
            text(&o.stdout),
            format!("Job queued: {id}\nJob {id}: queued (still, after {secs} s)\n")
        );
    }
}

/// Zero resident processes when idle: the queue manager exits on its own after
/// `--idle-exit` seconds with nothing queued and nothing running — not while a job runs.
#[test]
fn queue_manager_exits_when_idle_but_not_while_a_job_runs() {
    let u = User::new();
    let root = u.env.root.clone();
    let mut job: Value = serde_json::from_str(&common::noop_job("2025-10-25T10:00:00Z")).unwrap();
    job["config"]["project"] = "P".into();
    job["config"]["supporting_data"] = serde_json::json!({"sleep_seconds": 4});
    std::fs::write(
        root.join("Queues/poplar/Jobs/queued_jobs/idle-1.json"),
        job.to_string(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let mut qm = u.daemon(
        Daemon::QueueManager,
        &root,
        Sees::Nothing,
        &[
            "--queue",
            "poplar",
            "--launcher",
            "direct",
            "--idle-exit",
            "1",
        ],
    );
    let finished = root.join("Queues/poplar/Jobs/finished_jobs/idle-1.json");
    let status = crate::wait::child_exit(&mut qm.0, LONG, "queue-manager's idle exit");
    assert!(status.success(), "queue-manager exited with {status}");
    assert!(finished.exists(), "it exited before its job finished");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "it exited while the 4 s job ran"
    );
    // Nothing queued from the start: it exits too (and 0 keeps it resident: covered by the
    // other tests, which run managers for their whole length).
    let mut qm = u.daemon(
        Daemon::QueueManager,
        &root,
        Sees::Nothing,
        &[
            "--queue",
            "poplar",
            "--launcher",
            "direct",
            "--idle-exit",
            "1",
        ],
    );
    crate::wait::child_exit(&mut qm.0, LONG, "the idle exit");
}

/// The `ExecStart=` of a unit in `systemd/user/`, with `%h`, `%i` and `/usr/bin/` resolved.
fn user_unit_command(unit: &str, home: &Path, instance: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("systemd/user")
        .join(unit);
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("no ExecStart= in {}", path.display()));
    line.split_whitespace()
        .map(|w| {
            let w = w
                .replace("%h", home.to_str().unwrap())
                .replace("%i", instance);
            match w.as_str() {
                "/usr/bin/orchestratord" => Daemon::Orchestratord.path().to_string(),
                "/usr/bin/queue-manager" => Daemon::QueueManager.path().to_string(),
                _ => w,
            }
        })
        .collect()
}

/// Per-user mode: the user units' daemons serve the store the CLI resolves — here the one
/// named by ~/.config/agentstore/config.yaml — not a hard-coded ~/Dropbox/AgentStore; the
/// system units alone say they are the system service; agentstore.target gathers the rest.
#[test]
fn user_units_serve_the_store_the_cli_resolves() {
    let u = User::new();
    let root = u.env.root.clone();
    let home = u.env.home.clone();
    std::fs::create_dir_all(home.join(".config/agentstore")).unwrap();
    std::fs::write(
        home.join(".config/agentstore/config.yaml"),
        format!("agent_store_root: {}\n", root.display()),
    )
    .unwrap();
    // A Dropbox store exists too: the config must win over it, as for the CLI.
    let o = u.cli(&home.join("Dropbox/AgentStore"), Sees::Nothing, &["init"]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let bus = PrivateBus::start();
    let spawn = |argv: Vec<String>| {
        let mut c = Command::new(&argv[0]);
        u.scope(&mut c, Sees::Bus(&bus));
        c.args(&argv[1..])
            .env_remove("AGENT_STORE_ROOT")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        KillOnDrop(c.spawn().unwrap())
    };
    let _orch = spawn(user_unit_command(
        "agentstore-orchestrator.service",
        &home,
        "",
    ));
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let o = Command::new("busctl")
        .args([
            "--address",
            &bus.address,
            "get-property",
            "org.agentstore.Orchestrator1",
            "/org/agentstore/Orchestrator1",
            "org.agentstore.Orchestrator1",
            "StoreRoot",
        ])
        .output()
        .unwrap();
    assert_eq!(
        text(&o.stdout).trim(),
        format!("s {:?}", root.display().to_string()),
        "{}",
        text(&o.stderr)
    );
    let qm = spawn(user_unit_command("queue-manager@.service", &home, "poplar"));
    wait_for_name(&bus, "org.agentstore.Queue.poplar");
    // The name comes first; the runtime fields are written by the manager's first loop (to
    // this machine's Queues/poplar/runtime@<host>.json; readers show it with queue.json).
    let pid = qm.0.id();
    wait_until(
        LONG,
        "the queue's runtime names the user unit's manager",
        || {
            agentstore::store::Store::open(&root)
                .and_then(|s| s.queue("poplar"))
                .is_ok_and(|q| q.runtime.process_id == Some(pid))
        },
    );
    // And the CLI, with the same HOME and no AGENT_STORE_ROOT, reaches that daemon.
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    u.scope(&mut c, Sees::Bus(&bus));
    let o = c
        .env_remove("AGENT_STORE_ROOT")
        .args(["research-code", "--project", "P"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = job_id(&o);
    // In a state folder (or, for a few milliseconds while it starts, only a start claim).
    wait_until(Duration::from_secs(10), "the job in the store", || {
        ["queued", "running", "finished", "failed"].iter().any(|s| {
            root.join(format!("Queues/poplar/Jobs/{s}_jobs/{id}.json"))
                .exists()
        })
    });

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    for unit in ["agentstore-orchestrator.service", "queue-manager@.service"] {
        let user = std::fs::read_to_string(dir.join("user").join(unit)).unwrap();
        assert!(!user.contains("Environment=AGENTSTORE_MODE"), "user {unit}");
        let system = std::fs::read_to_string(dir.join(unit)).unwrap();
        assert!(
            system.contains("\nEnvironment=AGENTSTORE_MODE=system\n"),
            "system {unit}"
        );
    }
    let target = std::fs::read_to_string(dir.join("user/agentstore.target")).unwrap();
    assert!(target.contains("WantedBy=default.target"));
    for unit in [
        "agentstore-orchestrator.path",
        "agentstore-orchestrator.timer",
        "queue-manager@.path",
        "queue-manager@.timer",
    ] {
        let t = std::fs::read_to_string(dir.join("user").join(unit)).unwrap();
        assert!(
            t.lines()
                .any(|l| l.starts_with("WantedBy=") && l.contains("agentstore.target")),
            "{unit} is not part of agentstore.target"
        );
    }
}

/// Out of the box, the four agent commands work: no command file in ~/.claude/commands nor
/// in the project, only the ones the package ships (share/commands/, found through
/// AGENTSTORE_COMMANDS_DIR as the package's /usr/share/agentstore/claude-commands would be),
/// and the queue's default arguments let implement-tasks edit unattended with a narrow
/// permission mode. `add-queue`/`set-queue` reach every config field.
#[test]
fn the_four_agent_commands_work_out_of_the_box() {
    let u = User::new();
    let root = u.env.root.clone();
    let fake = common::fake_claude();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("share/commands");
    let q: Value =
        serde_json::from_str(&u.env.ok(&["--format", "json", "view-queue", "poplar"])).unwrap();
    assert_eq!(
        q["config"]["claude_default_args"],
        serde_json::json!(["-p", "--permission-mode", "acceptEdits"]),
        "{q}"
    );
    let set = u.env.ok(&[
        "--format",
        "json",
        "set-queue",
        "poplar",
        "--claude-cli-path",
        fake.to_str().unwrap(),
        "--worker-count",
        "3",
        "--rest-interval",
        "30",
        "--max-job-runtime-seconds",
        "600",
        "--launcher",
        "direct",
        "--memory-max",
        "2G",
        "--cpu-quota",
        "150%",
        "--tasks-max",
        "64",
        "--agentshell-path",
        "/opt/agentshell",
        "--claude-default-arg=-p",
        "--claude-default-arg=--permission-mode",
        "--claude-default-arg=acceptEdits",
        "--claude-default-arg=--max-turns",
        "--claude-default-arg=40",
    ]);
    let q: Value = serde_json::from_str(&set).unwrap();
    let c = &q["config"];
    assert_eq!(c["worker_count"], 3);
    assert_eq!(c["rest_interval"], 30);
    assert_eq!(c["max_job_runtime_seconds"], 600);
    assert_eq!(c["launcher"], "direct");
    assert_eq!(c["resource_limits"]["memory_max"], "2G");
    assert_eq!(c["resource_limits"]["cpu_quota"], "150%");
    assert_eq!(c["resource_limits"]["tasks_max"], 64);
    assert_eq!(c["agentshell_path"], "/opt/agentshell");
    assert_eq!(
        c["claude_default_args"],
        serde_json::json!([
            "-p",
            "--permission-mode",
            "acceptEdits",
            "--max-turns",
            "40"
        ])
    );
    // set-queue changes only what it is given; add-queue takes the same fields.
    u.env.ok(&["set-queue", "poplar", "--memory-max", ""]);
    let q: Value =
        serde_json::from_str(&u.env.ok(&["--format", "json", "view-queue", "poplar"])).unwrap();
    assert_eq!(
        q["config"]["resource_limits"]["memory_max"],
        Value::Null,
        "{q}"
    );
    assert_eq!(q["config"]["worker_count"], 3, "{q}");
    let added: Value = serde_json::from_str(&u.env.ok(&[
        "--format",
        "json",
        "add-queue",
        "oak",
        "--no-claude-default-args",
        "--worker-count",
        "5",
    ]))
    .unwrap();
    assert_eq!(
        added["config"]["claude_default_args"],
        serde_json::json!([])
    );
    assert_eq!(added["config"]["worker_count"], 5);
    let bad = u.env.fails(&["set-queue", "poplar", "--worker-count", "0"]);
    assert!(bad.contains("--worker-count"), "{bad}");
    let bad = u.env.fails(&["set-queue", "nope", "--worker-count", "1"]);
    assert!(bad.contains("nope"), "{bad}");

    let spawn = |d: Daemon, args: &[&str]| {
        let mut c = u.daemon_cmd(d, &root, Sees::Nothing, args);
        c.env("AGENTSTORE_COMMANDS_DIR", &shipped);
        KillOnDrop(c.spawn().unwrap())
    };
    let _orch = spawn(Daemon::Orchestratord, &["--idle-exit", "0"]);
    let _qm = spawn(
        Daemon::QueueManager,
        &["--queue", "poplar", "--idle-exit", "0"],
    );
    let agent = |args: &[&str]| {
        let mut all = vec!["--follow", "120"];
        all.extend_from_slice(args);
        let o = u.cli(&root, Sees::Nothing, &all);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let id = job_id(&o);
        assert_eq!(
            text(&o.stdout),
            format!(
                "Job queued: {id}\nJob {id}: finished\n  its result: orchestrator view-job {id}\n"
            ),
            "{args:?}"
        );
        let job: Value = serde_json::from_slice(
            &std::fs::read(root.join(format!("Queues/poplar/Jobs/finished_jobs/{id}.json")))
                .unwrap(),
        )
        .unwrap();
        (
            id,
            job["runtime"]["output"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    // The fake claude answers with the prompt it got: the shipped command's text.
    let (_, out) = agent(&[
        "research-code",
        "--project",
        "P",
        "--task",
        "STDERR=careful",
    ]);
    assert!(out.contains("code research"), "{out}");
    // runtime.output keeps stderr too, after stdout (PRD §4.6).
    assert!(out.ends_with("\n--- stderr ---\ncareful"), "{out}");
    assert!(
        out.starts_with('{'),
        "stdout (Claude's JSON) comes first: {out}"
    );
    let (prd, out) = agent(&["create-prd", "--project", "P", "--task", "Make it fast"]);
    assert!(out.contains("product requirements document"), "{out}");
    assert!(out.contains("Make it fast"), "{out}");
    wait_until(LONG, "the PRD from create-prd", || {
        root.join(format!("projects/P/queued_prds/{prd}.json"))
            .exists()
    });
    let (_, out) = agent(&["create-tasks", "--project", "P", "--prd", &prd]);
    assert!(out.contains("planning the implementation"), "{out}");
    let (_, out) = agent(&["implement-tasks", "--project", "P", "--prd", &prd]);
    assert!(out.contains("Implementation report"), "{out}");
}

/// `orchestrator demo`: the main job in one command, as a plain user with whatever bus there
/// is — none, a free session bus, or one where the user's own orchestrator already owns the
/// name — each step printed with its time, then the result; the store is removed unless
/// `--keep`.
#[test]
fn demo_runs_the_whole_path_with_or_without_a_bus() {
    let u = User::new();
    let demo = |sees: Sees<'_>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        u.scope(&mut c, sees);
        c.env_remove("AGENT_STORE_ROOT")
            .env_remove("ANTHROPIC_API_KEY")
            .env("TMPDIR", u.env.dir.path())
            .env("COLUMNS", "80")
            .arg("demo")
            .args(args);
        c.output().unwrap()
    };
    let steps = [
        "store created: ",
        "orchestratord started (pid ",
        "queue-manager poplar started (pid ",
        "message sent: research-code --project hello",
        "Job queued: ",
        "job finished",
        "Result (finished):\nNo-op job completed successfully\n",
    ];
    let check = |o: &Output, via: &str| {
        let out = text(&o.stdout);
        assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
        let mut at = 0;
        for s in steps {
            let found = out[at..]
                .find(s)
                .unwrap_or_else(|| panic!("{s:?} missing (in order) from:\n{out}"));
            at += found + s.len();
        }
        assert!(out.contains(&format!("answered ({via})")), "{out}");
        assert!(
            out.lines()
                .filter(|l| l.starts_with('['))
                .all(|l| l.contains("s] ")),
            "every step has its time:\n{out}"
        );
        // Within 80 columns, but for a command printed whole to paste and the store's path.
        assert!(
            out.lines()
                .filter(|l| !l.starts_with("  /") && !l.starts_with("The store is kept: "))
                .all(|l| l.chars().count() <= 80),
            "a line over 80 columns:\n{out}"
        );
        out
    };
    let leftovers = || {
        std::fs::read_dir(u.env.dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("agentstore-demo-")
            })
            .count()
    };
    // No bus at all: the inbox.
    let out = check(&demo(Sees::Nothing, &[]), "inbox");
    assert!(out.contains("bus: none"), "{out}");
    assert_eq!(leftovers(), 0, "the throwaway store was not removed");
    // A free session bus: D-Bus.
    let bus = PrivateBus::start();
    let out = check(&demo(Sees::Bus(&bus), &[]), "D-Bus");
    assert!(out.contains("bus: session"), "{out}");
    // The user's own orchestrator owns the name: the demo runs beside it, through the inbox,
    // and never sends to it.
    let _theirs = u.daemon(
        Daemon::Orchestratord,
        &u.env.root,
        Sees::Bus(&bus),
        &["--idle-exit", "0"],
    );
    wait_for_name(&bus, "org.agentstore.Orchestrator1");
    check(&demo(Sees::Bus(&bus), &["--keep"]), "inbox");
    assert!(json_files(&u.env.root.join("messaging/processed_inbox")).is_empty());
    assert_eq!(leftovers(), 1, "--keep keeps the store");
}

/// `orchestrator setup` walks a new user through per-user mode and can be run again: the
/// store, the user document and login, a project, the queue this machine serves, the
/// config and unit drop-ins that point the user units at a store outside the default place.
#[test]
fn setup_is_complete_and_rerunnable() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let run_dir = t.path().join("run");
    let store = t.path().join("Research/AgentStore");
    let project = t.path().join("code/hello");
    for d in [&home, &run_dir, &project] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cli = |root: Option<&Path>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        c.env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &run_dir)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("AGENTSTORE_BUS")
            .env_remove("AGENTSTORE_MODE")
            .env_remove("AGENT_STORE_ROOT")
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", run_dir.join("none").display()),
            );
        if let Some(r) = root {
            c.env("AGENT_STORE_ROOT", r);
        }
        c.args(args).output().unwrap()
    };
    let setup = [
        "setup",
        "--project",
        "hello",
        "--directory",
        project.to_str().unwrap(),
        "--serve-queue",
        "oak",
    ];
    let first = cli(Some(&store), &setup);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let out = text(&first.stdout);
    for want in [
        "user ",
        "added",
        "queue      oak added",
        "project    hello added",
        "no systemd user manager",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    let cfg = std::fs::read_to_string(home.join(".config/agentstore/config.yaml")).unwrap();
    let canon = std::fs::canonicalize(&store).unwrap();
    assert!(
        cfg.contains(&format!("agent_store_root: {}", canon.display())),
        "{cfg}"
    );
    let dropin = std::fs::read_to_string(
        home.join(".config/systemd/user/queue-manager@.path.d/agentstore-store.conf"),
    )
    .unwrap();
    assert!(
        dropin.contains(&format!(
            "DirectoryNotEmpty={}/Queues/%i/Jobs/queued_jobs",
            canon.display()
        )),
        "{dropin}"
    );
    assert!(
        home.join(".config/systemd/user/agentstore-orchestrator.path.d/agentstore-store.conf")
            .is_file()
    );
    // Without AGENT_STORE_ROOT, the CLI (and so the user units) now find that store, logged in
    // as the new user, with the project current.
    let o = cli(None, &["--format", "json", "view-project", "hello"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["default_queue"], "oak");
    assert_eq!(p["directory"], project.to_str().unwrap());
    // The new store's default queue is the one this machine serves: a project added later
    // without --default-queue goes to oak, not to a `poplar` nobody serves (issue 32).
    assert!(!store.join("Queues/poplar").exists());
    let o = cli(
        None,
        &[
            "add-project",
            "second",
            "--directory",
            project.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = cli(None, &["--format", "json", "view-project", "second"]);
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["default_queue"], "oak");
    let session: Value =
        serde_json::from_slice(&std::fs::read(home.join(".orchestrator_config.json")).unwrap())
            .unwrap();
    assert_eq!(session["project"], "hello");
    assert!(session["username"].is_string());
    // Again: nothing changes, everything is reported as there.
    let before = std::fs::read(store.join("projects/hello/project.json")).unwrap();
    let again = cli(None, &setup);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let out = text(&again.stdout);
    for want in [
        "already complete",
        "exists",
        "queue      oak exists",
        "unchanged",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    assert_eq!(
        before,
        std::fs::read(store.join("projects/hello/project.json")).unwrap()
    );
    // A config naming another store is not overwritten: a clear error, exit 1.
    let other = t.path().join("Other");
    let o = cli(Some(&other), &["setup"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("config.yaml exists and does not name"),
        "{}",
        text(&o.stderr)
    );
    let cfg2 = std::fs::read_to_string(home.join(".config/agentstore/config.yaml")).unwrap();
    assert_eq!(cfg, cfg2);
}

/// A fake `venvman` that records its argv, uid, cwd and parent chain (`comm` of each
/// ancestor) into `record`, then makes `<dir>/.venv/pyvenv.cfg` as venvman would.
fn fake_venvman(bin: &Path, record: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(bin).unwrap();
    let script = format!(
        r#"#!/bin/sh
dir=
while [ $# -gt 0 ]; do
  case "$1" in --dir) dir=$2;; esac
  printf '%s\n' "$1" >> '{rec}.argv'
  shift
done
{{
  echo "uid $(id -u)"
  echo "cwd $(pwd)"
  p=$PPID; chain=
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    chain="$chain $(cat /proc/$p/comm)"
    p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status)
  done
  echo "chain$chain"
}} > '{rec}'
mkdir -p "$dir/.venv" && echo "home = /usr/bin" > "$dir/.venv/pyvenv.cfg"
echo "venv made in $dir"
"#,
        rec = record.display()
    );
    let path = bin.join("venvman");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Issue 11, "project-side effects run where the project is, as its owner": the research
/// document and the venvman environment are made by the job — agent-worker on the compute
/// host, as the job's Unix user — with no orchestratord running at all, and the orchestrator,
/// once back, only records them (project update_time) and writes nothing in the project.
/// Before, orchestratord ran venvman itself when it answered the message and wrote the
/// document in its completion handler. A compute host without venvman fails the job with an
/// error naming venvman.
#[test]
fn project_side_effects_are_made_by_the_job_as_its_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let u = User::new();
    let root = u.env.root.clone();
    // When the test runs as root, jobs run as the project owner's Unix user: make that the
    // unprivileged test account (an ordinary one: a root daemon runs jobs only as such), so
    // what the job writes is told apart from what a daemon (root) would.
    let root_mode = nix::unistd::geteuid().is_root();
    let (job_login, job_uid) = if root_mode {
        let n = crate::claude_env::unprivileged_user().unwrap();
        (n.name, n.uid)
    } else {
        (login(), nix::unistd::geteuid().as_raw())
    };
    let user_doc = root.join("users/chenry.json");
    let mut user: Value = serde_json::from_slice(&std::fs::read(&user_doc).unwrap()).unwrap();
    user["unix_user"] = Value::String(job_login.clone());
    std::fs::write(&user_doc, user.to_string()).unwrap();
    let doc = u.project_dir.join("docs/RESEARCH.md");
    let project_doc = root.join("projects/P/project.json");
    let mut project: Value = serde_json::from_slice(&std::fs::read(&project_doc).unwrap()).unwrap();
    project["code_research_document"] = Value::String(doc.display().to_string());
    std::fs::write(&project_doc, project.to_string()).unwrap();
    let record_dir = u.env.dir.path().join("record");
    std::fs::create_dir_all(&record_dir).unwrap();
    if root_mode {
        // Sticky, like /tmp: the job's account may create files there, and nobody may
        // replace another's (the programs and configuration below stay trusted).
        for d in [u.env.dir.path(), &record_dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
        nix::unistd::chown(&u.project_dir, Some(job_uid.into()), None).unwrap();
    }
    let record = record_dir.join("venvman.txt");
    let bin = u.env.dir.path().join("bin");
    fake_venvman(&bin, &record);
    let fake = common::fake_claude();
    u.env.ok(&[
        "set-queue",
        "poplar",
        "--claude-cli-path",
        fake.to_str().unwrap(),
        "--launcher",
        "direct",
    ]);
    // The fake venvman records its calls outside the project, which a sandboxed job may not
    // write (tests/worker_sandbox.rs checks that): this queue runs its jobs unconfined.
    let queue_doc = root.join("Queues/poplar/queue.json");
    let mut queue: Value = serde_json::from_slice(&std::fs::read(&queue_doc).unwrap()).unwrap();
    queue["config"]["sandbox"] = serde_json::json!({"enabled": false});
    std::fs::write(&queue_doc, queue.to_string()).unwrap();
    let path_with_fake = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The CLI (this host has venvman: PRD §5.3 checks it here) writes the inbox.
    let cli = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        u.scope(&mut c, Sees::Nothing);
        c.env("AGENT_STORE_ROOT", &root)
            .env("PATH", &path_with_fake)
            .env_remove("AGENTSTORE_VENVMAN")
            .args(args);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        job_id(&o)
    };
    // The command files are the ones built into the binary (nothing installed here).
    let daemon = |d: Daemon, args: &[&str], venvman: Option<&str>| {
        let mut c = u.daemon_cmd(d, &root, Sees::Nothing, args);
        c.env_remove("AGENTSTORE_COMMANDS_DIR");
        match venvman {
            Some(name) => c.env("AGENTSTORE_VENVMAN", name),
            None => c
                .env("PATH", &path_with_fake)
                .env_remove("AGENTSTORE_VENVMAN"),
        };
        KillOnDrop(c.spawn().unwrap())
    };
    let job_file =
        |state: &str, id: &str| root.join(format!("Queues/poplar/Jobs/{state}_jobs/{id}.json"));
    let read_job = |state: &str, id: &str| -> Value {
        serde_json::from_slice(&std::fs::read(job_file(state, id)).unwrap()).unwrap()
    };

    // Jobs made by the orchestrator, which then goes away (killed and reaped): whatever
    // happens in the project afterwards is not its doing.
    let make_jobs = |cmds: &[&[&str]]| -> Vec<String> {
        let orch = daemon(Daemon::Orchestratord, &["--idle-exit", "0"], None);
        let ids: Vec<String> = cmds.iter().map(|a| cli(a)).collect();
        for id in &ids {
            wait_until(LONG, "the orchestrator made the job", || {
                job_file("queued", id).exists()
            });
        }
        drop(orch);
        ids
    };
    // Runs the queue's jobs to their end with a queue manager that has `venvman`.
    let run_jobs = |ids: &[String], venvman: Option<&str>| {
        let _qm = daemon(
            Daemon::QueueManager,
            &["--queue", "poplar", "--idle-exit", "0"],
            venvman,
        );
        for id in ids {
            wait_until(LONG, "the job ends", || {
                job_file("failed", id).exists() || job_file("finished", id).exists()
            });
        }
    };

    // A compute host without venvman: the job fails, naming it. (A program name that is
    // nowhere, so a venvman installed on this machine cannot change the outcome.)
    let missing = make_jobs(&[&["create-environment", "--project", "P"]]);
    let queued = read_job("queued", &missing[0]);
    assert_eq!(queued["config"]["jobtype"], "venvman", "{queued}");
    assert!(
        walk(&u.project_dir).is_empty(),
        "the orchestrator touched the project"
    );
    run_jobs(&missing, Some("venvman-absent-8c1f"));
    let failed = read_job("failed", &missing[0]);
    let error = failed["runtime"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("venvman not installed on ") && error.contains("venvman-absent-8c1f"),
        "{error}"
    );
    assert!(!record.exists() && walk(&u.project_dir).is_empty());

    // With venvman: the job runs it from agent-worker, as the job's user; the research job
    // writes the project's document the same way. No orchestratord runs meanwhile.
    let ids = make_jobs(&[
        &[
            "create-environment",
            "--project",
            "P",
            "--python",
            "3.11",
            "--install-deps",
        ],
        &["research-code", "--project", "P"],
    ]);
    assert!(
        walk(&u.project_dir).is_empty(),
        "the orchestrator touched the project"
    );
    run_jobs(&ids, None);
    let (env_job, research) = (ids[0].clone(), ids[1].clone());
    for id in &ids {
        assert!(
            job_file("finished", id).exists(),
            "{}",
            std::fs::read_to_string(job_file("failed", id)).unwrap_or_default()
        );
    }
    let argv = std::fs::read_to_string(format!("{}.argv", record.display())).unwrap();
    let dir = u.project_dir.display().to_string();
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        vec![
            "create",
            "--project",
            "P",
            "--dir",
            &dir,
            "--python",
            "3.11",
            "--install-deps"
        ]
    );
    let rec = std::fs::read_to_string(&record).unwrap();
    assert!(rec.contains(&format!("uid {job_uid}\n")), "{rec}");
    assert!(rec.contains(&format!("cwd {dir}\n")), "{rec}");
    let chain = rec.lines().find_map(|l| l.strip_prefix("chain")).unwrap();
    let chain: Vec<&str> = chain.split_whitespace().collect();
    assert_eq!(chain.first(), Some(&"agent-worker"), "{rec}");
    assert!(!chain.contains(&"orchestratord"), "{rec}");
    let venv = u.project_dir.join(".venv/pyvenv.cfg");
    assert_eq!(std::fs::metadata(&venv).unwrap().uid(), job_uid);
    let out = read_job("finished", &env_job)["runtime"]["output"].clone();
    assert!(
        out.as_str().unwrap_or_default().contains("venv made in"),
        "{out}"
    );

    let text_doc = std::fs::read_to_string(&doc).unwrap();
    assert!(text_doc.contains("code research"), "{text_doc}");
    for p in [&doc, &u.project_dir.join("docs")] {
        assert_eq!(
            std::fs::metadata(p).unwrap().uid(),
            job_uid,
            "{}",
            p.display()
        );
    }

    // The orchestrator comes back: it records the work (update_time) and leaves the project
    // as the jobs made it.
    let before: Vec<_> = walk(&u.project_dir);
    // update_time has whole seconds: start from an old one so the bump is always visible.
    let mut old: Value = serde_json::from_slice(&std::fs::read(&project_doc).unwrap()).unwrap();
    old["update_time"] = Value::String("2020-01-01T00:00:00Z".into());
    std::fs::write(&project_doc, old.to_string()).unwrap();
    let t0 = old["update_time"].clone();
    let _orch = daemon(Daemon::Orchestratord, &["--idle-exit", "0"], None);
    for id in [&env_job, &research] {
        wait_until(LONG, "handled", || {
            read_job("finished", id)["runtime"]["handled"] == Value::Bool(true)
        });
    }
    let now: Value = serde_json::from_slice(&std::fs::read(&project_doc).unwrap()).unwrap();
    assert_ne!(now["update_time"], t0);
    assert_eq!(
        walk(&u.project_dir),
        before,
        "the orchestrator changed the project"
    );
}

/// Every path under `dir` with its size, owner and modification time.
fn walk(dir: &Path) -> Vec<(PathBuf, u64, u32, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p.clone());
            }
            out.push((
                p,
                m.size(),
                m.uid(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000,
            ));
        }
    }
    out.sort();
    out
}
