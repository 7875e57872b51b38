//! The queue manager itself (PRD §7): its configuration, the [`Manager`] with its state, and
//! start-up (runtime reset, bus name, re-adoption) and the event loop that drives the rest.

use super::launcher::JobLauncher;
use super::selection::QueuedIndex;
use super::{Running, add_secs, scope};
use crate::bus::queue::{QueueObject, QueueRequest, QueueState};
use crate::bus::{queue_bus_name, queue_object_path};
use crate::model::{
    DocKind, JobStatus, Launcher, MAX_REST_INTERVAL, Queue, QueueConfig, Timestamp,
};
use crate::store::{Event, Store, StoreError, hostname};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use zbus::object_server::InterfaceRef;

/// Which bus the manager serves `org.agentstore.Queue1` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusTarget {
    /// No D-Bus (a store-only run).
    None,
    /// The system bus.
    System,
    /// The session bus.
    Session,
    /// A bus at this address (tests' private `dbus-daemon`).
    Address(String),
}

/// How to run one queue manager.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Store root.
    pub root: PathBuf,
    /// Queue name.
    pub queue: String,
    /// Bus for `org.agentstore.Queue1`.
    pub bus: BusTarget,
    /// Launcher override (else the queue's `launcher`, else auto).
    pub launcher: Option<Launcher>,
    /// The agent-worker binary.
    pub worker: PathBuf,
    /// Extra environment for workers (the agent sees only its allow-listed part).
    pub worker_env: Vec<(String, String)>,
}

impl ManagerConfig {
    /// Defaults: session bus, launcher from the queue, `agent-worker` next to this program.
    pub fn new(root: impl Into<PathBuf>, queue: &str) -> ManagerConfig {
        ManagerConfig {
            root: root.into(),
            queue: queue.to_string(),
            bus: BusTarget::Session,
            launcher: None,
            worker: default_worker_path(),
            worker_env: Vec::new(),
        }
    }
}

/// `agent-worker` in the folder of the running program, else `agent-worker` on PATH.
pub fn default_worker_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("agent-worker")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("agent-worker"))
}

