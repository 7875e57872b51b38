//! Slurm jobs of a root queue manager run as the job's own account (issue 27,
//! docs/trust-model.md "The Slurm relay"): `sbatch` is run as that account (so Slurm's access
//! checks and the batch step are the account's), held until the manager has recorded the
//! submission (`--hold`, released by [`record_submission`](Manager::record_submission)), with
//! the job and the queue's settings in the batch script on sbatch's standard input (never on
//! a command line, never in the store) and `--output=` a file in the account's own folder,
//! which Slurm opens as the account. The batch step (`agent-worker --relay`) never touches the
//! store; the manager reads the job's end back from that file with the account's rights (a
//! `tail` run as the account) and takes from it only what the job says about its own run.
//! Nothing root opens or hands to `sbatch` lies in the store.
//!
//! Approvals go the same way: the step prints each request on that output; the manager, at
//! each poll, reads what was added since the last with the account's rights, checks each
//! request and writes it into the store itself (`Jobs/approvals/`, as its own requests), where
//! the job's owner lists and answers it as any other. A person's answer is appended (as the
//! account) to the account's `<queue>-<job>.answers` beside the output, signed with the
//! manager's Ed25519 key for the job; the step holds the public key only, so an answer the
//! account (or its agent) writes there itself is never taken.

use super::*;
use crate::trust::Account;
use std::path::PathBuf;

/// The manager's environment variable naming the folder of the relay files (root-owned unit
/// configuration; tests): default `~/.local/state/agentstore/slurm` of the job's account.
pub const OUTPUT_DIR_ENV: &str = "AGENTSTORE_SLURM_OUTPUT_DIR";

/// The heredoc delimiter of the batch script (no line of one-line JSON can equal it).
const INPUT_END: &str = "AGENTSTORE_RELAY_INPUT";

/// A job run in Slurm as its own account: whose, and the file its batch step writes.
#[derive(Debug, Clone)]
pub(in crate::queue) struct Relay {
    pub(super) account: Account,
    pub(super) file: PathBuf,
    /// Where the manager appends its answers to the job's approval requests.
    pub(super) answers: PathBuf,
}

/// The most of a relay file read at one poll for new approval requests.
pub(super) const ASKS_CHUNK: u64 = 4 << 20;

impl Relay {
    /// The relay of job `id` of `queue` run as the account `login`.
    pub(super) fn new(login: &str, queue: &str, id: &str) -> Result<Relay, String> {
        let account = Account::lookup(login)
            .map_err(|e| format!("Cannot run the job in Slurm as its account: {e}"))?;
        let dir = match std::env::var_os(OUTPUT_DIR_ENV).filter(|v| !v.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => account.home.join(".local/state/agentstore/slurm"),
        };
        Ok(Relay {
            file: dir.join(format!("{queue}-{id}.out")),
            answers: dir.join(format!("{queue}-{id}.answers")),
            account,
        })
    }

    /// A command run as the account, with its own HOME, USER and LOGNAME.
    fn command(&self, prog: &str) -> tokio::process::Command {
        let mut std = std::process::Command::new(prog);
        crate::trust::switch::run_as(&mut std, &self.account);
        let mut cmd = tokio::process::Command::from(std);
        cmd.env("HOME", &self.account.home)
            .env("USER", &self.account.name)
            .env("LOGNAME", &self.account.name)
            .current_dir("/");
        cmd
    }

