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
                && self.checked_answer(&req.job_id, &req.request_id).is_none()
            {
                added.push(req);
            }
        }
        for req in added {
            self.publish_request(req).await;
        }
        let listed: Vec<ApprovalRequest> = self.pending().clone();
        for req in listed {
            let answer = self.checked_answer(&req.job_id, &req.request_id);
            let asked =
                crate::store::safe::is_file(&self.store.approval_request_path(&q, &req.request_id));
            if !asked || answer.is_some() {
                self.settle_request(&req.request_id, answer).await;
            }
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
                Some(req)
                    if !known
                        && req.request_id == id
                        && self.checked_answer(&req.job_id, id).is_none() =>
                {
                    self.publish_request(req).await;
                }
                None if known => self.settle_request(id, None).await,
                _ => {}
            }
        } else if let Some(id) = name.strip_suffix(ANSWER_SUFFIX) {
            let job = self
                .pending()
                .iter()
                .find(|p| p.request_id == id)
                .map(|p| p.job_id.clone());
            let answer = job.and_then(|j| self.checked_answer(&j, id));
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
                QueueError::NotFound(crate::permissions::no_such_request(request_id, &q))
            })?;
        let path = self.store.job_path(&q, JobStatus::Running, &req.job_id);
        let job: Option<Job> = self.store.read_doc(DocKind::Job, &path).ok();
        let project = job
            .as_ref()
            .and_then(|j| self.store.project(&j.config.project).ok());
        // Someone who may not even see the job gets the answer an unknown request gets.
        if !caller.can_see_job_opt(job.as_ref(), project.as_ref()) {
            return Err(QueueError::NotFound(crate::permissions::no_such_request(
                request_id, &q,
            )));
        }
        if !caller.can_answer_request(job.as_ref(), project.as_ref()) {
            return Err(QueueError::PermissionDenied(
                crate::permissions::may_not_answer(&req.job_id),
            ));
        }
        let message: String = message.chars().take(MAX_MESSAGE).collect();
        let answer = ApprovalAnswer {
            request_id: request_id.to_string(),
            allow,
            always,
            message,
            by: by.to_string(),
            at: Timestamp::now(),
            proof: String::new(),
        };
        // Only this manager's answers count (its worker checks the proof): a job started by
        // an earlier run of the manager has no key here, and cannot be answered.
        let Some(key) = self.approval_keys.get(&req.job_id).cloned() else {
            return Err(QueueError::Failed(format!(
                "approval request {request_id} was asked of an earlier run of this queue manager, which held the key its answers are signed with: it is denied at its deadline"
            )));
        };
        let answer = answer.sign(&key);
        let write = || {
            self.store.write_approval_answer(&q, &answer).map_err(|e| {
                QueueError::Failed(format!(
                    "cannot write {}: {e}",
                    self.store.approval_answer_path(&q, request_id).display()
                ))
            })
        };
        // A file already there that is not a signed answer was planted: `checked_answer`
        // removes it, and this answer takes its place.
        let written = write()? || (self.checked_answer(&req.job_id, request_id).is_none() && write()?);
        if !written {
            let first = self.checked_answer(&req.job_id, request_id);
            self.settle_request(request_id, first).await;
            return Err(QueueError::Failed(format!(
                "approval request {request_id} was answered already"
            )));
        }
        self.settle_request(request_id, Some(answer)).await;
        Ok(())
    }
}

/// True when `caller` may see request `req` of `queue` (PRD §10: whoever may see its running
/// job; a job that cannot be read is for admins only).
pub(super) fn may_see_request(
    store: &crate::store::Store,
    queue: &str,
    req: &ApprovalRequest,
    caller: &Caller,
) -> bool {
    let path = store.job_path(queue, JobStatus::Running, &req.job_id);
    let job: Option<Job> = store.read_doc(DocKind::Job, &path).ok();
    let project = job
        .as_ref()
        .and_then(|j| store.project(&j.config.project).ok());
    caller.can_see_job_opt(job.as_ref(), project.as_ref())
}

impl Manager {
    /// The answer to `request_id` (of job `job_id`) as this manager takes it: one signed
    /// with the job's approval key. A file that is not — planted by whoever can write the
    /// store — is removed (logged) and is no answer. A job started by an earlier run of this
    /// manager has no key here: its file is shown as it is, and its worker checks it.
    fn checked_answer(&self, job_id: &str, request_id: &str) -> Option<ApprovalAnswer> {
        let q = &self.cfg.queue;
        let path = self.store.approval_answer_path(q, request_id);
        if !crate::store::safe::exists(&path) {
            return None;
        }
        let answer = self.store.approval_answer(q, request_id);
        let Some(key) = self.approval_keys.get(job_id) else {
            return answer;
        };
        match answer {
            Some(a) if a.request_id == request_id && a.verify(key) => Some(a),
            _ => {
                tracing::warn!(queue = %q, job_id, request_id,
                    "approval: an answer not written by this queue manager (no valid proof) was removed");
                let _ = crate::store::safe::remove_file(&path);
                None
            }
        }
    }
}
