//! The queue manager's side of approvals (issue 15): it watches `Jobs/approvals/`, where
//! running jobs' workers write their requests (`worker::approval`), keeps the pending list
//! the front end serves (`ListApprovals`: each caller sees the requests of the jobs PRD §10
//! lets them see), publishes each request and its answer as id-only events
//! (`ApprovalRequested`, `ApprovalAnswered`), and writes a person's answer (`Answer`,
//! authorized as a cancel is: admins, the job's user, those who may modify its project —
//! PRD §10; someone who may not even see the job is answered as for an unknown request).
//! The worker records the decision on the job.
//!
//! Trust: the store is shared input. Every answer this manager writes is signed with the
//! job's approval key (derived from the manager's master key, kept outside the store, and
//! handed to the job's worker on its gate); the worker takes only signed answers, and an
//! answer file without a valid proof is removed and never settles a request here.

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

    /// Reads the folder again: new requests of running jobs are published, answered or
    /// vanished ones leave the list, requests of jobs no longer running are removed.
    pub(super) async fn load_approvals(&mut self) {
        let q = self.cfg.queue.clone();
        let on_disk = self.store.pending_approvals(&q);
        let mut added = Vec::new();
        for req in on_disk {
            match self.asker(&req) {
                Asker::Here => {}
                // Its machine's manager publishes, answers and removes it.
                Asker::Elsewhere(_) => continue,
                Asker::Ended => {
                    self.store.remove_approval(&q, &req.request_id);
                    continue;
                }
            }
            if !self
                .approvals
                .lock()
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
        let listed: Vec<ApprovalRequest> = self.approvals.lock().clone();
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
            let known = self.approvals.lock().iter().any(|p| p.request_id == id);
            match self.store.approval_request(&q, id) {
                Some(req)
                    if !known
                        && req.request_id == id
                        && matches!(self.asker(&req), Asker::Here)
                        && self.checked_answer(&req.job_id, id).is_none() =>
                {
                    self.publish_request(req).await;
                }
                None if known => self.settle_request(id, None).await,
                _ => {}
            }
        } else if let Some(id) = name.strip_suffix(ANSWER_SUFFIX) {
            let job = self
                .approvals
                .lock()
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
        self.store.notice_approval_waiting(&self.cfg.queue, &req);
        self.approvals.lock().push(req.clone());
        if let Some(events) = &self.events {
            events.emit(&QueueEvent::ApprovalRequested(req)).await;
        }
    }

    /// Takes a request off the list and publishes how it ended.
    async fn settle_request(&mut self, request_id: &str, answer: Option<ApprovalAnswer>) {
        let req = {
            let mut p = self.approvals.lock();
            let Some(i) = p.iter().position(|r| r.request_id == request_id) else {
                return;
            };
            p.remove(i)
        };
        if let Some(a) = &answer {
            self.store
                .notice_approval_answered(&self.cfg.queue, &req, a);
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
            .approvals
            .lock()
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
            .approvals
            .lock()
            .iter()
            .find(|r| r.request_id == request_id)
            .cloned()
            .ok_or_else(|| self.not_asked_here(request_id, caller))?;
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
        // A job run in Slurm as its own account denied the request itself at its deadline.
        let relay = self.relay_job(&req.job_id);
        if relay.is_some() && req.deadline <= Timestamp::now() {
            self.expire_requests_of(std::slice::from_ref(&req.job_id))
                .await;
            return Err(QueueError::Failed(format!(
                "approval request {request_id} passed its deadline: the job was answered no"
            )));
        }
        let plain = ApprovalAnswer {
            request_id: request_id.to_string(),
            allow,
            always,
            message,
            by: by.to_string(),
            at: Timestamp::now(),
            proof: String::new(),
        };
        // Only this manager's answers count: its worker checks the proof.
        let key = self.approval_key(&req.job_id);
        let answer = plain.clone().sign(&key);
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
        let written =
            write()? || (self.checked_answer(&req.job_id, request_id).is_none() && write()?);
        if !written {
            let first = self.checked_answer(&req.job_id, request_id);
            self.settle_request(request_id, first).await;
            return Err(QueueError::Failed(format!(
                "approval request {request_id} was answered already"
            )));
        }
        self.settle_request(request_id, Some(answer)).await;
        // A relay step reads it from its account's file, signed so that only this manager
        // could have written it.
        if let Some(relay) = relay
            && let Err(e) = relay.deliver(&plain.sign_for_relay(&key)).await
        {
            tracing::warn!(queue = %q, job_id = %req.job_id, request_id, "cannot hand the answer to the Slurm job: {e}");
            return Err(QueueError::Failed(format!(
                "the answer to {request_id} is recorded but could not be handed to the job, which will be answered no at the deadline: {e}"
            )));
        }
        Ok(())
    }

    /// Settles the waiting requests of jobs `job_ids` whose deadline passed, with a denial by
    /// `deadline` written here (for jobs whose step writes none to the store: the relay's).
    pub(super) async fn expire_requests_of(&mut self, job_ids: &[String]) {
        let now = Timestamp::now();
        let due: Vec<ApprovalRequest> = self
            .approvals
            .lock()
            .iter()
            .filter(|r| r.deadline <= now && job_ids.contains(&r.job_id))
            .cloned()
            .collect();
        let secs = self.config.approvals.clone().unwrap_or_default().deadline();
        for req in due {
            let answer = ApprovalAnswer {
                request_id: req.request_id.clone(),
                allow: false,
                always: false,
                message: format!("no answer within {secs} s: denied"),
                by: "deadline".into(),
                at: now,
                proof: String::new(),
            }
            .sign(&self.approval_key(&req.job_id));
            let answer = match self.store.write_approval_answer(&self.cfg.queue, &answer) {
                Ok(true) => Some(answer),
                _ => self.checked_answer(&req.job_id, &req.request_id),
            };
            self.settle_request(&req.request_id, answer).await;
        }
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

/// Whose request a request in `Jobs/approvals/` is, as this manager sees it.
enum Asker {
    /// A job this manager runs (its worker, its Slurm job, or a running job of this
    /// machine it has not adopted yet).
    Here,
    /// A job another machine's manager runs (that machine, when its running document says
    /// so) — or one whose running document has not reached this copy of the store yet.
    Elsewhere(Option<String>),
    /// A job that ended: its request is left over.
    Ended,
}

impl Manager {
    /// Whose request a request of job `job_id` is. Only the manager that runs the job
    /// publishes, answers and records its requests: another machine's manager serving the
    /// same queue (a standby, or over a shared filesystem) sees the same synced folder but
    /// could sign no answer that job's worker takes, and would record every request and
    /// answer a second time (the soak of issue 34: 457 of 2,237 requests answered twice)
    /// and remove the owner's answers as unsigned.
    fn asker(&self, req: &ApprovalRequest) -> Asker {
        let job_id = req.job_id.as_str();
        if self.running.contains_key(job_id) || self.slurm.tracks(job_id) {
            return Asker::Here;
        }
        let q = &self.cfg.queue;
        let path = self.store.job_path(q, JobStatus::Running, job_id);
        match self.store.read_doc::<Job>(DocKind::Job, &path) {
            Ok(job)
                if job
                    .runtime
                    .host
                    .as_deref()
                    .is_none_or(|h| self.is_this_machine(h)) =>
            {
                Asker::Here
            }
            Ok(job) => Asker::Elsewhere(job.runtime.host),
            Err(_) if crate::store::safe::exists(&path) => Asker::Elsewhere(None),
            Err(_) => {
                let ended = [JobStatus::Finished, JobStatus::Failed]
                    .into_iter()
                    .any(|s| crate::store::safe::is_file(&self.store.job_path(q, s, job_id)));
                // No running job: one that ended, or a request older than a sync engine
                // takes to bring the job's own document (a machine's jobs are judged lost
                // after that time too), is left over; a younger one may be ahead of it.
                let grace = self.store.config().machines.lost_job_grace_seconds;
                if ended || req.requested_at.plus_secs(grace) <= Timestamp::now() {
                    Asker::Ended
                } else {
                    Asker::Elsewhere(None)
                }
            }
        }
    }

    /// The error for an answer to a request this manager does not hold: where the request's
    /// job runs when that is another machine (the answer must be given there), else the
    /// unknown-request answer.
    fn not_asked_here(&self, request_id: &str, caller: &Caller) -> QueueError {
        let q = &self.cfg.queue;
        let unknown = || QueueError::NotFound(crate::permissions::no_such_request(request_id, q));
        let Some(req) = self.store.approval_request(q, request_id) else {
            return unknown();
        };
        if !may_see_request(&self.store, q, &req, caller) {
            return unknown();
        }
        match self.asker(&req) {
            Asker::Elsewhere(Some(h)) => QueueError::Failed(format!(
                "approval request {request_id} is job {}'s, which runs on machine {h}: answer it there (its queue manager signs the answers its worker takes)",
                req.job_id
            )),
            _ => unknown(),
        }
    }

    /// Job `job_id`'s approval key: derived from this manager's master key, so a manager
    /// that restarts (and re-adopts the job) signs and checks as the one that started it.
    pub(super) fn approval_key(&self, job_id: &str) -> String {
        job_key(&self.approval_master, &self.cfg.queue, job_id)
    }

    /// The answer to `request_id` (of job `job_id`) as this manager takes it: one signed
    /// with the job's approval key. A file that is not — planted by whoever can write the
    /// store — is removed (logged) and is no answer.
    fn checked_answer(&self, job_id: &str, request_id: &str) -> Option<ApprovalAnswer> {
        let q = &self.cfg.queue;
        let path = self.store.approval_answer_path(q, request_id);
        if !crate::store::safe::exists(&path) {
            return None;
        }
        let answer = self.store.approval_answer(q, request_id);
        let key = self.approval_key(job_id);
        match answer {
            Some(a) if a.request_id == request_id && a.verify(&key) => Some(a),
            _ => {
                tracing::warn!(queue = %q, job_id, request_id,
                    "approval: an answer not written by this queue manager (no valid proof) was removed");
                let _ = crate::store::safe::remove_file(&path);
                None
            }
        }
    }
}

/// The key of job `job_id` of `queue` under `master`: a UUID (v5 over the master).
fn job_key(master: &str, queue: &str, job_id: &str) -> String {
    let m = uuid::Uuid::parse_str(master).unwrap_or_else(|_| uuid::Uuid::new_v4());
    uuid::Uuid::new_v5(
        &m,
        format!("agentstore-job-key\0{queue}\0{job_id}").as_bytes(),
    )
    .simple()
    .to_string()
}

/// Where the master key lives: never in the store (shared input), but in this account's
/// own state — `$STATE_DIRECTORY` under systemd, `/var/lib/agentstore-queue-manager` for
/// root, else `$XDG_STATE_HOME/agentstore` (or `~/.local/state/agentstore`).
fn master_key_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|v| !v.is_empty()) {
        let first = d.to_string_lossy().split(':').next().map(PathBuf::from)?;
        return Some(first);
    }
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from("/var/lib/agentstore-queue-manager"));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(state.join("agentstore"))
}

