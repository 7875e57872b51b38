//! `retry-task`, `cancel-task` and `set-task` (issue 30): a person's changes to a task. They
//! write the store, so they are message commands answered by orchestratord (over D-Bus or
//! the inbox, like `retry`), with PRD §10 through [`crate::permissions`]: a task the caller
//! may not see reads as not found; one of a project the caller may not change is refused.
//!
//! - `retry-task PRD/TASK`: a failed, cancelled or review task gets a new job (from its last
//!   one), and so do the tasks of its PRD that failed after it (their jobs failed with
//!   "dependency failed"), each after the new jobs of what it depends on.
//! - `cancel-task PRD/TASK`: the task is cancelled (its queued or running job is named in
//!   the answer; the CLI asks the job's queue manager to cancel it); when every other task
//!   is done, the PRD's integration is queued.
//! - `set-task PRD/TASK [title] [description] [depends_on]`: before the task's job starts
//!   (no job yet, or its last one failed or was cancelled); new dependencies are checked
//!   like a new task list (known, visible, no cycle).

use super::fanout::{Planned, write_task_job};
use super::listing::effective;
use crate::model::{Command, DocKind, Job, Task, TaskRef, TaskStatus, Timestamp};
use crate::orchestrator::RouteError;
use crate::permissions::{Caller, Denied};
use crate::store::Store;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Answers a task command message (`content.task` = `PRD/TASK`).
pub fn answer(
    store: &Store,
    command: Command,
    msg: &crate::model::Message,
    who: &Caller,
) -> Result<Value, RouteError> {
    let c = &msg.content;
    let name = c
        .get("task")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            RouteError::Invalid(format!("{} needs content.task (PRD/TASK)", msg.command))
        })?;
    match command {
        Command::RetryTask => retry(store, who, name),
        Command::CancelTask => cancel(store, who, name),
        Command::SetTask => set(store, who, name, c),
        other => Err(RouteError::Invalid(format!("{other}: not a task command"))),
    }
}

/// The task `name` for a change by `who`: hidden ones are not found, others' refused.
fn changeable(store: &Store, who: &Caller, name: &str) -> Result<Task, RouteError> {
    let task = super::listing::view(store, who, name)?;
    let project = store.project(&task.project)?;
    if !who.can_change_task(&project) {
        return Err(RouteError::PermissionDenied(
            Denied::ChangeTask(name.to_string(), project.owner.clone(), project.id.clone())
                .to_string(),
        ));
    }
    Ok(task)
}

fn label(t: &Task) -> String {
    format!("{}/{}", t.prd, t.id)
}

fn last_job(store: &Store, t: &Task) -> Option<(String, Job)> {
    let id = t.jobs.last()?;
    let loc = store.find_job(id).ok()?;
    let job = store.job(&loc).ok()?;
    Some((loc.queue, job))
}

