//! queue-manager (PRD §7, DESIGN §4–5): one per queue per machine. Starts queued jobs oldest
//! first up to `worker_count`, notices worker exits at once (child wait, pidfd), enforces
//! timeouts, fails jobs whose worker died, re-adopts jobs still running after its own
//! restart, and serves `org.agentstore.Queue1`.
//!
//! It is event-driven: inotify on `queued_jobs/`, worker exits, D-Bus calls and the next
//! timeout wake the loop; a `rest_interval` sweep is the backstop for anything missed
//! (a synced folder, a lost event). `queue.json`'s runtime is written once per loop.

pub mod args;
pub mod idle;
pub mod launcher;
pub mod pidwatch;
pub mod scope;
pub mod selection;

use crate::bus::queue::{QueueObject, QueueRequest, QueueState};
use crate::bus::{BusError, queue_bus_name, queue_object_path};
use crate::model::{
    DocKind, Job, JobStatus, Launcher, MAX_REST_INTERVAL, MAX_TIMEOUT_SECONDS, MAX_WORKER_COUNT,
    Queue, QueueConfig, Timestamp,
};
use crate::permissions::project_owner_login;
use crate::store::jobfile::{fail_raw, set_failed, write_and_move};
use crate::store::{Event, Store, StoreError, hostname, move_no_replace, read_limited};
use futures_util::StreamExt;
use launcher::{JobLauncher, LaunchSpec, release};
use nix::sys::signal::Signal;
use selection::QueuedIndex;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use zbus::object_server::InterfaceRef;

/// Grace between SIGTERM and SIGKILL when a job is stopped (timeout, cancel).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Error text of a job whose worker died without reporting (PRD §7).
pub const WORKER_DIED: &str = "Worker harness process died";

/// Error text of a job whose handling crashed an earlier queue manager (a poison document):
/// it is failed instead of being tried again, so one document cannot crash-loop the manager.
pub const POISON: &str = "A previous queue manager stopped while handling this job (it crashed or was killed); the job is failed so that it cannot stop the manager again";

/// `t + secs`, or — where that is past what the clock can represent — the latest of
/// `t + MAX_TIMEOUT_SECONDS` and `t`: never a panic.
fn add_secs(t: Instant, secs: u64) -> Instant {
    t.checked_add(Duration::from_secs(secs))
        .or_else(|| t.checked_add(Duration::from_secs(MAX_TIMEOUT_SECONDS)))
        .unwrap_or(t)
}

/// The timeout of `job` (its own, else the queue's), checked against 1..=[`MAX_TIMEOUT_SECONDS`]
/// whatever schema the store carries.
pub fn job_limit(job: &Job, config: &QueueConfig) -> Result<u64, String> {
    let (limit, field) = match job.config.timeout_seconds {
        Some(t) => (t, "config.timeout_seconds"),
        None => (
            config.max_job_runtime_seconds,
            "the queue's max_job_runtime_seconds",
        ),
    };
    if (1..=MAX_TIMEOUT_SECONDS).contains(&limit) {
        Ok(limit)
    } else {
        Err(format!(
            "Invalid job: {field} is {limit}; it must be between 1 and {MAX_TIMEOUT_SECONDS} seconds (30 days)"
        ))
    }
}

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

/// Folder of the poison markers, `Queues/<q>/.handling/`.
const MARKER_DIR: &str = ".handling";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkKind {
    Start,
    Adopt,
}

impl MarkKind {
    fn prefix(self) -> &'static str {
        match self {
            MarkKind::Start => "start",
            MarkKind::Adopt => "adopt",
        }
    }

    fn parse(name: &str) -> Option<(MarkKind, &str)> {
        [MarkKind::Start, MarkKind::Adopt]
            .into_iter()
            .find_map(|k| {
                name.strip_prefix(k.prefix())
                    .and_then(|r| r.strip_prefix('-'))
                    .filter(|id| crate::model::is_safe_id(id))
                    .map(|id| (k, id))
            })
    }
}

#[derive(Debug, Clone)]
enum EndCause {
    Timeout,
    Cancelled(String),
}

