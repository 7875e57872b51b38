//! The queue manager's side of approvals (issue 15): it watches `Jobs/approvals/`, where
//! running jobs' workers write their requests (`worker::approval`), keeps the pending list
//! the front end serves (`PendingApprovals`), publishes each request and its answer as
//! events (`ApprovalRequested`, `ApprovalAnswered`), and writes a person's answer
//! (`Answer`, authorized as a cancel is: admins, the job's user, those who may modify its
//! project — PRD §10). The worker records the decision on the job.

use super::Manager;
use super::QueueError;
use super::handle::QueueEvent;
use crate::model::approval::{ApprovalAnswer, ApprovalRequest};
use crate::model::{DocKind, Job, JobStatus, Timestamp};
use crate::permissions::Caller;
use crate::store::Record;
use crate::store::approvals::{ANSWER_SUFFIX, REQUEST_SUFFIX};

/// Longest reason kept from an answer.
const MAX_MESSAGE: usize = 4096;

impl Manager {
    /// Watches `Jobs/approvals/` (made when missing); `None` (logged) when it cannot.
    pub(super) fn watch_approvals(&self) -> Option<inotify::Inotify> {
        let dir = self.store.approvals_dir(&self.cfg.queue);
        let watch = || -> std::io::Result<inotify::Inotify> {
            crate::store::safe::create_dir_all(&dir)?;
            let i = inotify::Inotify::init()?;
            use inotify::WatchMask as W;
            crate::store::safe::watch_dir(
                &mut i.watches(),
                &dir,
                W::MOVED_TO | W::CLOSE_WRITE | W::DELETE | W::MOVED_FROM,
            )?;
            Ok(i)
        };
        match watch() {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!(queue = %self.cfg.queue,
                    "cannot watch {} (approval requests are seen at each sweep only): {e}", dir.display());
                None
            }
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<ApprovalRequest>> {
        self.approvals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the folder again: new requests of running jobs are published, answered or
    /// vanished ones leave the list, requests of jobs no longer running are removed.
    pub(super) async fn load_approvals(&mut self) {
        let q = self.cfg.queue.clone();
        let on_disk = self.store.pending_approvals(&q);
        let mut added = Vec::new();
        for req in on_disk {
            let running = crate::store::safe::is_file(&self.store.job_path(
                &q,
                JobStatus::Running,
                &req.job_id,
            ));
            if !running {
                self.store.remove_approval(&q, &req.request_id);
                continue;
            }
            if !self
                .pending()
                .iter()
                .any(|p| p.request_id == req.request_id)
            {
                added.push(req);
            }
        }
        for req in added {
            self.publish_request(req).await;
        }
        let gone: Vec<ApprovalRequest> = self
            .pending()
            .iter()
            .filter(|p| {
                !crate::store::safe::is_file(&self.store.approval_request_path(&q, &p.request_id))
                    || crate::store::safe::exists(
                        &self.store.approval_answer_path(&q, &p.request_id),
                    )
            })
            .cloned()
            .collect();
        for req in gone {
            let answer = self.store.approval_answer(&q, &req.request_id);
            self.settle_request(&req.request_id, answer).await;
        }
    }

    /// A change in `Jobs/approvals/` (`None`: overflow, read it all again).
    pub(super) async fn on_approval_file(&mut self, name: Option<&str>) {
        let Some(name) = name else {
            return self.load_approvals().await;
        };
        let q = self.cfg.queue.clone();
        if let Some(id) = name.strip_suffix(REQUEST_SUFFIX) {
            let known = self.pending().iter().any(|p| p.request_id == id);
            match self.store.approval_request(&q, id) {
                Some(req) if !known && self.store.approval_answer(&q, id).is_none() => {
                    self.publish_request(req).await;
                }
                None if known => self.settle_request(id, None).await,
                _ => {}
            }
        } else if let Some(id) = name.strip_suffix(ANSWER_SUFFIX) {
            let answer = self.store.approval_answer(&q, id);
            if answer.is_some() {
                self.settle_request(id, answer).await;
            }
        }
    }

    async fn publish_request(&mut self, req: ApprovalRequest) {
        self.record(Record::info(
            self.event("approval_requested")
                .job(&req.job_id)
                .detail(&req.summary),
            format!(
                "job {} asks to use {} ({}), request {}",
                req.job_id, req.tool, req.summary, req.request_id
            ),
        ));
        self.pending().push(req.clone());
        if let Some(events) = &self.events {
            events.emit(&QueueEvent::ApprovalRequested(req)).await;
        }
    }

    /// Takes a request off the list and publishes how it ended.
    async fn settle_request(&mut self, request_id: &str, answer: Option<ApprovalAnswer>) {
        let req = {
            let mut p = self.pending();
            let Some(i) = p.iter().position(|r| r.request_id == request_id) else {
                return;
            };
            p.remove(i)
        };
        if let Some(a) = &answer {
            self.record(Record::info(
                self.event("approval_answered")
                    .job(&req.job_id)
                    .detail(format!(
                        "{} {}",
                        if a.allow { "allowed" } else { "denied" },
                        req.request_id
                    )),
                format!(
                    "request {} of job {} {} by {}",
                    req.request_id,
                    req.job_id,
                    if a.allow { "allowed" } else { "denied" },
                    a.by
                ),
            ));
        }
        if let Some(events) = &self.events {
            events
                .emit(&QueueEvent::ApprovalAnswered {
                    request: req,
                    answer,
                })
                .await;
        }
    }

    /// Drops the requests of a job that ended (its worker may have died before removing
    /// them).
    pub(super) async fn drop_approvals_of(&mut self, job_id: &str) {
        let ids: Vec<String> = self
            .pending()
            .iter()
            .filter(|r| r.job_id == job_id)
            .map(|r| r.request_id.clone())
            .collect();
        for id in ids {
            self.store.remove_approval(&self.cfg.queue, &id);
            self.settle_request(&id, None).await;
        }
    }

    /// A person's answer (see the module text).
    pub(super) async fn answer_request(
        &mut self,
        request_id: &str,
        allow: bool,
        always: bool,
        message: &str,
        caller: &Caller,
        by: &str,
    ) -> Result<(), QueueError> {
        let q = self.cfg.queue.clone();
        let req = self
            .pending()
            .iter()
            .find(|r| r.request_id == request_id)
            .cloned()
            .ok_or_else(|| {
                QueueError::NotFound(format!(
                    "approval request {request_id} is not waiting in queue {q} (answered, past its deadline, or its job ended)"
                ))
            })?;
        let path = self.store.job_path(&q, JobStatus::Running, &req.job_id);
        let job: Option<Job> = self.store.read_doc(DocKind::Job, &path).ok();
        if !caller.is_admin() && !job.as_ref().is_some_and(|j| self.may_act_on(j, caller)) {
            return Err(QueueError::PermissionDenied(format!(
                "job {} belongs to another user's project: only its submitter, the project's owner and admins may answer its requests",
                req.job_id
            )));
        }
        let message: String = message.chars().take(MAX_MESSAGE).collect();
        let answer = ApprovalAnswer {
            request_id: request_id.to_string(),
            allow,
            always,
            message,
            by: by.to_string(),
            at: Timestamp::now(),
        };
        let written = self.store.write_approval_answer(&q, &answer).map_err(|e| {
            QueueError::Failed(format!(
                "cannot write {}: {e}",
                self.store.approval_answer_path(&q, request_id).display()
            ))
        })?;
        if !written {
            let first = self.store.approval_answer(&q, request_id);
            self.settle_request(request_id, first).await;
            return Err(QueueError::Failed(format!(
                "approval request {request_id} was answered already"
            )));
        }
        self.settle_request(request_id, Some(answer)).await;
        Ok(())
    }

    /// PRD §10 for a job's own actions: its user, or those who may modify its project.
    pub(super) fn may_act_on(&self, job: &Job, caller: &Caller) -> bool {
        let project = self.store.project(&job.config.project).ok();
        caller.can_cancel_job(Some(job), project.as_ref())
    }
}
