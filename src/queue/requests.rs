//! Requests to the queue manager (through its handle; `org.agentstore.Queue1` on D-Bus):
//! cancel, pause, resume, answer (`approval`).

use super::EndCause;
use super::Manager;
use super::QueueError;
use super::handle::{QueueEvent, QueueRequest};
use crate::model::{DocKind, Job, JobStatus};
use crate::store::jobfile::fail_raw;
use crate::store::{Record, read_limited};

impl Manager {
    // ---- requests ----------------------------------------------------------------------

    pub(super) async fn on_request(&mut self, req: QueueRequest) {
        match req {
            QueueRequest::Pause { reply } => {
                self.set_paused(true).await;
                let _ = reply.send(Ok(()));
            }
            QueueRequest::Resume { reply } => {
                self.set_paused(false).await;
                let _ = reply.send(Ok(()));
            }
            QueueRequest::Cancel {
                id,
                caller,
                by,
                reply,
            } => {
                let r = self.cancel(&id, &caller, &by).await;
                let _ = reply.send(r);
            }
            QueueRequest::Answer {
                request_id,
                allow,
                always,
                message,
                caller,
                by,
                reply,
            } => {
                let r = self
                    .answer_request(&request_id, allow, always, &message, &caller, &by)
                    .await;
                let _ = reply.send(r);
            }
        }
    }

    /// Pause or resume; the `Paused` property shows it before the caller gets its reply.
    pub(super) async fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        let what = if paused { "paused" } else { "resumed" };
        self.record(Record::info(self.event(what), what).no_event_line());
        let (old, new) = {
            let mut s = self.state.lock();
            let old = s.clone();
            s.paused = paused;
            (old, s.clone())
        };
        if let Some(events) = &self.events {
            events.emit(&QueueEvent::StateChanged { old, new }).await;
        }
    }

    pub(super) async fn cancel(
        &mut self,
        id: &str,
        caller: &crate::permissions::Caller,
        by: &str,
    ) -> Result<(), QueueError> {
        crate::store::check_id("job", id)?;
        let q = self.cfg.queue.clone();
        // A job being launched is in this machine's claim (starting.rs), in neither folder.
        let claim = crate::store::jobfile::claims_dir(&self.store, &q, &self.host)
            .join(format!("{id}.json"));
        let (from, path) = match [JobStatus::Running, JobStatus::Queued]
            .into_iter()
            .find(|s| crate::store::safe::is_file(&self.store.job_path(&q, *s, id)))
        {
            Some(from) => (from, self.store.job_path(&q, from, id)),
            None if self.launching.contains(id) => (JobStatus::Queued, claim),
            None => {
                return Err(QueueError::NotFound(format!(
                    "job {id} is not queued or running in queue {q}"
                )));
            }
        };
        let job: Option<Job> = self.store.read_doc(DocKind::Job, &path).ok();
        let project = job
            .as_ref()
            .and_then(|j| self.store.project(&j.config.project).ok());
        // Someone who may not even see the job is answered as for a job that is not here.
        if !caller.can_see_job_opt(job.as_ref(), project.as_ref()) {
            return Err(QueueError::NotFound(format!(
                "job {id} is not queued or running in queue {q}"
            )));
        }
        if !caller.can_cancel_job(job.as_ref(), project.as_ref()) {
            return Err(QueueError::PermissionDenied(
                crate::permissions::Denied::CancelJob(id.to_string()).to_string(),
            ));
        }
        tracing::info!(job_id = %id, queue = %q, "cancel requested by {by}");
        match from {
            // Its worker is being launched: it never runs, and the job fails as cancelled
            // as soon as the launch completes (starting.rs, `cancel_launched`).
            _ if self.launching.cancel(id, by) => Ok(()),
            JobStatus::Running if self.running.contains_key(id) => {
                self.stop_job(id, EndCause::Cancelled(by.to_string())).await;
                Ok(())
            }
            JobStatus::Running if self.slurm.tracks(id) => self
                .slurm_cancel(id, EndCause::Cancelled(by.to_string()))
                .await
                .map_err(QueueError::Failed),
            JobStatus::Running => Err(QueueError::Failed(format!(
                "job {id} is running under another queue manager"
            ))),
            _ => {
                let error = format!("Job cancelled by {by}");
                match job {
                    Some(j) => self.fail_owned(id, JobStatus::Queued, j, error).await,
                    None => {
                        let bytes = read_limited(&path)?;
                        fail_raw(&self.store, &q, id, JobStatus::Queued, &bytes, &error)?;
                        self.ended(id, JobStatus::Queued, JobStatus::Failed, &error)
                            .await;
                    }
                }
                self.index.forget(id);
                Ok(())
            }
        }
    }
}