#[derive(Debug)]
struct Running {
    pid: u32,
    unit: Option<String>,
    started_at: Instant,
    limit: u64,
    deadline: Instant,
    end: Option<EndCause>,
    kill_at: Option<Instant>,
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
    cfg: ManagerConfig,
    store: Arc<Store>,
    config: QueueConfig,
    launcher: JobLauncher,
    running: HashMap<String, Running>,
    index: QueuedIndex,
    queued: u32,
    paused: bool,
    host: String,
    root_mode: bool,
    state: Arc<Mutex<QueueState>>,
    iface: Option<InterfaceRef<QueueObject>>,
    _conn: Option<zbus::Connection>,
    exits_tx: mpsc::UnboundedSender<String>,
    exits_rx: mpsc::UnboundedReceiver<String>,
    requests_rx: mpsc::Receiver<QueueRequest>,
    inotify: Option<inotify::Inotify>,
    log_file: String,
    /// Jobs whose start failed for a reason outside the job (the store could not be
    /// written): not tried again before the instant, with the attempt count.
    backoff: HashMap<String, (Instant, u32)>,
    /// Why the store could not be written when a job's worker died: recorded on the job
    /// instead of "worker died" once the job can be written again.
    store_errors: HashMap<String, String>,
    /// JobStateChanged signals of this pass, sent after queue.json and the properties are
    /// updated (so a listener that reacts to one sees consistent state).
    pending: Vec<(String, JobStatus, JobStatus)>,
}

/// Starts a manager and runs it until `shutdown` resolves.
pub async fn run(cfg: ManagerConfig, shutdown: impl Future<Output = ()>) -> Result<(), QueueError> {
    Manager::start(cfg).await?.run(shutdown).await
}

/// A queued job read and ready to launch.
struct PreparedStart {
    id: String,
    path: PathBuf,
    job: Job,
    args: Vec<String>,
    limit: u64,
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

    fn stop(&mut self) {
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
    async fn step(&mut self) {
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

    fn next_deadline(&self) -> Instant {
        self.running
            .values()
            .map(|r| match (&r.end, r.kill_at) {
                (None, _) => r.deadline,
                (Some(_), Some(k)) => k,
                (Some(_), None) => add_secs(Instant::now(), 3600),
            })
            .chain(self.backoff.values().map(|(at, _)| *at))
            .min()
            .unwrap_or_else(|| add_secs(Instant::now(), 86_400))
    }

    // ---- starting ----------------------------------------------------------------------

    async fn start_jobs(&mut self) {
        let q = self.cfg.queue.clone();
        let dir = self.store.jobs_dir(&q, JobStatus::Queued);
        let scan = match self.index.scan(&dir, self.store.validator()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(queue = %q, "cannot scan {}: {e}", dir.display());
                return;
            }
        };
        for c in &scan.conflicts {
            self.set_aside(c, "Dropbox conflict copy");
        }
        for r in &scan.refused {
            self.set_aside(
                r,
                "not a regular file (a symbolic link, FIFO or device; never followed or read):",
            );
        }
        for id in &scan.invalid {
            self.fail_invalid(id, JobStatus::Queued).await;
        }
        let mut waiting = scan.ordered.len() + scan.pending;
        if !self.paused {
            let workers = self.config.worker_count.min(MAX_WORKER_COUNT);
            let free = usize::try_from(workers)
                .unwrap_or(1)
                .saturating_sub(self.running.len());
            let now = Instant::now();
            self.backoff
                .retain(|id, _| scan.ordered.iter().any(|o| o == id));
            let startable: Vec<String> = scan
                .ordered
                .iter()
                .filter(|id| self.backoff.get(*id).is_none_or(|(at, _)| *at <= now))
                .take(free)
                .cloned()
                .collect();
            // A marker naming each job is on disk for the whole attempt: if the manager dies
            // meanwhile, its successor fails the job instead of trying it again.
            let mut marked = Vec::new();
            let mut ready = Vec::new();
            for id in &startable {
                if self.mark(MarkKind::Start, id) {
                    marked.push(id.clone());
                }
                if let Some(p) = self.prepare_start(id).await {
                    ready.push(p);
                }
            }
            // Scope placements overlap: every StartTransientUnit and its JobRemoved are in
            // flight together (never more than the free slots), and each worker is still
            // released only after its own scope exists and its file is in running_jobs/.
            let launcher = &self.launcher;
            let (worker, env, limits) = (
                &self.cfg.worker,
                &self.cfg.worker_env,
                self.config.resource_limits.as_ref(),
            );
            let launches = futures_util::future::join_all(ready.iter().map(|p| {
                let spec = LaunchSpec {
                    worker,
                    args: p.args.clone(),
                    env,
                    job_id: &p.id,
                    runtime_max_secs: p.limit,
                    limits,
                };
                // Measured from before the launch: systemd's RuntimeMaxSec clock starts with
                // the scope, so a job it kills at the limit has run at least `limit` by this
                // clock.
                let started_at = Instant::now();
                async move { (started_at, launcher.launch(spec).await) }
            }))
            .await;
            for (p, (started_at, launched)) in ready.into_iter().zip(launches) {
                self.finish_start(p, started_at, launched).await;
            }
            for id in &marked {
                self.unmark(MarkKind::Start, id);
            }
            for id in &startable {
                if !self.backoff.contains_key(id.as_str()) {
                    waiting = waiting.saturating_sub(1);
                }
            }
        }
        self.queued = u32::try_from(waiting).unwrap_or(u32::MAX);
    }

    fn set_aside(&self, path: &std::path::Path, what: &str) {
        let dir = self.store.conflicts_dir();
        let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
        let to = dir.join(name);
        let res = crate::store::safe::create_dir_all(&dir).and_then(|_| move_no_replace(path, &to));
        let text = match res {
            Ok(()) => format!("{what} {} set aside in {}", path.display(), to.display()),
            Err(e) => format!("cannot set aside {what} {}: {e}", path.display()),
        };
        tracing::warn!(queue = %self.cfg.queue, "{text}");
        self.store.append_daemon_log(&self.log_file, &text);
        self.store.record_event(
            &Event::new("queue-manager", "conflict_set_aside")
                .queue(&self.cfg.queue)
                .detail(text),
        );
    }

    async fn fail_invalid(&mut self, id: &str, from: JobStatus) {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, from, id);
        let Ok(bytes) = read_limited(&path) else {
            return;
        };
        let error = match self.store.parse_doc::<Job>(DocKind::Job, &path, &bytes) {
            Err(StoreError::Invalid { rejection, .. }) => format!("Invalid job file: {rejection}"),
            Err(e) => format!("Invalid job file: {e}"),
            Ok(_) => return,
        };
        self.index.forget(id);
        match fail_raw(&self.store, &q, id, from, &bytes, &error) {
            Ok(_) => self.ended(id, from, JobStatus::Failed, &error).await,
            Err(e) => tracing::error!(job_id = %id, queue = %q, "cannot fail invalid job: {e}"),
        }
    }

