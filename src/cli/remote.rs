//! Browsing through orchestratord when the store folder is not readable by the caller (the
//! packaged system store is owned by the `agentstore` user, mode 0750): the same list/view
//! commands, answered over D-Bus, with PRD §10 applied by the daemon to the caller's Unix user.

use super::browse::{
    JobRow, jobs_table, overlay_live, render_prds, render_projects, render_queues, render_users,
    show,
};
use super::render::{Format, write_json};
use super::{CliError, CliResult, Command, GlobalArgs, Session};
use crate::model::Command as Op;
use crate::model::{Job, JobStatus, Prd, PrdState, Project, Queue, User};
use crate::store::resolve_root;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::io::Write;

/// True when the store folder exists but this user may not read it.
pub(super) fn store_unreadable(g: &GlobalArgs) -> bool {
    let (root, _) = resolve_root(g.root.as_deref());
    matches!(std::fs::read_dir(&root), Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied)
}

/// The direct command and its content for a browsing command; `None` for other commands.
fn request(command: &Command, g: &GlobalArgs) -> Option<(Op, Map<String, Value>)> {
    let mut c = Map::new();
    let name = match command {
        Command::ListUsers => Op::ListUsers,
        Command::ListProjects => Op::ListProjects,
        Command::ListQueues => Op::ListQueues,
        Command::ListPrds { project } => {
            if let Some(p) = project {
                c.insert("project".into(), json!(p));
            }
            Op::ListPrds
        }
        Command::ListJobs {
            status, project, ..
        } => {
            if let Some(s) = status {
                c.insert("status".into(), json!(JobStatus::from(*s).name()));
            }
            if let Some(p) = project {
                c.insert("project".into(), json!(p));
            }
            if let Some(q) = &g.queue {
                c.insert("queue".into(), json!(q));
            }
            Op::ListJobs
        }
        Command::ViewUser { user_id } => {
            c.insert("user".into(), json!(user_id));
            Op::ViewUser
        }
        Command::ViewProject { project_id } => {
            c.insert("project".into(), json!(project_id));
            Op::ViewProject
        }
        Command::ViewPrd { prd_id } => {
            c.insert("prd".into(), json!(prd_id));
            Op::ViewPrd
        }
        Command::ViewQueue { queue_name } => {
            c.insert("queue".into(), json!(queue_name));
            Op::ViewQueue
        }
        Command::ViewJob { job_id } => {
            c.insert("job".into(), json!(job_id));
            Op::ViewJob
        }
        Command::ListMessages(a) => {
            c = a.content();
            Op::ListMessages
        }
        Command::ViewMessage { message_id } => {
            c.insert("message".into(), json!(message_id));
            Op::ViewMessage
        }
        Command::ListTasks {
            prd,
            project,
            status,
        } => {
            for (k, v) in [("prd", prd), ("project", project), ("status", status)] {
                if let Some(v) = v {
                    c.insert(k.into(), json!(v));
                }
            }
            Op::ListTasks
        }
        Command::ViewTask { task } => {
            c.insert("task".into(), json!(task));
            Op::ViewTask
        }
        _ => return None,
    };
    Some((name, c))
}

fn decode<T: DeserializeOwned>(v: Value) -> Result<T, CliError> {
    serde_json::from_value(v)
        .map_err(|e| CliError::new(format!("unexpected answer from orchestratord: {e}")))
}

/// Runs a browsing command over D-Bus; `None` when `command` is not one.
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, command: &Command) -> Option<CliResult> {
    // Job listings page through ListJobs: one answer could exceed the bus's message limit.
    if let Command::ListJobs {
        status, project, ..
    } = command
    {
        let status = status.map(JobStatus::from);
        return Some(super::browse::list_jobs_dbus(
            g,
            out,
            status,
            project.as_deref(),
        ));
    }
    let (name, content) = request(command, g)?;
    Some(call(g, out, command, name, content))
}

/// Asks orchestratord over D-Bus (the bus of a store this user cannot read) to answer
/// command `op`, as the session's user; returns the answer's `content.result`.
pub(super) fn ask(g: &GlobalArgs, op: Op, content: Map<String, Value>) -> Result<Value, CliError> {
    let user = Session::load().ok().and_then(|s| s.username);
    let msg = json!({"command": op.name(), "content": content, "user": user});
    let bus = g.unreadable_store_bus();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(e.to_string()))?;
    let answer = rt.block_on(super::agent::submit_dbus(&bus, &msg.to_string())).map_err(|e| match e {
        zbus::Error::MethodError(n, detail, _) if n.as_str().starts_with("org.agentstore.Error.") => {
            CliError::new(detail.unwrap_or_else(|| n.to_string()))
        }
        other => CliError::new(format!(
            "the store is not readable by you and orchestratord is not reachable on the {bus} bus ({other}); ask an admin to add you to the agentstore group"
        )),
    })?;
    let mut response: Value =
        serde_json::from_str(&answer).map_err(|e| CliError::new(e.to_string()))?;
    Ok(response
        .get_mut("content")
        .and_then(|c| c.get_mut("result"))
        .map(Value::take)
        .unwrap_or(Value::Null))
}

fn call(
    g: &GlobalArgs,
    out: &mut dyn Write,
    command: &Command,
    op: Op,
    content: Map<String, Value>,
) -> CliResult {
    let result = ask(g, op, content)?;
    match command {
        Command::ListUsers => render_users(g, out, &decode::<Vec<User>>(result)?),
        Command::ListProjects => render_projects(g, out, &decode::<Vec<Project>>(result)?),
        Command::ListQueues => {
            let mut queues: Vec<Queue> = decode(result)?;
            overlay_live(g, &mut queues);
            render_queues(g, out, &queues)
        }
        Command::ListPrds { .. } => {
            let prds: Vec<Prd> = decode(result)?;
            render_prds(
                g,
                out,
                &prds
                    .into_iter()
                    .map(|p| (p.status, p))
                    .collect::<Vec<(PrdState, Prd)>>(),
            )
        }
        Command::ListJobs { .. } => {
            let jobs: Vec<Job> = decode(result)?;
            if g.format == Format::Json {
                write_json(out, &jobs)?;
                return Ok(());
            }
            let rows: Vec<JobRow> = jobs
                .into_iter()
                .map(|j| JobRow {
                    id: j.id.unwrap_or_default(),
                    status: j.runtime.status,
                    priority: j.config.priority,
                    queue: j.config.queue.unwrap_or_default(),
                    project: j.config.project,
                    queue_time: j.config.queue_time,
                })
                .collect();
            jobs_table(out, &rows)
        }
        Command::ListMessages(_) => super::messages::render_list(g, out, &result),
        Command::ListTasks { .. } => {
            super::tasks::render_tasks(g, out, &decode::<Vec<crate::model::Task>>(result)?)
        }
        Command::ViewJob { job_id } if g.format == Format::Text => {
            let job: Job = decode(result)?;
            super::browse::show_job(g, out, job_id, job)
        }
        _ => show(g, out, &result),
    }
}
