//! `agentstore-notify`: the notifier process. It takes the store's notifier lock
//! (`<root>/.notify.lock`; one machine sends, the others stand by until its heartbeat goes
//! stale), then delivers pending notices pass after pass: at once when a notice appears
//! (inotify on `notifications/pending/`), when a paused sink's backoff ends, and every
//! `notify.poll_interval_ms` as a backstop (a synced folder's changes may come in without an
//! event).

use super::dispatch::{Dispatcher, PassReport};
use crate::model::system_mode;
use crate::orchestrator::{LockError, LockTiming, StoreLock};
use crate::store::notify_config::NotifyConfig;
use crate::store::{Config, Store, StoreError};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The notifier's lock file, under the store root.
pub const LOCK_FILE: &str = ".notify.lock";

/// Why the notifier stopped.
#[derive(Debug, thiserror::Error)]
pub enum NotifyDaemonError {
    /// The store cannot be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The machine's configuration cannot be read.
    #[error("{0}")]
    Config(String),
}

/// The machine's `notify:` section: from `/etc/agentstore/config.yaml` for the system
/// services, else the user's own `~/.config/agentstore/config.yaml`; never the store's. A
/// root process uses only a file root owns that nobody else can change. No file: the
/// defaults (the desktop only).
pub fn machine_config() -> Result<(NotifyConfig, String), String> {
    let system = system_mode();
    let Some(path) = crate::trust::policy::config_path(system) else {
        return Ok((NotifyConfig::default(), "built-in defaults".into()));
    };
    machine_config_from(&path)
}

/// [`machine_config`] from `path`.
pub fn machine_config_from(path: &Path) -> Result<(NotifyConfig, String), String> {
    if !path.exists() {
        return Ok((
            NotifyConfig::default(),
            format!("built-in defaults ({} does not exist)", path.display()),
        ));
    }
    if nix::unistd::geteuid().is_root() {
        crate::trust::secure::check(path, &[0])
            .map_err(|e| format!("{} is not trusted: {e}", path.display()))?;
    }
    let cfg = Config::load(path).map_err(|e| e.to_string())?;
    Ok((cfg.notify, path.display().to_string()))
}

/// How the notifier runs.
#[derive(Debug, Clone)]
pub struct NotifyOptions {
    /// The store.
    pub root: PathBuf,
    /// Backstop interval (default: `notify.poll_interval_ms`, else 2 s).
    pub poll_interval: Option<Duration>,
    /// One pass, then exit (no lock wait: fails if another notifier holds it).
    pub once: bool,
    /// The settings to use instead of the machine's (tests, `orchestrator notify test`).
    pub config: Option<NotifyConfig>,
}

/// What runs beside the deliveries while this notifier holds the lock (the Slack app's
/// Socket Mode connection: one machine holds it), given the store and the settings; dropped
/// (aborted) when the notifier stops or loses the lock.
pub type LeadTask = Box<
    dyn FnOnce(&Store, &NotifyConfig) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>
        + Send,
>;

/// Runs the notifier until `shutdown` resolves.
pub async fn run(
    opts: NotifyOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NotifyDaemonError> {
    run_leading(opts, shutdown, None).await
}

/// [`run`], with `lead` started once the lock is held.
pub async fn run_leading(
    opts: NotifyOptions,
    shutdown: impl Future<Output = ()>,
    lead: Option<LeadTask>,
) -> Result<(), NotifyDaemonError> {
    let store = Store::open(&opts.root)?;
    let (cfg, source) = match opts.config.clone() {
        Some(c) => (c, "the caller".to_string()),
        None => machine_config().map_err(NotifyDaemonError::Config)?,
    };
    tracing::info!("notifier: settings from {source}");
    let poll = opts.poll_interval.unwrap_or(Duration::from_millis(
        cfg.poll_interval_ms.unwrap_or(2000).clamp(10, 3_600_000),
    ));
    tokio::pin!(shutdown);
    let lock_path = opts.root.join(LOCK_FILE);
    let timing = LockTiming::from_config(&store.config().orchestrator);
    // One machine sends: wait as a stand-by while another holds the lock.
    let mut lock = loop {
        match StoreLock::acquire_with(&lock_path, timing) {
            Ok(l) => break l,
            Err(e @ (LockError::Held { .. } | LockError::Unknown { .. })) if !opts.once => {
                tracing::info!("notifier standing by: {e}");
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    _ = tokio::time::sleep(timing.heartbeat) => {}
                }
            }
            Err(e) => return Err(NotifyDaemonError::Config(e.to_string())),
        }
    };
    let _lead = lead
        .and_then(|f| f(&store, &cfg))
        .map(|task| AbortOnDrop(tokio::spawn(task)));
    crate::systemd::notify_ready("delivering notices");
    let mut dispatcher = Dispatcher::new(store, cfg);
    let (wake_tx, mut wake_rx) = tokio::sync::mpsc::channel::<()>(1);
    let _watch = watch_pending(&dispatcher.store().notices_pending_dir(), wake_tx);
    let mut last_beat = tokio::time::Instant::now();
    loop {
        let report: PassReport = dispatcher.pass().await;
        if report.sent + report.dead + report.failed > 0 {
            tracing::debug!(?report, "notify pass");
        }
        if last_beat.elapsed() >= timing.heartbeat {
            if let Err(e) = lock.heartbeat() {
                tracing::warn!("notifier lock lost: {e}; stopping");
                return Ok(());
            }
            last_beat = tokio::time::Instant::now();
        }
        if opts.once {
            return Ok(());
        }
        let wait = report.next_try.map_or(poll, |n| n.min(poll));
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = wake_rx.recv() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches `dir` (created if missing) with inotify on a thread; each event wakes the loop.
fn watch_pending(dir: &Path, wake: tokio::sync::mpsc::Sender<()>) -> Option<()> {
    use inotify::{Inotify, WatchMask};
    if let Err(e) = crate::store::safe::create_dir_all(dir) {
        tracing::warn!("cannot create {}: {e}", dir.display());
        return None;
    }
    let mut ino = Inotify::init().ok()?;
    ino.watches()
        .add(
            dir,
            WatchMask::MOVED_TO | WatchMask::CREATE | WatchMask::CLOSE_WRITE,
        )
        .ok()?;
    std::thread::Builder::new()
        .name("notify-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while ino.read_events_blocking(&mut buf).is_ok() {
                // A full channel already holds a wake-up: nothing is lost.
                if wake.try_send(()).is_err() && wake.is_closed() {
                    return;
                }
            }
        })
        .ok()?;
    Some(())
}
