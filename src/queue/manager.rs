//! The queue manager itself (PRD §7): its configuration, the [`Manager`] with its state, and
//! start-up (open, runtime reset, re-adoption; the front end takes the bus name in between)
//! and the event loop that drives the rest.

use super::handle::{QueueEvents, QueueHandle, QueueRequest, QueueState};
use super::launcher::JobLauncher;
use super::selection::QueuedIndex;
use super::{QueueError, Running, add_secs};
use crate::model::{JobStatus, Launcher, MAX_REST_INTERVAL, Queue, QueueConfig, Timestamp};
use crate::store::{Event, Record, Store, StoreError, hostname};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

/// How to run one queue manager.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Store root.
    pub root: PathBuf,
    /// Queue name.
    pub queue: String,
    /// Bus for `org.agentstore.Queue1` (what `--bus` resolved to); `None`: no D-Bus (a
    /// store-only run).
    pub bus: Option<crate::systemd::Bus>,
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
            bus: Some(crate::systemd::Bus::Session),
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

enum Wake {
    Shutdown,
    File(Option<String>, bool),
    WatchEnded,
    Exit(super::WorkerExit),
    Launched(Box<super::starting::LaunchDone>),
    Request(QueueRequest),
    Approval(Option<String>),
    /// A file left `running_jobs/` of a Slurm queue (a worker wrote its end).
    RunningLeft(Option<String>),
    Deadline,
    Sweep,
    Heartbeat,
}

/// A queue manager: opened ([`Manager::open`]), served by a front end, then started
/// ([`Manager::start`]: runtime reset, running jobs adopted) and [run](Manager::run).
pub struct Manager {
    pub(super) cfg: ManagerConfig,
    pub(super) store: Arc<Store>,
    pub(super) config: QueueConfig,
    pub(super) launcher: JobLauncher,
    pub(super) running: HashMap<String, Running>,
    /// Workers being launched (spawned, their scope being placed), not yet running.
    pub(super) launching: super::starting::Launching,
    pub(super) index: QueuedIndex,
    pub(super) queued: u32,
    pub(super) paused: bool,
    pub(super) host: String,
    pub(super) root_mode: bool,
    pub(super) state: Arc<Mutex<QueueState>>,
    /// Approval requests of running jobs waiting for an answer (the handle reads them).
    pub(super) approvals: Arc<Mutex<Vec<crate::model::approval::ApprovalRequest>>>,
    /// This manager's approval master key (see `approval::master_key`): each job's key,
    /// handed to its worker on the gate and never written to the store, derives from it.
    pub(super) approval_master: String,
    /// Jobs started since the heartbeat was written: it is written again after this pass,
    /// so the machine's word on what it runs (`Heartbeat::running`) lags no start.
    pub(super) beat_due: bool,
    /// The watch on `Jobs/approvals/`.
    pub(super) approvals_watch: Option<inotify::Inotify>,
    /// `running_jobs/` of a Slurm queue (its workers run elsewhere, no exit to wait on).
    pub(super) running_watch: Option<inotify::Inotify>,
    /// Where the events of each step go (the D-Bus front end), once one is attached.
    pub(super) events: Option<Box<dyn QueueEvents>>,
    requests_tx: mpsc::Sender<QueueRequest>,
    pub(super) exits_tx: mpsc::UnboundedSender<super::WorkerExit>,
    /// The tasks the manager spawned (one per worker, waiting for its exit): reaped as they
    /// end, and stopped and drained at shutdown (the jobs themselves keep running).
    pub(super) tasks: tokio::task::JoinSet<()>,
    pub(super) exits_rx: mpsc::UnboundedReceiver<super::WorkerExit>,
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
    /// This manager's heartbeat, rewritten every `machines.heartbeat_seconds`.
    pub(super) heartbeat: Option<crate::store::machines::Heartbeat>,
    /// Whether this manager serves its queue or stands down for another machine's (the
    /// store not being one filesystem, `machines.shared_filesystem`), see `handover.rs`.
    pub(super) handover: super::handover::Handover,