/// This manager's master approval key: read from (or made once in) a file only its
/// account can read (`approval-key`, mode 0600, owned by it, reached with no link), so a
/// restarted manager signs as before; a fresh random one for this run (logged) when no such
/// file can be had — the requests of jobs an earlier run started then wait for their
/// deadline. Never a folder inside the store `store_root` (a service account whose home is
/// the store would otherwise sync its key to every peer).
pub(super) fn master_key(store_root: &std::path::Path) -> String {
    let inside_store = |d: &std::path::Path| {
        let canon =
            |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let root = canon(store_root);
        // The folder may not exist yet: judge its nearest existing ancestor.
        let mut probe = d.to_path_buf();
        while !probe.exists() && probe.pop() {}
        d.starts_with(store_root) || (probe.exists() && canon(&probe).starts_with(&root))
    };
    match master_key_dir()
        .ok_or_else(|| "no state folder (HOME unset)".to_string())
        .and_then(|d| {
            if inside_store(&d) {
                return Err(format!("{} is inside the store", d.display()));
            }
            read_or_make_key(&d.join("approval-key")).map_err(|e| format!("{}: {e}", d.display()))
        }) {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(
                "approval key: {e}; using one for this run only (requests of jobs started by an earlier run cannot be answered)"
            );
            crate::model::approval::new_approval_key()
        }
    }
}

