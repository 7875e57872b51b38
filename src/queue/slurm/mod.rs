//! The Slurm launcher (issue 14): one Slurm batch job per job, Slurm doing the scheduling.
//!
//! Submission is gated like a local start, without a Slurm hold: `sbatch` first (the job
//! still in `queued_jobs/`), then the Slurm job id is recorded on the job as it moves into
//! `running_jobs/`. The batch step's first lines wait until the job's file there names its
//! own Slurm job (`$SLURM_JOB_ID`) before `agent-worker` runs ([`batch_script`]), so Slurm
//! schedules the job as soon as it is submitted (a held job waits for the controller's next
//! scheduling cycle after `scontrol release`). A manager killed anywhere in between submits
//! nothing twice: a queued job whose submission may have happened (an interrupted start, an
//! unanswered sbatch) is first looked up by its Slurm job name (`agentstore-<id>`), in one
//! `squeue` for all such jobs of a pass; a batch step whose job is never recorded gives up
//! after [`GATE_SECONDS`] without running the worker.
//!
//! A root (system) manager submits differently ([`relay`], issue 27): `sbatch` runs as the
//! job's own account, held (`--hold`) until the submission is recorded and then released,
//! the batch step (`agent-worker --relay`) never opens the store, and the job's end is read
//! back from its output file in the account's own folder, with the account's rights.
//!
//! Supervision is one `squeue` per pass for all of the queue's Slurm jobs (every
//! `slurm.poll_seconds`; at once after a submission or a cancel, and within a second after a
//! pass that saw a job change state). A job's end is the worker's own when it wrote one; else
//! it is taken from Slurm's state (TIMEOUT, CANCELLED, NODE_FAIL, OUT_OF_MEMORY, …) and, for a
//! worker that died, Slurm's exit record (`scontrol show job`, only for such jobs).

mod asks;
mod relay;
mod settings;
mod state;
mod submit;
mod supervise;
#[cfg(test)]
mod tests;

pub use relay::OUTPUT_DIR_ENV;
pub use settings::*;

use relay::Relay;
pub(super) use state::SlurmState;
use state::{Seen, Tracked};

use super::Manager;
use super::poison::{MarkKind, handling, handling_sync};
use super::{EndCause, WORKER_DIED, add_secs, job_limit};
use crate::model::{Job, JobStatus, SlurmConfig, Timestamp};
use crate::store::{Record, read_limited};
use std::collections::HashSet;
use std::path::Path;
use tokio::time::Instant;

/// The error of a job Slurm ended without the worker writing a result (`end`: why the
/// manager stopped it, if it did; `exit`: Slurm's `ExitCode=` when known).
pub(super) fn end_error(
    job: &SlurmJob,
    limit: u64,
    end: Option<&EndCause>,
    exit: Option<&str>,
) -> String {
    let timeout = || format!("Job timeout after {}s (limit: {limit}s)", job.elapsed);
    match (end, job.state.as_str()) {
        (Some(EndCause::Cancelled(by)), _) => format!("Job cancelled by {by}"),
        (Some(EndCause::Timeout), _) | (None, "TIMEOUT" | "DEADLINE") => timeout(),
        (None, "CANCELLED") => format!(
            "Job cancelled in Slurm (Slurm job {}, outside agentstore)",
            job.id
        ),
        (None, "COMPLETED" | "FAILED") => {
            let exit = exit.map(|e| format!(", exit code {e}")).unwrap_or_default();
            format!(
                "{WORKER_DIED} (Slurm job {} {}{exit}, reason {})",
                job.id, job.state, job.reason
            )
        }
        (None, state) => format!(
            "Slurm ended job {} with {state} (reason: {}); the worker wrote no result",
            job.id, job.reason
        ),
    }
}

/// A queued job ready to be handed to Slurm.
struct Submission {
    /// Whether an earlier submission may exist (looked up by name first).
    unsure: bool,
    id: String,
    path: std::path::PathBuf,
    job: Job,
    args: Vec<String>,
    limit: u64,
    /// Run as its own account (root manager only).
    relay: Option<Relay>,
}
