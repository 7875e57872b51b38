//! `orchestratord`: the orchestrator as a systemd service (DESIGN §5).
//!
//! Start-up takes the D-Bus name (a second instance on this machine fails with "already
//! running"), then the store lock (a second instance on another machine sharing the store
//! fails the same way, unless it is a standby: [`super::standby`]), then tells systemd it is
//! ready. It reacts to inotify events on the
//! inbox and on every queue's `finished_jobs/` within milliseconds, sweeps every
//! `polling_interval_seconds` as a backstop, and exits after `idle_exit_seconds` without
//! work (systemd's path, timer and D-Bus activation start it again on demand).

use super::error::DaemonError;
use super::pass::inbox_pass;
use super::service::{CycleReport, Frontend, Shared};
use super::standby::{Role, Seat};
use super::{DAEMON, LockTiming};
use crate::model::JobStatus;
use crate::store::{Event, Record, Store};
use crate::systemd::{notify_ready, notify_status, notify_stopping};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod lock_keeper;

use lock_keeper::*;

/// The daemon's own log under `logs/`.
const LOG_FILE: &str = "orchestrator.log";

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
    /// Bus to own org.agentstore.Orchestrator1 on: auto (system bus when run as the system
    /// service, else the session bus if there is one, else none), system, session, none
    /// (inbox files only), or a D-Bus address (unix:path=…).
    #[arg(long, value_name = "BUS", default_value_t = crate::systemd::bus_choice::BusChoice::Auto)]
    pub bus: crate::systemd::bus_choice::BusChoice,
    /// Removed (was `--bus none`): recognised only to say so.
    #[arg(long = "no-bus", hide = true)]
    pub removed_no_bus: bool,
    /// Exit after this many idle seconds (0 = never); default from config.yaml.
    #[arg(long, value_name = "SECONDS")]
    pub idle_exit: Option<u64>,
    /// Backstop sweep interval; default polling_interval_seconds from config.yaml.
    #[arg(long, value_name = "SECONDS")]
    pub sweep_interval: Option<u64>,
    /// Don't watch with inotify; only sweep (for network filesystems).
    #[arg(long)]
    pub no_inotify: bool,
    /// Wait as a standby while another machine holds the store lock and take over when it
    /// goes silent (also when this host is listed in config.yaml `orchestrator.standby`).
    #[arg(long)]
    pub standby: bool,
}

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// Store root.
    pub root: PathBuf,
    /// Overrides `idle_exit_seconds` (0 = never exit when idle).
    pub idle_exit: Option<Duration>,
    /// Overrides `polling_interval_seconds`.
    pub sweep_interval: Option<Duration>,
    /// Don't use inotify: only sweep every interval (network filesystems where inotify sees
    /// nothing; also how the PRD's 10 s polling design is benchmarked).
    pub no_inotify: bool,
    /// Wait as a standby while the lock is held elsewhere ([`super::standby`]).
    pub standby: bool,
}

/// The one inotify watcher of the daemon's lifetime: one instance and one thread turn events
/// on the inbox, `Queues/` and every queue's `finished_jobs/` into wake-ups. A name moved into
/// a `finished_jobs/` is handed to the completion state, so a pass looks at that job alone; an
/// overflow asks for a backstop sweep. Queues added or removed later only add or remove a
/// watch on the same instance.
struct Watcher {
    watches: inotify::Watches,
    finished: std::collections::HashMap<String, inotify::WatchDescriptor>,
    /// The same pairs the other way round, for the watcher thread.
    queue_of: Arc<parking_lot::Mutex<std::collections::HashMap<inotify::WatchDescriptor, String>>>,
}

impl Watcher {
    const MASK: inotify::WatchMask =
        inotify::WatchMask::CLOSE_WRITE.union(inotify::WatchMask::MOVED_TO);

