//! `agent-worker`: runs one job (PRD §8). Started by queue-manager; wiring only.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Run one AgentStore job from running_jobs/ and move it to finished_jobs/ or failed_jobs/.
#[derive(Debug, Parser)]
#[command(name = "agent-worker", version)]
struct Args {
    /// Store root.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Queue name.
    #[arg(long)]
    queue: String,
    /// Run the agent as this Unix user (the queue manager passes it when it runs as root).
    #[arg(long, value_name = "USER")]
    run_as: Option<String>,
    /// Wait for `go` on stdin before starting (set by the queue manager).
    #[arg(long)]
    gate: bool,
    /// Job id (file stem in Queues/<queue>/Jobs/running_jobs/).
    job_id: String,
}

fn main() -> ExitCode {
    agentstore::systemd::init_logging("agent-worker", "info");
    match run() {
        Ok(agentstore::model::JobStatus::Finished) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<agentstore::model::JobStatus> {
    let a = Args::parse();
    let (root, _) = agentstore::store::resolve_root(a.root.as_deref());
    let args = agentstore::worker::WorkerArgs {
        root,
        queue: a.queue,
        job_id: a.job_id.clone(),
        run_as: a.run_as,
        gate: a.gate,
    };
    agentstore::worker::run(&args).with_context(|| format!("job {}", a.job_id))
}
