//! Reading tasks for a caller (PRD §10: a task is seen by whoever may see its PRD), with
//! the status its job gives it now (a task's document is written when its job is queued and
//! when it ends; in between, the job's folder says where it stands).

use crate::model::{JobStatus, Task, TaskRef, TaskStatus};
use crate::permissions::Caller;
use crate::store::{Store, StoreError};

/// What a listing is narrowed to.
#[derive(Debug, Default, Clone)]
pub struct TaskFilter {
    /// Only this PRD's tasks.
    pub prd: Option<String>,
    /// Only this project's.
    pub project: Option<String>,
    /// Only tasks in this state.
    pub status: Option<TaskStatus>,
}

/// The latest attempt of job `id`: the queue's retry policy runs a failed job again as a
/// new job whose id derives from the failed one's ([`crate::model::flow::retry_id`]), so the
/// chain is followed by id, as the queue's `after` follows it.
pub fn latest_attempt(store: &Store, id: &str) -> String {
    let mut id = id.to_string();
    for _ in 0..crate::model::flow::MAX_ATTEMPTS {
        let next = crate::model::flow::retry_id(&id);
        if store.find_job(&next).is_err() {
            break;
        }
        id = next;
    }
    id
}

/// `task` with the state of its latest job (its latest attempt) laid over a waiting one.
pub fn effective(store: &Store, mut task: Task) -> Task {
    if !matches!(
        task.status,
        TaskStatus::Pending | TaskStatus::Ready | TaskStatus::Running
    ) {
        return task;
    }
    let Some(job) = task.jobs.last() else {
        return task;
    };
    let job = &latest_attempt(store, job);
    match store.find_job(job).map(|l| l.status) {
        Ok(JobStatus::Running) => task.status = TaskStatus::Running,
        Ok(JobStatus::Failed) => {
            task.status = TaskStatus::Failed;
            if let Ok(loc) = store.find_job(job)
                && let Ok(j) = store.job(&loc)
            {
                task.error = j.runtime.error;
            }
        }
        _ => {}
    }
    task
}

/// The tasks `who` may see, narrowed by `filter`, each with its effective state.
pub fn list(store: &Store, who: &Caller, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
    let mut prds: Vec<(String, String)> = Vec::new();
    match (&filter.prd, &filter.project) {
        (Some(prd), _) => {
            let (_, _, p) = store.find_prd(prd)?;
            if filter.project.as_ref().is_none_or(|x| *x == p.project) {
                prds.push((p.project.clone(), p.id.clone()));
            }
        }
        (None, Some(project)) => {
            for prd in store.task_prds(project)? {
                prds.push((project.clone(), prd));
            }
        }
        (None, None) => {
            for project in store.project_ids()? {
                for prd in store.task_prds(&project)? {
                    prds.push((project.clone(), prd));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (project, prd) in prds {
        if !super::graph::prd_visible(store, who, &prd) {
            continue;
        }
        for t in store.tasks_of(&project, &prd, &mut |e| eprintln!("warning: {e}"))? {
            let t = effective(store, t);
            if filter.status.is_none_or(|s| s == t.status) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// One task (`prd/task`) for `who`; one that `who` may not see reads as not found.
pub fn view(store: &Store, who: &Caller, name: &str) -> Result<Task, StoreError> {
    let not_found = || StoreError::NotFound {
        kind: "task",
        id: name.to_string(),
    };
    let Some((prd, task)) = name.split_once('/') else {
        return Err(not_found());
    };
    let r = TaskRef {
        prd: prd.to_string(),
        task: task.to_string(),
    };
    if !super::graph::prd_visible(store, who, &r.prd) {
        return Err(not_found());
    }
    let (_, t) = store.task(&r)?;
    Ok(effective(store, t))
}

/// `list-tasks` as a direct command (D-Bus `Submit`, the web API): `content.prd`,
/// `content.project`, `content.status` (each optional; empty means not given). A project
/// named must be one the caller may see, refused as `list-prds --project` refuses it.
pub fn answer_list(
    store: &Store,
    msg: &crate::model::Message,
    who: &Caller,
) -> Result<serde_json::Value, crate::orchestrator::RouteError> {
    use crate::orchestrator::RouteError;
    let arg = |k: &str| -> Result<Option<String>, RouteError> {
        match msg.content.get(k) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(RouteError::Invalid(format!(
                "list-tasks: content.{k} must be a string, not {other}"
            ))),
        }
    };
    let status = match arg("status")? {
        None => None,
        Some(s) => Some(TaskStatus::from_name(&s).ok_or_else(|| {
            RouteError::Invalid(format!(
                "list-tasks: status {s:?} is not a task state (pending, ready, running, review, done, failed, cancelled)"
            ))
        })?),
    };
    let project = arg("project")?;
    if let Some(p) = &project {
        crate::permissions::visible_project(store, who, p)?;
    }
    let prd = arg("prd")?;
    if let Some(p) = &prd {
        crate::store::check_id("prd", p)?;
        if !super::graph::prd_visible(store, who, p) {
            return Err(StoreError::NotFound {
                kind: "PRD",
                id: p.clone(),
            }
            .into());
        }
    }
    let tasks = list(
        store,
        who,
        &TaskFilter {
            prd,
            project,
            status,
        },
    )?;
    Ok(serde_json::to_value(&tasks).unwrap_or(serde_json::Value::Null))
}

/// `view-task` as a message asks it (`content.task` = `PRD/TASK`).
pub fn answer_view(
    store: &Store,
    msg: &crate::model::Message,
    who: &Caller,
) -> Result<serde_json::Value, crate::orchestrator::RouteError> {
    use crate::orchestrator::content::{required, to_value};
    Ok(to_value(&view(store, who, required(msg, "task")?)?))
}
