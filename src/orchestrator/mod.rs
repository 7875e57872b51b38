//! The orchestrator (PRD §6): routes inbox messages, answers direct commands, turns agent
//! commands into jobs, and handles finished jobs. [`daemon`] runs it as a systemd service
//! with a D-Bus API.
//!
//! Crash safety (DESIGN §4): a message is answered by writing `outbox/<correlation_id>.json`
//! and only then moved to `processed_inbox/`; the job id is derived from the correlation id.
//! A restart at any instant therefore finds either nothing done (answers it), the job but no
//! answer (answers with the same job), or the answer but the message still in the inbox
//! (just moves it): one answer and at most one job per message.

mod audit;
pub mod backlog;
pub mod caller;
pub mod claims;
pub mod commands;
mod completion;
pub mod content;
pub mod daemon;

mod inbox;

pub use inbox::*;
mod error;
pub mod flow;
pub mod handled;
mod joblog;
mod jobs;
mod lock;
pub mod machines;
pub mod messages;
pub mod pass;
pub mod retry;
pub mod service;
pub mod standby;
pub mod tasks;
pub mod upkeep;

pub use completion::{handle_finished_jobs, result_text};
pub use error::{DaemonError, RouteError};
pub use jobs::{CreatedJob, DEFAULT_TIMEOUT_SECONDS, job_id_for, select_queue, venvman_options};
pub use lock::{LockError, LockInfo, LockTiming, StoreLock};

use crate::model::{
    Command, CommandKind, DocKind, Message, MessageSource, MessageStatus, Timestamp, is_safe_id,
};
use crate::permissions::Caller;
use crate::store::{
    Event, Level, Record, Store, StoreError, move_no_replace, read_limited, safe, scan_dir,
};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The outcome of one message.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The response (also written to the outbox for inbox messages).
    pub response: Message,
    /// The job created, for agent commands.
    pub job: Option<CreatedJob>,
    /// The error, when the response says `status: error`.
    pub error: Option<RouteError>,
}

/// Name this process uses in events and logs.
pub const DAEMON: &str = "orchestratord";

/// Handles one validated message for `who`.
pub fn handle(store: &Store, msg: &Message, who: &Caller) -> Outcome {
    let result = route(store, msg, who);
    let (status, content, error, job) = match result {
        Ok((content, job)) => (MessageStatus::Done, content, None, job),
        Err(e) => (MessageStatus::Error, Map::new(), Some(e), None),
    };
    let response = Message {
        correlation_id: msg.correlation_id.clone(),
        source: MessageSource::Orchestrator,
        project: msg.project.clone(),
        queue_time: msg.queue_time,
        processed_time: Some(Timestamp::now()),
        command: msg.command.clone(),
        content,
        status,
        error: error.as_ref().map(ToString::to_string),
        user: msg.user.clone(),
    };
    Outcome {
        response,
        job,
        error,
    }
}

fn route(
    store: &Store,
    msg: &Message,
    who: &Caller,
) -> Result<(Map<String, Value>, Option<CreatedJob>), RouteError> {
    let mut content = Map::new();
    let command = commands::parse(msg)?;
    match command.kind() {
        CommandKind::Direct => {
            content.insert("result".into(), commands::answer(store, command, msg, who)?);
            Ok((content, None))
        }
        CommandKind::Job => {
            let job = jobs::create_job(store, command, msg, who)?;
            content.insert("job_id".into(), json!(job.id));
            content.insert("queue".into(), json!(job.queue));
            content.insert("job_path".into(), json!(job.path));
            if command == Command::ImplementTasks
                && let Some(Value::String(prd)) = msg.content.get("prd")
                && let Some(t) = tasks::fanout::answer(store, &msg.correlation_id, prd)
            {
                content.insert("tasks".into(), t);
            }
            Ok((content, Some(job)))
        }
        CommandKind::Upkeep => {
            content.insert("result".into(), upkeep::answer(store, command, msg, who)?);
            Ok((content, None))
        }
    }
}

/// The caller a file message acts for: its `user` (which must exist), else trusted — whoever
/// can write the inbox can write the whole store.
pub fn caller_for_file(store: &Store, msg: &Message) -> Result<Caller, RouteError> {
    match &msg.user {
        None => Ok(Caller::Trusted),
        Some(u) => match store.user(u) {
            Ok(user) => Ok(Caller::User(user)),
            Err(StoreError::NotFound { .. }) => {
                Err(RouteError::NotFound(format!("User not found: {u}")))
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// A correlation id for a file whose contents could not be trusted: its stem, made safe.
fn fallback_id(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::model::derive_safe_id(&stem)
}

/// An error response for a message that could not even be parsed.
/// `queue_time` comes from the document when it has a valid one, else from the file's
/// modification time, so answering the same file again after a crash gives the same answer.
fn unparsed_error(
    correlation_id: String,
    error: RouteError,
    raw: Option<&Value>,
    path: &Path,
) -> Message {
    let get = |k: &str| {
        raw.and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Message {
        correlation_id,
        source: MessageSource::Orchestrator,
        project: get("project").filter(|p| is_safe_id(p)),
        queue_time: get("queue_time")
            .and_then(|t| t.parse().ok())
            .or_else(|| file_time(path))
            .unwrap_or_else(Timestamp::now),
        processed_time: Some(Timestamp::now()),
        command: get("command")
            .map(|c| {
                if c.len() <= 200 {
                    c
                } else {
                    // The answer must pass its own schema (≤ 200 characters).
                    let mut end = 180;
                    while !c.is_char_boundary(end) {
                        end -= 1;
                    }
                    format!("{}…", &c[..end])
                }
            })
            .unwrap_or_else(|| "unknown".into()),
        content: Map::new(),
        status: MessageStatus::Error,
        error: Some(error.to_string()),
        user: get("user").filter(|u| is_safe_id(u)),
    }
}

/// A file's modification time, to the second.
fn file_time(path: &Path) -> Option<Timestamp> {
    let m = safe::symlink_metadata(path).ok()?.modified().ok()?;
    let t = chrono::DateTime::<chrono::Utc>::from(m);
    chrono::DateTime::from_timestamp(t.timestamp(), 0).map(Timestamp)
}

/// What became of one inbox file.
#[derive(Debug)]
pub enum FileOutcome {
    /// Answered now.
    Answered(Box<Outcome>),
    /// It had been answered before a crash; only the move was left to do.
    AlreadyAnswered(String),
    /// A sync engine's conflict copy, moved to `conflicts/`.
    SetAside(PathBuf),
    /// The file vanished (another process took it).
    Gone,
    /// Could not be answered (the error is logged and recorded as a `message_failed` event);
    /// it stays in the inbox and is tried again, and the other messages go on.
    Failed(PathBuf, String),
    /// Not JSON yet and written moments ago: probably still being written (`cat > inbox/x`);
    /// looked at again shortly.
    Deferred(PathBuf),
}
