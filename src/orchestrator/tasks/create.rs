//! `create-tasks` handled (issue 30): the agent's task list becomes one task document per
//! task, and the PRD lists them. A malformed list fails the job with the reason, its raw
//! answer kept in the job's output.

use super::{graph, parse};
use crate::model::{DocKind, Job, JobStatus, Task, TaskStatus, Timestamp};
use crate::permissions::Caller;
use crate::store::{JobLocation, Store, StoreError};
use serde_json::Value;

/// What handling a create-tasks job came to.
pub enum Created {
    /// The tasks were written (their ids, in order).
    Tasks(Vec<String>),
    /// The answer was refused and the job moved to failed with this reason.
    Refused(String),
}

/// The caller a job acts for: the user who asked, else trusted (a job written by hand). A
/// user who no longer exists is an unprivileged user of that name (sees only their own).
pub fn job_caller(store: &Store, job: &Job) -> Caller {
    match job.config.user.as_deref() {
        None => Caller::Trusted,
        Some(u) => Caller::User(store.user(u).unwrap_or_else(|_| crate::model::User {
            id: u.to_string(),
            slack_username: None,
            name: String::new(),
            email: String::new(),
            permissions: crate::model::Permission::User,
            unix_user: None,
            notify: None,
        })),
    }
}

/// Reads the task list of finished create-tasks job `job` for PRD `prd_id`, checks it and
/// writes the tasks. On a bad list the job is failed (its document rewritten in place and
/// moved to `failed_jobs/`), nothing else changes.
pub fn created(
    store: &Store,
    loc: &JobLocation,
    job: &Job,
    prd_id: &str,
) -> Result<Created, StoreError> {
    let (_, prd_path, mut prd) = store.find_prd(prd_id)?;
    let who = job_caller(store, job);
    let text = job.result_text();
    let now = Timestamp::now();
    let tasks: Result<Vec<Task>, String> = parse::task_list(&text).map(|specs| {
        specs
            .into_iter()
            .map(|s| Task {
                schema_version: Some(crate::model::flow::SCHEMA_VERSION.into()),
                id: s.id,
                prd: prd.id.clone(),
                project: prd.project.clone(),
                title: s.title,
                description: s.description,
                acceptance_criteria: s.acceptance_criteria,
                depends_on: s.depends_on,
                status: TaskStatus::Pending,
                jobs: Vec::new(),
                branch: None,
                commit: None,
                error: None,
                created_time: now,
                update_time: now,
            })
            .collect()
    });
    let checked = tasks.and_then(|ts| {
        graph::check(store, &who, &ts)?;
        for t in &ts {
            let v = serde_json::to_value(t).map_err(|e| e.to_string())?;
            store
                .validator()
                .validate(DocKind::Task, &v)
                .map_err(|r| format!("task {}: {r}", t.id))?;
        }
        Ok(ts)
    });
    let tasks = match checked {
        Ok(t) => t,
        Err(why) => {
            let why = format!("create-tasks: the agent's task list was refused: {why}");
            fail_job(store, loc, job, &why)?;
            return Ok(Created::Refused(why));
        }
    };
    // A task already there (the job handled again after a crash, or a second create-tasks)
    // is replaced only while nothing worked on it.
    for t in &tasks {
        let path = store.task_path(&t.project, &t.prd, &t.id);
        if let Ok(old) = store.read_doc::<Task>(DocKind::Task, &path)
            && !old.jobs.is_empty()
        {
            continue;
        }
        store.write_doc(DocKind::Task, &path, t)?;
    }
    let ids: Vec<String> = graph::order(&tasks).iter().map(|t| t.id.clone()).collect();
    prd.content.insert(
        "tasks".into(),
        Value::Array(ids.iter().cloned().map(Value::String).collect()),
    );
    prd.update_time = now;
    store.write_doc(DocKind::Prd, &prd_path, &prd)?;
    Ok(Created::Tasks(ids))
}

/// Fails finished job `job`: `runtime.error` says why (its output stays), `handled` set.
/// The failed document is written whole into `failed_jobs/` first, then the finished one
/// removed: no reader ever sees a finished file saying it failed, and a crash between
/// leaves both, which the next pass ends the same way.
fn fail_job(store: &Store, loc: &JobLocation, job: &Job, why: &str) -> Result<(), StoreError> {
    let mut failed = job.clone();
    failed.runtime.status = JobStatus::Failed;
    failed.runtime.error = Some(why.to_string());
    failed.runtime.handled = Some(true);
    let dest = store.job_path(&loc.queue, JobStatus::Failed, &loc.id);
    store.write_doc_new(DocKind::Job, &dest, &failed)?;
    match crate::store::safe::remove_file(&loc.path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::Io {
            path: loc.path.clone(),
            source: e,
        }),
        _ => Ok(()),
    }
}
