//! `orchestratord`: the orchestrator as a systemd service (DESIGN §5).
//!
//! Start-up takes the D-Bus name (a second instance on this machine fails with "already
//! running"), then the store lock (a second instance on another machine sharing the store
//! fails the same way), then tells systemd it is ready. It reacts to inotify events on the
//! inbox and on every queue's `finished_jobs/` within milliseconds, sweeps every
//! `polling_interval_seconds` as a backstop, and exits after `idle_exit_seconds` without
//! work (systemd's path, timer and D-Bus activation start it again on demand).

use super::{DAEMON, FileOutcome, StoreLock, handle_finished_jobs, process_inbox};
use crate::bus::orchestrator::{OrchestratorObject, Shared};
use crate::bus::{BusKind, ORCHESTRATOR_NAME, ORCHESTRATOR_PATH};
use crate::model::{JobStatus, Timestamp};
use crate::store::{Event, Store, StoreError};
use crate::systemd::{notify_ready, notify_status, notify_stopping};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Route AgentStore inbox messages, create jobs, and handle finished jobs.
///
/// Normally started by systemd (agentstore-orchestrator.service, by its .path and .timer
/// units, or by D-Bus activation); it can also run in the foreground for development.
#[derive(Debug, clap::Parser)]
#[command(name = "orchestratord", version)]
pub struct Args {
    /// Store folder (default: AGENT_STORE_ROOT, config files, ~/Dropbox/AgentStore).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Bus to own org.agentstore.Orchestrator1 on.
    #[arg(long, value_enum, default_value_t = BusKind::System)]
    pub bus: BusKind,
    /// Run without D-Bus (inbox files only).
    #[arg(long)]
    pub no_bus: bool,
    /// Exit after this many idle seconds (0 = never); default from config.yaml.
    #[arg(long, value_name = "SECONDS")]
    pub idle_exit: Option<u64>,
    /// Backstop sweep interval; default polling_interval_seconds from config.yaml.
    #[arg(long, value_name = "SECONDS")]
    pub sweep_interval: Option<u64>,
    /// Don't watch with inotify; only sweep (for network filesystems).
    #[arg(long)]
    pub no_inotify: bool,
}

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// Store root.
    pub root: PathBuf,
    /// Bus to serve on; `None` runs without D-Bus (inbox only).
    pub bus: Option<BusKind>,
    /// Overrides `idle_exit_seconds` (0 = never exit when idle).
    pub idle_exit: Option<Duration>,
    /// Overrides `polling_interval_seconds`.
    pub sweep_interval: Option<Duration>,
    /// Don't use inotify: only sweep every interval (network filesystems where inotify sees
    /// nothing; also how the PRD's 10 s polling design is benchmarked).
    pub no_inotify: bool,
}

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another orchestrator holds the bus name or the store lock.
    #[error("{0}")]
    AlreadyRunning(String),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// D-Bus failed.
    #[error("D-Bus: {0}")]
    Bus(#[from] zbus::Error),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// One pass: the inbox (in batches of `max_messages_per_loop`) and, when enabled, finished
/// jobs. Returns how many items were handled.
pub fn cycle(shared: &Shared) -> Result<usize, StoreError> {
    cycle_report(shared).map(|r| r.handled)
}

/// What a pass did.
#[derive(Debug, Default, Clone)]
pub struct CycleReport {
    /// Messages answered and finished jobs handled.
    pub handled: usize,
    /// Inbox files left for a moment because they may still be being written.
    pub deferred: usize,
    /// Inbox messages answered: (correlation id, command, status, project, created job).
    pub answered: Vec<(String, String, String, String, Option<super::CreatedJob>)>,
}

/// [`cycle`], also counting deferred files.
pub fn cycle_report(shared: &Shared) -> Result<CycleReport, StoreError> {
    let mut deferred = 0;
    let mut answered = Vec::new();
    let store = &shared.store;
    let limit = store.config().orchestrator.max_messages_per_loop.max(1);
    let mut handled = 0;
    loop {
        let _guard = shared.routing.lock().map_err(|_| StoreError::Io {
            path: store.root().to_path_buf(),
            source: std::io::Error::other("routing lock poisoned"),
        })?;
        let outcomes = process_inbox(store, limit)?;
        drop(_guard);
        let n = outcomes.len();
        for o in &outcomes {
            if matches!(o, FileOutcome::Deferred(_)) {
                deferred += 1;
            }
            if let FileOutcome::Answered(o) = o {
                shared.messages_processed.fetch_add(1, Ordering::Relaxed);
                let r = &o.response;
                if o.error.is_some() {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                }
                tracing::info!(
                    correlation_id = %r.correlation_id,
                    "answered {} from inbox: {}",
                    r.command,
                    r.error.as_deref().unwrap_or("done")
                );
                answered.push((
                    r.correlation_id.clone(),
                    r.command.clone(),
                    if o.error.is_some() { "error" } else { "done" }.to_string(),
                    r.project.clone().unwrap_or_default(),
                    o.job.clone().filter(|j| j.new),
                ));
                if let Some(job) = o.job.as_ref().filter(|j| j.new) {
                    shared.jobs_created.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(job_id = %job.id, queue = %job.queue, correlation_id = %r.correlation_id, "job created");
                }
            }
        }
        handled += n - deferred.min(n);
        // PRD §6.1: after each batch of at most max_messages_per_loop, finished jobs; a
        // flood of messages never starves completion handling.
        if store.config().orchestrator.enable_job_completion_handler {
            let mut completions = shared.completions.lock().map_err(|_| StoreError::Io {
                path: store.root().to_path_buf(),
                source: std::io::Error::other("completions lock poisoned"),
            })?;
            handled += handle_finished_jobs(store, &mut completions)?.len();
        }
        if n < limit || deferred > 0 {
            break;
        }
    }
    if let Ok(mut t) = shared.last_loop.lock() {
        *t = Some(Timestamp::now());
    }
    Ok(CycleReport {
        handled,
        deferred,
        answered,
    })
}

/// Starts a thread that turns inotify events on the inbox and the queues' `finished_jobs/`
/// into wake-ups. A name moved into a `finished_jobs/` is handed to the completion state, so
/// a pass looks at that job alone; an overflow asks for a backstop sweep. Folders created
/// later (new queues) are picked up at each re-arm.
fn watch(shared: &Arc<Shared>, tx: tokio::sync::mpsc::Sender<()>) -> std::io::Result<()> {
    use inotify::{EventMask, Inotify, WatchMask};
    let store = &shared.store;
    let mut ino = Inotify::init()?;
    // Not CREATE: a file is ready when its writer closes it or renames it into place.
    let mask = WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO;
    ino.watches().add(store.inbox(), mask)?;
    ino.watches()
        .add(store.queues_dir(), WatchMask::CREATE | WatchMask::MOVED_TO)?;
    let mut finished = std::collections::HashMap::new();
    for q in store.queue_ids().unwrap_or_default() {
        if let Ok(wd) = ino
            .watches()
            .add(store.jobs_dir(&q, JobStatus::Finished), mask)
        {
            finished.insert(wd, q);
        }
    }
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("inotify".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(events) = ino.read_events_blocking(&mut buf) {
                let mut relevant = false;
                for e in events {
                    if e.mask.contains(EventMask::Q_OVERFLOW) {
                        if let Ok(mut c) = shared.completions.lock() {
                            c.request_sweep();
                        }
                        relevant = true;
                        continue;
                    }
                    let name = e.name.map(|n| n.to_string_lossy().into_owned());
                    if name.as_deref().is_some_and(|n| n.starts_with('.')) {
                        continue;
                    }
                    relevant = true;
                    if let (Some(q), Some(n)) = (finished.get(&e.wd), name.as_deref())
                        && let Ok(mut c) = shared.completions.lock()
                    {
                        c.notify(q, n);
                    }
                }
                if relevant && tx.blocking_send(()).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

/// Asks the next pass to run the completion backstop sweep.
fn request_sweep(shared: &Shared) {
    if let Ok(mut c) = shared.completions.lock() {
        c.request_sweep();
    }
}

/// The D-Bus signals for messages answered from the inbox (D-Bus calls emit their own).
async fn emit_signals(conn: &zbus::Connection, report: &CycleReport) {
    use crate::bus::ORCHESTRATOR_INTERFACE as IFACE;
    for (cid, command, status, project, job) in &report.answered {
        let _ = conn
            .emit_signal(
                None::<&str>,
                ORCHESTRATOR_PATH,
                IFACE,
                "MessageProcessed",
                &(cid, command, status),
            )
            .await;
        if let Some(j) = job {
            let _ = conn
                .emit_signal(
                    None::<&str>,
                    ORCHESTRATOR_PATH,
                    IFACE,
                    "JobCreated",
                    &(&j.id, &j.queue, project),
                )
                .await;
        }
    }
}

/// Another holder is "already running" (exit 2, no restart); an unwritable lock is an
/// ordinary failure that systemd may retry.
fn lock_error(e: super::LockError) -> DaemonError {
    match e {
        super::LockError::Held { .. } => DaemonError::AlreadyRunning(e.to_string()),
        super::LockError::Io { .. } => DaemonError::Other(e.to_string()),
    }
}

/// Runs the daemon until `shutdown` resolves or it has been idle long enough.
pub async fn run(
    opts: DaemonOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let store = Store::open(&opts.root)?;
    if !store.inbox().is_dir() {
        return Err(DaemonError::Other(format!(
            "{} is not an AgentStore (no messaging/inbox); create it with `orchestrator init --root {}`",
            opts.root.display(),
            opts.root.display()
        )));
    }
    let cfg = store.config().orchestrator.clone();
    let shared = Shared::new(store);

    // Singleton 1: the bus name on this machine.
    let _conn = match opts.bus {
        None => None,
        Some(kind) => {
            let built = kind
                .builder()
                .serve_at(ORCHESTRATOR_PATH, OrchestratorObject::new(shared.clone()))
                .name(ORCHESTRATOR_NAME)
                .replace_existing_names(false)
                .allow_name_replacements(false)
                .build()
                .await;
            match built {
                Ok(c) => Some(c),
                Err(zbus::Error::NameTaken) => {
                    return Err(DaemonError::AlreadyRunning(format!(
                        "Orchestrator already running: {ORCHESTRATOR_NAME} is owned on the {kind} bus"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    // Singleton 2: the store lock, across machines sharing the folder.
    let mut lock = StoreLock::acquire(&shared.store.lock_path()).map_err(lock_error)?;

    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(64);
    if !opts.no_inotify {
        watch(&shared, tx.clone()).map_err(|e| {
            DaemonError::Other(format!(
                "inotify on {}: {e}",
                shared.store.inbox().display()
            ))
        })?;
    }

    // Temp files of writes a crash interrupted (ours are renamed within moments).
    let mut dirs = vec![
        shared.store.outbox(),
        shared.store.processed_inbox(),
        shared.store.inbox(),
    ];
    for q in shared.store.queue_ids().unwrap_or_default() {
        dirs.push(shared.store.jobs_dir(&q, JobStatus::Queued));
        dirs.push(shared.store.jobs_dir(&q, JobStatus::Finished));
    }
    let stale: usize = dirs
        .iter()
        .map(|d| crate::store::remove_stale_temp_files(d, Duration::from_secs(2)))
        .sum();
    if stale > 0 {
        tracing::info!("removed {stale} temp files left by an interrupted write");
    }
    let root = shared.store.root().display().to_string();
    shared
        .store
        .record_event(&Event::new(DAEMON, "daemon_started").detail(format!("root {root}")));
    shared.store.append_daemon_log(
        "orchestrator.log",
        &format!("started pid {}", std::process::id()),
    );
    tracing::info!(
        "orchestratord {} watching {root}",
        env!("CARGO_PKG_VERSION")
    );
    notify_ready(&format!("Watching {root}"));

    let sweep_every = opts
        .sweep_interval
        .unwrap_or(Duration::from_secs(cfg.polling_interval_seconds.max(1)));
    let idle_exit = opts
        .idle_exit
        .unwrap_or(Duration::from_secs(cfg.idle_exit_seconds));
    let heartbeat_every = Duration::from_secs(super::lock::HEARTBEAT_SECS);
    let mut last_heartbeat = Instant::now();
    let mut last_work = Instant::now();
    let mut last_activity = shared.activity.load(Ordering::Relaxed);
    let mut known_queues = shared.store.queue_ids().unwrap_or_default();
    tokio::pin!(shutdown);

    let result = loop {
        let s = shared.clone();
        let report = match tokio::task::spawn_blocking(move || cycle_report(&s)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::error!("sweep failed: {e}");
                CycleReport::default()
            }
            Err(e) => break Err(DaemonError::Other(format!("sweep panicked: {e}"))),
        };
        let (handled, deferred) = (report.handled, report.deferred);
        if let Some(conn) = &_conn {
            emit_signals(conn, &report).await;
        }
        let activity = shared.activity.load(Ordering::Relaxed);
        if handled > 0 || activity != last_activity {
            last_work = Instant::now();
            last_activity = activity;
        }
        notify_status(&format!(
            "Watching {root}: {} messages answered, {} jobs created",
            shared.messages_processed.load(Ordering::Relaxed),
            shared.jobs_created.load(Ordering::Relaxed)
        ));
        if last_heartbeat.elapsed() >= heartbeat_every {
            if let Err(e) = lock.heartbeat() {
                break Err(DaemonError::AlreadyRunning(format!(
                    "lost the store lock: {e}"
                )));
            }
            last_heartbeat = Instant::now();
        }
        // New queues: restart the watcher so their finished_jobs/ are watched too.
        let queues = shared.store.queue_ids().unwrap_or_default();
        if queues != known_queues {
            known_queues = queues;
            if !opts.no_inotify {
                let _ = watch(&shared, tx.clone());
                // Jobs that finished before the new watch existed.
                request_sweep(&shared);
            }
        }
        let idle_left = if idle_exit.is_zero() {
            Duration::MAX
        } else {
            idle_exit.saturating_sub(last_work.elapsed())
        };
        if idle_left.is_zero() {
            tracing::info!(
                "idle for {} s; exiting (activation starts it again)",
                idle_exit.as_secs()
            );
            break Ok(());
        }
        let mut wait = sweep_every.min(heartbeat_every).min(idle_left);
        if deferred > 0 {
            wait = wait.min(super::SETTLE);
        }
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            got = rx.recv() => {
                if got.is_none() { break Err(DaemonError::Other("inotify watcher stopped".into())); }
                // Coalesce a burst of events into one pass.
                while rx.try_recv().is_ok() {}
            }
            _ = tokio::time::sleep(wait) => request_sweep(&shared),
        }
        if opts.no_inotify {
            request_sweep(&shared);
        }
    };
    notify_stopping("Stopping");
    shared
        .store
        .record_event(&Event::new(DAEMON, "daemon_stopped"));
    shared.store.append_daemon_log(
        "orchestrator.log",
        &format!("stopped pid {}", std::process::id()),
    );
    drop(lock);
    result
}