    fn start(shared: &Arc<Shared>, tx: tokio::sync::mpsc::Sender<()>) -> std::io::Result<Watcher> {
        use crate::store::safe::watch_dir;
        use inotify::{EventMask, Inotify, WatchMask};
        let store = &shared.store;
        let mut ino = Inotify::init()?;
        // Not CREATE: a file is ready when its writer closes it or renames it into place.
        watch_dir(&mut ino.watches(), &store.inbox(), Self::MASK)?;
        watch_dir(
            &mut ino.watches(),
            &store.queues_dir(),
            WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE,
        )?;
        let queue_of = Arc::new(parking_lot::Mutex::new(std::collections::HashMap::new()));
        let mut w = Watcher {
            watches: ino.watches(),
            finished: Default::default(),
            queue_of: queue_of.clone(),
        };
        w.refresh(store, &store.queue_ids().unwrap_or_default());
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("inotify".into())
            .spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(events) = ino.read_events_blocking(&mut buf) {
                    let mut relevant = false;
                    for e in events {
                        if e.mask.contains(EventMask::Q_OVERFLOW) {
                            request_sweep(&shared);
                            relevant = true;
                            continue;
                        }
                        let name = e.name.map(|n| n.to_string_lossy().into_owned());
                        if name.as_deref().is_some_and(|n| n.starts_with('.')) {
                            continue;
                        }
                        relevant = true;
                        let queue: Option<String> = queue_of.lock().get(&e.wd).cloned();
                        if let (Some(q), Some(n)) = (queue, name.as_deref()) {
                            shared.completions.lock().notify(&q, n);
                        }
                    }
                    if relevant && tx.blocking_send(()).is_err() {
                        break;
                    }
                }
            })?;
        Ok(w)
    }

    /// Watches the `finished_jobs/` of every queue in `queues` and forgets the others.
    fn refresh(&mut self, store: &Store, queues: &[String]) {
        use crate::store::safe::watch_dir;
        let mut queue_of = self.queue_of.lock();
        self.finished.retain(|q, wd| {
            let keep = queues.contains(q);
            if !keep {
                // Gone already when the folder was removed (the kernel drops the watch).
                let _ = self.watches.remove(wd.clone());
                queue_of.remove(wd);
            }
            keep
        });
        for q in queues {
            if self.finished.contains_key(q) {
                continue;
            }
            match watch_dir(
                &mut self.watches,
                &store.jobs_dir(q, JobStatus::Finished),
                Self::MASK,
            ) {
                Ok(wd) => {
                    queue_of.insert(wd.clone(), q.clone());
                    self.finished.insert(q.clone(), wd);
                }
                Err(e) if crate::store::safe::is_refusal(&e) => {
                    tracing::warn!("not watching queue {q}: {e}")
                }
                Err(e) => tracing::debug!("inotify on queue {q}: {e}"),
            }
        }
    }
}

/// Asks the next pass to run the completion backstop sweep.
fn request_sweep(shared: &Shared) {
    shared.completions.lock().request_sweep();
}

/// Records whether the store can be written; logged when it changes.
fn set_read_only(shared: &Shared, why: Option<String>) {
    let mut r = shared.read_only.lock();
    match (&*r, &why) {
        (None, Some(w)) => tracing::warn!(
            "the store cannot be written ({w}); serving D-Bus read-only until it can"
        ),
        (Some(_), None) => tracing::info!("the store can be written again; lock taken"),
        _ => {}
    }
    *r = why;
}