/// `retry-task`: `{"retried": [{"task", "job_id", "queue", "after"}…]}`.
pub fn retry(store: &Store, who: &Caller, name: &str) -> Result<Value, RouteError> {
    let target = changeable(store, who, name)?;
    match target.status {
        TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::Review => {}
        TaskStatus::Done => {
            return Err(RouteError::Invalid(format!(
                "task {name} is done; nothing to retry"
            )));
        }
        s => {
            return Err(RouteError::Invalid(format!(
                "task {name} is {} (job {}); cancel it first (orchestrator cancel-task {name}) or let it end",
                s.name(),
                target.jobs.last().map_or("-", String::as_str)
            )));
        }
    }
    let Some((queue, template)) = last_job(store, &target) else {
        return Err(RouteError::Invalid(format!(
            "task {name} has no job to start again from; queue its PRD with orchestrator implement-tasks --prd {}",
            target.prd
        )));
    };
    let (_, _, prd) = store.find_prd(&target.prd)?;
    let all: Vec<Task> = store
        .tasks_of(&prd.project, &prd.id, &mut |_| {})?
        .into_iter()
        .map(|t| effective(store, t))
        .collect();
    // The target and the tasks that failed after it (transitively).
    let mut chosen: Vec<String> = vec![target.id.clone()];
    let mut grew = true;
    while grew {
        grew = false;
        for t in &all {
            if !chosen.contains(&t.id)
                && t.status == TaskStatus::Failed
                && t.dependencies()
                    .iter()
                    .any(|d| d.prd == prd.id && chosen.contains(&d.task))
            {
                chosen.push(t.id.clone());
                grew = true;
            }
        }
    }
    let mut planned: BTreeMap<String, String> = BTreeMap::new();
    let mut rows = Vec::new();
    for t in super::graph::order(&all) {
        if !chosen.contains(&t.id) {
            continue;
        }
        let previous = t.jobs.last().cloned().unwrap_or_else(|| t.id.clone());
        let job_id = super::super::job_id_for(&format!("{previous}\u{0}retry-task"));
        let mut after = Vec::new();
        let mut bases = Vec::new();
        for d in t.dependencies() {
            let dep = if d.prd == prd.id {
                all.iter().find(|x| x.id == d.task).cloned()
            } else {
                store.task(&d).ok().map(|(_, x)| effective(store, x))
            }
            .ok_or_else(|| {
                RouteError::Invalid(format!("task {}: dependency {d} not found", label(t)))
            })?;
            if dep.project == t.project {
                bases.push(Task::branch_name(&dep.prd, &dep.id));
            }
            if d.prd == prd.id
                && let Some(j) = planned.get(&d.task)
            {
                after.push(j.clone());
                continue;
            }
            match dep.status {
                TaskStatus::Done => {}
                TaskStatus::Pending | TaskStatus::Ready | TaskStatus::Running => {
                    if let Some(j) = dep.jobs.last() {
                        after.push(j.clone());
                    }
                }
                s => {
                    return Err(RouteError::Invalid(format!(
                        "task {}: dependency {d} is {}; retry it first (orchestrator retry-task {d})",
                        label(t),
                        s.name()
                    )));
                }
            }
        }
        let template = last_job(store, t).map_or_else(|| template.clone(), |(_, j)| j);
        let exists = store.find_job(&job_id).is_ok();
        let p = Planned {
            task: t.clone(),
            job_id: job_id.clone(),
            after: after.clone(),
            bases,
            exists,
        };
        if !exists {
            // The document as stored (not its effective view) is what is rewritten.
            let (_, stored) = store.task(&TaskRef {
                prd: t.prd.clone(),
                task: t.id.clone(),
            })?;
            let p = Planned { task: stored, ..p };
            write_task_job(store, &template, &queue, &prd, &p).map_err(RouteError::Failed)?;
        }
        planned.insert(t.id.clone(), job_id.clone());
        rows.push(json!({"task": label(t), "job_id": job_id, "queue": queue, "after": after}));
    }
    Ok(json!({ "retried": rows }))
}

/// `cancel-task`: `{"task", "cancelled": true, "job": the job to cancel or null, "integration"}`.
pub fn cancel(store: &Store, who: &Caller, name: &str) -> Result<Value, RouteError> {
    let task = changeable(store, who, name)?;
    match task.status {
        TaskStatus::Done => {
            return Err(RouteError::Invalid(format!(
                "task {name} is done; a done task cannot be cancelled"
            )));
        }
        TaskStatus::Cancelled => {
            return Err(RouteError::Invalid(format!(
                "task {name} is already cancelled"
            )));
        }
        _ => {}
    }
    let live = task.jobs.last().filter(|j| {
        store.find_job(j).is_ok_and(|l| {
            matches!(
                l.status,
                crate::model::JobStatus::Queued | crate::model::JobStatus::Running
            )
        })
    });
    let (path, mut stored) = store.task(&TaskRef {
        prd: task.prd.clone(),
        task: task.id.clone(),
    })?;
    stored.status = TaskStatus::Cancelled;
    stored.error = Some(format!(
        "cancelled by {}",
        who.user_id().unwrap_or("a trusted caller")
    ));
    stored.update_time = Timestamp::now();
    store.write_doc(DocKind::Task, &path, &stored)?;
    // With every other task done, the PRD's integration goes ahead without this one.
    let (_, _, prd) = store.find_prd(&task.prd)?;
    let all = store.tasks_of(&prd.project, &prd.id, &mut |_| {})?;
    let mut integration = Value::Null;
    if all
        .iter()
        .all(|t| matches!(t.status, TaskStatus::Done | TaskStatus::Cancelled))
        && let Some((queue, template)) = all
            .iter()
            .filter(|t| t.status == TaskStatus::Done)
            .find_map(|t| last_job(store, t))
    {
        integration = Value::String(super::integrate::all_done(
            store, &queue, &template, &all, &prd.id,
        )?);
    }
    Ok(json!({
        "task": name,
        "cancelled": true,
        "job": live,
        "integration": integration,
    }))
}