    /// `sbatch args` as the account, its folder made first (0700, the account's), `script`
    /// on its standard input.
    pub(super) async fn sbatch(
        &self,
        args: &[String],
        env: &[(String, String)],
        script: String,
    ) -> Result<String, SlurmError> {
        let dir = self
            .file
            .parent()
            .map_or_else(|| "/".to_string(), |d| d.display().to_string());
        // Found on the manager's PATH, as a plain sbatch is.
        let sbatch = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join("sbatch"))
            .find(|p| p.is_file())
            .ok_or_else(|| SlurmError::Missing("sbatch".to_string()))?;
        let mut cmd = self.command("sh");
        cmd.arg("-c")
            .arg("umask 077 && mkdir -p -- \"$0\" && exec \"$@\"")
            .arg(dir)
            .arg(sbatch)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)));
        // sbatch hands its environment to the step: nothing of the manager's own unit (its
        // credentials folder is root's; a Slurm job gets no credentials).
        for k in [
            "CREDENTIALS_DIRECTORY",
            "STATE_DIRECTORY",
            "INVOCATION_ID",
            "JOURNAL_STREAM",
            "WATCHDOG_USEC",
            "WATCHDOG_PID",
        ] {
            cmd.env_remove(k);
        }
        run_command("sbatch", cmd, Some(script.into_bytes())).await
    }

    /// The last [`READ_LIMIT`](crate::model::relay::READ_LIMIT) bytes of the step's output
    /// file, read with the account's rights (`None`: the file cannot be read by the account).
    /// The job's end is its last end line ([`crate::model::relay::end_of`]).
    pub(super) async fn read_tail(&self) -> Option<Vec<u8>> {
        let mut cmd = self.command("tail");
        cmd.arg("-c")
            .arg(crate::model::relay::READ_LIMIT.to_string())
            .arg("--")
            .arg(&self.file)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
            .await
            .ok()?
            .ok()?;
        if !out.status.success() {
            tracing::warn!(file = %self.file.display(), "cannot read the Slurm relay file as {}: {}",
                self.account.name, String::from_utf8_lossy(&out.stderr).trim());
            return None;
        }
        Some(out.stdout)
    }

    /// Removes the job's relay files (its output and its answers) once its end is recorded.
    /// Run as the account, in the account's folder: `rm` unlinks a link itself, never what it
    /// names, and a folder the account replaced by a link reaches only what the account may
    /// change; root writes nothing where the account controls the path.
    pub(super) async fn remove_files(&self) {
        let mut cmd = self.command("rm");
        cmd.arg("-f")
            .arg("--")
            .arg(&self.file)
            .arg(&self.answers)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let why = match tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await {
            Ok(Ok(out)) if out.status.success() => return,
            Ok(Ok(out)) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("rm took over {} s", COMMAND_TIMEOUT.as_secs()),
        };
        tracing::warn!(file = %self.file.display(), "cannot remove the Slurm relay files as {}: {why}",
            self.account.name);
    }

    /// What the step wrote from byte `offset` of its file on (at most [`ASKS_CHUNK`]), read
    /// as the account (`None`: not readable, or not yet there).
    pub(super) async fn read_from(&self, offset: u64) -> Option<Vec<u8>> {
        use tokio::io::AsyncReadExt;
        let mut cmd = self.command("tail");
        cmd.arg("-c")
            .arg(format!("+{}", offset.saturating_add(1)))
            .arg("--")
            .arg(&self.file)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().ok()?;
        let mut out = Vec::new();
        let mut stdout = child.stdout.take()?.take(ASKS_CHUNK);
        let read = stdout.read_to_end(&mut out);
        tokio::time::timeout(COMMAND_TIMEOUT, read)
            .await
            .ok()?
            .ok()?;
        // Whatever is left unread is for the next poll.
        let _ = child.start_kill();
        let _ = child.wait().await;
        Some(out)
    }

    /// Appends `answer` (signed for the relay) to the job's answers file, as the account.
    pub(in crate::queue) async fn deliver(
        &self,
        answer: &crate::model::approval::ApprovalAnswer,
    ) -> Result<(), String> {
        let mut line = serde_json::to_vec(answer).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut cmd = self.command("sh");
        cmd.arg("-c")
            .arg("umask 077 && cat >>\"$0\"")
            .arg(&self.answers)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let run = async {
            use tokio::io::AsyncWriteExt;
            let mut child = cmd.spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(&line).await?;
            }
            child.wait_with_output().await
        };
        let out = tokio::time::timeout(COMMAND_TIMEOUT, run)
            .await
            .map_err(|_| "timed out".to_string())?
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "appending to {} as {}: {}",
                self.answers.display(),
                self.account.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// The batch script of a relay job: `agent-worker --relay` with the job, the queue's
