//! Agent commands (PRD §5.1, §5.3): sent to orchestratord over D-Bus when it is reachable
//! (bus activation starts it), else written into the inbox as a message file — as another
//! machine would through Dropbox — and, with `--follow N`, answered from the outbox.

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, Session, open_store};
use crate::bus::Bus;
use crate::bus::orchestrator::{Orchestrator1Proxy, submit_when_up};
use crate::model::{DocKind, JobStatus, Message, MessageSource, MessageStatus, Timestamp};
use crate::orchestrator::RouteError;
use crate::store::{Store, move_no_replace};
use clap::Args;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Options shared by the agent commands.
#[derive(Debug, Args, Clone)]
pub struct AgentArgs {
    /// Project (default: the current project from `set-project`).
    #[arg(add = crate::cli::complete::project(), long)]
    pub project: Option<String>,
    /// What to do (the prompt); required by create-prd.
    #[arg(long)]
    pub task: Option<String>,
    /// Job timeout in seconds (default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Job type: claude (default), agent (the built-in agent), codex (the Codex CLI) or noop.
    #[arg(long, value_parser = ["claude", "agent", "codex", "noop"])]
    pub jobtype: Option<String>,
    /// Model for `--jobtype agent` (e.g. deepseek/deepseek-chat) or `--jobtype codex` (gpt-5).
    #[arg(long)]
    pub model: Option<String>,
    /// Extra argument for the Claude CLI (repeatable).
    #[arg(long = "claude-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub claude_extra_args: Vec<String>,
    /// Flow options: priority, dependencies, retries.
    #[command(flatten)]
    pub flow: super::flow::FlowArgs,
}

/// Options of create-tasks and implement-tasks.
#[derive(Debug, Args, Clone)]
pub struct PrdArgs {
    /// Common options.
    #[command(flatten)]
    pub common: AgentArgs,
    /// PRD id (default: the current PRD from `set-prd`).
    #[arg(long)]
    pub prd: Option<String>,
}

/// Options of create-environment.
#[derive(Debug, Args, Clone)]
pub struct EnvArgs {
    /// Project (default: the current project).
    #[arg(add = crate::cli::complete::project(), long)]
    pub project: Option<String>,
    /// Python version for the venv.
    #[arg(long)]
    pub python: Option<String>,
    /// Install the project's dependencies.
    #[arg(long)]
    pub install_deps: bool,
    /// Replace an existing environment.
    #[arg(long)]
    pub force: bool,
}

/// Builds the message for `command`.
pub(super) fn message(
    command: crate::model::Command,
    project: Option<String>,
    content: Map<String, Value>,
    user: Option<String>,
) -> Message {
    Message {
        correlation_id: uuid::Uuid::new_v4().to_string(),
        source: MessageSource::User,
        project,
        queue_time: Timestamp::now(),
        processed_time: None,
        command: command.name().to_string(),
        content,
        status: MessageStatus::Queued,
        error: None,
        user,
    }
}

pub(super) fn project_or_current(p: Option<String>, s: &Session) -> Result<String, CliError> {
    p.or_else(|| s.project.clone()).ok_or_else(|| {
        CliError::new("no --project given and no current project (orchestrator set-project ID)")
    })
}

pub(super) fn common_content(a: &AgentArgs, queue: &Option<String>) -> Map<String, Value> {
    let mut c = Map::new();
    if let Some(t) = &a.task {
        c.insert("task".into(), json!(t));
    }
    if let Some(q) = queue {
        c.insert("queue".into(), json!(q));
    }
    if let Some(t) = a.timeout {
        c.insert("timeout".into(), json!(t));
    }
    if let Some(j) = &a.jobtype {
        c.insert("jobtype".into(), json!(j));
    }
    if let Some(m) = &a.model {
        c.insert("model".into(), json!(m));
    }
    if !a.claude_extra_args.is_empty() {
        c.insert("claude_extra_args".into(), json!(a.claude_extra_args));
    }
    a.flow.add_to(&mut c);
    c
}

/// `create-prd`, `research-code`.
pub(super) fn simple(
    g: &GlobalArgs,
    out: &mut dyn Write,
    command: crate::model::Command,
    a: AgentArgs,
) -> CliResult {
    let s = Session::load().map_err(CliError::new)?;
    let project = project_or_current(a.project.clone(), &s)?;
    if command == crate::model::Command::CreatePrd && a.task.is_none() {
        return Err(CliError::new(
            "create-prd needs --task \"what the PRD is about\"",
        ));
    }
    let msg = message(
        command,
        Some(project),
        common_content(&a, &g.queue),
        s.username.clone(),
    );
    send(g, out, msg)
}