/// Runs the daemon, reachable through `frontend` besides the inbox, until `shutdown`
/// resolves or it has been idle long enough.
pub async fn run(
    opts: DaemonOptions,
    mut frontend: impl Frontend,
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
    frontend.serve(shared.clone()).await?;
    // Singleton 2: the store lock, across machines sharing the folder (a standby waits for
    // it). A store that cannot be written (full disk, read-only mount) does not stop the
    // daemon: it serves D-Bus read-only and takes the lock as soon as it can write.
    let eligible = opts.standby || cfg.is_standby_host(&crate::store::hostname());
    let mut seat = Seat::new(
        shared.store.lock_path(),
        LockTiming::from_config(&cfg),
        cfg.takeover_settle(),
        eligible,
    )
    // Only where standbys are configured may another machine hold the lock after us.
    .with_hold(if eligible || !cfg.standby.is_empty() {
        cfg.takeover_hold()
    } else {
        Duration::ZERO
    });
    let first = shared.run_blocking({
        let s = shared.clone();
        move || {
            let r = seat.poll(&s.store).map(|_| ());
            (seat, r)
        }
    });
    let (returned, started) = first.await.map_err(|e| DaemonError::Other(e.to_string()))?;
    seat = returned;
    started?;
    apply_role(&shared, seat.role());
    shared
        .machines
        .lock()
        .set_role(seat.role().name(), seat.lock_info().map(|l| l.epoch));

    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(64);
    let mut watcher = if opts.no_inotify {
        None
    } else {
        match Watcher::start(&shared, tx.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(
                    "inotify on {} failed ({e}); polling every sweep interval instead",
                    shared.store.inbox().display()
                );
                None
            }
        }
    };

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
    shared.store.record(
        Record::info(
            Event::new(DAEMON, "daemon_started").detail(format!("root {root}")),
            format!(
                "orchestratord {} started pid {}, watching {root}",
                env!("CARGO_PKG_VERSION"),
                std::process::id()
            ),
        )
        .log(LOG_FILE),
    );
    notify_ready(&format!("Watching {root}"));
    let mut watchdog = crate::systemd::Watchdog::from_env();

    let sweep_every = opts
        .sweep_interval
        .unwrap_or(Duration::from_secs(cfg.polling_interval_seconds.max(1)));
    let idle_exit = opts
        .idle_exit
        .unwrap_or(Duration::from_secs(cfg.idle_exit_seconds));
    let heartbeat_every = seat.timing().heartbeat;
    let mut last_work = Instant::now();
    let mut last_activity = shared.activity.load(Ordering::Relaxed);
    let mut known_queues = shared.store.queue_ids().unwrap_or_default();
    tokio::pin!(shutdown);

    // The lock lives on its own thread: a long pass (a backlog after a take-over) never
    // delays its heartbeat past the stale time, and a newer holder is obeyed within moments.
    let keeper = LockKeeper::start(seat, shared.clone(), tx.clone())
        .map_err(|e| DaemonError::Other(format!("cannot start the lock thread: {e}")))?;
    let mut last_role = shared.role.lock().clone();
    // Finished jobs are handled on a thread of their own, a batch at a time; the loop
    // answers the inbox meanwhile and asks the thread for a run after each pass.
    let completer = super::backlog::Worker::start(shared.clone(), tx.clone())
        .map_err(|e| DaemonError::Other(format!("cannot start the completion thread: {e}")))?;
    let mut idled = false;
    let result = loop {
        if let Some(e) = keeper.failed() {
            break Err(e);
        }
        let role = shared.role.lock().clone();
        if role != last_role {
            last_role = role.clone();
            frontend.role_changed().await;
            // Other machines learn the new role now, not after a backlog is answered.
            let (s, held) = (shared.clone(), role.answers());
            if let Ok(changes) = shared
                .run_blocking(move || super::machines::beat(&s.store, &s.machines, held))
                .await
                && !changes.is_empty()
            {
                frontend.machines_changed(&changes).await;
            }
            // A new active orchestrator counts as work: it does not exit idle at once.
            last_work = Instant::now();
        }
        let answers = role.answers();
        let standby = matches!(role, Role::Standby(_) | Role::Settling);
        let s = shared.clone();
        let report = if !answers {
            CycleReport::default()
        } else {
            match shared.run_blocking(move || inbox_pass(&s)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::error!("sweep failed: {e}");
                    CycleReport::default()
                }
                Err(e) => break Err(DaemonError::Other(format!("sweep stopped: {e}"))),
            }
        };
        let (handled, deferred) = (report.handled, report.deferred);
        if answers
            && shared
                .store
                .config()
                .orchestrator
                .enable_job_completion_handler
        {
            completer.want();
        }
        frontend.announce(&report).await;
        let (s, held) = (shared.clone(), answers);
        match shared
            .run_blocking(move || super::machines::beat(&s.store, &s.machines, held))
            .await
        {
            Ok(changes) if !changes.is_empty() => frontend.machines_changed(&changes).await,
            Ok(_) => {}
            Err(e) => break Err(DaemonError::Other(format!("heartbeat stopped: {e}"))),
        }
        let activity = shared.activity.load(Ordering::Relaxed);
        if handled > 0 || activity != last_activity {
            last_work = Instant::now();
            last_activity = activity;
        }
        notify_status(&status_line(&shared, &root));
        // A pass got this far (inbox, finished jobs, heartbeat): alive (systemd's watchdog).
        watchdog.progressed();
        // New or removed queues: their finished_jobs/ watches follow.
        let queues = shared.store.queue_ids().unwrap_or_default();
        if queues != known_queues {
            if let Some(w) = watcher.as_mut() {
                w.refresh(&shared.store, &queues);
                // Jobs that finished before the new watch existed.
                request_sweep(&shared);
            }
            known_queues = queues;
        }
        // A standby never exits idle: it is there to take over.
        let idle_left = if idle_exit.is_zero() || standby {
            Duration::MAX
        } else {
            idle_exit.saturating_sub(last_work.elapsed())
        };
        if idle_left.is_zero() {
            // A process stopped past its idle time (SIGSTOP, a suspended machine) wakes here
            // before its lock thread has looked again: a holder that took over meanwhile
            // makes this a stand-down (exit 2, as the lock thread would say), never an idle
            // exit; a new role (standby) goes on.
            match keeper.poll_now(&shared) {
                Err(e) => break Err(e),
                Ok(true) => continue,
                Ok(false) => {}
            }
            tracing::info!(
                "idle for {} s; exiting (activation starts it again)",
                idle_exit.as_secs()
            );
            idled = true;
            break Ok(());
        }
        let beat_in = shared.machines.lock().due_in();
        let mut wait = sweep_every
            .min(heartbeat_every)
            .min(idle_left)
            .min(beat_in.max(Duration::from_millis(100)))
            .min(watchdog.wake_within());
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
    // The completion task ends after its batch; calls under way finish before the lock is
    // let go; new ones are refused.
    let _ = shared.run_blocking(move || completer.stop()).await;
    shared.drain().await;
    if idled {
        tracing::debug!(
            "idle exit: the calls under way are answered; new ones are refused as Unavailable until the bus name goes"
        );
        #[cfg(debug_assertions)]
        held_after_idle_exit().await;
    }
    let seat = keeper.stop();
    shared.machines.lock().stop(&shared.store);
    shared.store.record(
        Record::info(
            Event::new(DAEMON, "daemon_stopped"),
            format!("orchestratord stopped pid {}", std::process::id()),
        )
        .log(LOG_FILE),
    );
    drop(seat);
    result
}

