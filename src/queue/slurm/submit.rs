//! Handing queued jobs to Slurm: `sbatch` (gated, looked up by name when unsure), the
//! shared-store probe, the partition's limits.

use super::*;

impl Manager {
    pub(super) fn slurm_cfg(&self) -> SlurmConfig {
        self.config.slurm.clone().unwrap_or_default()
    }

    pub(super) fn poll_interval(&self) -> u64 {
        self.slurm_cfg()
            .poll_seconds
            .unwrap_or(DEFAULT_POLL_SECONDS)
            .clamp(1, 3600)
    }

    /// How many more jobs may go to Slurm now.
    pub(in crate::queue) fn slurm_free(&self) -> usize {
        let max = self
            .slurm_cfg()
            .max_in_slurm
            .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
        self.slurm.free(max)
    }

    pub(super) fn set_slurm_status(&mut self, status: Option<String>) {
        if let Some(status) = self.slurm.set_status(status) {
            match &status {
                Some(s) => self.record(Record::warn(
                    self.event("slurm_unavailable").detail(s),
                    format!("queue {}: {s}", self.cfg.queue),
                )),
                None => self.record(Record::info(
                    self.event("slurm_available"),
                    format!("queue {}: Slurm answers again", self.cfg.queue),
                )),
            }
        }
    }

    pub(super) async fn slurm_run(
        &mut self,
        prog: &str,
        args: &[String],
    ) -> Result<String, SlurmError> {
        // sbatch exports its environment to the batch step: the workers' extra environment.
        let env = if prog == "sbatch" {
            self.cfg.worker_env.clone()
        } else {
            Vec::new()
        };
        let r = run(prog, args, &env).await;
        self.note_transient(&r);
        r
    }

    /// A controller that does not answer is the queue's `slurm_status`.
    pub(super) fn note_transient<T>(&mut self, r: &Result<T, SlurmError>) {
        if let Err(e) = r
            && e.is_transient()
        {
            self.set_slurm_status(Some(format!("jobs stay queued: {e}")));
        }
    }

    /// `sbatch` for each submission, [`SBATCH_PARALLEL`] in flight at once; each answer is
    /// recorded as it comes ([`submitted`](Self::submitted)), so a job's batch step finds
    /// its record (its gate opens) without waiting for the rest of the burst. Each sbatch and
    /// the handling of its answer run as handling that job (poison.rs): a panic there is
    /// recorded in its start marker and fails that job, and only it, at the next start.
    pub(super) async fn sbatch_all(&mut self, subs: Vec<(Submission, Vec<String>)>) {
        use futures_util::StreamExt;
        let env = self.cfg.worker_env.clone();
        // Each job's approval key goes in sbatch's own environment, which Slurm gives the
        // batch step (issue 27: without it every person-approval of a Slurm job was denied);
        // never on a command line (any local user reads those) nor in the store.
        type Sub = (
            Submission,
            Vec<String>,
            std::path::PathBuf,
            Vec<(String, String)>,
            Option<String>,
        );
        let jobs: Vec<Sub> = subs
            .into_iter()
            .map(|(s, line)| {
                let marker = self.marker_path(MarkKind::Start, &s.id);
                let mut env = env.clone();
                // Never to a batch step run as the job's account: it could sign answers to
                // its own requests with it.
                if s.relay.is_none() {
                    env.push((
                        crate::model::approval::APPROVAL_KEY_ENV.to_string(),
                        self.approval_key(&s.id),
                    ));
                }
                // A relay step gets the public half of the key its answers are signed with.
                let public_key = s.relay.as_ref().and_then(|_| {
                    crate::model::approval::relay_public_key(&self.approval_key(&s.id))
                });
                (s, line, marker, env, public_key)
            })
            .collect();
        let worker = self.cfg.worker.display().to_string();
        let config = self.config.clone();
        let mut answers = futures_util::stream::iter(jobs.into_iter().map(
            |(s, line, marker, env, public_key)| {
                let (worker, config) = (worker.clone(), config.clone());
                handling(marker.clone(), async move {
                    let r = match &s.relay {
                        Some(relay) => {
                            let mut command = vec![worker, "--relay".to_string()];
                            command.extend(s.args.iter().cloned());
                            let handover = crate::model::relay::Handover {
                                answers: relay.answers.clone(),
                                public_key: public_key.unwrap_or_default(),
                            };
                            let script = relay::script(&command, &s.job, &config, &handover);
                            relay.sbatch(&line, &env, script).await
                        }
                        None => run("sbatch", &line, &env).await,
                    };
                    (s, r, marker)
                })
            },
        ))
        .buffer_unordered(SBATCH_PARALLEL);
        while let Some((s, answer, marker)) = answers.next().await {
            self.note_transient(&answer);
            handling(marker, self.submitted(s, answer)).await;
        }
    }

