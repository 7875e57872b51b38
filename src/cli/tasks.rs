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
    match g.format {
        Format::Json => write_json(out, &tasks)?,
        Format::Text => {
            let mut t = Table::new(&["TASK", "STATUS", "PROJECT", "AFTER", "JOB", "TITLE"]);
            for task in &tasks {
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
