//! Supervising the queue's Slurm jobs: adoption, `squeue` passes, cancels, and each
//! ended job's settlement.

use super::*;

impl Manager {
    /// Takes over a running job that has a Slurm job id (after a restart).
    pub(in crate::queue) fn slurm_adopt(&mut self, id: &str, job: &Job, sid: &str) {
        let limit = job_limit(job, &self.config).unwrap_or(crate::model::MAX_TIMEOUT_SECONDS);
        let relay = match self.relay_of(id, job) {
            Some(Err(e)) => {
                tracing::warn!(job_id = %id, queue = %self.cfg.queue, "{e}: its end is taken from Slurm's record");
                None
            }
            r => r.and_then(Result::ok),
        };
        self.record(
            Record::info(
                self.event("job_adopted").job(id),
                format!("job {id} re-adopted (Slurm job {sid})"),
            )
            .no_event_line(),
        );
        self.slurm.adopt(id, Tracked::new(sid, limit, "", relay));
    }

    /// Watches `running_jobs/` of a Slurm queue: a worker that wrote its end (its file moved
    /// out) is settled at once ([`slurm_reap`](Self::slurm_reap)) instead of at the next
    /// `squeue` poll. A worker on another node of a shared filesystem raises no inotify event
    /// here: the poll still sees it. `None` (logged) when it cannot watch.
    pub(in crate::queue) fn watch_running(&self) -> Option<inotify::Inotify> {
        let dir = self.store.jobs_dir(&self.cfg.queue, JobStatus::Running);
        let watch = || -> std::io::Result<inotify::Inotify> {
            crate::store::safe::create_dir_all(&dir)?;
            let i = inotify::Inotify::init()?;
            use inotify::WatchMask as W;
            crate::store::safe::watch_dir(&mut i.watches(), &dir, W::MOVED_FROM | W::DELETE)?;
            Ok(i)
        };
        match watch() {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!(queue = %self.cfg.queue,
                    "cannot watch {} (Slurm jobs' ends are seen at each poll only): {e}", dir.display());
                None
            }
        }
    }

    /// Settles the Slurm jobs whose file left `running_jobs/` (the worker wrote its end),
    /// without asking Slurm; `name`: the file the event named (None: look at them all).
    pub(in crate::queue) async fn slurm_reap(&mut self, name: Option<&str>) {
        let q = self.cfg.queue.clone();
        let ids: Vec<String> = match name.map(|n| n.trim_end_matches(".json")) {
            Some(id) if self.slurm.tracks(id) => vec![id.to_string()],
            Some(_) => return,
            None => self.slurm.job_ids().cloned().collect(),
        };
        for id in ids {
            if self.store.job_path(&q, JobStatus::Running, &id).is_file() {
                continue;
            }
            if let Some(t) = self.slurm.untrack(&id) {
                self.forget_asks(&t);
                let relay = t.relay.clone();
                self.settle(&id, None).await;
                self.relay_ended(&id, relay).await;
            }
        }
    }

    /// `cancel-job` of a job in Slurm: `scancel`; its end is settled by the poll.
    pub(in crate::queue) async fn slurm_cancel(
        &mut self,
        id: &str,
        cause: EndCause,
    ) -> Result<(), String> {
        let Some(t) = self.slurm.job_mut(id) else {
            return Ok(());
        };
        if t.end.is_none() {
            t.end = Some(cause);
        }
        let sid = t.slurm_id.clone();
        if !is_slurm_job_id(&sid) {
            return Err(format!(
                "job {id}: its runtime.slurm_job_id {sid:?} is not a Slurm job id; nothing cancelled in Slurm"
            ));
        }
        // Only the Slurm job of this job: one whose id a job file names but whose name is
        // not `agentstore-<id>` (another user's, named by a forged file) is left alone.
        let args = [format!("--name={JOB_NAME_PREFIX}{id}"), sid.clone()];
        self.slurm_run("scancel", &args)
            .await
            .map_err(|e| format!("scancel {sid}: {e}"))?;
        self.slurm.poll_now();
        Ok(())
    }

    /// When the next poll is due.
    pub(in crate::queue) fn slurm_deadline(&self) -> Option<Instant> {
        self.slurm.deadline()
    }

    /// One look at all of the queue's Slurm jobs, if due.
    pub(in crate::queue) async fn slurm_poll_if_due(&mut self) {
        if self.slurm_deadline().is_some_and(|at| at <= Instant::now()) {
            self.slurm_poll().await;
        }
    }

    /// One look at all of the queue's Slurm jobs: states, ends, held jobs to release, our own
    /// time limit.
    pub(in crate::queue) async fn slurm_poll(&mut self) {
        let every = self.poll_interval();
        self.slurm.poll_in(every);
        if self.slurm.idle() {
            return;
        }
        let q = self.cfg.queue.clone();
        let ids: Vec<String> = self.slurm.job_ids().cloned().collect();
        let probe = format!("probe-{q}");
        let refs: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .chain(self.slurm.probing().then_some(probe.as_str()))
            .collect();
        let listed = match self.squeue(&refs).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(queue = %q, "squeue: {e}");
                return;
            }
        };
        if self.slurm.store_shared() {
            self.set_slurm_status(None);
        }
        self.probe_verdict(&listed);
        let store = &self.store;
        let Seen {
            release,
            over,
            ended,
        } = self.slurm.observe(
            &listed,
            |id| store.job_path(&q, JobStatus::Running, id).is_file(),
            Instant::now(),
        );
        self.slurm_release(&release).await;
        self.relay_asks().await;
        for id in over {
            tracing::warn!(job_id = %id, queue = %q, "job timed out; scancel");
            if let Err(e) = self.slurm_cancel(&id, EndCause::Timeout).await {
                tracing::warn!(job_id = %id, queue = %q, "{e}");
            }
        }
        for (id, slurm_job) in ended {
            let Some(t) = self.slurm.untrack(&id) else {
                continue;
            };
            self.forget_asks(&t);
            let relay = t.relay.clone();
            match slurm_job {
                None => self.settle(&id, None).await,
                Some(j) => self.slurm_settle(&id, t, j).await,
            }
            self.relay_ended(&id, relay).await;
        }
    }

    /// Fails a job Slurm ended whose worker wrote no result.
    pub(super) async fn slurm_settle(&mut self, id: &str, t: Tracked, j: SlurmJob) {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, JobStatus::Running, id);
        // A batch step run as the job's account wrote its end into its own file.
        let tail = match &t.relay {
            Some(relay) => relay.read_tail().await,
            None => None,
        };
        if let Some(relay) = &t.relay
            && let Some(end) = tail.as_deref().and_then(crate::model::relay::end_of)
            && self.finish_relayed(id, relay, end).await
        {
            return self.settle(id, None).await;
        }
        // No end: what the step said last is all that is left of its output (its file goes
        // once this end is recorded), so it goes to the manager's journal with the job's id.
        if let Some(words) = tail.as_deref().and_then(crate::model::relay::last_words) {
            tracing::warn!(job_id = %id, queue = %q, "Slurm job {} ended without reporting its end; its batch step's last output:\n{words}", j.id);
        }
        let exit = if t.end.is_none() && matches!(j.state.as_str(), "COMPLETED" | "FAILED") {
            self.slurm_exit_code(&j.id).await
        } else {
            None
        };
        let error = end_error(&j, t.limit, t.end.as_ref(), exit.as_deref());
        let Ok(bytes) = read_limited(&path) else {
            return self.settle(id, None).await;
        };
        self.fail_running(id, &path, &bytes, error).await;
    }

    /// Slurm's `ExitCode=` of an ended job (`scontrol show job`), when it still knows it.
    pub(super) async fn slurm_exit_code(&mut self, sid: &str) -> Option<String> {
        let out = self
            .slurm_run(
                "scontrol",
                &["show".into(), "job".into(), "--oneliner".into(), sid.into()],
            )
            .await
            .ok()?;
        out.split_whitespace()
            .find_map(|f| f.strip_prefix("ExitCode="))
            .map(str::to_string)
    }
}
