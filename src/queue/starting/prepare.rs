//! Preparing one start: reading and checking the queued job, claiming it, the machine's
//! rules for what may run, and giving claims back or backing off when the store cannot be
//! written.

use super::*;

impl Manager {
    /// Reads a queued job and works out how to launch it; `None` when it was taken away,
    /// has been failed (invalid, no account to run as) or is put off (the store cannot be
    /// written).
    pub(in crate::queue) async fn prepare_start(&mut self, id: &str) -> Option<PreparedStart> {
        let q = self.cfg.queue.clone();
        // Option-like names (`--help.json`) run like any job; a name longer than an id may
        // be cannot: every name made from it (its probe, claim, worker's files) is too long.
        if id.len() > crate::model::MAX_ID_BYTES {
            let why = format!(
                "{} bytes; a job id has at most {}",
                id.len(),
                crate::model::MAX_ID_BYTES
            );
            self.fail_bad_name(id, &why).await;
            return None;
        }
        let path = self.store.job_path(&q, JobStatus::Queued, id);
        let bytes = match read_limited(&path) {
            Ok(b) => b,
            Err(_) => return None, // taken away meanwhile
        };
        let job: Job = match self.store.parse_doc(DocKind::Job, &path, &bytes) {
            Ok(j) => j,
            Err(_) => {
                self.fail_invalid(id, JobStatus::Queued).await;
                return None;
            }
        };
        self.index.forget(id);
        if let Some((state, read)) = self
            .store
            .moved_on_copy(&q, id)
            .map(|s| (s, self.same_job_moved_on(&q, id, s, &job)))
            .filter(|(_, same)| *same != Some(false))
        {
            // Through a sync engine: the job's move on arrived here, the delete of its queued
            // file not (yet): it already ran or runs elsewhere. Never started twice. (A
            // DIFFERENT job under a used id is not this: it goes on, to end failed as an id
            // collision when its worker cannot move it next to the other.)
            if read == Some(true) && matches!(state, JobStatus::Finished | JobStatus::Failed) {
                // The job has ended (read whole, the same job): the queued copy holds nothing
                // the ended one lacks. Removed, so it never waits here for a delete that may
                // never come (its machine lost) and never runs once the ended job is archived.
                match crate::store::safe::remove_file(&path) {
                    Ok(()) => self.record(Record::info(
                        self.event("stale_copy_removed").job(id).detail(state.dir()),
                        format!(
                            "job {id}: removed its stale queued copy (the job ended, in {}/)",
                            state.dir()
                        ),
                    )),
                    Err(e) => {
                        tracing::warn!(job_id = %id, "cannot remove its stale queued copy: {e}")
                    }
                }
                return None;
            }
            self.back_off(
                id,
                &format!(
                    "it is also in {}/ in this copy of the store (a move not fully synced yet): the queued file is a stale copy",
                    state.dir()
                ),
            );
            return None;
        }
        let mut job = job;
        if let Some(why) = self.awaited_document(&job) {
            self.back_off(id, &why);
            return None;
        }
        if let Err(e) = self
            .may_run(&job)
            .and_then(|_| self.fill_pipeline_step(&mut job))
        {
            self.fail_owned(id, JobStatus::Queued, job, e).await;
            return None;
        }
        let run_as = if self.root_mode {
            // Only an account the machine allows (issue 27): the store's users/*.json choose
            // among them, never root, a system account or one outside the allowed groups.
            let allowed = project_owner_login(&self.store, &job)
                .map_err(|e| e.to_string())
                .and_then(|n| {
                    let a = crate::trust::Account::lookup(&n).map_err(|e| {
                        format!("Cannot run the job as the project owner's account: {e}")
                    })?;
                    let policy = crate::trust::Policy::load();
                    crate::trust::check_run_as(&policy, &a).map_err(|e| e.to_string())?;
                    Ok(n)
                });
            match allowed {
                Ok(n) => Some(n),
                Err(e) => {
                    self.fail_owned(id, JobStatus::Queued, job, e.to_string())
                        .await;
                    return None;
                }
            }
        } else {
            None
        };
        let limit = match job_limit(&job, &self.config) {
            Ok(l) => l,
            Err(e) => {
                self.fail_owned(id, JobStatus::Queued, job, e).await;
                return None;
            }
        };
        // The store must take the job's next write before a worker is started for it: on a
        // full disk the start is put off (with a growing pause), not tried again at once.
        // A probe beside the job, never the job's own file: another manager of the queue may
        // have taken it meanwhile, and it must not be written back into being.
        if let Err(e) = self.probe_write(&path, &job) {
            self.back_off(id, &e.to_string());
            return None;
        }
        // Values glued to their options and `--` before the job id: a job file named
        // `--help.json` or `-V.json` is a job like any other, never an option.
        let mut args = vec![
            format!("--root={}", self.cfg.root.display()),
            format!("--queue={q}"),
            "--gate".to_string(),
        ];
        if let Some(u) = &run_as {
            args.push(format!("--run-as={u}"));
        }
        args.push("--".to_string());
        args.push(id.to_string());
        Some(PreparedStart {
            id: id.to_string(),
            path,
            job,
            args,
            limit,
        })
    }

