//! `list-tasks` and `view-task` (issue 30): the tasks of PRDs, read from the store with the
//! PRD §10 rules (a task is seen by whoever may see its PRD).

use super::browse::{caller, show};
use super::render::{Format, Table, write_json};
use super::{CliError, CliResult, GlobalArgs, open_store};
use crate::model::TaskStatus;
use crate::orchestrator::tasks::listing::{self, TaskFilter};
use std::io::Write;

/// `list-tasks [--prd P] [--project P] [--status S]`.
pub(super) fn list_tasks(
    g: &GlobalArgs,
    out: &mut dyn Write,
    prd: Option<String>,
    project: Option<String>,
    status: Option<String>,
) -> CliResult {
    let status = match status.as_deref() {
        None => None,
        Some(s) => Some(TaskStatus::from_name(s).ok_or_else(|| {
            CliError::new(format!(
                "--status {s:?}: not a task state (pending, ready, running, review, done, failed, cancelled)"
            ))
        })?),
    };
    let store = open_store(g)?;
    let who = caller(&store)?;
    let tasks = listing::list(
        &store,
        &who,
        &TaskFilter {
            prd,
            project,
            status,
        },
    )?;
    render_tasks(g, out, &tasks)
}

/// The task table (or JSON).
pub(super) fn render_tasks(
    g: &GlobalArgs,
    out: &mut dyn Write,
    tasks: &[crate::model::Task],
) -> CliResult {
    match g.format {
        Format::Json => write_json(out, &tasks)?,
        Format::Text => {
            let mut t = Table::new(&["TASK", "STATUS", "PROJECT", "AFTER", "JOB", "TITLE"]);
            for task in tasks {
                t.row(vec![
                    format!("{}/{}", task.prd, task.id),
                    task.status.name().to_string(),
                    task.project.clone(),
                    task.depends_on.join(","),
                    task.jobs.last().cloned().unwrap_or_else(|| "-".into()),
                    task.title.clone(),
                ]);
            }
            t.write(out)?;
        }
    }
    Ok(())
}

/// `view-task PRD/TASK`.
pub(super) fn view_task(g: &GlobalArgs, out: &mut dyn Write, name: &str) -> CliResult {
    let store = open_store(g)?;
    let who = caller(&store)?;
    let task = listing::view(&store, &who, name)?;
    show(g, out, &task)
}

fn content(task: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut c = serde_json::Map::new();
    c.insert("task".into(), serde_json::Value::String(task.to_string()));
    c
}

/// `retry-task PRD/TASK` (answered by orchestratord: it writes the store).
pub(super) fn retry_task(g: &GlobalArgs, out: &mut dyn Write, task: &str) -> CliResult {
    let r = super::flow::upkeep(g, crate::model::Command::RetryTask, content(task))?;
    match g.format {
        Format::Json => write_json(out, &r)?,
        Format::Text => {
            for row in r["retried"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "Task {} queued again: job {} (queue {})",
                    row["task"].as_str().unwrap_or("?"),
                    row["job_id"].as_str().unwrap_or("?"),
                    row["queue"].as_str().unwrap_or("?")
                )?;
            }
        }
    }
    Ok(())
}

/// `cancel-task PRD/TASK`: the task cancelled by orchestratord, then its live job by its
/// queue manager (as `cancel-job` does it).
pub(super) fn cancel_task(g: &GlobalArgs, out: &mut dyn Write, task: &str) -> CliResult {
    let r = super::flow::upkeep(g, crate::model::Command::CancelTask, content(task))?;
    let mut job_note = String::new();
    if let Some(job) = r["job"].as_str() {
        let mut sink = Vec::new();
        match super::jobs::cancel_job(g, &mut sink, job) {
            Ok(()) => job_note = format!("; its job {job} cancelled"),
            Err(e) => job_note = format!("; its job {job} could not be cancelled: {e}"),
        }
    }
    match g.format {
        Format::Json => {
            let mut r = r;
            r["job_note"] = serde_json::Value::String(job_note);
            write_json(out, &r)?
        }
        Format::Text => {
            writeln!(out, "Task {task} cancelled{job_note}")?;
            if let Some(i) = r["integration"].as_str() {
                writeln!(out, "Every other task is done: {i}")?;
            }
        }
    }
    Ok(())
}

/// `set-task PRD/TASK [--title T] [--description D] [--depends-on A,B]`.
pub(super) fn set_task(
    g: &GlobalArgs,
    out: &mut dyn Write,
    task: &str,
    title: Option<String>,
    description: Option<String>,
    depends_on: Option<String>,
) -> CliResult {
    let mut c = content(task);
    if let Some(t) = title {
        c.insert("title".into(), t.into());
    }
    if let Some(d) = description {
        c.insert("description".into(), d.into());
    }
    if let Some(d) = depends_on {
        let deps: Vec<serde_json::Value> = d
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| serde_json::Value::String(s.to_string()))
            .collect();
        c.insert("depends_on".into(), serde_json::Value::Array(deps));
    }
    let r = super::flow::upkeep(g, crate::model::Command::SetTask, c)?;
    match g.format {
        Format::Json => write_json(out, &r)?,
        Format::Text => {
            let changed: Vec<&str> = r["changed"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .collect();
            writeln!(out, "Task {task} changed: {}", changed.join(", "))?;
        }
    }
    Ok(())
}
