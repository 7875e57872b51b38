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

/// `task` with the state of its latest job laid over a waiting one.
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
