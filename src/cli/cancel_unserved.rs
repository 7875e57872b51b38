//! `cancel-job` of a job waiting in a queue nobody serves (issue 32): no queue manager on the
//! bus to ask, none reporting from any machine, no `.path` unit here to start one. The job
//! would wait forever and could not be cancelled; the CLI, when it may write the store,
//! takes the job from `queued_jobs/` itself — the same claim a starting manager takes, so a
//! manager that comes up meanwhile cannot run it too — and fails it "Job cancelled by …",
//! with the same PRD §10 rule the manager applies.

use super::{CliError, GlobalArgs};
use crate::model::JobStatus;
use crate::store::{JobLocation, Store};

/// Cancels `id` (queued at `loc`) when its queue is unserved: `Ok(Some(why))` when done
/// (`why` says why the CLI did it itself), `Ok(None)` when a manager should be asked.
pub(super) fn cancel_if_unserved(
    g: &GlobalArgs,
    store: &Store,
    loc: &JobLocation,
    id: &str,
) -> Result<Option<String>, CliError> {
    if loc.status != JobStatus::Queued {
        return Ok(None);
    }
    let Some(why) = super::machines::unserved(g, store, &loc.queue) else {
        return Ok(None);
    };
    let caller = super::browse::caller(store)?;
    let mut job = store.job(loc)?;
    let project = store.project(&job.config.project).ok();
    if !caller.can_cancel_job(Some(&job), project.as_ref()) {
        return Err(CliError::new(
            crate::permissions::Denied::CancelJob(id.to_string()).to_string(),
        ));
    }
    let by = caller
        .user_id()
        .map(str::to_string)
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .unwrap_or_else(|| "the CLI".into());
    let error = format!("Job cancelled by {by}");
    crate::store::jobfile::set_failed(&mut job, error.clone());
    crate::store::jobfile::write_and_move(store, &loc.queue, id, JobStatus::Queued, &job)?;
    store.record_event(
        &crate::store::Event::new("orchestrator", "job_failed")
            .job(id)
            .queue(&loc.queue)
            .detail(&error),
    );
    store.notice_job_ended(&loc.queue, id);
    let why = why.split(';').next().unwrap_or(&why).to_string();
    Ok(Some(why))
}