/// Errors that stop the manager.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Store access failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another manager of this queue owns the bus name.
    #[error("queue manager for {0} is already running (its D-Bus name is taken)")]
    AlreadyRunning(String),
    /// D-Bus failed.
    #[error("D-Bus: {0}")]
    Bus(#[from] zbus::Error),
    /// The launcher cannot be used.
    #[error(transparent)]
    Scope(#[from] scope::ScopeError),
    /// inotify failed.
    #[error("inotify on {path}: {source}")]
    Watch {
        /// Folder.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

enum Wake {
    Shutdown,
    File(Option<String>, bool),
    WatchEnded,
    Exit(String),
    Request(QueueRequest),
    Deadline,
    Sweep,
}

/// A started queue manager: runtime reset, bus name owned, running jobs adopted.
pub struct Manager {
    pub(super) cfg: ManagerConfig,
    pub(super) store: Arc<Store>,
    pub(super) config: QueueConfig,
    pub(super) launcher: JobLauncher,
    pub(super) running: HashMap<String, Running>,
    pub(super) index: QueuedIndex,
    pub(super) queued: u32,
    pub(super) paused: bool,
    pub(super) host: String,
    pub(super) root_mode: bool,
    pub(super) state: Arc<Mutex<QueueState>>,
    pub(super) iface: Option<InterfaceRef<QueueObject>>,
    pub(super) _conn: Option<zbus::Connection>,
    pub(super) exits_tx: mpsc::UnboundedSender<String>,
    pub(super) exits_rx: mpsc::UnboundedReceiver<String>,
    pub(super) requests_rx: mpsc::Receiver<QueueRequest>,
    pub(super) inotify: Option<inotify::Inotify>,
    pub(super) log_file: String,
    /// Jobs whose start failed for a reason outside the job (the store could not be
    /// written): not tried again before the instant, with the attempt count.
    pub(super) backoff: HashMap<String, (Instant, u32)>,
    /// Why the store could not be written when a job's worker died: recorded on the job
    /// instead of "worker died" once the job can be written again.
    pub(super) store_errors: HashMap<String, String>,
    /// JobStateChanged signals of this pass, sent after queue.json and the properties are
    /// updated (so a listener that reacts to one sees consistent state).
    pub(super) pending: Vec<(String, JobStatus, JobStatus)>,
    /// When to look again at queued jobs waiting for dependencies or a retry's back-off.
    pub(super) flow_wake: Option<Instant>,
}

/// Starts a manager and runs it until `shutdown` resolves.
pub async fn run(cfg: ManagerConfig, shutdown: impl Future<Output = ()>) -> Result<(), QueueError> {
    Manager::start(cfg).await?.run(shutdown).await
}

impl Manager {
    /// Opens the store, resets the queue's runtime (PRD §4.5), re-adopts this host's running
    /// jobs, watches `queued_jobs/` and takes the bus name. Returns when the manager is
    /// ready to be [`run`](Manager::run).
    pub async fn start(cfg: ManagerConfig) -> Result<Manager, QueueError> {
        let store = Arc::new(Store::open(&cfg.root)?);
        let queue: Queue = store.queue(&cfg.queue)?;
        for s in JobStatus::ALL {
            let d = store.jobs_dir(&cfg.queue, s);
            crate::store::safe::create_dir_all(&d)
                .map_err(|source| StoreError::Io { path: d, source })?;
        }
        let choice = cfg
            .launcher
            .or(queue.config.launcher)
            .unwrap_or(Launcher::Auto);
        let launcher = JobLauncher::choose(choice).await?;
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        let (requests_tx, requests_rx) = mpsc::channel(32);
        let paused = queue.runtime.paused.unwrap_or(false);
        let state = Arc::new(Mutex::new(QueueState {
            worker_count: queue.config.worker_count,
            paused,
            ..QueueState::default()
        }));
        let mut m = Manager {
            log_file: format!("queue-{}.log", cfg.queue),
            store: store.clone(),
            config: queue.config.clone(),
            launcher,
            running: HashMap::new(),
            index: QueuedIndex::default(),
            queued: 0,
            paused,
            host: hostname(),
            root_mode: nix::unistd::geteuid().is_root(),
            state: state.clone(),
            iface: None,
            _conn: None,
            exits_tx,
            exits_rx,
            requests_rx,
            inotify: None,
            backoff: HashMap::new(),
            store_errors: HashMap::new(),
            pending: Vec::new(),
            flow_wake: None,
            cfg,
        };
        let q = m.cfg.queue.clone();
        if m.cfg.bus != BusTarget::None {
            let builder = match &m.cfg.bus {
                BusTarget::System => zbus::connection::Builder::system(),
                BusTarget::Session => zbus::connection::Builder::session(),
                BusTarget::Address(a) => zbus::connection::Builder::address(a.as_str()),
                BusTarget::None => unreachable_bus(),
            };
            let object = QueueObject::new(state, requests_tx, store.clone());
            let path = queue_object_path(&q);
            let conn = builder
                .serve_at(path.as_str(), object)
                .name(queue_bus_name(&q))
                .replace_existing_names(false)
                .build()
                .await
                .map_err(|e| match e {
                    zbus::Error::NameTaken => QueueError::AlreadyRunning(q.clone()),
                    other => QueueError::Bus(other),
                })?;
            m.iface = Some(
                conn.object_server()
                    .interface::<_, QueueObject>(path.as_str())
                    .await?,
            );
            m._conn = Some(conn);
        }
        // Reset runtime first: whatever the file says is stale (PRD §4.5).
        m.write_runtime(true);
        let queued_dir = m.store.jobs_dir(&q, JobStatus::Queued);
        let inotify = inotify::Inotify::init().map_err(|source| QueueError::Watch {
            path: queued_dir.clone(),
            source,
        })?;
        use inotify::WatchMask as W;
        inotify
            .watches()
            .add(
                &queued_dir,
                W::MOVED_TO | W::CLOSE_WRITE | W::MOVED_FROM | W::DELETE,
            )
            .map_err(|source| QueueError::Watch {
                path: queued_dir.clone(),
                source,
            })?;
        m.inotify = Some(inotify);
        m.recover_poisoned().await;
        let dead = m.adopt_running();
        tracing::info!(queue = %q, launcher = m.launcher.name(), adopted = m.running.len(),
            "queue manager started");
        m.store.record_event(
            &Event::new("queue-manager", "daemon_started")
                .queue(&q)
                .detail(format!("launcher {}", m.launcher.name())),
        );
        m.store.append_daemon_log(
            &m.log_file,
            &format!(
                "queue-manager started (pid {}, launcher {}, {} job(s) re-adopted)",
                std::process::id(),
                m.launcher.name(),
                m.running.len()
            ),
        );
        for id in dead {
            m.settle(&id, None).await;
        }
        // The first pass over queued_jobs/ (which reads each queued job's queue time) runs
        // in `run`, after systemd has been told the manager is ready: readiness never waits
        // on the size of the queue.
        Ok(m)
    }

    /// The launcher in use (`direct` or `systemd`).
    pub fn launcher_name(&self) -> &'static str {
        self.launcher.name()
    }

    /// Runs the loop until `shutdown` resolves. Running jobs are left running: a restarted
    /// manager re-adopts them.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), QueueError> {
        tokio::pin!(shutdown);
        let mut events = match self.inotify.take() {
            Some(i) => Some(
                i.into_event_stream(vec![0u8; 16 * 1024])
                    .map_err(|source| QueueError::Watch {
                        path: self.store.jobs_dir(&self.cfg.queue, JobStatus::Queued),
                        source,
                    })?,
            ),
            None => None,
        };
        let mut sweep = tokio::time::interval(Duration::from_secs(
            self.config.rest_interval.clamp(1, MAX_REST_INTERVAL),
        ));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sweep.tick().await;
        self.step().await;
        loop {
            let next = self.next_deadline();
            let wake = tokio::select! {
                _ = &mut shutdown => Wake::Shutdown,
                ev = async {
                    match events.as_mut() {
                        Some(s) => s.next().await,
                        None => std::future::pending().await,
                    }
                } => match ev {
                    Some(Ok(e)) => Wake::File(
                        e.name.and_then(|n| n.to_str().map(str::to_string)),
                        e.mask.intersects(inotify::EventMask::MOVED_FROM | inotify::EventMask::DELETE),
                    ),
                    Some(Err(e)) => { tracing::warn!("inotify: {e}"); Wake::File(None, false) }
                    None => Wake::WatchEnded,
                },
                Some(id) = self.exits_rx.recv() => Wake::Exit(id),
                Some(req) = self.requests_rx.recv() => Wake::Request(req),
                _ = tokio::time::sleep_until(next) => Wake::Deadline,
                _ = sweep.tick() => Wake::Sweep,
            };
            match wake {
                Wake::Shutdown => break,
                Wake::File(name, gone) => {
                    let Some(name) = name else {
                        // Overflow or error: fall through to a full pass.
                        self.index = QueuedIndex::default();
                        self.step().await;
                        continue;
                    };
                    // Temp files (ours and the orchestrator's) are not jobs yet.
                    if crate::store::is_ignored(&name) {
                        continue;
                    }
                    let id = name.trim_end_matches(".json");
                    self.index.forget(id);
                    // Our own move of a job we just started needs no new pass.
                    if gone && self.running.contains_key(id) {
                        continue;
                    }
                }
                Wake::WatchEnded => {
                    tracing::warn!("inotify stream ended; relying on the rest_interval sweep");
                    events = None;
                }
                Wake::Exit(id) => self.on_exit(&id).await,
                Wake::Request(r) => self.on_request(r).await,
                Wake::Deadline => self.on_deadlines().await,
                Wake::Sweep => self.sweep().await,
            }
            // Batch whatever else is ready before one pass and one queue.json write.
            while let Ok(id) = self.exits_rx.try_recv() {
                self.on_exit(&id).await;
            }
            self.step().await;
        }
        self.stop();
        Ok(())
    }

    pub(super) fn stop(&mut self) {
        let q = &self.cfg.queue;
        tracing::info!(queue = %q, running = self.running.len(), "queue manager stopping");
        crate::systemd::notify_stopping("stopping; running jobs continue");
        self.store.append_daemon_log(
            &self.log_file,
            &format!(
                "queue-manager stopping ({} job(s) left running for the next manager)",
                self.running.len()
            ),
        );
        self.store
            .record_event(&Event::new("queue-manager", "daemon_stopped").queue(q));
        if let Ok(mut doc) = self.store.queue(q) {
            doc.runtime.process_id = None;
            doc.runtime.last_update = Some(Timestamp::now());
            let path = self.store.queue_path(q);
            if let Err(e) = self.store.write_doc(DocKind::Queue, &path, &doc) {
                tracing::warn!(queue = %q, "cannot write queue.json: {e}");
            }
        }
    }

    /// One pass: reload the queue config, start what fits, write the runtime.
    pub(super) async fn step(&mut self) {
        match self.store.queue(&self.cfg.queue) {
            Ok(q) => self.config = q.config,
            Err(e) => {
                tracing::warn!(queue = %self.cfg.queue, "keeping the last good queue.json: {e}")
            }
        }
        self.start_jobs().await;
        let changed = self.write_runtime(false);
        self.flush_signals(changed).await;
    }

    pub(super) fn next_deadline(&self) -> Instant {
        self.running
            .values()
            .map(|r| match (&r.end, r.kill_at) {
                (None, _) => r.deadline,
                (Some(_), Some(k)) => k,
                (Some(_), None) => add_secs(Instant::now(), 3600),
            })
            .chain(self.backoff.values().map(|(at, _)| *at))
            .chain(self.flow_wake)
            .min()
            .unwrap_or_else(|| add_secs(Instant::now(), 86_400))
    }
}

fn unreachable_bus() -> zbus::connection::Builder<'static> {
    // BusTarget::None never reaches the builder; a session builder keeps this total.
    zbus::connection::Builder::session()
}
