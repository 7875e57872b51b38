use super::Timestamp;
use serde::{Deserialize, Serialize};

/// `Queues/<id>/queue.json` (PRD §4.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queue {
    /// Settings written by people.
    pub config: QueueConfig,
    /// State written by the queue manager.
    pub runtime: QueueRuntime,
}

/// Queue settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Queue name, also the folder name.
    pub id: String,
    /// Maximum simultaneous jobs.
    pub worker_count: u32,
    /// Command that runs Claude Code.
    pub claude_cli_path: String,
    /// Seconds between backstop sweeps.
    pub rest_interval: u64,
    /// Arguments given to every Claude job.
    pub claude_default_args: Vec<String>,
    /// Job timeout when the job sets none.
    pub max_job_runtime_seconds: u64,
    /// How jobs are started (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<Launcher>,
    /// cgroup limits for each job (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceLimits>,
    /// Command that runs the built-in agent (extension; default `agentshell`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentshell_path: Option<String>,
    /// Command that runs the Codex CLI for `jobtype: codex` (extension, issue 35; default
    /// `codex`). Like the others, only a program the machine's configuration allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex_cli_path: Option<String>,
    /// Arguments given to every Codex job before the job's own (extension, issue 35), e.g.
    /// `["-m", "gpt-5"]`; the worker adds `exec --json` and the sandbox and approval
    /// settings the queue's approvals map to, unless these name them already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codex_default_args: Vec<String>,
    /// Whether a job's extra args may change permissions (extension; default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_permission_args: Option<bool>,
    /// Retry policy for this queue's jobs (extension; absent: never retried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<super::flow::RetryPolicy>,
    /// Approvals for the queue's unattended jobs: rules, default, deadline (extension;
    /// absent means every request is asked, denied after 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<super::approval::ApprovalPolicy>,
    /// How jobs are handed to Slurm, for `launcher: slurm` (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmConfig>,
    /// Kernel confinement of the queue's jobs (extension, issue 28; absent: off, as queues
    /// made before it were; new queues get it on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSetting>,
    /// How a PRD's `integrate` job merges its tasks' branches (extension, issue 30; absent:
    /// plain `git merge`, as queues made before it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integration: Option<IntegrationMode>,
}

/// A queue's `config.integration`: how a PRD's integration job merges its tasks' branches.
///
/// Also the `--integration` value of `add-queue`/`set-queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum IntegrationMode {
    /// Plain `git merge`; a conflict puts the PRD in review.
    #[default]
    Merge,
    /// `git merge`; a conflict is handed to the job's agent in the integration worktree,
    /// accepted only when no conflict marker is left, the merge commits and the check passes.
    Agent,
}

/// A queue's `config.sandbox`: whether its jobs run confined by the kernel (Landlock), and
/// what they may reach beyond the project, the agent's own state and a scratch directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SandboxSetting {
    /// Confine the jobs.
    pub enabled: bool,
    /// TCP ports a job may connect to besides its model endpoint's (e.g. 22 for git over ssh).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connect_ports: Vec<u16>,
}

impl QueueConfig {
    /// Whether the queue's jobs run confined.
    pub fn sandboxed(&self) -> bool {
        self.sandbox.as_ref().is_some_and(|s| s.enabled)
    }
}

/// A Slurm-backed queue's settings (`config.slurm`, for `launcher: slurm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// `sbatch --partition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `sbatch --account`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `sbatch --qos`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// `sbatch --gres` for each job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    /// More `sbatch` arguments, given before the queue manager's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// How many of the queue's jobs may be in Slurm at once (absent: no limit of ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_slurm: Option<u32>,
    /// Seconds between two looks at the queue's Slurm jobs (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_seconds: Option<u64>,
}

/// How the queue manager starts workers.
///
/// It is also the `--launcher` value of the CLI and the queue manager (clap derives it here, so
/// the command lines need no copy of the enum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// systemd when reachable, else direct.
    #[default]
    Auto,
    /// A transient scope per job.
    Systemd,
    /// Own session and process group.
    Direct,
    /// One Slurm batch job per job (`config.slurm`).
    Slurm,
}

/// Per-job cgroup limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// systemd `MemoryMax=` (bytes, or a string like `4G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<serde_json::Value>,
    /// systemd `CPUQuota=` like `200%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<String>,
    /// systemd `TasksMax=`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_max: Option<u64>,
}

/// Queue state maintained by its manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct QueueRuntime {
    /// PID of the queue manager.
    pub process_id: Option<u32>,
    /// Running jobs.
    pub active_jobs: u32,
    /// Last loop time.
    pub last_update: Option<Timestamp>,
    /// Queued jobs.
    pub queued_jobs: u32,
    /// Host of the queue manager (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Whether starting new jobs is paused (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Why a Slurm queue cannot hand jobs to Slurm now (extension; absent when it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_status: Option<String>,
}
