//! Starting and stopping workers. `direct`: the worker gets its own session and is killed by
//! process group. `systemd`: the same process, placed in a transient scope before it may do
//! anything (see [`super::scope`]). Either way the worker is started gated: it blocks on its
//! stdin until the manager has written the job file and says `go`; a gated worker makes its
//! own session first (`agent-worker --gate`), so every signal sent after the release reaches
//! its whole process group.

use super::scope::{ScopeError, ScopeLauncher};
use crate::model::{Launcher, ResourceLimits};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

/// Errors starting a worker.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The worker binary could not be started.
    #[error("cannot start worker {path}: {source}")]
    Spawn {
        /// Worker binary.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The scope could not be made.
    #[error(transparent)]
    Scope(#[from] ScopeError),
}

/// What a job needs to be started.
#[derive(Debug)]
pub struct LaunchSpec<'a> {
    /// Worker binary.
    pub worker: &'a Path,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment for it.
    pub env: &'a [(String, String)],
    /// Job id.
    pub job_id: &'a str,
    /// Seconds until systemd stops the scope.
    pub runtime_max_secs: u64,
    /// cgroup limits.
    pub limits: Option<&'a ResourceLimits>,
}

/// A started, still gated worker.
#[derive(Debug)]
pub struct Launched {
    /// Its PID (= process group and session id).
    pub pid: u32,
    /// The child handle, for waiting.
    pub child: Child,
    /// The gate: write `go` to let it run; drop it to make it exit.
    pub gate: ChildStdin,
    /// Its scope, for the systemd launcher.
    pub unit: Option<String>,
}

/// How workers are started on this machine.
#[derive(Debug, Clone)]
pub enum JobLauncher {
    /// Own session, process-group kill.
    Direct,
    /// A transient scope per job.
    Systemd(ScopeLauncher),
    /// One Slurm batch job per job (started and followed by [`super::slurm`], never here).
    Slurm,
}

impl JobLauncher {
    /// Chooses per `launcher`: `auto` is systemd when a systemd service manager answers,
    /// else direct.
    pub async fn choose(launcher: Launcher) -> Result<JobLauncher, ScopeError> {
        match launcher {
            Launcher::Direct => Ok(JobLauncher::Direct),
            Launcher::Slurm => Ok(JobLauncher::Slurm),
            Launcher::Systemd => Ok(JobLauncher::Systemd(ScopeLauncher::connect().await?)),
            Launcher::Auto => match ScopeLauncher::connect().await {
                Ok(s) => Ok(JobLauncher::Systemd(s)),
                Err(e) => {
                    tracing::info!("launcher auto: using direct ({e})");
                    Ok(JobLauncher::Direct)
                }
            },
        }
    }

    /// `direct` or `systemd`.
    pub fn name(&self) -> &'static str {
        match self {
            JobLauncher::Direct => "direct",
            JobLauncher::Systemd(_) => "systemd",
            JobLauncher::Slurm => "slurm",
        }
    }

    /// Starts a gated worker (not yet in any scope: see [`place`](Self::place)).
    pub fn spawn(&self, spec: &LaunchSpec<'_>) -> Result<Launched, LaunchError> {
        let mut cmd = Command::new(spec.worker);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .kill_on_drop(false);
        // No `pre_exec` (a setsid between fork and exec): without one the standard library
        // starts the worker with posix_spawn (a vfork-style clone), never copying the
        // manager's page tables for a process that is about to exec — at hundreds of starts
        // a second, a measurable share of the machine. The worker makes its own session
        // before its gate instead.
        let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            path: spec.worker.to_path_buf(),
            source,
        })?;
        let (Some(pid), Some(gate)) = (child.id(), child.stdin.take()) else {
            return Err(LaunchError::Spawn {
                path: spec.worker.to_path_buf(),
                source: std::io::Error::other("worker exited at once"),
            });
        };
        Ok(Launched {
            pid,
            child,
            gate,
            unit: None,
        })
    }

    /// The scope job `job_id`'s worker is placed in (`None`: no scope, for `direct`).
    pub fn unit_for(&self, job_id: &str) -> Option<String> {
        match self {
            JobLauncher::Systemd(_) => Some(super::scope::scope_name(job_id)),
            JobLauncher::Direct | JobLauncher::Slurm => None,
        }
    }

    /// Places spawned worker `l` in its scope (systemd; nothing to do for `direct`) and
    /// returns once systemd reports the scope started. On an error the worker stays gated:
    /// the caller ends the job first, then discards the worker.
    pub async fn place(&self, l: &Launched, spec: &LaunchSpec<'_>) -> Result<(), LaunchError> {
        match self {
            JobLauncher::Direct | JobLauncher::Slurm => Ok(()),
            JobLauncher::Systemd(s) => {
                s.start(spec.job_id, l.pid, spec.runtime_max_secs, spec.limits)
                    .await?;
                Ok(())
            }
        }
    }

    /// Sends `signal` to everything the worker started.
    pub async fn signal(&self, pid: u32, unit: Option<&str>, signal: Signal) {
        if let (JobLauncher::Systemd(s), Some(u)) = (self, unit)
            && s.kill(u, signal as i32).await.is_ok()
        {
            return;
        }
        if let Ok(p) = i32::try_from(pid) {
            let _ = killpg(Pid::from_raw(p), signal);
        }
    }

    /// After the worker is gone: removes whatever it left behind (its process group, or
    /// its scope).
    pub async fn clean_up(&self, pid: u32, unit: Option<&str>) {
        if let (JobLauncher::Systemd(s), Some(u)) = (self, unit) {
            s.stop(u).await;
        }
        if let Ok(p) = i32::try_from(pid) {
            let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

/// Lets a gated worker run (`go`), handing it on a second line the queue's settings the
/// manager has read and checked, so the worker neither reads queue.json again nor compiles
/// its schema, and on a third the job's approval key (answers are signed with it; it is
/// never written to the store). The gate is closed right after: a worker that reads only the
/// first line (an older one) runs as before, and one that finds no second line reads
/// queue.json itself.
pub async fn release(
    mut gate: ChildStdin,
    config: &crate::model::QueueConfig,
    approval_key: &str,
) -> std::io::Result<()> {
    let mut lines = b"go\n".to_vec();
    // An empty line when the settings cannot be written: the worker then reads them itself.
    lines.extend_from_slice(&serde_json::to_vec(config).unwrap_or_default());
    lines.push(b'\n');
    lines.extend_from_slice(approval_key.as_bytes());
    lines.push(b'\n');
    gate.write_all(&lines).await?;
    gate.flush().await
}