/// settings and the approvals' [`Handover`](crate::model::relay::Handover) on its standard
/// input.
pub(super) fn script(
    command: &[String],
    job: &Job,
    config: &crate::model::QueueConfig,
    handover: &crate::model::relay::Handover,
) -> String {
    let cmd: Vec<String> = command.iter().map(|s| shell_quote(s)).collect();
    let job = serde_json::to_string(job).unwrap_or_default();
    let config = serde_json::to_string(config).unwrap_or_default();
    let handover = serde_json::to_string(handover).unwrap_or_default();
    format!(
        "#!/bin/sh\nexec {} <<'{INPUT_END}'\n{job}\n{config}\n{handover}\n{INPUT_END}\n",
        cmd.join(" ")
    )
}

impl Manager {
    /// The relay of a job when this manager runs as root (`None` otherwise: the batch step is
    /// this manager's own account, which may write the store).
    pub(super) fn relay_of(&self, id: &str, job: &Job) -> Option<Result<Relay, String>> {
        if !self.root_mode {
            return None;
        }
        Some(
            crate::permissions::project_owner_login(&self.store, job)
                .map_err(|e| e.to_string())
                .and_then(|login| Relay::new(&login, &self.cfg.queue, id)),
        )
    }

    /// After job `id` ended: once its end is recorded (its file left `running_jobs/`), its
    /// relay files go; until then a later manager still reads its end from them.
    pub(super) async fn relay_ended(&self, id: &str, relay: Option<Relay>) {
        let Some(relay) = relay else { return };
        let running = self.store.job_path(&self.cfg.queue, JobStatus::Running, id);
        if crate::store::safe::exists(&running) {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue,
                "the end of the Slurm job is not recorded yet: its relay file {} stays", relay.file.display());
            return;
        }
        relay.remove_files().await;
    }

    /// Writes the end a relay job's batch step reported into the store (`theirs`: its final
    /// document, untrusted). Only what the job says of its own run is taken; its id, settings,
    /// start and Slurm job stay the manager's. False when `theirs` is no job document.
    pub(super) async fn finish_relayed(&mut self, id: &str, relay: &Relay, theirs: &[u8]) -> bool {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, JobStatus::Running, id);
        let Ok(bytes) = read_limited(&path) else {
            return false;
        };
        let Ok(mut job) = self
            .store
            .parse_doc::<Job>(crate::model::DocKind::Job, &path, &bytes)
        else {
            return false;
        };
        let t = match self
            .store
            .parse_doc::<Job>(crate::model::DocKind::Job, &relay.file, theirs)
        {
            Ok(t) => t.runtime,
            Err(e) => {
                tracing::warn!(job_id = %id, queue = %q, "the Slurm relay file {} holds no valid end: {e}", relay.file.display());
                return false;
            }
        };
        let r = &mut job.runtime;
        r.status = if t.status == JobStatus::Finished {
            JobStatus::Finished
        } else {
            JobStatus::Failed
        };
        r.finish_time = Some(Timestamp::now());
        r.error = match (t.status, t.error) {
            (JobStatus::Finished, e) => e,
            (_, Some(e)) => Some(e),
            (_, None) => Some("the job's batch step reported a failure without an error".into()),
        };
        r.output = t.output;
        r.exit_code = t.exit_code;
        r.cost_usd = t.cost_usd;
        r.usage = t.usage;
        r.num_turns = t.num_turns;
        r.session_id = t.session_id;
        r.approvals = t.approvals;
        r.commit = t.commit;
        r.worktree = t.worktree;
        r.sandbox = t.sandbox;
        r.sandbox_refused = t.sandbox_refused;
        let status = r.status;
        let detail = r.error.clone().unwrap_or_default();
        if let Err(e) =
            crate::store::jobfile::write_and_move(&self.store, &q, id, JobStatus::Running, &job)
        {
            tracing::error!(job_id = %id, queue = %q, "cannot record the end of Slurm job: {e}");
            return false;
        }
        let event = if status == JobStatus::Failed {
            "job_failed"
        } else {
            "job_finished"
        };
        let mut e = self.event(event).job(id);
        if !detail.is_empty() {
            e = e.detail(&detail);
        }
        self.record(Record::info(
            e,
            format!(
                "job {id} {} (Slurm job run as {}, end read from {})",
                status.name(),
                relay.account.name,
                relay.file.display()
            ),
        ));
        self.store.notice_job_ended(&q, id);
        true
    }
}