    /// The jobs whose start an earlier manager left interrupted (their start marker found at
    /// start-up, `recover_poisoned`): only these are looked up on disk by
    /// `start_was_interrupted`, never every queued job at every pass.
    pub(super) interrupted: std::collections::HashSet<String>,

    /// The queue's jobs in Slurm (launcher `slurm`).
    pub(super) slurm: super::slurm::SlurmState,
}

impl Manager {
    /// Opens the store and chooses the launcher; nothing is changed yet. A front end then
    /// serves its [`handle`](Manager::handle) and [`attach`](Manager::attach)es its event
    /// sink (taking its bus name first, so a second manager stops before touching the
    /// queue), and [`start`](Manager::start) makes it ready to [`run`](Manager::run).
    pub async fn open(cfg: ManagerConfig) -> Result<Manager, QueueError> {
        let store = Arc::new(Store::open(&cfg.root)?);
        let queue: Queue = store.queue_file(&cfg.queue)?;
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
        // Paused survives a restart: this machine's runtime says so, else queue.json (a store
        // from before the runtime had its own file, or a user who paused it by hand).
        let host = hostname();
        // (The runtime under this machine's host name: a store from before machine ids.)
        let paused = store
            .queue_runtime(&cfg.queue, &host)
            .or_else(|| {
                crate::store::identity::legacy_key()
                    .and_then(|l| store.queue_runtime(&cfg.queue, &l))
            })
            .and_then(|r| r.paused)
            .or(queue.runtime.paused)
            .unwrap_or(false);
        let state = Arc::new(Mutex::new(QueueState {
            worker_count: queue.config.worker_count,
            paused,
            ..QueueState::default()
        }));
        Ok(Manager {
            log_file: format!("queue-{}.log", cfg.queue),
            store: store.clone(),
            config: queue.config.clone(),
            launcher,
            running: HashMap::new(),
            launching: Default::default(),
            index: QueuedIndex::default(),
            queued: 0,
            paused,
            host,
            root_mode: nix::unistd::geteuid().is_root(),
            state,
            approvals: Arc::new(Mutex::new(Vec::new())),
            approval_master: super::approval::master_key(store.root()),
            beat_due: false,
            approvals_watch: None,
            running_watch: None,
            events: None,
            requests_tx,
            exits_tx,
            tasks: tokio::task::JoinSet::new(),
            exits_rx,
            requests_rx,
            inotify: None,
            backoff: HashMap::new(),
            store_errors: HashMap::new(),
            pending: Vec::new(),
            flow_wake: None,
            heartbeat: None,
            handover: Default::default(),
            interrupted: Default::default(),

            slurm: super::slurm::SlurmState::default(),
            cfg,
        })
    }

    /// What a front end serves: the state snapshot and the request channel.
    pub fn handle(&self) -> QueueHandle {
        QueueHandle::new(
            self.cfg.queue.clone(),
            self.state.clone(),
            self.approvals.clone(),
            self.requests_tx.clone(),
        )
    }

    /// An event of this manager about its queue.
    pub(super) fn event(&self, kind: &str) -> Event {
        Event::new("queue-manager", kind).queue(&self.cfg.queue)
    }

    /// Records an action once: journal, events file and the queue's daemon log
    /// (`logs/queue-<q>.log`).
    pub(super) fn record(&self, r: Record) {
        self.store.record(r.log(&self.log_file));
    }

    /// The manager's store.
    pub fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// Sends the events of every later step to `events`.
    pub fn attach(&mut self, events: Box<dyn QueueEvents>) {
        self.events = Some(events);
    }

    /// Resets the queue's runtime (PRD §4.5), watches `queued_jobs/` and re-adopts this
    /// host's running jobs. Returns when the manager is ready to be [`run`](Manager::run).
    pub async fn start(self) -> Result<Manager, QueueError> {
        let span = self.span();
        self.start_in_span().instrument(span).await
    }

    /// The span everything the manager says is in: its queue (journal field `QUEUE=`).
    fn span(&self) -> tracing::Span {
        tracing::info_span!("queue_manager", queue = %self.cfg.queue)
    }

