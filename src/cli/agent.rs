//! Agent commands (PRD §5.1, §5.3): sent to orchestratord over D-Bus when it is reachable
//! (bus activation starts it), else written into the inbox as a message file — as another
//! machine would through Dropbox — and, with `--follow N`, answered from the outbox.

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, Session, open_store};
use crate::bus::BusKind;
use crate::bus::orchestrator::Orchestrator1Proxy;
use crate::model::{DocKind, Message, MessageSource, MessageStatus, Timestamp};
use crate::store::{Store, move_no_replace};
use clap::Args;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

/// Options shared by the agent commands.
#[derive(Debug, Args, Clone)]
pub struct AgentArgs {
    /// Project (default: the current project from `set-project`).
    #[arg(long)]
    pub project: Option<String>,
    /// What to do (the prompt); required by create-prd.
    #[arg(long)]
    pub task: Option<String>,
    /// Job timeout in seconds (default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Job type: claude (default), agent (the built-in agent) or noop.
    #[arg(long, value_parser = ["claude", "agent", "noop"])]
    pub jobtype: Option<String>,
    /// Model for `--jobtype agent` (e.g. deepseek/deepseek-chat).
    #[arg(long)]
    pub model: Option<String>,
    /// Extra argument for the Claude CLI (repeatable).
    #[arg(long = "claude-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub claude_extra_args: Vec<String>,
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
    #[arg(long)]
    pub project: Option<String>,
    /// Python version for the venv.
    #[arg(long)]
    pub python: Option<String>,
    /// Install the project's dependencies.
    #[arg(long)]
    pub install_deps: bool,
}

/// Builds the message for `command`.
fn message(
    command: &str,
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
        command: command.to_string(),
        content,
        status: MessageStatus::Queued,
        error: None,
        user,
    }
}

fn project_or_current(p: Option<String>, s: &Session) -> Result<String, CliError> {
    p.or_else(|| s.project.clone()).ok_or_else(|| {
        CliError::new("no --project given and no current project (orchestrator set-project ID)")
    })
}

fn common_content(a: &AgentArgs, queue: &Option<String>) -> Map<String, Value> {
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
    c
}

/// `create-prd`, `research-code`.
pub(super) fn simple(
    g: &GlobalArgs,
    out: &mut dyn Write,
    command: &str,
    a: AgentArgs,
) -> CliResult {
    let s = Session::load().map_err(CliError::new)?;
    let project = project_or_current(a.project.clone(), &s)?;
    if command == "create-prd" && a.task.is_none() {
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
    command: &str,
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
    send(
        g,
        out,
        message(
            "create-environment",
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
    /// Written to the inbox; maybe answered from the outbox.
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

pub(super) async fn submit_dbus(bus: BusKind, text: &str) -> zbus::Result<String> {
    let conn = bus
        .builder()
        .method_timeout(Duration::from_secs(120))
        .build()
        .await?;
    let proxy = Orchestrator1Proxy::new(&conn).await?;
    proxy.submit(text).await
}

fn deliver(g: &GlobalArgs, store: &Store, msg: &Message) -> Result<Delivery, CliError> {
    let text = serde_json::to_string(msg).map_err(|e| CliError::new(e.to_string()))?;
    let bus = g.bus.unwrap_or_else(BusKind::from_env);
    if !g.no_dbus {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::new(e.to_string()))?;
        match rt.block_on(submit_dbus(bus, &text)) {
            Ok(resp) => {
                let m: Message = serde_json::from_str(&resp)
                    .map_err(|e| CliError::new(format!("bad answer from orchestratord: {e}")))?;
                return Ok(Delivery::Answered(m));
            }
            Err(zbus::Error::MethodError(name, detail, _))
                if name.as_str().starts_with("org.agentstore.Error.") =>
            {
                return Err(CliError::new(detail.unwrap_or_else(|| name.to_string())));
            }
            Err(e) if unreachable(&e) => {
                if g.verbose {
                    eprintln!(
                        "orchestratord not reachable on the {bus} bus ({e}); using the inbox"
                    );
                }
            }
            Err(e) => return Err(CliError::new(format!("D-Bus: {e}"))),
        }
    }
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

fn send(g: &GlobalArgs, out: &mut dyn Write, msg: Message) -> CliResult {
    let store = open_store(g)?;
    match deliver(g, &store, &msg)? {
        Delivery::Answered(m)
        | Delivery::Inbox {
            answer: Some(m), ..
        } => print_answer(g, out, &m),
        Delivery::Inbox { path, answer: None } => {
            match g.format {
                Format::Json => write_json(out, &msg)?,
                Format::Text => writeln!(
                    out,
                    "Message queued: {} ({}); the answer will be in messaging/outbox/ — use --follow SECONDS to wait",
                    msg.correlation_id,
                    store.relative(&path).display()
                )?,
            }
            Ok(())
        }
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
