//! `agent-worker`: runs one job (PRD §8). Started by queue-manager; wiring only.
#![deny(unsafe_code)]

use agentstore::worker::args::Args;
use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;

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
    let (root, _) = agentstore::store::resolve_daemon_root(a.root.as_deref());
    let args = agentstore::worker::WorkerArgs {
        root,
        queue: a.queue,
        job_id: a.job_id.clone(),
        run_as: a.run_as,
        gate: a.gate,
    };
    agentstore::worker::run(&args).with_context(|| format!("job {}", a.job_id))
}
