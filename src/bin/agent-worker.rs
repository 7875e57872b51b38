//! `agent-worker`: runs one job (PRD §8). Started by queue-manager; wiring only.
#![deny(unsafe_code)]

use agentstore::worker::args::Args;
use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "mcp-approvals")
    {
        // stdout is the MCP channel: nothing else may be written there.
        let a = agentstore::worker::args::McpArgs::parse_from(std::env::args_os().skip(1));
        let stdin = std::io::stdin().lock();
        agentstore::worker::mcp::serve(
            &a.socket,
            std::time::Duration::from_secs(a.deadline),
            stdin,
            std::io::stdout(),
        );
        return ExitCode::SUCCESS;
    }
    agentstore::systemd::init_logging("agent-worker", "info");
    match run() {
        Ok(agentstore::model::JobStatus::Finished) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            tracing::error!("{e:#}");
            if agentstore::worker::is_store_full(&e) {
                ExitCode::from(agentstore::worker::EXIT_STORE_FULL)
            } else {
                ExitCode::from(2)
            }
        }
    }
}

fn run() -> anyhow::Result<agentstore::model::JobStatus> {
    let a = Args::parse();
    if a.relay {
        return agentstore::worker::relay::run(&a.queue, &a.job_id, a.root.as_deref())
            .with_context(|| format!("job {}", a.job_id));
    }
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
