//! `queue-manager --queue NAME`: the per-queue daemon (PRD §7). Wiring only: arguments,
//! logging, signals, sd_notify.
#![deny(unsafe_code)]

use agentstore::queue::args::{Args, BusArg};
use agentstore::queue::{BusTarget, Manager, ManagerConfig, QueueError, default_worker_path};
use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    agentstore::systemd::init_logging("queue-manager", "info");
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
    let (root, _) = agentstore::store::resolve_root(args.root.as_deref());
    let mut cfg = ManagerConfig::new(root, &args.queue);
    cfg.bus = match args.bus {
        BusArg::System => BusTarget::System,
        BusArg::Session => BusTarget::Session,
        BusArg::None => BusTarget::None,
    };
    cfg.launcher = args.launcher;
    cfg.worker = args.worker.unwrap_or_else(default_worker_path);
    let manager = Manager::start(cfg)
        .await
        .with_context(|| format!("queue {}", args.queue))?;
    agentstore::systemd::notify_ready(&format!(
        "serving queue {} (launcher {})",
        args.queue,
        manager.launcher_name()
    ));
    manager
        .run(async {
            agentstore::systemd::shutdown_signal().await;
        })
        .await?;
    Ok(())
}
