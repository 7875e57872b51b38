//! `queue-manager --queue NAME`: the per-queue daemon (PRD §7). Wiring only: arguments,
//! logging, signals (readiness is told by the manager's own loop).
#![deny(unsafe_code)]

use agentstore::queue::args::Args;
use agentstore::queue::{ManagerConfig, QueueError, default_worker_path};
use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args = Args::parse();
    agentstore::systemd::init_logging("queue-manager", "info");
    // Least privilege (issue 9): as root, the store is read and written with its owner's
    // rights. Before the runtime: the filesystem ids are per thread and inherited.
    let (root, _) = agentstore::store::resolve_daemon_root(args.root.as_deref());
    match agentstore::store::owner::act_as_store_owner(&root) {
        Ok(Some(o)) => tracing::info!(
            "store I/O with the store owner's rights (uid {}, gid {})",
            o.uid,
            o.gid
        ),
        Ok(None) => {}
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("queue-manager: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")
        .and_then(|rt| rt.block_on(serve(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("queue-manager: {e:#}");
            // Another manager serves this queue: exit 2, which the unit's
            // RestartPreventExitStatus= keeps systemd from restarting against it.
            if matches!(e.downcast_ref(), Some(QueueError::AlreadyRunning(_))) {
                ExitCode::from(agentstore::systemd::EXIT_ALREADY_RUNNING)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let (root, _) = agentstore::store::resolve_daemon_root(args.root.as_deref());
    let idle_exit = match args.idle_exit {
        Some(s) => s,
        None => agentstore::store::Store::open(&root)
            .map(|s| s.config().orchestrator.idle_exit_seconds)
            .unwrap_or(0),
    };
    let mut cfg = ManagerConfig::new(root.clone(), &args.queue);
    cfg.bus = args.bus.for_daemon();
    cfg.launcher = args.launcher;
    cfg.worker = args.worker.unwrap_or_else(default_worker_path);
    let manager = agentstore::bus::queue::start_manager(cfg)
        .await
        .with_context(|| format!("queue {}", args.queue))?;
    let queue = args.queue.clone();
    let stop = async move {
        tokio::select! {
            _ = agentstore::systemd::shutdown_signal() => {}
            () = agentstore::queue::idle::idle_exit(root, queue, Duration::from_secs(idle_exit)) => {}
        }
    };
    manager.run(stop).await?;
    Ok(())
}
