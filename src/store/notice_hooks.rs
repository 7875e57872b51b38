//! The notices the daemons emit at the moments a person should hear of (issue 31): one call
//! each, so the hook in a daemon is one line. Emitting is idempotent (the notice id is
//! derived from what it is about), so a hook that runs twice — a worker and its manager both
//! seeing an end, a manager reloading its requests after a restart — emits once.

use super::notices::{Notice, NoticeKind, clip};
use super::{JobLocation, Store};
use crate::model::approval::{ApprovalAnswer, ApprovalRequest};
use crate::model::{Job, JobStatus};

impl Store {
    /// Who a job's notices are for: its `user`, else its project's owner.
    pub fn notice_user_of(&self, job: &Job) -> Option<String> {
        job.config
            .user
            .clone()
            .or_else(|| self.project(&job.config.project).ok().map(|p| p.owner))
    }

    /// A job ended (`finished_jobs/` or `failed_jobs/`): `job_finished` or `job_failed`,
    /// with its error and cost; a task's failed job also blocks its PRD's graph
    /// ([`Store::notice_task_failed`]).
    pub fn notice_job_ended(&self, queue: &str, id: &str) {
        for status in [JobStatus::Failed, JobStatus::Finished] {
            let loc = JobLocation {
                queue: queue.to_string(),
                status,
                id: id.to_string(),
                path: self.job_path(queue, status, id),
            };
            let Ok(job) = self.job(&loc) else { continue };
            let user = self.notice_user_of(&job);
            let (kind, verb) = if status == JobStatus::Failed {
                (NoticeKind::JobFailed, "failed")
            } else {
                (NoticeKind::JobFinished, "finished")
            };
            let mut n = Notice::new(
                kind,
                &format!("{queue}/{id}"),
                user.as_deref(),
                &format!("Job {id} {verb}"),
            )
            .job(queue, id)
            .body(&clip(&job.config.task_description, 500));
            n.project = Some(job.config.project.clone());
            n.error = job.runtime.error.as_deref().map(|e| clip(e, 2000));
            n.cost_usd = job.runtime.cost_usd;
            self.notify(n);
            if status == JobStatus::Failed {
                self.notice_task_failed(queue, id, &job);
            }
            return;
        }
    }

    /// A job of `queue` asks for an approval.
    pub fn notice_approval_waiting(&self, queue: &str, req: &ApprovalRequest) {
        let job = self.find_job(&req.job_id).and_then(|l| self.job(&l)).ok();
        let user = job.as_ref().and_then(|j| self.notice_user_of(j));
        let mut n = Notice::new(
            NoticeKind::ApprovalWaiting,
            &format!("{queue}/{}", req.request_id),
            user.as_deref(),
            &format!("Job {} asks to use {}", req.job_id, clip(&req.tool, 60)),
        )
        .job(queue, &req.job_id)
        .body(&format!(
            "{}\n\nAnswer: orchestrator approvals answer {} {} --allow|--deny",
            clip(&req.summary, 1000),
            queue,
            req.request_id
        ));
        n.project = job.map(|j| j.config.project);
        n.deadline = Some(req.deadline);
        n.request_id = Some(req.request_id.clone());
        self.notify(n);
    }

    /// An approval of `queue` was answered.
    pub fn notice_approval_answered(&self, queue: &str, req: &ApprovalRequest, a: &ApprovalAnswer) {
        let job = self.find_job(&req.job_id).and_then(|l| self.job(&l)).ok();
        let user = job.as_ref().and_then(|j| self.notice_user_of(j));
        let verb = if a.allow { "allowed" } else { "denied" };
        let mut n = Notice::new(
            NoticeKind::ApprovalAnswered,
            &format!("{queue}/{}", req.request_id),
            user.as_deref(),
            &format!("Job {}: {} {verb}", req.job_id, clip(&req.tool, 60)),
        )
        .job(queue, &req.job_id)
        .body(&clip(&req.summary, 1000));
        n.project = job.map(|j| j.config.project);
        n.answered_by = Some(clip(&a.by, 100));
        n.request_id = Some(req.request_id.clone());
        self.notify(n);
    }

    /// A job failed for a cause its retry policy covers, and its attempts are used up.
    pub fn notice_retry_exhausted(&self, queue: &str, id: &str, job: &Job, error: &str) {
        let user = self.notice_user_of(job);
        let mut n = Notice::new(
            NoticeKind::RetryExhausted,
            &format!("{queue}/{id}"),
            user.as_deref(),
            &format!(
                "Job {id} failed after {} attempts; no retry left",
                job.config.attempt.unwrap_or(1)
            ),
        )
        .job(queue, id)
        .body(&clip(&job.config.task_description, 500));
        n.project = Some(job.config.project.clone());
        n.error = Some(clip(error, 2000));
        n.cost_usd = job.runtime.cost_usd;
        self.notify(n);
    }
}
