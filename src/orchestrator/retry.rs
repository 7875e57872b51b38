//! `orchestrator retry JOB` (issue 17): a failed job tried again by hand as a new job document
//! (`attempt` + 1, `retry_of` the failed one; the failed document is left as it is), and with
//! it every job that failed only because it depended on it ("dependency <id> failed"), so a
//! chain stopped by a failed step resumes from that step.

use super::RouteError;
use crate::model::flow::{next_attempt, retry_id};
use crate::model::{DocKind, Job, JobStatus};
use crate::permissions::Caller;
use crate::store::{JobLocation, Store};

/// One job queued by a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retried {
    /// The failed job.
    pub of: String,
    /// Its new attempt.
    pub id: String,
    /// Queue of both.
    pub queue: String,
}

/// Retries failed job `id` and the jobs that failed waiting for it.
pub fn retry_by_hand(store: &Store, who: &Caller, id: &str) -> Result<Vec<Retried>, RouteError> {
    let loc = store.find_job(id)?;
    if loc.status != JobStatus::Failed {
        return Err(RouteError::Invalid(format!(
            "job {id} is {}; only a failed job can be retried",
            loc.status.name()
        )));
    }
    let next = retry_id(id);
    if store.find_job(&next).is_ok() {
        return Err(RouteError::Invalid(format!(
            "job {id} was already retried as {next}; retry that one if it failed"
        )));
    }
    let mut out = Vec::new();
    let mut todo = vec![loc];
    while let Some(loc) = todo.pop() {
        let job = store.job(&loc)?;
        let project = store.project(&job.config.project)?;
        if !who.can_modify_project(&project) {
            if !out.is_empty() {
                // A job of someone else's project stopped by this one: theirs to retry.
                continue;
            }
            return Err(RouteError::PermissionDenied(format!(
                "only the owner of project {} or an admin can retry its jobs",
                project.id
            )));
        }
        let new_id = retry_id(&loc.id);
        if store.find_job(&new_id).is_ok() {
            continue;
        }
        let Some(mut attempt) = next_attempt(&job, &loc.id, None) else {
            return Err(RouteError::Invalid(format!(
                "job {} is attempt {}; no more attempts are allowed",
                loc.id,
                job.config.attempt.unwrap_or(1)
            )));
        };
        // A job runs in its project's folder as it was when the job was queued; a retry runs
        // in the folder the project has now (`edit-project --directory` after a job failed
        // "Working directory does not exist").
        attempt.config.working_directory = project.directory.clone();
        let path = store.job_path(&loc.queue, JobStatus::Queued, &new_id);
        store.write_doc(DocKind::Job, &path, &attempt)?;
        out.push(Retried {
            of: loc.id.clone(),
            id: new_id,
            queue: loc.queue.clone(),
        });
        todo.extend(stopped_by(store, &loc.id));
    }
    Ok(out)
}

/// Failed jobs (any queue) whose error is "dependency `id` failed". Reads the failed
/// folders' documents: a command run by hand, not a daemon pass.
fn stopped_by(store: &Store, id: &str) -> Vec<JobLocation> {
    let want = crate::model::flow::dependency_failed(id);
    let Ok(locs) = store.job_locations(&[JobStatus::Failed]) else {
        return Vec::new();
    };
    locs.into_iter()
        .filter(|l| {
            store
                .read_doc::<Job>(DocKind::Job, &l.path)
                .is_ok_and(|j| j.runtime.error.as_deref() == Some(want.as_str()))
        })
        .collect()
}