    /// What `sbatch` answered for `s`: recorded, put off, or the job failed.
    pub(super) async fn submitted(&mut self, s: Submission, answer: Result<String, SlurmError>) {
        #[cfg(debug_assertions)]
        crate::queue::poison::injected_fault("submit", &s.id).await;
        match answer {
            Ok(out) => {
                let sid = out.trim().split(';').next().unwrap_or_default().to_string();
                if sid.is_empty() || !sid.chars().all(|c| c.is_ascii_digit() || c == '_') {
                    self.back_off(
                        &s.id,
                        &format!("sbatch printed no job id (it printed {:?})", out.trim()),
                    );
                    return;
                }
                self.record_submission(s, sid).await;
            }
            Err(e) if e.is_transient() => self.back_off(&s.id, &e.to_string()),
            Err(e) => {
                self.slurm.settled(&s.id);
                self.fail_owned(
                    &s.id,
                    JobStatus::Queued,
                    s.job,
                    format!("Cannot start job: Slurm refused it: {e}"),
                )
                .await;
            }
        }
    }

    /// The queue's live Slurm jobs named after `ids` (one `squeue`).
    pub(super) async fn squeue(&mut self, ids: &[&str]) -> Result<Vec<SlurmJob>, SlurmError> {
        let mut args = vec![
            "--noheader".to_string(),
            "--states=all".to_string(),
            format!("--format={SQUEUE_FORMAT}"),
        ];
        // A long list of names is filtered here instead (the command line stays short).
        if ids.len() <= 200 {
            let names: Vec<String> = ids
                .iter()
                .map(|i| format!("{JOB_NAME_PREFIX}{i}"))
                .collect();
            args.push(format!("--name={}", names.join(",")));
        }
        let out = self.slurm_run("squeue", &args).await?;
        let wanted: HashSet<String> = ids
            .iter()
            .map(|i| format!("{JOB_NAME_PREFIX}{i}"))
            .collect();
        Ok(parse_squeue(&out)
            .into_iter()
            .filter(|j| wanted.contains(&j.name))
            .collect())
    }