    /// Fails a job the manager owns (queued, or running with its worker dead).
    async fn fail_owned(&mut self, id: &str, from: JobStatus, mut job: Job, error: String) {
        let q = self.cfg.queue.clone();
        set_failed(&mut job, error.clone());
        match write_and_move(&self.store, &q, id, from, &job) {
            Ok(_) => self.ended(id, from, JobStatus::Failed, &error).await,
            Err(e) => tracing::error!(job_id = %id, queue = %q, "cannot fail job: {e}"),
        }
    }

    async fn ended(&mut self, id: &str, from: JobStatus, to: JobStatus, error: &str) {
        self.store_errors.remove(id);
        self.backoff.remove(id);
        let q = &self.cfg.queue;
        let event = if to == JobStatus::Failed {
            "job_failed"
        } else {
            "job_finished"
        };
        tracing::warn!(job_id = %id, queue = %q, "job {}: {error}", to.name());
        self.store.record_event(
            &Event::new("queue-manager", event)
                .job(id)
                .queue(q)
                .detail(error),
        );
        self.store
            .append_daemon_log(&self.log_file, &format!("job {id} {}: {error}", to.name()));
        self.signal(id, from, to).await;
    }

    async fn signal(&mut self, id: &str, old: JobStatus, new: JobStatus) {
        self.pending.push((id.to_string(), old, new));
    }

    /// Emits, in this order, the property changes of the step (`changed`: the state before
    /// and after), then the job moves it made: a client (or a proxy's property cache) sees
    /// the new counts before the moves they count. Awaited here, never from a spawned task,
    /// so the order on the bus is the order of the calls.
    async fn flush_signals(&mut self, changed: Option<(QueueState, QueueState)>) {
        let pending = std::mem::take(&mut self.pending);
        let Some(iface) = &self.iface else { return };
        if let Some((old, new)) = changed {
            let obj = iface.get().await;
            let e = iface.signal_emitter();
            if old.worker_count != new.worker_count {
                let _ = obj.worker_count_changed(e).await;
            }
            if old.active_jobs != new.active_jobs {
                let _ = obj.active_jobs_changed(e).await;
            }
            if old.queued_jobs != new.queued_jobs {
                let _ = obj.queued_jobs_changed(e).await;
            }
            if old.paused != new.paused {
                let _ = obj.paused_changed(e).await;
            }
        }
        for (id, old, new) in pending {
            if let Err(e) =
                QueueObject::job_state_changed(iface.signal_emitter(), &id, old.name(), new.name())
                    .await
            {
                tracing::debug!("JobStateChanged: {e}");
            }
        }
    }