    /// Releases a launched worker whose job the launch recorded in running_jobs/.
    pub(super) async fn finish_start(
        &mut self,
        p: PreparedStart,
        started_at: Instant,
        launched: Result<launcher::Launched, launcher::LaunchError>,
    ) {
        let q = self.cfg.queue.clone();
        let PreparedStart {
            id,
            path,
            job,
            limit,
            ..
        } = p;
        let id = id.as_str();
        let launched = match launched {
            Ok(l) => l,
            Err(e) => {
                let p = PreparedStart {
                    id: id.to_string(),
                    path,
                    job,
                    args: Vec::new(),
                    limit,
                };
                return self
                    .fail_claimed(&p, format!("Cannot start job: {e}"))
                    .await;
            }
        };
        // The launch recorded the job in running_jobs/ naming this worker (`claim_and_place`).
        self.backoff.remove(id);
        #[cfg(debug_assertions)]
        crate::queue::poison::injected_fault("release", id).await;
        let key = self.approval_key(id);
        if let Err(e) = release(launched.gate, &self.config, &key).await {
            // It died before it could start; the exit watcher reports it as dead.
            tracing::warn!(job_id = %id, queue = %q, "worker gone before start: {e}");
        }
        let tx = self.exits_tx.clone();
        let job_id = id.to_string();
        let mut child = launched.child;
        self.tasks.spawn(async move {
            let code = child.wait().await.ok().and_then(|s| s.code());
            let _ = tx.send(crate::queue::WorkerExit::of(job_id, code));
        });
        self.beat_due = true;
        self.running.insert(
            id.to_string(),
            Running {
                pid: launched.pid,
                unit: launched.unit.clone(),
                started_at,
                limit,
                deadline: add_secs(started_at, limit),
                end: None,
                kill_at: None,
            },
        );
        self.record(Record::info(
            self.event("job_started")
                .job(id)
                .project(&job.config.project)
                .detail(format!("pid {}", launched.pid)),
            format!(
                "job {id} started (worker pid {}, unit {})",
                launched.pid,
                launched.unit.as_deref().unwrap_or("-")
            ),
        ));
        self.signal(id, JobStatus::Queued, JobStatus::Running).await;
    }

