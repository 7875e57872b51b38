//! queue-manager (PRD §7, DESIGN §4–5): one per queue per machine. Starts queued jobs oldest
//! first up to `worker_count`, notices worker exits at once (child wait, pidfd), enforces
//! timeouts, fails jobs whose worker died, re-adopts jobs still running after its own
//! restart, and serves `org.agentstore.Queue1`.
//!
//! It is event-driven: inotify on `queued_jobs/`, worker exits, D-Bus calls and the next
//! timeout wake the loop; a `rest_interval` sweep is the backstop for anything missed
//! (a synced folder, a lost event). `queue.json`'s runtime is written once per loop.
//!
//! The manager is split along its seams: `manager` (config, the `Manager`, start and the
//! run loop), `starting` (starting queued jobs, start back-off), `supervising` (worker
//! exits, settling, timeouts, re-adoption), `poison` (poison markers and their recovery),
//! `requests` (requests: cancel, pause, resume) and `status` (`queue.json`'s runtime,
//! events). A front end (D-Bus: `bus::queue`) sees it only through its [`handle`] and the
//! events it pushes; errors are its own ([`QueueError`]).

mod approval;
pub mod args;
mod error;
pub mod flow;
pub mod handle;
mod handover;
pub mod idle;
pub mod launcher;
mod machines;
mod manager;
pub mod pidwatch;
mod poison;
mod requests;
pub mod scope;
pub mod selection;
pub mod slurm;
mod starting;
mod status;
mod supervising;

pub use error::QueueError;
pub use handle::{QueueEvent, QueueEvents, QueueHandle, QueueRequest, QueueState};
pub use manager::{Manager, ManagerConfig, default_worker_path};

use crate::model::{Job, MAX_TIMEOUT_SECONDS, QueueConfig};
use std::time::Duration;
use tokio::time::Instant;

/// Grace between SIGTERM and SIGKILL when a job is stopped (timeout, cancel).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Error text of a job whose worker died without reporting (PRD §7).
pub const WORKER_DIED: &str = "Worker harness process died";

/// A worker that ended, as its exit watcher reports it: the job, and whether the worker
/// said (by its exit status, [`crate::model::WORKER_EXIT_STORE_FULL`]) that the store was full.
#[derive(Debug)]
pub(crate) struct WorkerExit {
    id: String,
    store_full: bool,
}

impl WorkerExit {
    /// The end of `id`'s worker with exit `code` (`None`: unknown, a re-adopted worker).
    fn of(id: String, code: Option<i32>) -> WorkerExit {
        WorkerExit {
            id,
            store_full: code == Some(i32::from(crate::model::WORKER_EXIT_STORE_FULL)),
        }
    }
}

/// Interrupted attempts at handling one job (a start or a re-adoption during which the queue
/// manager died with no crash recorded: an operator's or a soak's `kill -9`, the OOM killer,
/// a reboot, a crash the panic hook cannot see such as a stack overflow) after which the job
/// is failed instead of being tried again. An external kill is not the job's fault, so the
/// cap is high; a crash the manager records itself (a panic while it handled the job, see
/// `poison.rs`) fails the job at the first restart. Either way one document cannot
/// crash-loop the manager for more than this many restarts.
pub const POISON_ATTEMPTS: u32 = 12;

/// Error text of a job failed by the poison rule ([`POISON_ATTEMPTS`]).
pub fn poison_reason(what: &str, attempts: u32) -> String {
    format!(
        "A previous queue manager stopped while {what} this job, {attempts} attempts in a row (it crashed or was killed each time); the job is failed so that it cannot stop the manager again"
    )
}

/// Error text of a job whose handling crashed the queue manager (its panic recorded).
pub fn crash_reason(what: &str, panic: &str) -> String {
    format!(
        "The queue manager crashed while {what} this job ({panic}); the job is failed so that it cannot stop the manager again"
    )
}

/// `t + secs`, or — where that is past what the clock can represent — the latest of
/// `t + MAX_TIMEOUT_SECONDS` and `t`: never a panic.
fn add_secs(t: Instant, secs: u64) -> Instant {
    t.checked_add(Duration::from_secs(secs))
        .or_else(|| t.checked_add(Duration::from_secs(MAX_TIMEOUT_SECONDS)))
        .unwrap_or(t)
}

/// The timeout of `job` (its own, else the queue's), checked against 1..=[`MAX_TIMEOUT_SECONDS`]
/// whatever schema the store carries.
pub fn job_limit(job: &Job, config: &QueueConfig) -> Result<u64, String> {
    let (limit, field) = match job.config.timeout_seconds {
        Some(t) => (t, "config.timeout_seconds"),
        None => (
            config.max_job_runtime_seconds,
            "the queue's max_job_runtime_seconds",
        ),
    };
    if (1..=MAX_TIMEOUT_SECONDS).contains(&limit) {
        Ok(limit)
    } else {
        Err(format!(
            "Invalid job: {field} is {limit}; it must be between 1 and {MAX_TIMEOUT_SECONDS} seconds (30 days)"
        ))
    }
}

#[derive(Debug, Clone)]
enum EndCause {
    Timeout,
    Cancelled(String),
}

#[derive(Debug)]
struct Running {
    pid: u32,
    unit: Option<String>,
    started_at: Instant,
    limit: u64,
    deadline: Instant,
    end: Option<EndCause>,
    kill_at: Option<Instant>,
}
