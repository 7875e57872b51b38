//! `queue-manager --queue NAME`: the per-queue daemon (PRD §7). Wiring only: arguments,
//! logging, signals, sd_notify.

use agentstore::bus::BusKind;
use agentstore::model::JobStatus;
use agentstore::model::Launcher;
use agentstore::queue::args::Args;
use agentstore::queue::{BusTarget, Manager, ManagerConfig, default_worker_path};
use anyhow::Context;
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    let idle_exit = match args.idle_exit {
        Some(s) => s,
        None => agentstore::store::Store::open(&root)
            .map(|s| s.config().orchestrator.idle_exit_seconds)
            .unwrap_or(0),
    };
    let mut cfg = ManagerConfig::new(root.clone(), &args.queue);
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
    let queue = args.queue.clone();
    let stop = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = idle(root, queue, Duration::from_secs(idle_exit)) => {
                agentstore::systemd::notify_stopping("idle: nothing queued or running");
            }
        }
    };
    manager.run(stop).await?;
    Ok(())
}

/// Resolves once the queue has had nothing queued and nothing of this host running for
/// `limit` without a break (never for 0). Read from the job folders every second, so it
/// needs nothing from the manager's insides; a job queued after the exit starts the
/// manager again through `queue-manager@.path`, and a restart re-adopts what runs.
async fn idle(root: PathBuf, queue: String, limit: Duration) {
    if limit.is_zero() {
        return std::future::pending().await;
    }
    let host = agentstore::store::hostname();
    let mut idle_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (r, q, h) = (root.clone(), queue.clone(), host.clone());
        let busy = tokio::task::spawn_blocking(move || busy(&r, &q, &h))
            .await
            .unwrap_or(true);
        if busy {
            idle_since = Instant::now();
        } else if idle_since.elapsed() >= limit {
            tracing::info!(queue = %queue, "idle for {} s: exiting", limit.as_secs());
            return;
        }
    }
}

/// True when `queue` has anything in `queued_jobs/`, or a running job of this host (or of
/// no host yet).
/// Anything unreadable counts as busy: never exit on a doubt.
fn busy(root: &Path, queue: &str, host: &str) -> bool {
    let Ok(store) = agentstore::store::Store::open(root) else {
        return true;
    };
    let has_json = |status: JobStatus| -> Result<Vec<PathBuf>, ()> {
        let dir = store.jobs_dir(queue, status);
        let rd = std::fs::read_dir(&dir).map_err(|_| ())?;
        Ok(rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                name.ends_with(".json") && !name.starts_with('.')
            })
            .collect())
    };
    // Any entry at all, not only jobs: `queue-manager@.path` (DirectoryNotEmpty) would start
    // the manager again at once for a stray file, so such a file keeps it up instead.
    let queued_empty = std::fs::read_dir(store.jobs_dir(queue, JobStatus::Queued))
        .is_ok_and(|mut rd| rd.next().is_none());
    if !queued_empty {
        return true;
    }
    let Ok(running) = has_json(JobStatus::Running) else {
        return true;
    };
    running.iter().any(|p| {
        match store.read_doc::<agentstore::model::Job>(agentstore::model::DocKind::Job, p) {
            Ok(job) => job.runtime.host.as_deref().is_none_or(|h| h == host),
            Err(_) => true,
        }
    })
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
