//! D-Bus requests to the queue manager (`org.agentstore.Queue1`): cancel, pause, resume.

use super::EndCause;
use super::Manager;
use crate::bus::BusError;
use crate::bus::queue::QueueRequest;
use crate::model::{DocKind, Job, JobStatus};
use crate::store::jobfile::fail_raw;
use crate::store::read_limited;

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
        }
    }

    /// Pause or resume; the `Paused` property shows it before the caller gets its reply.
    pub(super) async fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        self.store
            .append_daemon_log(&self.log_file, if paused { "paused" } else { "resumed" });
        self.state.lock().unwrap_or_else(|e| e.into_inner()).paused = paused;
        if let Some(iface) = &self.iface {
            let _ = iface
                .get()
                .await
                .paused_changed(iface.signal_emitter())
                .await;
        }
    }

    pub(super) async fn cancel(
        &mut self,
        id: &str,
        caller: &crate::permissions::Caller,
        by: &str,
    ) -> Result<(), BusError> {
        crate::store::check_id("job", id)?;
        let q = self.cfg.queue.clone();
        let from = [JobStatus::Running, JobStatus::Queued]
            .into_iter()
            .find(|s| crate::store::safe::is_file(&self.store.job_path(&q, *s, id)))
            .ok_or_else(|| {
                BusError::NotFound(format!("job {id} is not queued or running in queue {q}"))
            })?;
        let path = self.store.job_path(&q, from, id);
        let job: Option<Job> = self.store.read_doc(DocKind::Job, &path).ok();
        if !caller.is_admin() {
            let allowed = job.as_ref().is_some_and(|j| {
                caller.user_id().is_some() && caller.user_id() == j.config.user.as_deref()
                    || self
                        .store
                        .project(&j.config.project)
                        .is_ok_and(|p| caller.can_modify_project(&p))
            });
            if !allowed {
                return Err(BusError::PermissionDenied(format!(
                    "job {id} belongs to another user's project"
                )));
            }
        }
        tracing::info!(job_id = %id, queue = %q, "cancel requested by {by}");
        match from {
            JobStatus::Running if self.running.contains_key(id) => {
                self.stop_job(id, EndCause::Cancelled(by.to_string())).await;
                Ok(())
            }
            JobStatus::Running => Err(BusError::Failed(format!(
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
