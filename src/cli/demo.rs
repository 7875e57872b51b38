//! `orchestrator demo`: the whole job path in one command, no root, no network. A throwaway
//! store, orchestratord and one queue manager as child processes (on the session bus when
//! there is one, else without a bus: the CLI then writes the inbox), one research-code job
//! through message → job → worker → result, each step printed with its time.

use super::agent;
use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs};
use crate::model::{
    DocKind, JobStatus, Message, MessageSource, MessageStatus, Permission, Project, QueueConfig,
    Timestamp, User,
};
use crate::store::Store;
use clap::Args;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `demo` options.
#[derive(Debug, Args, Clone)]
pub struct DemoArgs {
    /// Leave the throwaway store (and print where it is) instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub timeout: u64,
    /// The job type: noop (the built-in no-op), claude (the real Claude Code with the
    /// shipped code-researcher command), or auto: claude when `claude` is on PATH and an
    /// ANTHROPIC_API_KEY is set (or ~/.claude/.credentials.json exists), else noop.
    #[arg(long, value_parser = ["auto", "noop", "claude"], default_value = "auto")]
    pub jobtype: String,
}

/// The throwaway store and the daemons; cleaned up on drop.
struct Demo {
    dir: PathBuf,
    keep: bool,
    children: Vec<(String, Child)>,
}

impl Drop for Demo {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        for (_, c) in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A sibling binary of this program (the package and `cargo build` put them together), else
/// the name, for PATH.
fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The shipped command files: the package's folder, else the source tree's `share/commands`
/// (running from a checkout), unless AGENTSTORE_COMMANDS_DIR says otherwise.
fn commands_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("AGENTSTORE_COMMANDS_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    [
        PathBuf::from(crate::worker::claude::SHIPPED_COMMANDS_DIR),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("share/commands"),
    ]
    .into_iter()
    .find(|d| d.join("code-researcher.md").is_file())
}

struct Clock {
    start: Instant,
    json: bool,
    steps: Vec<Value>,
}

impl Clock {
    fn step(&mut self, out: &mut dyn Write, what: &str) -> CliResult {
        let t = self.start.elapsed().as_secs_f64();
        if self.json {
            self.steps.push(json!({"t": t, "step": what}));
        } else {
            // Wrapped to the terminal, continuation lines under the text (paths and ids,
            // which have no spaces, are split only when longer than a line).
            let lines = super::render::wrap(
                what,
                super::render::terminal_width().saturating_sub(12).max(20),
            );
            for (i, l) in lines.iter().enumerate() {
                if i == 0 {
                    writeln!(out, "[{t:7.2}s] {l}")?;
                } else {
                    writeln!(out, "            {l}")?;
                }
            }
            out.flush()?;
        }
        Ok(())
    }
}

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::new(format!("demo: {e}"))
}

/// The login name of this process (the demo's jobs run as it).
fn login() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "root".into())
}

/// A small project for the job to look at.
fn sample_project(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("README.md"),
        "# hello\n\nA tiny demo project: `python3 src/hello.py NAME` greets NAME.\n",
    )?;
    std::fs::write(
        dir.join("src/hello.py"),
        "import sys\n\n\ndef greet(name: str) -> str:\n    return f\"Hello, {name}!\"\n\n\nif __name__ == \"__main__\":\n    print(greet(sys.argv[1] if len(sys.argv) > 1 else \"world\"))\n",
    )
}

/// Starts `bin` with `args`; `None` when it exits at once (e.g. the bus name is taken by a
/// daemon of the user's own store), so the caller can retry without a bus.
fn start(
    bin: &str,
    args: &[&str],
    root: &Path,
    log: &Path,
    env: &[(&str, &Path)],
) -> Result<Option<Child>, CliError> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| err(format!("{}: {e}", log.display())))?;
    let mut c = Command::new(sibling(bin));
    c.args(args)
        .arg("--root")
        .arg(root)
        .env("AGENT_STORE_ROOT", root)
        .env_remove("AGENTSTORE_MODE")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c
        .spawn()
        .map_err(|e| err(format!("cannot start {bin}: {e}")))?;
    // Up and serving: it stays alive for a moment (a taken bus name exits at once).
    let deadline = Instant::now() + Duration::from_millis(700);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Some(child))
}

