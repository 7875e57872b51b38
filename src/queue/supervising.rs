//! Supervising running jobs (PRD §7): failing jobs, worker exits and settling their end,
//! timeouts, re-adopting this host's running jobs and the `rest_interval` sweep.

use super::Manager;
use super::poison::{MarkKind, handling_sync};
use super::selection::QueuedIndex;
use super::{EndCause, KILL_GRACE, Running, WORKER_DIED, add_secs, job_limit, pidwatch};
use crate::model::{DocKind, Job, JobStatus, MAX_TIMEOUT_SECONDS, Timestamp};
use crate::store::jobfile::{fail_raw, set_failed, write_and_move};
use crate::store::{Record, StoreError, read_limited};
use nix::sys::signal::Signal;
use std::time::Duration;
use tokio::time::Instant;

impl Manager {
    pub(super) async fn fail_invalid(&mut self, id: &str, from: JobStatus) {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, from, id);
        let Ok(bytes) = read_limited(&path) else {
            return;
        };
        let error = match self.store.parse_doc::<Job>(DocKind::Job, &path, &bytes) {
            Err(StoreError::Invalid { rejection, .. }) => format!("Invalid job file: {rejection}"),
            Err(e) => format!("Invalid job file: {e}"),
            Ok(_) => return,
        };
        self.index.forget(id);
        match fail_raw(&self.store, &q, id, from, &bytes, &error) {
            Ok(_) => self.ended(id, from, JobStatus::Failed, &error).await,
            Err(e) => tracing::error!(job_id = %id, queue = %q, "cannot fail invalid job: {e}"),
        }
    }

    /// Fails, once, a queued file whose name is too long to be a job id: nothing can be made
    /// of it under that name (its claim, probe and worker would each fail again), so it ends
    /// in failed_jobs/ as it is.
    pub(super) async fn fail_bad_name(&mut self, id: &str, why: &str) {
        let q = self.cfg.queue.clone();
        let from = JobStatus::Queued;
        let path = self.store.job_path(&q, from, id);
        let Ok(bytes) = read_limited(&path) else {
            return;
        };
        let error = format!("Invalid job file name: {why}");
        self.index.forget(id);
        match fail_raw(&self.store, &q, id, from, &bytes, &error) {
            Ok(_) => self.ended(id, from, JobStatus::Failed, &error).await,
            Err(e) => {
                tracing::error!(queue = %q, "cannot fail the job file with an invalid name: {e}");
                // Never tried again and again: out of queued_jobs/ for a person to see.
                self.set_aside(&path, "a job file whose name is no job id");
            }
        }
    }

    /// Fails a job the manager owns (queued, or running with its worker dead).
    pub(super) async fn fail_owned(
        &mut self,
        id: &str,
        from: JobStatus,
        mut job: Job,
        error: String,
    ) {
        let q = self.cfg.queue.clone();
        set_failed(&mut job, error.clone());
        match write_and_move(&self.store, &q, id, from, &job) {
            Ok(_) => self.ended(id, from, JobStatus::Failed, &error).await,
            Err(e) => {
                tracing::error!(job_id = %id, queue = %q, "cannot fail job: {e}");
                self.remember_full_disk(id, &e);
            }
        }
    }

    /// A running job that could not be failed because the store is full: its worker most
    /// likely died of the same full disk, so the next try (once there is room) records that,
    /// not "worker died" (the probe at the worker's death can pass when a block was freed).
    fn remember_full_disk(&mut self, id: &str, e: &crate::store::StoreError) {
        let crate::store::StoreError::Io { source, .. } = e else {
            return;
        };
        if matches!(
            source.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        ) {
            self.store_errors
                .entry(id.to_string())
                .or_insert_with(|| super::starting::unsaved_result(source));
        }
    }

    pub(super) async fn ended(&mut self, id: &str, from: JobStatus, to: JobStatus, error: &str) {
        self.store_errors.remove(id);
        self.backoff.remove(id);
        let event = if to == JobStatus::Failed {
            "job_failed"
        } else {
            "job_finished"
        };
        self.record(Record::warn(
            self.event(event).job(id).detail(error),
            format!("job {id} {}: {error}", to.name()),
        ));
        self.store.notice_job_ended(&self.cfg.queue, id);
        self.drop_approvals_of(id).await;
        self.signal(id, from, to).await;
    }

    // ---- running jobs ------------------------------------------------------------------

    /// Takes over this host's jobs in `running_jobs/` whose worker still runs; fails those
    /// whose worker is gone (PRD §11 scenario 2).
    pub(super) fn adopt_running(&mut self) -> Vec<String> {
        let q = self.cfg.queue.clone();
        let dir = self.store.jobs_dir(&q, JobStatus::Running);
        let docs = match crate::store::scan_dir(&dir) {
            Ok(s) => s.documents,
            Err(e) => {
                tracing::warn!(queue = %q, "cannot scan {}: {e}", dir.display());
                return Vec::new();
            }
        };
        let mut dead = Vec::new();
        for path in docs {
            let Some(id) = crate::store::file_id(&path).map(str::to_string) else {
                continue;
            };
            if self.running.contains_key(&id)
                || self.slurm.tracks(&id)
                || self.launching.contains(&id)
            {
                continue;
            }
            if !self.adopt_one(&id, &path) {
                dead.push(id);
            }
        }
        dead
    }

    /// Adopts one running job; false when its worker is gone (the job is to be settled).
    pub(super) fn adopt_one(&mut self, id: &str, path: &std::path::Path) -> bool {
        let job: Job = match self.store.read_doc(DocKind::Job, path) {
            Ok(j) => j,
            Err(_) => return true,
        };
        if job
            .runtime
            .host
            .as_deref()
            .is_some_and(|h| !self.is_this_machine(h))
        {
            return true; // another machine's job
        }
        if let Some(sid) = job.runtime.slurm_job_id.clone() {
            self.slurm_adopt(id, &job, &sid);
            return true;
        }
        let marked = self.mark(MarkKind::Adopt, id);
        let marker = self.marker_path(MarkKind::Adopt, id);
        let alive = handling_sync(marker, || self.adopt_job(id, &job));
        if marked {
            self.unmark(MarkKind::Adopt, id);
        }
        alive
    }

    pub(super) fn adopt_job(&mut self, id: &str, job: &Job) -> bool {
        let Some(pid) = job
            .runtime
            .process_id
            .filter(|p| pidwatch::is_worker_of(*p, id))
        else {
            return false;
        };
        let Some(fd) = pidwatch::pidfd_open(pid) else {
            return false;
        };
        // A limit out of range (a loosened schema) still gets a deadline: the longest allowed.
        let limit = job_limit(job, &self.config).unwrap_or(MAX_TIMEOUT_SECONDS);
        let ran = job
            .runtime
            .start_time
            .map(|s| s.seconds_until(&Timestamp::now()).max(0.0))
            .unwrap_or(0.0);
        let now = Instant::now();
        let started_at = Duration::try_from_secs_f64(ran)
            .ok()
            .and_then(|d| now.checked_sub(d))
            .unwrap_or(now);
        let tx = self.exits_tx.clone();
        let job_id = id.to_string();
        self.tasks.spawn(async move {
            pidwatch::wait_exit(fd).await;
            let _ = tx.send(super::WorkerExit::of(job_id, None));
        });
        self.record(
            Record::info(
                self.event("job_adopted").job(id),
                format!("job {id} re-adopted (worker pid {pid})"),
            )
            .no_event_line(),
        );
        self.running.insert(
            id.to_string(),
            Running {
                pid,
                unit: job.runtime.unit.clone(),
                started_at,
                limit,
                deadline: add_secs(started_at, limit),
                end: None,
                kill_at: None,
            },
        );
        true
    }

    pub(super) async fn on_exit(&mut self, exit: super::WorkerExit) {
        let id = exit.id.as_str();
        let Some(r) = self.running.remove(id) else {
            return;
        };
        // The worker said the store was full when it died: that is the job's error, even if
        // there is room again by now (the probe in `settle` would pass).
        if exit.store_full {
            self.store_errors.entry(id.to_string()).or_insert_with(|| {
                super::starting::unsaved_result(&std::io::Error::from_raw_os_error(libc::ENOSPC))
            });
        }
        // A worker that reported its own end (its file has left running_jobs/): nothing of
        // the job is written after its clean-up, so the scope's stop (a round trip to
        // systemd per job) goes on beside the loop. Any other end is written only after it.
        let q = &self.cfg.queue;
        let reported = r.end.is_none() && !self.store.job_path(q, JobStatus::Running, id).is_file();
        if reported {
            let launcher = self.launcher.clone();
            let (pid, unit) = (r.pid, r.unit.clone());
            self.tasks
                .spawn(async move { launcher.clean_up(pid, unit.as_deref()).await });
        } else {
            self.launcher.clean_up(r.pid, r.unit.as_deref()).await;
        }
        self.settle(id, Some(r)).await;
    }

    /// After a worker is gone: signals the end it reported, or writes the end it could not
    /// (`r` is `None` for a job found running with no live worker).
    pub(super) async fn settle(&mut self, id: &str, r: Option<Running>) {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, JobStatus::Running, id);
        // Still in running_jobs/ means the worker did not end it, even when a file of the
        // same id exists in finished_jobs/ (an id collision: the worker's move was refused).
        if !path.is_file() {
            let collided = crate::store::jobfile::collision_path(&self.store, &q, id, 1).is_file();
            let ended = [JobStatus::Failed, JobStatus::Finished]
                .into_iter()
                .find(|to| self.store.job_path(&q, *to, id).is_file());
            let to = if collided {
                Some(JobStatus::Failed)
            } else {
                ended
            };
            match to {
                Some(to) => {
                    if to == JobStatus::Failed && !collided {
                        self.retry_reported(id);
                    }
                    self.record(
                        Record::info(
                            self.event("worker_exited").job(id),
                            format!("job {id} {} (worker exited)", to.name()),
                        )
                        .no_event_line(),
                    );
                    self.signal(id, JobStatus::Running, to).await;
                }
                None => {
                    tracing::warn!(job_id = %id, queue = %q, "job file vanished from running_jobs")
                }
            }
            return;
        }
        let Ok(bytes) = read_limited(&path) else {
            tracing::warn!(job_id = %id, queue = %q, "job file vanished from running_jobs");
            return;
        };
        if !self.store_errors.contains_key(id)
            && r.as_ref().is_none_or(|r| r.end.is_none())
            && let Some(e) = self.store_write_error()
        {
            self.store_errors.insert(id.to_string(), e);
        }
        let died = self
            .store_errors
            .get(id)
            .cloned()
            .unwrap_or_else(|| WORKER_DIED.to_string());
        let error = match r {
            None => died,
            Some(r) => {
                let elapsed = r.started_at.elapsed().as_secs_f64();
                let timeout = format!(
                    "Job timeout after {}s (limit: {}s)",
                    elapsed.floor() as u64,
                    r.limit
                );
                match &r.end {
                    Some(EndCause::Cancelled(by)) => format!("Job cancelled by {by}"),
                    Some(EndCause::Timeout) => timeout,
                    None if elapsed >= r.limit as f64 => timeout,
                    None => died,
                }
            }
        };
        self.fail_running(id, &path, &bytes, error).await;
    }

    /// Fails running job `id` (its document's `bytes`, read from `path`) with `error`: as a
    /// job when it parses (a retry is queued first when its policy says so), else as raw
    /// bytes kept in the failed document.
    pub(super) async fn fail_running(
        &mut self,
        id: &str,
        path: &std::path::Path,
        bytes: &[u8],
        error: String,
    ) {
        let q = self.cfg.queue.clone();
        match self.store.parse_doc::<Job>(DocKind::Job, path, bytes) {
            Ok(job) => {
                self.retry_if_due(id, &job, &error);
                self.fail_owned(id, JobStatus::Running, job, error).await
            }
            Err(_) => match fail_raw(&self.store, &q, id, JobStatus::Running, bytes, &error) {
                Ok(_) => {
                    self.ended(id, JobStatus::Running, JobStatus::Failed, &error)
                        .await
                }
                Err(e) => {
                    tracing::error!(job_id = %id, queue = %q, "cannot fail job: {e}");
                    self.remember_full_disk(id, &e);
                }
            },
        }
    }

    pub(super) async fn stop_job(&mut self, id: &str, cause: EndCause) {
        let Some(r) = self.running.get_mut(id) else {
            return;
        };
        if r.end.is_none() {
            r.end = Some(cause);
        }
        r.kill_at = Some(Instant::now() + KILL_GRACE);
        let (pid, unit) = (r.pid, r.unit.clone());
        self.launcher
            .signal(pid, unit.as_deref(), Signal::SIGTERM)
            .await;
    }

    pub(super) async fn on_deadlines(&mut self) {
        let now = Instant::now();
        let mut overdue = Vec::new();
        let mut kill = Vec::new();
        for (id, r) in &mut self.running {
            match (&r.end, r.kill_at) {
                (None, _) if now >= r.deadline => overdue.push(id.clone()),
                (Some(_), Some(k)) if now >= k => {
                    r.kill_at = None;
                    kill.push((r.pid, r.unit.clone()));
                }
                _ => {}
            }
        }
        for id in overdue {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "job timed out; stopping it");
            self.stop_job(&id, EndCause::Timeout).await;
        }
        for (pid, unit) in kill {
            self.launcher
                .signal(pid, unit.as_deref(), Signal::SIGKILL)
                .await;
        }
        self.slurm_poll_if_due().await;
    }

    pub(super) async fn sweep(&mut self) {
        // Workers that vanished without an exit notice (should not happen; cheap to check).
        let gone: Vec<String> = self
            .running
            .iter()
            .filter(|(id, r)| !pidwatch::is_worker_of(r.pid, id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.on_exit(super::WorkerExit::of(id, None)).await;
        }
        // Running files nobody watches (a restart race, a synced-in file from this host).
        for id in self.adopt_running() {
            self.settle(&id, None).await;
        }
        while let Ok(exit) = self.exits_rx.try_recv() {
            self.on_exit(exit).await;
        }
        self.index = QueuedIndex::default();
        let status = format!(
            "{} running, {} queued{}",
            self.running.len(),
            self.queued,
            if self.paused { ", paused" } else { "" }
        );
        crate::systemd::notify_status(&status);
        self.record(Record::info(self.event("sweep"), format!("sweep: {status}")).no_event_line());
    }
}