    /// Submits the shared-store probe (once): a short Slurm job that writes a file into the
    /// store's `logs/`, which this host must then see.
    pub(super) async fn slurm_probe(&mut self) {
        let cfg = self.slurm_cfg();
        let logs = self.store.logs_dir();
        let file = logs.join(format!(
            ".slurm-probe-{}-{}",
            self.cfg.queue,
            std::process::id()
        ));
        // The manager writes the probe's file (with the store's own I/O, which follows no
        // link) and the probe only reads it back: nothing a root Slurm job creates or
        // writes lies in the store (issue 27). The token tells this probe's file from any
        // other.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let _ = crate::store::safe::remove_file(&file);
        if let Err(e) = crate::store::write_atomic(&file, format!("{token}\n").as_bytes()) {
            tracing::warn!(queue = %self.cfg.queue, "cannot write the Slurm probe's file {}: {e}; the store's sharing is not checked", file.display());
            return;
        }
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name={JOB_NAME_PREFIX}probe-{}", self.cfg.queue),
            "--time=1".into(),
            "--output=/dev/null".into(),
            "--chdir=/".into(),
        ];
        for (opt, v) in [
            ("partition", &cfg.partition),
            ("account", &cfg.account),
            ("qos", &cfg.qos),
        ] {
            if let Some(v) = v {
                args.push(format!("--{opt}={v}"));
            }
        }
        // Read only, and never through a link planted in logs/ (the step runs as root).
        let (dq, fq) = (
            shell_quote(&logs.display().to_string()),
            shell_quote(&file.display().to_string()),
        );
        args.push(format!(
            "--wrap=[ ! -h {dq} ] && [ ! -h {fq} ] && grep -qsx {token} {fq}"
        ));
        // Not submitted: again with the next job.
        let probe = self.slurm_run("sbatch", &args).await.ok().map(|out| {
            let sid = out.trim().split(';').next().unwrap_or_default().to_string();
            (sid, file)
        });
        self.slurm.probe_submitted(probe);
    }

    /// The probe's verdict once Slurm ended it.
    pub(super) fn probe_verdict(&mut self, listed: &[SlurmJob]) {
        let Some((sid, file, state)) = self.slurm.probe_ended(listed) else {
            return;
        };
        let _ = crate::store::safe::remove_file(&file);
        if state == "COMPLETED" {
            return;
        }
        let text = format!(
            "jobs stay queued: the store {} is not shared with the compute nodes: Slurm job {sid} (the probe) ended {state}: the file it reads, {}, written on this host, was not visible to it; put the store on the cluster's shared filesystem at the same path on every node, then restart the queue manager",
            self.cfg.root.display(),
            file.display()
        );
        self.set_slurm_status(Some(text));
    }

    /// Hands `ids` (queued jobs) to Slurm.
    pub(in crate::queue) async fn slurm_start_batch(&mut self, ids: &[String]) {
        // Settings every job would be refused for: nothing is submitted, nothing is failed.
        // Checked also when no job can be taken (max_in_slurm 0 takes none).
        let problem = settings_problem(&self.slurm_cfg(), self.config.resource_limits.as_ref());
        if problem.is_none() && ids.is_empty() {
            return;
        }
        let problem = match problem {
            Some(why) => Some(why),
            None => self.partition_unknown().await,
        };
        if let Some(why) = problem {
            self.set_slurm_status(Some(format!(
                "jobs stay queued: {}: {why}",
                self.store.queue_path(&self.cfg.queue).display()
            )));
            return;
        }
        // A root manager's batch steps run as the jobs' accounts and never read the store:
        // nothing to probe (and nothing in the store handed to a root Slurm job).
        if !self.root_mode && self.slurm.take_probe_turn() {
            self.slurm_probe().await;
        }
        let mut marked = Vec::new();
        let mut ready = Vec::new();
        for id in ids {
            // An earlier attempt (its marker still on disk) may have reached sbatch.
            let mut unsure = self.start_was_interrupted(id) || self.slurm.unsure(id);
            let (was_marked, prepared) = self.begin_start(id).await;
            if was_marked {
                marked.push(id.clone());
            } else {
                unsure = true;
            }
            if let Some(p) = prepared {
                let relay = match self.relay_of(&p.id, &p.job) {
                    Some(Err(e)) => {
                        let marker = self.marker_path(MarkKind::Start, &p.id);
                        let id = p.id.clone();
                        handling(marker, self.fail_owned(&id, JobStatus::Queued, p.job, e)).await;
                        continue;
                    }
                    r => r.and_then(Result::ok),
                };
                ready.push(Submission {
                    unsure,
                    // The relay's batch step is the account already: no gate, no switch.
                    args: p
                        .args
                        .iter()
                        .filter(|a| a.as_str() != "--gate" && !a.starts_with("--run-as="))
                        .cloned()
                        .collect(),
                    id: p.id,
                    path: p.path,
                    job: p.job,
                    limit: p.limit,
                    relay,
                });
            }
        }
        // Submitted before (by a manager that died before recording it, or by an sbatch of
        // ours that did not answer): found by name, in one squeue for all such jobs.
        let names: Vec<&str> = ready
            .iter()
            .filter(|s| s.unsure)
            .map(|s| s.id.as_str())
            .collect();
        let existing = if names.is_empty() {
            Ok(Vec::new())
        } else {
            self.squeue(&names).await
        };
        let existing = match existing {
            Ok(l) => l,
            Err(e) => {
                // Only the jobs that needed the look-up wait; the others go on.
                let (wait, go): (Vec<Submission>, Vec<Submission>) =
                    ready.into_iter().partition(|s| s.unsure);
                for s in &wait {
                    self.back_off(&s.id, &e.to_string());
                }
                ready = go;
                Vec::new()
            }
        };
        let partition = if ready.iter().any(|s| {
            !existing
                .iter()
                .any(|j| j.name == format!("{JOB_NAME_PREFIX}{}", s.id))
        }) {
            self.partition_limits().await
        } else {
            None
        };
        let mut found = Vec::new();
        let mut fresh = Vec::new();
        for s in ready {
            let name = format!("{JOB_NAME_PREFIX}{}", s.id);
            match existing
                .iter()
                .find(|j| j.name == name && !is_terminal(&j.state))
            {
                Some(j) => found.push((s, j.clone())),
                None => {
                    let marker = self.marker_path(MarkKind::Start, &s.id);
                    if let Some(why) = partition.as_ref().and_then(|p| {
                        beyond_partition(p, s.limit, self.config.resource_limits.as_ref())
                    }) {
                        let id = s.id.clone();
                        handling(marker, self.fail_owned(&id, JobStatus::Queued, s.job, why)).await;
                        continue;
                    }
                    let line = handling_sync(marker, || self.sbatch_line(&s));
                    // From here on, a submission may exist whatever sbatch answers.
                    self.slurm.submitting(&s.id);
                    fresh.push((s, line));
                }
            }
        }
        let mut release = Vec::new();
        for (s, j) in found {
            self.record(Record::info(
                self.event("slurm_job_found").job(&s.id).detail(&j.id),
                format!(
                    "job {}: Slurm job {} from an earlier submission taken over",
                    s.id, j.id
                ),
            ));
            // Submitted held by an earlier version of the manager.
            if j.state == "PENDING" && j.reason == "JobHeldUser" {
                release.push(j.id.clone());
            }
            let marker = self.marker_path(MarkKind::Start, &s.id);
            handling(marker, self.record_submission(s, j.id)).await;
        }
        self.sbatch_all(fresh).await;
        self.slurm_release(&release).await;
        self.slurm.poll_now();
        for id in &marked {
            self.unmark(MarkKind::Start, id);
        }
    }

    /// Why the queue's partition cannot be used: Slurm does not list it (`sinfo`).
    pub(super) async fn partition_unknown(&mut self) -> Option<String> {
        let cfg = self.slurm_cfg();
        let wanted = cfg.partition.as_deref()?;
        self.partition_limits().await;
        let listed = self.slurm.partitions()?;
        if listed.iter().any(|p| p == wanted) {
            return None;
        }
        Some(format!(
            "config.slurm.partition: Slurm has no partition {wanted:?} (sinfo lists: {})",
            if listed.is_empty() {
                "none".to_string()
            } else {
                listed.join(", ")
            }
        ))
    }

    /// The limits of the queue's partition (`sinfo`, read again after a minute); None when
    /// they cannot be known (the job then goes to sbatch, which judges it).
    pub(super) async fn partition_limits(&mut self) -> Option<PartitionLimits> {
        if let Some(l) = self.slurm.partition_limits(PARTITION_TTL) {
            return l;
        }
        let cfg = self.slurm_cfg();
        // Every partition (not only the queue's): an unknown one is told by name.
        let args = vec![
            "--noheader".to_string(),
            "--all".to_string(),
            "--Node".to_string(),
            format!("--format={SINFO_FORMAT}"),
        ];
        let (partitions, l) = match self.slurm_run("sinfo", &args).await {
            Ok(out) => (
                Some(sinfo_partitions(&out)),
                parse_sinfo(&out, cfg.partition.as_deref()),
            ),
            Err(e) => {
                tracing::warn!(queue = %self.cfg.queue, "sinfo (the partition's limits are not checked): {e}");
                (None, None)
            }
        };
        self.slurm.read_partitions(partitions, l.clone());
        l
    }

    /// The `sbatch` arguments of a submission.
    pub(super) fn sbatch_line(&self, s: &Submission) -> Vec<String> {
        let q = &self.cfg.queue;
        let mut command = vec![self.cfg.worker.display().to_string()];
        command.extend(s.args.iter().cloned());
        // The batch step runs as root on the node when the manager is root: its output goes
        // nowhere in the store, where a planted link would send it (issue 27). What the job
        // did is in its job file (the worker records its end, output and error there).
        let output = s
            .relay
            .as_ref()
            .map_or(Path::new("/dev/null"), |r| r.file.as_path());
        let running = self.store.job_path(q, JobStatus::Running, &s.id);
        let mut line = sbatch_args(
            &self.slurm_cfg(),
            &s.id,
            s.limit,
            self.config.resource_limits.as_ref(),
            output,
            &running,
            &command,
        );
        if s.relay.is_some() {
            // Run as the job's account: the script comes on sbatch's stdin (relay::script),
            // held until its submission is recorded (the gate a store-reading step had).
            line.retain(|a| !a.starts_with("--wrap="));
            line.push("--hold".to_string());
        }
        line
    }

    /// Records Slurm job `sid` on a submitted job as it moves into `running_jobs/` (which
    /// opens the batch step's gate) and follows it.
    pub(super) async fn record_submission(&mut self, s: Submission, sid: String) {
        let q = self.cfg.queue.clone();
        let Submission {
            id,
            path,
            mut job,
            limit,
            relay,
            ..
        } = s;
        let now = Timestamp::now();
        // A relayed step (root manager) gets none of the manager's job keys: said in the job's
        // record and the journal, never silently (issue 35).
        let keys_warning = relay.as_ref().and_then(|rl| {
            crate::systemd::credentials::slurm_keys_warning(
                &crate::systemd::credentials::job_key_names(),
                &rl.account.name,
            )
        });
        let r = &mut job.runtime;
        if let Some(w) = &keys_warning
            && !r.warnings.contains(w)
        {
            r.warnings.push(w.clone());
        }
        r.start_time = Some(now);
        r.process_id = None;
        r.unit = None;
        r.slurm_job_id = Some(sid.clone());
        if let Err(e) = self.place_running(&id, &mut job, &path) {
            // The batch step waits at its gate: the next attempt finds it by name.
            self.back_off(&id, &e.to_string());
            return;
        }
        self.slurm.settled(&id);
        self.backoff.remove(&id);
        if self.slurm.store_shared() {
            self.set_slurm_status(None);
        }
        tracing::info!(job_id = %id, queue = %q, slurm_job_id = %sid, "job handed to Slurm");
        if let Some(w) = keys_warning {
            self.record(Record::warn(
                self.event("job_keys_not_delivered").job(&id).detail(&w),
                format!("job {id} (Slurm job {sid}): {w}"),
            ));
        }
        self.record(Record::info(
            self.event("job_started")
                .job(&id)
                .project(&job.config.project)
                .detail(format!("slurm job {sid}")),
            format!("job {id} submitted to Slurm (Slurm job {sid})"),
        ));
        self.slurm
            .track(&id, Tracked::new(&sid, limit, "PENDING", relay.clone()));
        if relay.is_some() {
            // Recorded: its hold is the gate, opened now.
            self.slurm_release(std::slice::from_ref(&sid)).await;
        }
        self.signal(&id, JobStatus::Queued, JobStatus::Running)
            .await;
    }

    pub(super) async fn slurm_release(&mut self, sids: &[String]) {
        if sids.is_empty() {
            return;
        }
        let args = vec!["release".to_string(), sids.join(",")];
        if let Err(e) = self.slurm_run("scontrol", &args).await {
            // The next poll releases what is still held.
            tracing::warn!(queue = %self.cfg.queue, "scontrol release {}: {e}", sids.join(","));
        }
    }
}