    async fn start_in_span(self) -> Result<Manager, QueueError> {
        let mut m = self;
        let q = m.cfg.queue.clone();
        // Reset runtime first: whatever the file says is stale (PRD §4.5).
        m.write_runtime(true);
        let queued_dir = m.store.jobs_dir(&q, JobStatus::Queued);
        let inotify = inotify::Inotify::init().map_err(|source| QueueError::Watch {
            path: queued_dir.clone(),
            source,
        })?;
        use inotify::WatchMask as W;
        crate::store::safe::watch_dir(
            &mut inotify.watches(),
            &queued_dir,
            W::MOVED_TO | W::CLOSE_WRITE | W::MOVED_FROM | W::DELETE,
        )
        .map_err(|source| QueueError::Watch {
            path: queued_dir.clone(),
            source,
        })?;
        m.inotify = Some(inotify);
        m.approvals_watch = m.watch_approvals();
        if matches!(m.launcher, super::launcher::JobLauncher::Slurm) {
            m.running_watch = m.watch_running();
        }
        super::poison::install_crash_recorder();
        m.give_back_claims();
        m.recover_poisoned().await;
        m.write_heartbeat(false);
        m.check_served_elsewhere();
        let dead = m.adopt_running();
        m.beat_due = true;
        m.record(Record::info(
            m.event("daemon_started")
                .detail(format!("launcher {}", m.launcher.name())),
            format!(
                "queue-manager started (pid {}, launcher {}, {} job(s) re-adopted)",
                std::process::id(),
                m.launcher.name(),
                m.running.len() + m.slurm.len()
            ),
        ));
        for id in dead {
            m.settle(&id, None).await;
        }
        // The runtime tells the truth from READY on: the jobs re-adopted are active now, not
        // only after the first pass (the reset above wrote 0).
        let changed = m.write_runtime(false);
        m.flush_signals(changed).await;
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
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), QueueError> {
        let span = self.span();
        self.run_in_span(shutdown).instrument(span).await
    }