/// `create-tasks`, `implement-tasks`.
pub(super) fn with_prd(
    g: &GlobalArgs,
    out: &mut dyn Write,
    command: crate::model::Command,
    a: PrdArgs,
) -> CliResult {
    let s = Session::load().map_err(CliError::new)?;
    let project = project_or_current(a.common.project.clone(), &s)?;
    let prd = a.prd.or_else(|| s.prd.clone()).ok_or_else(|| {
        CliError::new("no --prd given and no current PRD (orchestrator set-prd ID)")
    })?;
    let mut content = common_content(&a.common, &g.queue);
    content.insert("prd".into(), json!(prd));
    send(
        g,
        out,
        message(command, Some(project), content, s.username.clone()),
    )
}

/// `create-environment`.
pub(super) fn create_environment(g: &GlobalArgs, out: &mut dyn Write, a: EnvArgs) -> CliResult {
    let s = Session::load().map_err(CliError::new)?;
    let project = project_or_current(a.project, &s)?;
    let mut content = Map::new();
    if let Some(p) = a.python {
        content.insert("python".into(), json!(p));
    }
    if a.install_deps {
        content.insert("install_deps".into(), json!(true));
    }
    if a.force {
        content.insert("force".into(), json!(true));
    }
    if let Some(q) = &g.queue {
        content.insert("queue".into(), json!(q));
    }
    // PRD §5.3: "If venvman not installed: Print error, exit 1" — checked here, before either
    // path, so D-Bus and inbox answer alike. The job checks again where it runs (the compute
    // host) and fails naming venvman when it is missing there.
    let program = crate::worker::project_side::venvman_program();
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let path = std::env::var("PATH").ok();
    if crate::worker::project_side::find_program(&program, path.as_deref(), &home).is_none() {
        return Err(CliError::new(format!(
            "venvman not installed: `{program}` was not found on PATH nor in ~/.local/bin (install venvman, then retry)"
        )));
    }
    send(
        g,
        out,
        message(
            crate::model::Command::CreateEnvironment,
            Some(project),
            content,
            s.username.clone(),
        ),
    )
}

/// How the message reached the orchestrator.
enum Delivery {
    /// Answered over D-Bus.
    Answered(Message),
    /// Written to the inbox; answered from the outbox when `--follow` waited for it.
    Inbox {
        path: std::path::PathBuf,
        answer: Option<Message>,
    },
}

/// True for D-Bus errors meaning "nobody serves the name" (fall back to the inbox).
fn unreachable(e: &zbus::Error) -> bool {
    match e {
        zbus::Error::MethodError(name, _, _) => {
            let n = name.as_str();
            n.starts_with("org.freedesktop.DBus.Error.")
                && [
                    "ServiceUnknown",
                    "NameHasNoOwner",
                    "Spawn.",
                    "NoReply",
                    "TimedOut",
                    "AccessDenied",
                    "UnknownObject",
                    "UnknownMethod",
                ]
                .iter()
                .any(|k| n.contains(k))
        }
        zbus::Error::FDO(_) | zbus::Error::InputOutput(_) | zbus::Error::Handshake(_) => true,
        zbus::Error::Address(_) | zbus::Error::Unsupported => true,
        _ => false,
    }
}

/// An orchestrator proxy that never caches properties (each read asks the daemon).
async fn orchestrator_proxy(conn: &zbus::Connection) -> zbus::Result<Orchestrator1Proxy<'_>> {
    Orchestrator1Proxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

pub(super) async fn submit_dbus(bus: &Bus, text: &str) -> zbus::Result<String> {
    let conn = bus
        .builder()
        .method_timeout(Duration::from_secs(120))
        .build()
        .await?;
    submit_when_up(&orchestrator_proxy(&conn).await?, text).await
}

/// The same folder, as far as this machine can tell (both canonicalised when they exist).
pub(super) fn same_root(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    canon(a) == canon(b)
}

