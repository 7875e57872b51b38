//! A task's job ended (issue 30): the task follows it. A finished job makes the task `done`
//! with the commit the job recorded; when every task of the PRD is done, the PRD moves on.

use crate::model::{DocKind, Job, JobStatus, Task, TaskRef, TaskStatus, Timestamp};
use crate::store::{JobLocation, Store, StoreError};
use serde_json::Value;

/// The status a task's job gives it.
pub fn status_for(job: &JobStatus) -> TaskStatus {
    match job {
        JobStatus::Queued => TaskStatus::Ready,
        JobStatus::Running => TaskStatus::Running,
        JobStatus::Finished => TaskStatus::Done,
        _ => TaskStatus::Failed,
    }
}

/// Records finished task job `job` (at `loc`) on its task. Returns what was done.
pub fn task_job_ended(store: &Store, loc: &JobLocation, job: &Job) -> Result<String, StoreError> {
    let job_id = loc.id.as_str();
    let Some(r) = TaskRef::of_job(job) else {
        return Ok("task job names no task".into());
    };
    let (path, mut task) = store.task(&r)?;
    // The task's job, or a later attempt of it (the queue's retry policy after a crash or a
    // lost machine): that one is recorded too.
    let current = task
        .jobs
        .last()
        .map(|j| super::listing::latest_attempt(store, j));
    if current.as_deref() != Some(job_id) {
        return Ok(format!("task {r} has moved on to another job; left alone"));
    }
    if !task.jobs.iter().any(|j| j == job_id) {
        task.jobs.push(job_id.to_string());
    }
    if task.status == TaskStatus::Cancelled {
        return Ok(format!("task {r} was cancelled; left alone"));
    }
    task.status = status_for(&job.runtime.status);
    task.commit = job.runtime.commit.clone();
    if job.runtime.commit.is_none()
        && let Some(note) = &job.runtime.worktree
    {
        // Not a git project: one tree, no branch.
        task.branch = None;
        task.error = Some(note.clone());
    }
    if task.status == TaskStatus::Failed {
        task.error = job.runtime.error.clone();
    }
    task.update_time = Timestamp::now();
    store.write_doc(DocKind::Task, &path, &task)?;
    let mut what = format!("task {r} {}", task.status.name());
    if task.status == TaskStatus::Failed {
        // The tasks after it wait on it: a person decides (retry-task, set-task, cancel-task).
        store.notice_task_failed(&loc.queue, job_id, job);
    }
    if task.status == TaskStatus::Done {
        what.push_str(&prd_if_all_done(store, &loc.queue, job, &task)?);
    }
    Ok(what)
}

/// When every task of `task`'s PRD has ended done (or was cancelled): the integration of
/// their branches is queued (from `job`, on `queue`).
fn prd_if_all_done(
    store: &Store,
    queue: &str,
    job: &Job,
    task: &Task,
) -> Result<String, StoreError> {
    let tasks = store.tasks_of(&task.project, &task.prd, &mut |_| {})?;
    if tasks
        .iter()
        .any(|t| !matches!(t.status, TaskStatus::Done | TaskStatus::Cancelled))
    {
        return Ok(String::new());
    }
    let done = tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Done)
        .count();
    store.notice_graph_done(&task.prd, done);
    let next = super::integrate::all_done(store, queue, job, &tasks, &task.prd)?;
    Ok(format!("; every task done: {next}"))
}

/// The implementation report of a PRD whose tasks are done: per task, its branch and commit.
pub fn report(tasks: &[Task]) -> Value {
    let items: Vec<Value> = tasks
        .iter()
        .map(|t| {
            serde_json::json!({
                "task": t.id,
                "status": t.status.name(),
                "branch": t.branch,
                "commit": t.commit,
                "jobs": t.jobs,
                "note": t.error,
            })
        })
        .collect();
    serde_json::json!({ "tasks": items })
}