/// `set-task`: the task as it is now.
pub fn set(
    store: &Store,
    who: &Caller,
    name: &str,
    c: &serde_json::Map<String, Value>,
) -> Result<Value, RouteError> {
    let task = changeable(store, who, name)?;
    let started =
        !task.jobs.is_empty() && !matches!(task.status, TaskStatus::Failed | TaskStatus::Cancelled);
    if started {
        return Err(RouteError::Invalid(format!(
            "task {name} is {} (job {}); it can be changed only before its job starts, or after it failed or was cancelled (orchestrator cancel-task {name})",
            task.status.name(),
            task.jobs.last().map_or("-", String::as_str)
        )));
    }
    let (path, mut stored) = store.task(&TaskRef {
        prd: task.prd.clone(),
        task: task.id.clone(),
    })?;
    let text = |k: &str| -> Result<Option<String>, RouteError> {
        match c.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(RouteError::Invalid(format!(
                "set-task: content.{k} must be a non-empty string, not {other}"
            ))),
        }
    };
    let mut changed = Vec::new();
    if let Some(t) = text("title")? {
        stored.title = t;
        changed.push("title");
    }
    if let Some(d) = text("description")? {
        stored.description = d;
        changed.push("description");
    }
    match c.get("depends_on") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            let mut deps = Vec::new();
            for i in items {
                let Some(s) = i.as_str() else {
                    return Err(RouteError::Invalid(format!(
                        "set-task: content.depends_on must list task ids (strings), not {i}"
                    )));
                };
                deps.push(s.to_string());
            }
            stored.depends_on = deps;
            changed.push("depends_on");
        }
        Some(other) => {
            return Err(RouteError::Invalid(format!(
                "set-task: content.depends_on must be an array of task ids, not {other}"
            )));
        }
    }
    if changed.is_empty() {
        return Err(RouteError::Invalid(
            "set-task: nothing to change (give a title, a description or dependencies)".into(),
        ));
    }
    let (_, _, prd) = store.find_prd(&task.prd)?;
    let mut all = store.tasks_of(&prd.project, &prd.id, &mut |_| {})?;
    for t in all.iter_mut() {
        if t.id == stored.id {
            *t = stored.clone();
        }
    }
    super::graph::check(store, who, &all)
        .map_err(|e| RouteError::Invalid(format!("set-task {name}: {e}")))?;
    stored.update_time = Timestamp::now();
    let v = serde_json::to_value(&stored).unwrap_or(Value::Null);
    store
        .validator()
        .validate(DocKind::Task, &v)
        .map_err(|r| RouteError::Invalid(format!("set-task {name}: {r}")))?;
    store.write_doc(DocKind::Task, &path, &stored)?;
    // The PRD's list keeps dependency order.
    let (_, prd_path, mut prd) = store.find_prd(&task.prd)?;
    if changed.contains(&"depends_on") && prd.content.get("tasks").is_some_and(Value::is_array) {
        let ids: Vec<Value> = super::graph::order(&all)
            .iter()
            .map(|t| Value::String(t.id.clone()))
            .collect();
        prd.content.insert("tasks".into(), Value::Array(ids));
        prd.update_time = Timestamp::now();
        store.write_doc(DocKind::Prd, &prd_path, &prd)?;
    }
    Ok(json!({"task": stored, "changed": changed}))
}