    /// Writes `job`'s bytes to a probe file beside `path` (then removes it): whether the
    /// store takes the job's next write, without writing the job's own file.
    pub(super) fn probe_write(&self, path: &Path, job: &Job) -> Result<(), StoreError> {
        let bytes = self.store.doc_bytes(DocKind::Job, path, job)?;
        // A name of its own, not the job's: within NAME_MAX whatever the job's id.
        let probe = path.with_file_name(format!(
            ".probe-{}-{}.tmp",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        // Not synced: a full disk refuses the write itself (the job's own write, synced,
        // comes before its worker is released).
        let res = crate::store::safe::create_new(&probe, 0o600).and_then(|mut f| {
            use std::io::Write;
            f.write_all(&bytes)
        });
        let _ = crate::store::safe::remove_file(&probe);
        res.map_err(|source| StoreError::Io {
            path: probe,
            source,
        })
    }

    /// Puts claimed job `id` (its claim at `claim`), never released to a worker, back into
    /// `queued_jobs/` to be started again.
    pub(in crate::queue) fn give_back(&self, id: &str, claim: &Path) {
        let q = &self.cfg.queue;
        match crate::store::jobfile::give_back_claim(&self.store, q, id, claim) {
            Ok(_) => tracing::warn!(job_id = %id, queue = %q,
                "start not completed: the job, which never ran, is back in queued_jobs"),
            Err(e) => tracing::warn!(job_id = %id, queue = %q,
                "start not completed; cannot put the job back: {e}"),
        }
    }

    /// At start, before the poison markers are read: this machine's claims left by a manager
    /// that stopped between a claim and its worker's release go back to `queued_jobs/`
    /// (nothing of them ran; the start marker, if any, counts the interrupted attempt).
    pub(in crate::queue) fn give_back_claims(&self) {
        let q = &self.cfg.queue;
        for (id, claim) in crate::store::jobfile::claims_of(&self.store, q, &self.host) {
            match crate::store::jobfile::give_back_left_claim(&self.store, q, &id, &claim) {
                Ok(_) => tracing::warn!(job_id = %id, queue = %q,
                    "a start left unfinished by an earlier manager: the job, which never ran, is back in queued_jobs"),
                Err(e) => tracing::warn!(job_id = %id, queue = %q, "left claim: {e}"),
            }
        }
    }

    /// Fails claimed job `p` (never released to a worker) with `error`.
    pub(super) async fn fail_claimed(&mut self, p: &PreparedStart, error: String) {
        let mut job = p.job.clone();
        crate::store::jobfile::set_failed(&mut job, error.clone());
        match crate::store::jobfile::write_and_move_from(
            &self.store,
            &self.cfg.queue,
            &p.id,
            &p.path,
            &job,
        ) {
            Ok(_) => {
                self.ended(&p.id, JobStatus::Queued, JobStatus::Failed, &error)
                    .await
            }
            Err(e) => {
                tracing::error!(job_id = %p.id, queue = %self.cfg.queue, "cannot fail job: {e}")
            }
        }
    }

    /// Puts off starting `id` after a failure that is not the job's fault (the store cannot be
    /// written): 2 s, doubling up to 5 minutes.
    pub(in crate::queue) fn back_off(&mut self, id: &str, error: &str) {
        let n = self
            .backoff
            .get(id)
            .map_or(0, |(_, n)| *n)
            .saturating_add(1);
        let pause = Duration::from_secs(1u64 << n.min(8)).min(Duration::from_secs(300));
        self.backoff.insert(
            id.to_string(),
            (add_secs(Instant::now(), pause.as_secs()), n),
        );
        self.record(
            Record::warn(
                self.event("job_start_put_off").job(id),
                format!(
                    "job {id} not started (attempt {n}): {error}; next try in {} s",
                    pause.as_secs()
                ),
            )
            .no_event_line(),
        );
    }

    /// Whether the store takes a write now (a worker that died without a word may have died
    /// of a full disk): `Some(reason)` when it does not.
    pub(in crate::queue) fn store_write_error(&self) -> Option<String> {
        let dir = self.store.jobs_dir(&self.cfg.queue, JobStatus::Running);
        let probe = dir.join(format!(".write-probe-{}.tmp", std::process::id()));
        let res = std::fs::write(&probe, [0u8; 4096])
            .and_then(|_| std::fs::File::open(&probe)?.sync_all());
        let _ = std::fs::remove_file(&probe);
        res.err().map(|e| unsaved_result(&e))
    }

    /// Whether the copy of job `id` in `state`/ is the queued `job` itself, moved on, or one
    /// that cannot be read yet (a partial sync): not a different job that happens to carry
    /// the same id (that one goes on, and ends failed as an id collision).
    /// `None`: the later copy could not be read (taken as the same job: never started).
    pub(super) fn same_job_moved_on(
        &self,
        q: &str,
        id: &str,
        state: JobStatus,
        job: &Job,
    ) -> Option<bool> {
        match self
            .store
            .read_doc::<Job>(DocKind::Job, &self.store.job_path(q, state, id))
        {
            Ok(other) => Some(job.is_same_job_as(&other)),
            Err(_) => None,
        }
    }

    /// The checks a job file gets whoever wrote it (the orchestrator makes the same ones when
    /// it creates a job): PRD §10 — a job that names its user runs only if that user owns the
    /// project or is an admin — and extra args never widen the queue's permissions.
    /// In a synced store files arrive in any order: a job can be here before the project or
    /// user document it names. A job queued less than [`SYNC_ARRIVAL_GRACE_SECONDS`] ago
    /// waits for them (its start put off, saying which) instead of failing; an older one is
    /// judged on what is here.
    pub(super) fn awaited_document(&self, job: &Job) -> Option<String> {
        let young =
            job.config.queue_time.claimed_age(&Timestamp::now()) < SYNC_ARRIVAL_GRACE_SECONDS;
        if !young {
            return None;
        }
        let missing = |r: Result<(), StoreError>| matches!(r, Err(StoreError::NotFound { .. }));
        let p = &job.config.project;
        if missing(self.store.project(p).map(|_| ())) {
            return Some(format!(
                "project {p} is not in this copy of the store (yet: waiting for it to sync)"
            ));
        }
        match &job.config.user {
            Some(u) if missing(self.store.user(u).map(|_| ())) => Some(format!(
                "user {u} is not in this copy of the store (yet: waiting for it to sync)"
            )),
            _ => None,
        }
    }

    pub(in crate::queue) fn may_run(&self, job: &Job) -> Result<(), String> {
        if let Some(arg) = crate::model::permission_widening_arg_for(
            job.config.jobtype,
            &job.config.claude_extra_args,
        ) && self.config.allow_permission_args != Some(true)
        {
            return Err(format!(
                "Invalid job: claude_extra_args {arg:?} would change the agent's permissions, which queue {} does not allow (its allow_permission_args is not true)",
                self.cfg.queue
            ));
        }
        if let Some(u) = &job.config.user {
            let user = self
                .store
                .user(u)
                .map_err(|e| format!("Job refused: its user {u}: {e}"))?;
            crate::permissions::project_for_new_job(
                &self.store,
                &crate::permissions::Caller::User(user),
                &job.config.project,
            )
            .map_err(|e| format!("Job refused: {e} (its user is {u})"))?;
        }
        Ok(())
    }
}

/// The error of a job whose worker stopped because the store could not be written.
pub(in crate::queue) fn unsaved_result(e: &std::io::Error) -> String {
    format!(
        "The job's result could not be saved: the store cannot be written ({e}); the worker stopped when it could not write the job file"
    )
}