/// The first bus whose orchestratord serves `root` (asking for `StoreRoot` starts an
/// activatable daemon), as a connection to submit on. Daemons of other stores are skipped:
/// a message must never land in a store other than the CLI's own.
async fn daemon_for_root(
    buses: &[Bus],
    root: &Path,
    verbose: bool,
) -> Option<(Bus, zbus::Connection)> {
    for bus in buses {
        let attempt = async {
            let conn = bus
                .builder()
                .method_timeout(Duration::from_secs(120))
                .build()
                .await?;
            let served = orchestrator_proxy(&conn).await?.store_root().await?;
            Ok::<_, zbus::Error>((conn, served))
        };
        match tokio::time::timeout(Duration::from_secs(30), attempt).await {
            Ok(Ok((conn, served))) if same_root(Path::new(&served), root) => {
                return Some((bus.clone(), conn));
            }
            Ok(Ok((_, served))) => {
                if verbose {
                    eprintln!(
                        "orchestratord on the {bus} bus serves {served}, not {}; not using it",
                        root.display()
                    );
                }
            }
            Ok(Err(e)) => {
                if verbose {
                    eprintln!("no orchestratord on the {bus} bus ({e})");
                }
            }
            Err(_) => {
                if verbose {
                    eprintln!("orchestratord on the {bus} bus did not answer within 30 s");
                }
            }
        }
    }
    None
}

/// Submits over D-Bus to a daemon serving `store`; `Ok(None)` when there is none (or it
/// went away), so the caller writes the inbox. The correlation id makes a retry through
/// the inbox safe: the job id derives from it.
fn try_dbus(g: &GlobalArgs, store: &Store, text: &str) -> Result<Option<Message>, CliError> {
    let buses = g.client_buses();
    if buses.is_empty() {
        return Ok(None);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(e.to_string()))?;
    rt.block_on(async {
        let Some((bus, conn)) = daemon_for_root(&buses, store.root(), g.verbose).await else {
            return Ok(None);
        };
        let result = async { submit_when_up(&orchestrator_proxy(&conn).await?, text).await }.await;
        match result {
            Ok(resp) => serde_json::from_str(&resp)
                .map(Some)
                .map_err(|e| CliError::new(format!("bad answer from orchestratord: {e}"))),
            Err(zbus::Error::MethodError(name, detail, _))
                if name.as_str().starts_with("org.agentstore.Error.") =>
            {
                Err(CliError::new(detail.unwrap_or_else(|| name.to_string())))
            }
            Err(e) if unreachable(&e) => {
                if g.verbose {
                    eprintln!("orchestratord on the {bus} bus went away ({e}); using the inbox");
                }
                Ok(None)
            }
            Err(e) => Err(CliError::new(format!("D-Bus: {e}"))),
        }
    })
}

/// Submits `msg` over D-Bus to a daemon serving `store`; `Ok(None)` when none does (or it
/// went away). The daemon also leaves its answer in the outbox (the audit trail other
/// machines see); it has been delivered, so it moves on as a followed inbox answer does.
pub(super) fn submit_if_served(
    g: &GlobalArgs,
    store: &Store,
    msg: &Message,
) -> Result<Option<Message>, CliError> {
    let text = serde_json::to_string(msg).map_err(|e| CliError::new(e.to_string()))?;
    let answer = try_dbus(g, store, &text);
    if !matches!(answer, Ok(None)) {
        let name = format!("{}.json", msg.correlation_id);
        let left = store.outbox().join(&name);
        if left.exists() {
            let _ = std::fs::create_dir_all(store.processed_outbox());
            let _ = move_no_replace(&left, &store.processed_outbox().join(&name));
        }
    }
    answer
}

/// The checks orchestratord makes before it answers (PRD §5.3 error handling), made here
/// from the store when the message goes through the inbox, with the same messages: the
/// user, the project (and the caller's right to it), the queue, the PRD, and venvman's
/// options (venvman itself is looked for by `create_environment` before either path).
/// Returns the queue the job will go to (agent commands).
fn precheck(store: &Store, msg: &Message) -> Result<Option<String>, CliError> {
    let fail = |e: RouteError| CliError::new(e.to_string());
    let who = crate::orchestrator::caller_for_file(store, msg).map_err(fail)?;
    let Some(project_id) = msg.project.as_deref() else {
        return Ok(None);
    };
    let asked = if crate::orchestrator::commands::creates_job(&msg.command) {
        crate::permissions::project_for_new_job(store, &who, project_id)
    } else {
        crate::permissions::visible_project(store, &who, project_id)
    };
    let project = asked.map_err(|e| fail(RouteError::from(e)))?;
    if crate::model::Command::parse(&msg.command) == Some(crate::model::Command::CreateEnvironment)
    {
        crate::orchestrator::venvman_options(msg).map_err(fail)?;
    }
    let queue = crate::orchestrator::select_queue(store, msg, &project).map_err(fail)?;
    // A pipeline's later steps name the PRD their own create-prd step will make.
    if let Some(prd) = msg.content.get("prd").and_then(Value::as_str)
        && !crate::orchestrator::flow::prd_pending(msg, prd)
    {
        store.find_prd(prd).map_err(|e| fail(RouteError::from(e)))?;
    }
    Ok(Some(queue))
}

