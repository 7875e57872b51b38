//! `org.agentstore.Queue1`, served by each queue manager at `queue_object_path(q)` under the
//! name `queue_bus_name(q)`; and the client proxy the CLI and tests use.
//!
//! The interface object only answers: property reads come from a snapshot the manager
//! updates, and method calls are authorized here, then handed to the manager's loop over a
//! channel (the loop is the only place that changes jobs).

use super::BusError;
use crate::permissions::Caller;
use crate::store::Store;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;

/// What the properties show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueState {
    /// `worker_count` from the queue config.
    pub worker_count: u32,
    /// Jobs running now.
    pub active_jobs: u32,
    /// Jobs waiting.
    pub queued_jobs: u32,
    /// Whether new jobs are held back.
    pub paused: bool,
    /// Last loop time (ISO 8601), empty before the first.
    pub last_update: String,
}

/// A reply to the caller.
pub type Reply = oneshot::Sender<Result<(), BusError>>;

/// A request for the manager's loop, already authorized.
#[derive(Debug)]
pub enum QueueRequest {
    /// Cancel a queued or running job.
    Cancel {
        /// Job id.
        id: String,
        /// Who asks (the loop checks the job's project).
        caller: Caller,
        /// Caller's name for the job's error text.
        by: String,
        /// Answer.
        reply: Reply,
    },
    /// Stop starting new jobs.
    Pause {
        /// Answer.
        reply: Reply,
    },
    /// Start new jobs again.
    Resume {
        /// Answer.
        reply: Reply,
    },
}

/// The served object.
#[derive(Debug)]
pub struct QueueObject {
    state: Arc<Mutex<QueueState>>,
    requests: mpsc::Sender<QueueRequest>,
    store: Arc<Store>,
}

impl QueueObject {
    /// An object showing `state` and sending calls to `requests`.
    pub fn new(
        state: Arc<Mutex<QueueState>>,
        requests: mpsc::Sender<QueueRequest>,
        store: Arc<Store>,
    ) -> QueueObject {
        QueueObject {
            state,
            requests,
            store,
        }
    }

    fn snapshot(&self) -> QueueState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn caller(
        &self,
        hdr: &Header<'_>,
        conn: &zbus::Connection,
    ) -> Result<(Caller, String), BusError> {
        let uid = super::caller::caller_uid(conn, hdr).await?;
        caller_for_uid(&self.store, uid)
    }

    async fn send(&self, make: impl FnOnce(Reply) -> QueueRequest) -> Result<(), BusError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(make(tx))
            .await
            .map_err(|_| BusError::Failed("the queue manager is stopping".into()))?;
        rx.await
            .map_err(|_| BusError::Failed("the queue manager is stopping".into()))?
            .map_err(BusError::normalized)
    }
}

/// Maps a caller's Unix uid to a PRD §10 caller (the rule of [`super::caller`]) and the name
/// to record it by (its user id, or its login for trusted callers).
pub fn caller_for_uid(store: &Store, uid: u32) -> Result<(Caller, String), BusError> {
    let own = nix::unistd::geteuid().as_raw();
    let caller = super::caller::caller_for_uid(store, uid, own, None)?;
    let name = match &caller {
        Caller::User(u) => u.id.clone(),
        Caller::Trusted => super::caller::login_name(uid).unwrap_or_else(|| format!("uid {uid}")),
    };
    Ok((caller, name))
}

#[zbus::interface(name = "org.agentstore.Queue1")]
impl QueueObject {
    /// Maximum simultaneous jobs.
    #[zbus(property)]
    fn worker_count(&self) -> u32 {
        self.snapshot().worker_count
    }

    /// Jobs running now.
    #[zbus(property)]
    fn active_jobs(&self) -> u32 {
        self.snapshot().active_jobs
    }

    /// Jobs waiting in queued_jobs/.
    #[zbus(property)]
    fn queued_jobs(&self) -> u32 {
        self.snapshot().queued_jobs
    }

    /// True while no new jobs are started.
    #[zbus(property)]
    fn paused(&self) -> bool {
        self.snapshot().paused
    }

    /// Time of the manager's last loop (ISO 8601 UTC), empty before the first. Changes on
    /// every loop, so it is read, not signalled.
    #[zbus(property(emits_changed_signal = "false"))]
    fn last_update(&self) -> String {
        self.snapshot().last_update
    }

    /// Cancels a queued or running job: it ends in failed_jobs/ with "Job cancelled by …".
    async fn cancel_job(
        &self,
        id: &str,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, by) = self.caller(&hdr, conn).await?;
        let id = id.to_string();
        self.send(|reply| QueueRequest::Cancel {
            id,
            caller,
            by,
            reply,
        })
        .await
    }

    /// Stops starting new jobs (running ones continue). Admins only.
    async fn pause(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, _) = self.caller(&hdr, conn).await?;
        if !caller.is_admin() {
            return Err(BusError::permission_denied("only admins can pause a queue"));
        }
        self.send(|reply| QueueRequest::Pause { reply }).await
    }

    /// Starts new jobs again. Admins only.
    async fn resume(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, _) = self.caller(&hdr, conn).await?;
        if !caller.is_admin() {
            return Err(BusError::permission_denied(
                "only admins can resume a queue",
            ));
        }
        self.send(|reply| QueueRequest::Resume { reply }).await
    }

    /// A job moved: `old` and `new` are `queued`, `running`, `finished` or `failed`.
    #[zbus(signal)]
    pub async fn job_state_changed(
        emitter: &SignalEmitter<'_>,
        id: &str,
        old: &str,
        new: &str,
    ) -> zbus::Result<()>;
}

/// Client side of `org.agentstore.Queue1`.
#[zbus::proxy(interface = "org.agentstore.Queue1")]
pub trait Queue1 {
    /// Cancels a job.
    fn cancel_job(&self, id: &str) -> zbus::Result<()>;
    /// Pauses the queue.
    fn pause(&self) -> zbus::Result<()>;
    /// Resumes the queue.
    fn resume(&self) -> zbus::Result<()>;
    /// WorkerCount.
    #[zbus(property)]
    fn worker_count(&self) -> zbus::Result<u32>;
    /// ActiveJobs.
    #[zbus(property)]
    fn active_jobs(&self) -> zbus::Result<u32>;
    /// QueuedJobs.
    #[zbus(property)]
    fn queued_jobs(&self) -> zbus::Result<u32>;
    /// Paused.
    #[zbus(property)]
    fn paused(&self) -> zbus::Result<bool>;
    /// LastUpdate.
    #[zbus(property)]
    fn last_update(&self) -> zbus::Result<String>;
    /// JobStateChanged.
    #[zbus(signal)]
    fn job_state_changed(&self, id: String, old: String, new: String) -> zbus::Result<()>;
}

/// A proxy for queue `queue`'s manager on `conn`.
pub async fn queue_proxy(
    conn: &zbus::Connection,
    queue: &str,
) -> zbus::Result<Queue1Proxy<'static>> {
    Queue1Proxy::builder(conn)
        .destination(super::queue_bus_name(queue))
        .path(super::queue_object_path(queue))
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

/// The live state of `queue`'s manager, when one owns its name on `conn`.
pub async fn live_state(conn: &zbus::Connection, queue: &str) -> Option<QueueState> {
    let p = queue_proxy(conn, queue).await.ok()?;
    Some(QueueState {
        worker_count: p.worker_count().await.ok()?,
        active_jobs: p.active_jobs().await.ok()?,
        queued_jobs: p.queued_jobs().await.ok()?,
        paused: p.paused().await.ok()?,
        last_update: p.last_update().await.ok()?,
    })
}