    async fn run_in_span(mut self, shutdown: impl Future<Output = ()>) -> Result<(), QueueError> {
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
        let mut approval_events = self
            .approvals_watch
            .take()
            .and_then(|i| i.into_event_stream(vec![0u8; 16 * 1024]).ok());
        let mut running_events = self
            .running_watch
            .take()
            .and_then(|i| i.into_event_stream(vec![0u8; 16 * 1024]).ok());
        let mut sweep = tokio::time::interval(Duration::from_secs(
            self.config.rest_interval.clamp(1, MAX_REST_INTERVAL),
        ));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sweep.tick().await;
        let mut heartbeat = tokio::time::interval(self.store.config().machines.heartbeat());
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await;
        // Ready (systemd's READY=1) before the first pass: readiness never waits on the size
        // of the queue. The daemons tell systemd from their own loops, never from `bin/`.
        crate::systemd::notify_ready(&format!(
            "serving queue {} (launcher {})",
            self.cfg.queue,
            self.launcher.name()
        ));
        self.load_approvals().await;
        self.step().await;
        let mut watchdog = crate::systemd::Watchdog::from_env();
        loop {
            // Back at the top: the last pass ended (systemd's watchdog, WatchdogSec=).
            watchdog.progressed();
            let next = self.next_deadline();
            let next = Instant::now()
                .checked_add(watchdog.wake_within())
                .map_or(next, |w| next.min(w));
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
                Some(exit) = self.exits_rx.recv() => Wake::Exit(exit),
                done = self.launching.next() => Wake::Launched(Box::new(done)),
                Some(req) = self.requests_rx.recv() => Wake::Request(req),
                ev = async {
                    match approval_events.as_mut() {
                        Some(s) => s.next().await,
                        None => std::future::pending().await,
                    }
                } => match ev {
                    Some(Ok(e)) => Wake::Approval(e.name.and_then(|n| n.to_str().map(str::to_string))),
                    Some(Err(_)) => Wake::Approval(None),
                    None => { approval_events = None; Wake::Approval(None) }
                },
                ev = async {
                    match running_events.as_mut() {
                        Some(s) => s.next().await,
                        None => std::future::pending().await,
                    }
                } => match ev {
                    Some(Ok(e)) => Wake::RunningLeft(e.name.and_then(|n| n.to_str().map(str::to_string))),
                    Some(Err(_)) => Wake::RunningLeft(None),
                    None => { running_events = None; Wake::RunningLeft(None) }
                },
                _ = tokio::time::sleep_until(next) => Wake::Deadline,
                _ = sweep.tick() => Wake::Sweep,
                _ = heartbeat.tick() => Wake::Heartbeat,
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
                    // Our own move (the claim) of a job we just started, or are starting,
                    // needs no new pass.
                    if gone && (self.running.contains_key(id) || self.launching.contains(id)) {
                        continue;
                    }
                }
                Wake::WatchEnded => {
                    tracing::warn!("inotify stream ended; relying on the rest_interval sweep");
                    events = None;
                }
                Wake::Exit(exit) => self.on_exit(exit).await,
                Wake::Launched(done) => self.on_launched(*done).await,
                Wake::Request(r) => self.on_request(r).await,
                Wake::Approval(name) => {
                    self.on_approval_file(name.as_deref()).await;
                    continue;
                }
                Wake::RunningLeft(name) => {
                    if name.as_deref().is_some_and(crate::store::is_ignored) {
                        continue;
                    }
                    self.slurm_reap(name.as_deref()).await;
                }
                Wake::Deadline => self.on_deadlines().await,
                Wake::Sweep => self.sweep().await,
                Wake::Heartbeat => self.on_heartbeat().await,
            }
            // Forget the tasks of workers that have ended.
            while self.tasks.try_join_next().is_some() {}
            // Batch whatever else is ready before one pass and one queue.json write.
            while let Some(done) = self.launching.ready() {
                self.on_launched(done).await;
            }
            while let Ok(exit) = self.exits_rx.try_recv() {
                self.on_exit(exit).await;
            }
            self.step().await;
            if std::mem::take(&mut self.beat_due) {
                self.write_heartbeat(false);
            }
        }
        // Launches in flight complete (each bounded by systemd's confirmation timeout): their
        // jobs are then running for the next manager to re-adopt, and no start marker is
        // left behind to count against them.
        while !self.launching.is_empty() {
            let done = self.launching.next().await;
            self.on_launched(done).await;
        }
        self.stop();
        // Nothing spawned outlives the manager: the exit watchers stop (their workers run
        // on, for the next manager to re-adopt).
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        Ok(())
    }

    pub(super) fn stop(&mut self) {
        let q = &self.cfg.queue;
        crate::systemd::notify_stopping("stopping; running jobs continue");
        self.record(Record::info(
            self.event("daemon_stopped"),
            format!(
                "queue-manager stopping ({} job(s) left running for the next manager)",
                self.running.len()
            ),
        ));
        // This machine's runtime says no manager is up; queue.json is the user's, untouched.
        if let Some(mut r) = self.store.queue_runtime(q, &self.host) {
            r.process_id = None;
            r.last_update = Some(Timestamp::now());
            if let Err(e) = self.store.write_queue_runtime(q, &self.host, &r) {
                tracing::warn!(queue = %q, "cannot write the queue runtime: {e}");
            }
        }
        self.write_heartbeat(true);
    }

    /// One pass: reload the queue config, start what fits, write the runtime.
    pub(super) async fn step(&mut self) {
        // Event lines a full disk held back land as soon as there is room.
        self.store.retry_unwritten_events();
        match self.store.queue_file(&self.cfg.queue) {
            Ok(q) => {
                if q.config != self.config && !self.backoff.is_empty() {
                    // A user's fix (a Slurm account, a limit) applies now, not after the
                    // put-off jobs' back-off (up to 300 s) runs out.
                    tracing::info!(
                        queue = %self.cfg.queue,
                        "queue.json changed: {} put-off job(s) tried again now",
                        self.backoff.len()
                    );
                    self.backoff.clear();
                }
                self.config = q.config
            }
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
            .chain(self.slurm_deadline())
            .min()
            .unwrap_or_else(|| add_secs(Instant::now(), 86_400))
    }
}