/// Tests only (debug builds): `AGENTSTORE_TEST_FAULT=hold-idle-exit:<file>` keeps a daemon
/// that is exiting after its idle time in that state (new calls refused, the bus name still
/// its own) while `<file>` exists: it writes its pid there and waits until the test removes
/// it. A later instance (the one activation starts) holds nothing once `<file>.released`
/// exists.
#[cfg(debug_assertions)]
async fn held_after_idle_exit() {
    let Ok(f) = std::env::var("AGENTSTORE_TEST_FAULT") else {
        return;
    };
    let Some(path) = f.strip_prefix("hold-idle-exit:") else {
        return;
    };
    if std::path::Path::new(&format!("{path}.released")).exists() {
        return;
    }
    if std::fs::write(path, std::process::id().to_string()).is_err() {
        return;
    }
    while std::path::Path::new(path).exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The STATUS= line `systemctl status` shows: what this orchestratord is doing now.
fn status_line(shared: &Shared, root: &str) -> String {
    match &*shared.role.lock() {
        Role::Standby(why) => format!("Standby for {root}: {why}; takes over when it goes silent"),
        Role::Settling => format!("Took over the store lock of {root}; settling before answering"),
        Role::ReadOnly(why) => format!("Read-only on {root}: {why}"),
        Role::Active => format!(
            "Watching {root}: {} messages answered, {} jobs created",
            shared.messages_processed.load(Ordering::Relaxed),
            shared.jobs_created.load(Ordering::Relaxed)
        ),
    }
}