    /// Reads a queued job and works out how to launch it; `None` when it was taken away,
    /// has been failed (invalid, no account to run as) or is put off (the store cannot be
    /// written).
    async fn prepare_start(&mut self, id: &str) -> Option<PreparedStart> {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, JobStatus::Queued, id);
        let bytes = match read_limited(&path) {
            Ok(b) => b,
            Err(_) => return None, // taken away meanwhile
        };
        let job: Job = match self.store.parse_doc(DocKind::Job, &path, &bytes) {
            Ok(j) => j,
            Err(_) => {
                self.fail_invalid(id, JobStatus::Queued).await;
                return None;
            }
        };
        self.index.forget(id);
        if let Err(e) = self.may_run(&job) {
            self.fail_owned(id, JobStatus::Queued, job, e).await;
            return None;
        }
        let run_as = if self.root_mode {
            match project_owner_login(&self.store, &job) {
                Ok(n) => Some(n),
                Err(e) => {
                    self.fail_owned(id, JobStatus::Queued, job, e.to_string())
                        .await;
                    return None;
                }
            }
        } else {
            None
        };
        let limit = match job_limit(&job, &self.config) {
            Ok(l) => l,
            Err(e) => {
                self.fail_owned(id, JobStatus::Queued, job, e).await;
                return None;
            }
        };
        // The store must take the job's next write before a worker is started for it: on a
        // full disk the start is put off (with a growing pause), not tried again at once.
        if let Err(e) = self.store.write_doc(DocKind::Job, &path, &job) {
            self.back_off(id, &e.to_string());
            return None;
        }
        // Values glued to their options and `--` before the job id: a job file named
        // `--help.json` or `-V.json` is a job like any other, never an option.
        let mut args = vec![
            format!("--root={}", self.cfg.root.display()),
            format!("--queue={q}"),
            "--gate".to_string(),
        ];
        if let Some(u) = &run_as {
            args.push(format!("--run-as={u}"));
        }
        args.push("--".to_string());
        args.push(id.to_string());
        Some(PreparedStart {
            id: id.to_string(),
            path,
            job,
            args,
            limit,
        })
    }

    /// Records a launched worker: the job file into running_jobs/, then the worker released.
    async fn finish_start(
        &mut self,
        p: PreparedStart,
        started_at: Instant,
        launched: Result<launcher::Launched, launcher::LaunchError>,
    ) {
        let q = self.cfg.queue.clone();
        let PreparedStart {
            id,
            path,
            mut job,
            limit,
            ..
        } = p;
        let id = id.as_str();
        let mut launched = match launched {
            Ok(l) => l,
            Err(e) => {
                return self
                    .fail_owned(id, JobStatus::Queued, job, format!("Cannot start job: {e}"))
                    .await;
            }
        };
        let now = Timestamp::now();
        let r = &mut job.runtime;
        r.status = JobStatus::Running;
        r.start_time = Some(now);
        r.finish_time = None;
        r.process_id = Some(launched.pid);
        r.llm_process_id = None;
        r.error = None;
        r.output = None;
        r.host = Some(self.host.clone());
        r.unit = launched.unit.clone();
        let running_path = self.store.job_path(&q, JobStatus::Running, id);
        let placed = self
            .store
            .write_doc(DocKind::Job, &path, &job)
            .and_then(|_| {
                move_no_replace(&path, &running_path).map_err(|source| StoreError::Io {
                    path: running_path.clone(),
                    source,
                })
            });
        if let Err(e) = placed {
            tracing::error!(job_id = %id, queue = %q, "cannot move job to running_jobs: {e}");
            drop(launched.gate);
            let _ = launched.child.wait().await;
            self.launcher
                .clean_up(launched.pid, launched.unit.as_deref())
                .await;
            return self.back_off(id, &e.to_string());
        }
        self.backoff.remove(id);
        if let Err(e) = release(launched.gate).await {
            // It died before it could start; the exit watcher reports it as dead.
            tracing::warn!(job_id = %id, queue = %q, "worker gone before start: {e}");
        }
        let tx = self.exits_tx.clone();
        let job_id = id.to_string();
        let mut child = launched.child;
        tokio::spawn(async move {
            let _ = child.wait().await;
            let _ = tx.send(job_id);
        });
        self.running.insert(
            id.to_string(),
            Running {
                pid: launched.pid,
                unit: launched.unit.clone(),
                started_at,
                limit,
                deadline: add_secs(started_at, limit),
                end: None,
                kill_at: None,
            },
        );
        tracing::info!(job_id = %id, queue = %q, pid = launched.pid,
            unit = launched.unit.as_deref().unwrap_or("-"), "job started");
        self.store.record_event(
            &Event::new("queue-manager", "job_started")
                .job(id)
                .queue(&q)
                .project(&job.config.project)
                .detail(format!("pid {}", launched.pid)),
        );
        self.store.append_daemon_log(
            &self.log_file,
            &format!("job {id} started (worker pid {})", launched.pid),
        );
        self.signal(id, JobStatus::Queued, JobStatus::Running).await;
    }

    /// Puts off starting `id` after a failure that is not the job's fault (the store cannot be
    /// written): 2 s, doubling up to 5 minutes.
    fn back_off(&mut self, id: &str, error: &str) {
        let n = self
            .backoff
            .get(id)
            .map_or(0, |(_, n)| *n)
            .saturating_add(1);
        let pause = Duration::from_secs(1u64 << n.min(8)).min(Duration::from_secs(300));
        self.backoff.insert(
            id.to_string(),
            (add_secs(Instant::now(), pause.as_secs()), n),
        );
        tracing::warn!(job_id = %id, queue = %self.cfg.queue,
            "cannot start job (attempt {n}): {error}; trying again in {} s", pause.as_secs());
        self.store.append_daemon_log(
            &self.log_file,
            &format!(
                "job {id} not started (attempt {n}): {error}; next try in {} s",
                pause.as_secs()
            ),
        );
    }

    /// Whether the store takes a write now (a worker that died without a word may have died
    /// of a full disk): `Some(reason)` when it does not.
    fn store_write_error(&self) -> Option<String> {
        let dir = self.store.jobs_dir(&self.cfg.queue, JobStatus::Running);
        let probe = dir.join(format!(".write-probe-{}.tmp", std::process::id()));
        let res = std::fs::write(&probe, [0u8; 4096])
            .and_then(|_| std::fs::File::open(&probe)?.sync_all());
        let _ = std::fs::remove_file(&probe);
        res.err().map(|e| {
            format!(
                "The job's result could not be saved: the store cannot be written ({e}); the worker stopped when it could not write the job file"
            )
        })
    }

    /// The checks a job file gets whoever wrote it (the orchestrator makes the same ones when
    /// it creates a job): PRD §10 — a job that names its user runs only if that user owns the
    /// project or is an admin — and extra args never widen the queue's permissions.
    fn may_run(&self, job: &Job) -> Result<(), String> {
        if let Some(arg) = crate::model::permission_widening_arg(&job.config.claude_extra_args)
            && self.config.allow_permission_args != Some(true)
        {
            return Err(format!(
                "Invalid job: claude_extra_args {arg:?} would change the agent's permissions, which queue {} does not allow (its allow_permission_args is not true)",
                self.cfg.queue
            ));
        }
        if let Some(u) = &job.config.user {
            let user = self
                .store
                .user(u)
                .map_err(|e| format!("Job refused: its user {u}: {e}"))?;
            let project = self
                .store
                .project(&job.config.project)
                .map_err(|e| format!("Job refused: project {}: {e}", job.config.project))?;
            if !crate::permissions::Caller::User(user).can_modify_project(&project) {
                return Err(format!(
                    "Job refused: only the owner of project {} or an admin can create jobs for it; {u} is neither",
                    project.id
                ));
            }
        }
        Ok(())
    }

    // ---- running jobs ------------------------------------------------------------------

    /// Takes over this host's jobs in `running_jobs/` whose worker still runs; fails those
    /// whose worker is gone (PRD §11 scenario 2).
    fn adopt_running(&mut self) -> Vec<String> {
        let q = self.cfg.queue.clone();
        let dir = self.store.jobs_dir(&q, JobStatus::Running);
        let docs = match crate::store::scan_dir(&dir) {
            Ok(s) => s.documents,
            Err(e) => {
                tracing::warn!(queue = %q, "cannot scan {}: {e}", dir.display());
                return Vec::new();
            }
        };
        let mut dead = Vec::new();
        for path in docs {
            let Some(id) = crate::store::file_id(&path).map(str::to_string) else {
                continue;
            };
            if self.running.contains_key(&id) {
                continue;
            }
            if !self.adopt_one(&id, &path) {
                dead.push(id);
            }
        }
        dead
    }

    /// Adopts one running job; false when its worker is gone (the job is to be settled).
    fn adopt_one(&mut self, id: &str, path: &std::path::Path) -> bool {
        let job: Job = match self.store.read_doc(DocKind::Job, path) {
            Ok(j) => j,
            Err(_) => return true,
        };
        if job.runtime.host.as_deref().is_some_and(|h| h != self.host) {
            return true; // another machine's job
        }
        let marked = self.mark(MarkKind::Adopt, id);
        let alive = self.adopt_job(id, &job);
        if marked {
            self.unmark(MarkKind::Adopt, id);
        }
        alive
    }

    fn adopt_job(&mut self, id: &str, job: &Job) -> bool {
        let q = self.cfg.queue.clone();
        let Some(pid) = job
            .runtime
            .process_id
            .filter(|p| pidwatch::is_worker_of(*p, id))
        else {
            return false;
        };
        let Some(fd) = pidwatch::pidfd_open(pid) else {
            return false;
        };
        // A limit out of range (a loosened schema) still gets a deadline: the longest allowed.
        let limit = job_limit(job, &self.config).unwrap_or(MAX_TIMEOUT_SECONDS);
        let ran = job
            .runtime
            .start_time
            .map(|s| s.seconds_until(&Timestamp::now()).max(0.0))
            .unwrap_or(0.0);
        let now = Instant::now();
        let started_at = Duration::try_from_secs_f64(ran)
            .ok()
            .and_then(|d| now.checked_sub(d))
            .unwrap_or(now);
        let tx = self.exits_tx.clone();
        let job_id = id.to_string();
        tokio::spawn(async move {
            pidwatch::wait_exit(fd).await;
            let _ = tx.send(job_id);
        });
        tracing::info!(job_id = %id, queue = %q, pid, "re-adopted running job");
        self.store.append_daemon_log(
            &self.log_file,
            &format!("job {id} re-adopted (worker pid {pid})"),
        );
        self.running.insert(
            id.to_string(),
            Running {
                pid,
                unit: job.runtime.unit.clone(),
                started_at,
                limit,
                deadline: add_secs(started_at, limit),
                end: None,
                kill_at: None,
            },
        );
        true
    }

    // ---- poison markers ----------------------------------------------------------------

    /// `Queues/<q>/.handling/<host>/`: each machine's manager sees only its own markers (a
    /// synced store carries the others').
    fn marker_dir(&self) -> PathBuf {
        let host = if crate::model::is_safe_id(&self.host) {
            self.host.as_str()
        } else {
            "this-host"
        };
        self.store
            .queue_dir(&self.cfg.queue)
            .join(MARKER_DIR)
            .join(host)
    }

    fn marker_path(&self, kind: MarkKind, id: &str) -> PathBuf {
        self.marker_dir().join(format!("{}-{id}", kind.prefix()))
    }

    /// Records on disk that handling `id` begins. False when it could not be recorded (a
    /// full disk): the attempt goes on unprotected, as nothing else can be written either.
    fn mark(&self, kind: MarkKind, id: &str) -> bool {
        let p = self.marker_path(kind, id);
        let res = p
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&p, std::process::id().to_string()))
            .and_then(|_| std::fs::File::open(&p)?.sync_all());
        if let Err(e) = &res {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot write {}: {e}", p.display());
        }
        res.is_ok()
    }

    fn unmark(&self, kind: MarkKind, id: &str) {
        let p = self.marker_path(kind, id);
        if let Err(e) = std::fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot remove {}: {e}", p.display());
        }
    }

    /// At start: every job whose handling an earlier manager began and never finished is
    /// failed with [`POISON`] (its worker, if one runs, is stopped first).
    async fn recover_poisoned(&mut self) {
        let dir = self.marker_dir();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let q = self.cfg.queue.clone();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((kind, id)) = MarkKind::parse(&name) else {
                continue;
            };
            let from = match kind {
                MarkKind::Start => JobStatus::Queued,
                MarkKind::Adopt => JobStatus::Running,
            };
            let path = self.store.job_path(&q, from, id);
            if let Ok(bytes) = read_limited(&path) {
                if from == JobStatus::Running {
                    let pid = crate::model::strict::parse_value(&bytes)
                        .ok()
                        .and_then(|v| v.pointer("/runtime/process_id")?.as_u64())
                        .and_then(|p| u32::try_from(p).ok());
                    if let Some(pid) = pid.filter(|p| pidwatch::is_worker_of(*p, id))
                        && let Ok(pid) = i32::try_from(pid)
                    {
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(pid),
                            Signal::SIGKILL,
                        );
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            Signal::SIGKILL,
                        );
                    }
                }
                match fail_raw(&self.store, &q, id, from, &bytes, POISON) {
                    Ok(_) => self.ended(id, from, JobStatus::Failed, POISON).await,
                    Err(e) => {
                        tracing::error!(job_id = %id, queue = %q, "cannot fail poisoned job: {e}");
                        continue; // keep the marker: tried again at the next start
                    }
                }
            }
            let _ = std::fs::remove_file(e.path());
        }
    }

    async fn on_exit(&mut self, id: &str) {
        let Some(r) = self.running.remove(id) else {
            return;
        };
        self.launcher.clean_up(r.pid, r.unit.as_deref()).await;
        self.settle(id, Some(r)).await;
    }

    /// After a worker is gone: signals the end it reported, or writes the end it could not
    /// (`r` is `None` for a job found running with no live worker).
    async fn settle(&mut self, id: &str, r: Option<Running>) {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, JobStatus::Running, id);
        // Still in running_jobs/ means the worker did not end it, even when a file of the
        // same id exists in finished_jobs/ (an id collision: the worker's move was refused).
        if !path.is_file() {
            let collided = crate::store::jobfile::collision_path(&self.store, &q, id, 1).is_file();
            let ended = [JobStatus::Failed, JobStatus::Finished]
                .into_iter()
                .find(|to| self.store.job_path(&q, *to, id).is_file());
            let to = if collided {
                Some(JobStatus::Failed)
            } else {
                ended
            };
            match to {
                Some(to) => {
                    self.store.append_daemon_log(
                        &self.log_file,
                        &format!("job {id} {} (worker exited)", to.name()),
                    );
                    self.signal(id, JobStatus::Running, to).await;
                }
                None => {
                    tracing::warn!(job_id = %id, queue = %q, "job file vanished from running_jobs")
                }
            }
            return;
        }
        let Ok(bytes) = read_limited(&path) else {
            tracing::warn!(job_id = %id, queue = %q, "job file vanished from running_jobs");
            return;
        };
        if !self.store_errors.contains_key(id)
            && r.as_ref().is_none_or(|r| r.end.is_none())
            && let Some(e) = self.store_write_error()
        {
            self.store_errors.insert(id.to_string(), e);
        }
        let died = self
            .store_errors
            .get(id)
            .cloned()
            .unwrap_or_else(|| WORKER_DIED.to_string());
        let error = match r {
            None => died,
            Some(r) => {
                let elapsed = r.started_at.elapsed().as_secs_f64();
                let timeout = format!(
                    "Job timeout after {}s (limit: {}s)",
                    elapsed.floor() as u64,
                    r.limit
                );
                match &r.end {
                    Some(EndCause::Cancelled(by)) => format!("Job cancelled by {by}"),
                    Some(EndCause::Timeout) => timeout,
                    None if elapsed >= r.limit as f64 => timeout,
                    None => died,
                }
            }
        };
        match self.store.parse_doc::<Job>(DocKind::Job, &path, &bytes) {
            Ok(job) => self.fail_owned(id, JobStatus::Running, job, error).await,
            Err(_) => match fail_raw(&self.store, &q, id, JobStatus::Running, &bytes, &error) {
                Ok(_) => {
                    self.ended(id, JobStatus::Running, JobStatus::Failed, &error)
                        .await
                }
                Err(e) => tracing::error!(job_id = %id, queue = %q, "cannot fail job: {e}"),
            },
        }
    }

    async fn stop_job(&mut self, id: &str, cause: EndCause) {
        let Some(r) = self.running.get_mut(id) else {
            return;
        };
        if r.end.is_none() {
            r.end = Some(cause);
        }
        r.kill_at = Some(Instant::now() + KILL_GRACE);
        let (pid, unit) = (r.pid, r.unit.clone());
        self.launcher
            .signal(pid, unit.as_deref(), Signal::SIGTERM)
            .await;
    }

    async fn on_deadlines(&mut self) {
        let now = Instant::now();
        let mut overdue = Vec::new();
        let mut kill = Vec::new();
        for (id, r) in &mut self.running {
            match (&r.end, r.kill_at) {
                (None, _) if now >= r.deadline => overdue.push(id.clone()),
                (Some(_), Some(k)) if now >= k => {
                    r.kill_at = None;
                    kill.push((r.pid, r.unit.clone()));
                }
                _ => {}
            }
        }
        for id in overdue {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "job timed out; stopping it");
            self.stop_job(&id, EndCause::Timeout).await;
        }
        for (pid, unit) in kill {
            self.launcher
                .signal(pid, unit.as_deref(), Signal::SIGKILL)
                .await;
        }
    }

    async fn sweep(&mut self) {
        // Workers that vanished without an exit notice (should not happen; cheap to check).
        let gone: Vec<String> = self
            .running
            .iter()
            .filter(|(id, r)| !pidwatch::is_worker_of(r.pid, id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.on_exit(&id).await;
        }
        // Running files nobody watches (a restart race, a synced-in file from this host).
        for id in self.adopt_running() {
            self.settle(&id, None).await;
        }
        while let Ok(id) = self.exits_rx.try_recv() {
            self.on_exit(&id).await;
        }
        self.index = QueuedIndex::default();
        let status = format!(
            "{} running, {} queued{}",
            self.running.len(),
            self.queued,
            if self.paused { ", paused" } else { "" }
        );
        crate::systemd::notify_status(&status);
        self.store
            .append_daemon_log(&self.log_file, &format!("sweep: {status}"));
    }

    // ---- requests ----------------------------------------------------------------------

    async fn on_request(&mut self, req: QueueRequest) {
        match req {
            QueueRequest::Pause { reply } => {
                self.set_paused(true).await;
                let _ = reply.send(Ok(()));
            }
            QueueRequest::Resume { reply } => {
                self.set_paused(false).await;
                let _ = reply.send(Ok(()));
            }
            QueueRequest::Cancel {
                id,
                caller,
                by,
                reply,
            } => {
                let r = self.cancel(&id, &caller, &by).await;
                let _ = reply.send(r);
            }
        }
    }

    /// Pause or resume; the `Paused` property shows it before the caller gets its reply.
    async fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        self.store
            .append_daemon_log(&self.log_file, if paused { "paused" } else { "resumed" });
        self.state.lock().unwrap_or_else(|e| e.into_inner()).paused = paused;
        if let Some(iface) = &self.iface {
            let _ = iface
                .get()
                .await
                .paused_changed(iface.signal_emitter())
                .await;
        }
    }

    async fn cancel(
        &mut self,
        id: &str,
        caller: &crate::permissions::Caller,
        by: &str,
    ) -> Result<(), BusError> {
        crate::store::check_id("job", id)?;
        let q = self.cfg.queue.clone();
        let from = [JobStatus::Running, JobStatus::Queued]
            .into_iter()
            .find(|s| crate::store::safe::is_file(&self.store.job_path(&q, *s, id)))
            .ok_or_else(|| {
                BusError::NotFound(format!("job {id} is not queued or running in queue {q}"))
            })?;
        let path = self.store.job_path(&q, from, id);
        let job: Option<Job> = self.store.read_doc(DocKind::Job, &path).ok();
        if !caller.is_admin() {
            let allowed = job.as_ref().is_some_and(|j| {
                caller.user_id().is_some() && caller.user_id() == j.config.user.as_deref()
                    || self
                        .store
                        .project(&j.config.project)
                        .is_ok_and(|p| caller.can_modify_project(&p))
            });
            if !allowed {
                return Err(BusError::PermissionDenied(format!(
                    "job {id} belongs to another user's project"
                )));
            }
        }
        tracing::info!(job_id = %id, queue = %q, "cancel requested by {by}");
        match from {
            JobStatus::Running if self.running.contains_key(id) => {
                self.stop_job(id, EndCause::Cancelled(by.to_string())).await;
                Ok(())
            }
            JobStatus::Running => Err(BusError::Failed(format!(
                "job {id} is running under another queue manager"
            ))),
            _ => {
                let error = format!("Job cancelled by {by}");
                match job {
                    Some(j) => self.fail_owned(id, JobStatus::Queued, j, error).await,
                    None => {
                        let bytes = read_limited(&path)?;
                        fail_raw(&self.store, &q, id, JobStatus::Queued, &bytes, &error)?;
                        self.ended(id, JobStatus::Queued, JobStatus::Failed, &error)
                            .await;
                    }
                }
                self.index.forget(id);
                Ok(())
            }
        }
    }

    // ---- runtime -----------------------------------------------------------------------

    /// Writes `queue.json`'s runtime (PRD §4.5); `reset` = the startup reset. Returns the
    /// served state before and after, for [`Self::flush_signals`] (`None` on the reset).
    fn write_runtime(&mut self, reset: bool) -> Option<(QueueState, QueueState)> {
        let q = self.cfg.queue.clone();
        let mut doc = match self.store.queue(&q) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(queue = %q, "cannot read queue.json: {e}");
                return None;
            }
        };
        let now = Timestamp::now();
        doc.runtime.process_id = Some(std::process::id());
        doc.runtime.host = Some(self.host.clone());
        doc.runtime.paused = Some(self.paused);
        if reset {
            doc.runtime.active_jobs = 0;
            doc.runtime.queued_jobs = 0;
            doc.runtime.last_update = None;
        } else {
            doc.runtime.active_jobs = u32::try_from(self.running.len()).unwrap_or(u32::MAX);
            doc.runtime.queued_jobs = self.queued;
            doc.runtime.last_update = Some(now);
        }
        let path = self.store.queue_path(&q);
        if let Err(e) = self.store.write_doc(DocKind::Queue, &path, &doc) {
            tracing::warn!(queue = %q, "cannot write queue.json: {e}");
        }
        if reset {
            return None;
        }
        let new = QueueState {
            worker_count: doc.config.worker_count,
            active_jobs: doc.runtime.active_jobs,
            queued_jobs: doc.runtime.queued_jobs,
            paused: self.paused,
            last_update: now.to_string(),
        };
        let old = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *s, new.clone())
        };
        Some((old, new))
    }
}

fn unreachable_bus() -> zbus::connection::Builder<'static> {
    // BusTarget::None never reaches the builder; a session builder keeps this total.
    zbus::connection::Builder::session()
}