/// `orchestrator demo`.
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, a: DemoArgs) -> CliResult {
    let mut clock = Clock {
        start: Instant::now(),
        json: g.format == Format::Json,
        steps: Vec::new(),
    };
    let dir = std::env::temp_dir().join(format!(
        "agentstore-demo-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let mut demo = Demo {
        dir: dir.clone(),
        keep: a.keep,
        children: Vec::new(),
    };
    let root = dir.join("AgentStore");
    let project_dir = dir.join("hello");
    sample_project(&project_dir).map_err(err)?;

    // The store: the skeleton, a user (this login), a project, the default queue.
    let (store, _) = Store::init(&root)?;
    let me = login();
    let user_id = if crate::model::is_safe_id(&me) {
        me.clone()
    } else {
        "demo".into()
    };
    let now = Timestamp::now();
    store.add_user(&User {
        id: user_id.clone(),
        name: me.clone(),
        email: format!("{me}@localhost"),
        permissions: Permission::Admin,
        slack_username: None,
        unix_user: Some(me.clone()),
        notify: None,
    })?;
    let queue = store.config().queues_default.clone();
    if !store.queue_exists(&queue) {
        store.add_queue(QueueConfig::defaults(&queue))?;
    }
    let mut qdoc = store.queue_file(&queue)?;
    qdoc.config.launcher = Some(crate::model::Launcher::Direct);
    store.write_doc(DocKind::Queue, &store.queue_path(&queue), &qdoc)?;
    store.add_project(&Project {
        id: "hello".into(),
        directory: project_dir.display().to_string(),
        git_repository: None,
        create_time: now,
        update_time: now,
        description: Some("The demo project".into()),
        owner: user_id.clone(),
        collaborators: Vec::new(),
        code_research_document: Some(project_dir.join("CODE_RESEARCH.md").display().to_string()),
        default_queue: queue.clone(),
        check_command: None,
        push_remote: None,
    })?;
    clock.step(
        out,
        &format!(
            "store created: {} (user {user_id}, project hello, queue {queue})",
            root.display()
        ),
    )?;

    // The job type.
    let shipped = commands_dir();
    let real = match a.jobtype.as_str() {
        "claude" => true,
        "noop" => false,
        _ => {
            let key = std::env::var_os("ANTHROPIC_API_KEY").is_some_and(|k| !k.is_empty())
                || crate::store::home_dir()
                    .is_some_and(|h| h.join(".claude/.credentials.json").is_file());
            on_path("claude") && key && shipped.is_some()
        }
    };
    if real && shipped.is_none() {
        return Err(err(
            "no code-researcher command file found (install the package, or set AGENTSTORE_COMMANDS_DIR)",
        ));
    }

    // The daemons: session bus when there is one, else none.
    let log = dir.join("daemons.log");
    let bus_arg = crate::bus::BusChoice::Auto
        .for_daemon()
        .map_or_else(|| "none".to_string(), |b| b.to_string());
    let bus_arg = bus_arg.as_str();
    let env: Vec<(&str, &Path)> = shipped
        .as_deref()
        .map(|d| vec![("AGENTSTORE_COMMANDS_DIR", d)])
        .unwrap_or_default();
    let mut used_bus = bus_arg;
    let orch = match start(
        "orchestratord",
        &["--bus", bus_arg, "--idle-exit", "0"],
        &root,
        &log,
        &env,
    )? {
        Some(c) => c,
        None if bus_arg != "none" => {
            // The bus name is taken (the user's own orchestrator): run this one without.
            used_bus = "none";
            start(
                "orchestratord",
                &["--bus", "none", "--idle-exit", "0"],
                &root,
                &log,
                &env,
            )?
            .ok_or_else(|| {
                err(format!(
                    "orchestratord did not start; see {}",
                    log.display()
                ))
            })?
        }
        None => {
            return Err(err(format!(
                "orchestratord did not start; see {}",
                log.display()
            )));
        }
    };
    clock.step(
        out,
        &format!("orchestratord started (pid {}, bus: {used_bus})", orch.id()),
    )?;
    demo.children.push(("orchestratord".into(), orch));
    let qargs = [
        "--queue",
        queue.as_str(),
        "--idle-exit",
        "0",
        "--launcher",
        "direct",
    ];
    let mut qbus = bus_arg;
    let mut with_bus: Vec<&str> = qargs.to_vec();
    with_bus.extend(["--bus", bus_arg]);
    let qm = match start("queue-manager", &with_bus, &root, &log, &env)? {
        Some(c) => c,
        None => {
            qbus = "none";
            let mut none: Vec<&str> = qargs.to_vec();
            none.extend(["--bus", "none"]);
            start("queue-manager", &none, &root, &log, &env)?.ok_or_else(|| {
                err(format!(
                    "queue-manager did not start; see {}",
                    log.display()
                ))
            })?
        }
    };
    clock.step(
        out,
        &format!(
            "queue-manager {queue} started (pid {}, bus: {qbus})",
            qm.id()
        ),
    )?;
    demo.children.push(("queue-manager".into(), qm));

    // The message.
    let mut content = Map::new();
    if real {
        content.insert("jobtype".into(), json!("claude"));
    } else {
        content.insert("jobtype".into(), json!("noop"));
        content.insert(
            "supporting_data".into(),
            json!({"sleep_seconds": 1, "note": "the built-in no-op stands in for Claude Code"}),
        );
    }
    let msg = Message {
        correlation_id: uuid::Uuid::new_v4().to_string(),
        source: MessageSource::User,
        project: Some("hello".into()),
        queue_time: Timestamp::now(),
        processed_time: None,
        command: crate::model::Command::ResearchCode.name().into(),
        content,
        status: MessageStatus::Queued,
        error: None,
        user: Some(user_id.clone()),
    };
    let ga = GlobalArgs {
        root: Some(root.clone()),
        bus: if used_bus == "none" {
            crate::bus::BusChoice::None
        } else {
            crate::bus::BusChoice::Auto
        },
        follow: Some(a.timeout),
        ..g.clone()
    };
    clock.step(
        out,
        &format!(
            "message sent: research-code --project hello ({}, correlation id {})",
            if real {
                "jobtype claude: the real Claude Code"
            } else {
                "jobtype noop: no claude with a key here"
            },
            msg.correlation_id
        ),
    )?;
    let (answer, via) = agent::submit(&ga, &store, &msg)?;
    if answer.status == MessageStatus::Error {
        return Err(err(format!(
            "the orchestrator refused the message: {}",
            answer.error.unwrap_or_default()
        )));
    }
    let job_id = answer
        .content
        .get("job_id")
        .and_then(Value::as_str)
        .ok_or_else(|| err("the answer names no job"))?
        .to_string();
    clock.step(
        out,
        &format!("answered ({via}): Job queued: {job_id} (queue {queue})"),
    )?;

    // The job, state by state.
    let deadline = clock.start + Duration::from_secs(a.timeout);
    let mut last: Option<JobStatus> = None;
    let job = loop {
        if let Ok(loc) = store.find_job(&job_id)
            && Some(loc.status) != last
        {
            last = Some(loc.status);
            let job = store.job(&loc).ok();
            let detail = match (loc.status, &job) {
                (JobStatus::Running, Some(j)) => format!(
                    " (worker pid {}, host {})",
                    j.runtime.process_id.unwrap_or(0),
                    // The demo's manager runs here: this machine, by its name.
                    crate::store::identity::display_hostname()
                ),
                _ => String::new(),
            };
            clock.step(out, &format!("job {}{detail}", loc.status.name()))?;
            if matches!(loc.status, JobStatus::Finished | JobStatus::Failed) {
                break job;
            }
        }
        for (name, c) in &mut demo.children {
            if let Ok(Some(s)) = c.try_wait() {
                return Err(err(format!("{name} exited ({s}); see {}", log.display())));
            }
        }
        if Instant::now() >= deadline {
            return Err(err(format!(
                "job {job_id} still {} after {} s",
                last.map(|s| s.name()).unwrap_or("unknown"),
                a.timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let job = job.ok_or_else(|| err("the finished job could not be read"))?;
    let result = crate::orchestrator::result_text(&job);
    // The job wrote the research document itself (as this user, where the project is); the
    // orchestrator's completion handler only records it.
    let doc = project_dir.join("CODE_RESEARCH.md");
    if job.runtime.status == JobStatus::Finished && doc.exists() {
        clock.step(out, &format!("job wrote the result to {}", doc.display()))?;
        let handled_by = Instant::now() + Duration::from_secs(30);
        let handled = || {
            store
                .find_job(&job_id)
                .and_then(|l| store.job(&l))
                .is_ok_and(|j| j.runtime.handled == Some(true))
        };
        while !handled() && Instant::now() < handled_by {
            std::thread::sleep(Duration::from_millis(50));
        }
        if handled() {
            clock.step(out, "orchestrator recorded it in the project")?;
        }
    }
    if clock.json {
        write_json(
            out,
            &json!({
                "store": root,
                "kept": a.keep,
                "job_id": job_id,
                "status": job.runtime.status.name(),
                "error": job.runtime.error,
                "result": result,
                "steps": clock.steps,
            }),
        )?;
    } else {
        writeln!(out, "\nResult ({}):", job.runtime.status.name())?;
        writeln!(out, "{}", result.trim_end())?;
        if let Some(e) = &job.runtime.error {
            writeln!(out, "Error: {e}")?;
        }
        if a.keep {
            // The binary that runs now, not an `orchestrator` that may not be on PATH.
            let me = std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "orchestrator".into());
            // The command whole on its own line, to paste (never wrapped).
            writeln!(out, "\nThe store is kept: {}. Try:", root.display())?;
            writeln!(out, "  {me} --root {} list-jobs", root.display())?;
        }
    }
    if job.runtime.status == JobStatus::Failed {
        return Err(CliError::new(format!(
            "demo job {job_id} failed: {}",
            job.runtime.error.unwrap_or_default()
        )));
    }
    Ok(())
}
