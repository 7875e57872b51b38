//! `queue-manager --queue NAME`: the per-queue daemon (PRD §7). Wiring only: arguments,
//! logging, signals, sd_notify.

use agentstore::bus::BusKind;
use agentstore::model::Launcher;
use agentstore::queue::args::Args;
use agentstore::queue::{BusTarget, Manager, ManagerConfig, default_worker_path};
use anyhow::Context;
use clap::Parser;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    agentstore::systemd::init_logging("queue-manager", "info");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let (root, _) = agentstore::store::resolve_daemon_root(args.root.as_deref());
    let mut cfg = ManagerConfig::new(root, &args.queue);
    cfg.bus = match args.bus.for_daemon() {
        Some(BusKind::System) => BusTarget::System,
        Some(BusKind::Session) => BusTarget::Session,
        None => BusTarget::None,
    };
    cfg.launcher = args.launcher.map(Launcher::from);
    cfg.worker = args.worker.unwrap_or_else(default_worker_path);
    let manager = Manager::start(cfg)
        .await
        .with_context(|| format!("queue {}", args.queue))?;
    agentstore::systemd::notify_ready(&format!(
        "serving queue {} (launcher {})",
        args.queue,
        manager.launcher_name()
    ));
    manager.run(shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}