fn read_or_make_key(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let me = nix::unistd::geteuid().as_raw();
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(mut f) => {
            let k = crate::model::approval::new_approval_key();
            f.write_all(k.as_bytes())?;
            f.sync_all()?;
            return Ok(k);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "{} must be a file of uid {me} that no one else may read or write",
            path.display()
        )));
    }
    let mut text = String::new();
    (&mut f).take(256).read_to_string(&mut text)?;
    let k = text.trim();
    uuid::Uuid::parse_str(k).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    Ok(k.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_master_key_is_kept_private_and_read_again() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("state/approval-key");
        let k = read_or_make_key(&path).unwrap();
        assert_eq!(
            read_or_make_key(&path).unwrap(),
            k,
            "read again, not made anew"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Readable by others: not a key any more.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_or_make_key(&path).is_err());
        // A link is never followed.
        let link = d.path().join("state/link-key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read_or_make_key(&link).is_err());
    }

    #[test]
    fn each_job_has_its_own_key_and_keeps_it() {
        let m = crate::model::approval::new_approval_key();
        let a = job_key(&m, "q1", "job-a");
        assert_eq!(a, job_key(&m, "q1", "job-a"));
        assert_ne!(a, job_key(&m, "q1", "job-b"));
        assert_ne!(a, job_key(&m, "q2", "job-a"));
        assert_ne!(
            a,
            job_key(&crate::model::approval::new_approval_key(), "q1", "job-a")
        );
    }
}