/// Writes the message into the inbox; with `--follow N`, waits for its answer.
fn deliver_inbox(g: &GlobalArgs, store: &Store, msg: &Message) -> Result<Delivery, CliError> {
    let path = store.inbox().join(format!("{}.json", msg.correlation_id));
    store.write_doc(DocKind::Message, &path, msg)?;
    let answer = match g.follow {
        Some(secs) => Some(wait_for_answer(g, store, &msg.correlation_id, secs)?),
        None => None,
    };
    Ok(Delivery::Inbox { path, answer })
}

/// Waits up to `secs` for `outbox/<id>.json`, then moves it to `processed_outbox/` (the
/// response has been delivered).
fn wait_for_answer(
    g: &GlobalArgs,
    store: &Store,
    id: &str,
    secs: u64,
) -> Result<Message, CliError> {
    let path = store.outbox().join(format!("{id}.json"));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last_note = Instant::now();
    loop {
        if path.exists() {
            let m: Message = store.read_doc(DocKind::Message, &path)?;
            let done = store.processed_outbox().join(format!("{id}.json"));
            let _ = std::fs::create_dir_all(store.processed_outbox());
            let _ = move_no_replace(&path, &done);
            return Ok(m);
        }
        if Instant::now() >= deadline {
            return Err(CliError::new(format!(
                "no answer to message {id} after {secs} s; it stays in the inbox and will be answered in messaging/outbox/{id}.json once orchestratord runs (orchestrator daemon start)"
            )));
        }
        if g.verbose && last_note.elapsed() > Duration::from_secs(5) {
            eprintln!("waiting for orchestratord to answer {id}…");
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn send(g: &GlobalArgs, out: &mut dyn Write, msg: Message) -> CliResult {
    let started = Instant::now();
    let store = open_store(g)?;
    let mut queue = None;
    let delivery = match submit_if_served(g, &store, &msg)? {
        Some(answer) => Delivery::Answered(answer),
        None => {
            // No daemon serving this store: check here what it would check (same
            // messages, exit 1), then write the inbox.
            queue = precheck(&store, &msg)?;
            deliver_inbox(g, &store, &msg)?
        }
    };
    match delivery {
        Delivery::Answered(m)
        | Delivery::Inbox {
            answer: Some(m), ..
        } => {
            print_answer(g, out, &m)?;
            if let Some(q) = m.content.get("queue").and_then(Value::as_str) {
                warn_unserved(g, &store, q);
            }
            if m.status != MessageStatus::Error {
                warn_missing_folder(&store, &msg);
            }
            follow_job(g, out, &store, &m, started)
        }
        Delivery::Inbox { path, answer: None } => {
            if let Some(q) = &queue {
                warn_unserved(g, &store, q);
            }
            warn_missing_folder(&store, &msg);
            let pending = pending_answer(&store, &msg, queue.as_deref());
            match g.format {
                Format::Json => write_json(out, &pending)?,
                Format::Text => match pending.content.get("job_id").and_then(Value::as_str) {
                    Some(job) => writeln!(out, "Job queued: {job}")?,
                    None => writeln!(
                        out,
                        "Message queued: {} ({}); the answer will be in messaging/outbox/ — use --follow SECONDS to wait",
                        msg.correlation_id,
                        store.relative(&path).display()
                    )?,
                },
            }
            Ok(())
        }
    }
}

/// Says on stderr, once a job is queued, when its project's folder is not on this machine
/// (renamed or moved since `add-project`): the job fails "Working directory does not exist"
/// on any machine without it (issue 32: nothing said so until the job had failed).
fn warn_missing_folder(store: &Store, msg: &Message) {
    if !crate::orchestrator::commands::creates_job(&msg.command) {
        return;
    }
    let Some(project) = msg.project.as_deref() else {
        return;
    };
    if let Ok(p) = store.project(project) {
        super::admin::warn_missing_directory(&p.id, std::path::Path::new(&p.directory));
    }
}

/// Says on stderr, once the job is queued, when no machine will start it.
fn warn_unserved(g: &GlobalArgs, store: &Store, queue: &str) {
    if let Some(why) = super::machines::unserved(g, store, queue) {
        super::render::warning(&why);
    }
}

/// Delivers `msg` to orchestratord (over D-Bus when one serves this store, else through
/// the inbox, waiting `--follow` seconds for the answer) and returns the answer and how it
/// came ("D-Bus" or "inbox").
pub(super) fn submit(
    g: &GlobalArgs,
    store: &Store,
    msg: &Message,
) -> Result<(Message, &'static str), CliError> {
    if let Some(answer) = submit_if_served(g, store, msg)? {
        return Ok((answer, "D-Bus"));
    }
    precheck(store, msg)?;
    let g = GlobalArgs {
        follow: Some(g.follow.unwrap_or(60)),
        ..g.clone()
    };
    match deliver_inbox(&g, store, msg)? {
        Delivery::Inbox {
            answer: Some(m), ..
        } => Ok((m, "inbox")),
        _ => Err(CliError::new("no answer from orchestratord")),
    }
}

/// What the inbox path can say before the orchestrator answers: the answer it will give
/// (same job id, queue and job path), with `status: "queued"`.
fn pending_answer(store: &Store, msg: &Message, queue: Option<&str>) -> Message {
    let mut content = Map::new();
    if crate::orchestrator::commands::creates_job(&msg.command) {
        let job = crate::orchestrator::job_id_for(&msg.correlation_id);
        if let Some(q) = queue {
            content.insert("queue".into(), json!(q));
            let path = store.job_path(q, JobStatus::Queued, &job);
            content.insert(
                "job_path".into(),
                json!(store.relative(&path).display().to_string()),
            );
        }
        content.insert("job_id".into(), json!(job));
    }
    Message {
        source: MessageSource::Orchestrator,
        content,
        status: MessageStatus::Queued,
        ..msg.clone()
    }
}

/// `--follow N` (text): after the answer, waits for the job until N seconds after the start,
/// then prints its state: finished (exit 0), failed (exit 1), or still queued/running.
fn follow_job(
    g: &GlobalArgs,
    out: &mut dyn Write,
    store: &Store,
    answer: &Message,
    started: Instant,
) -> CliResult {
    let (Some(secs), Format::Text) = (g.follow, g.format) else {
        return Ok(());
    };
    let Some(id) = answer.content.get("job_id").and_then(Value::as_str) else {
        return Ok(());
    };
    out.flush()?;
    let deadline = started + Duration::from_secs(secs);
    loop {
        let loc = match store.find_job(id) {
            Ok(l) => Some(l),
            // A rename between state folders can hide it for an instant: look again.
            Err(crate::store::StoreError::NotFound { .. }) => None,
            // The job folders are not readable here (the system store): nothing to follow.
            Err(_) => return Ok(()),
        };
        let status = loc.as_ref().map(|l| l.status);
        match status {
            Some(JobStatus::Finished) => {
                writeln!(out, "Job {id}: finished")?;
                // Issue 32: where to read what it did (it said only "finished").
                writeln!(out, "  its result: orchestrator view-job {id}")?;
                return Ok(());
            }
            Some(JobStatus::Failed) => {
                let error = loc
                    .and_then(|l| store.job(&l).ok())
                    .and_then(|j| j.runtime.error)
                    .unwrap_or_else(|| "no error recorded".into());
                writeln!(out, "Job {id}: failed")?;
                return Err(CliError::new(format!("job {id} failed: {error}")));
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            let name = status.map(|s| s.name()).unwrap_or("queued");
            writeln!(out, "Job {id}: {name} (still, after {secs} s)")?;
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
fn print_answer(g: &GlobalArgs, out: &mut dyn Write, m: &Message) -> CliResult {
    if g.format == Format::Json {
        write_json(out, m)?;
    }
    if m.status == MessageStatus::Error {
        return Err(CliError::new(
            m.error.clone().unwrap_or_else(|| "failed".into()),
        ));
    }
    if g.format == Format::Text {
        if let Some(job) = m.content.get("job_id").and_then(Value::as_str) {
            writeln!(out, "Job queued: {job}")?;
            if g.verbose {
                writeln!(
                    out,
                    "  queue {}, {}",
                    m.content
                        .get("queue")
                        .and_then(Value::as_str)
                        .unwrap_or("?"),
                    m.content
                        .get("job_path")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                )?;
            }
        } else if let Some(r) = m.content.get("result") {
            match r.get("stdout").and_then(Value::as_str) {
                Some(s) => write!(out, "{s}")?,
                None => write_json(out, r)?,
            }
        }
    }
    Ok(())
}
