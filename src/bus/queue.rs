//! `org.agentstore.Queue1`, served by each queue manager at `queue_object_path(q)` under the
//! name `queue_bus_name(q)`; and the client proxy the CLI and tests use.
//!
//! A thin adapter over the manager's handle (`queue::QueueHandle`): property reads come from
//! its snapshot, method calls find the caller's uid and go to the handle (which authorizes
//! them and hands them to the manager's loop, the only place that changes jobs), and the
//! manager's events become signals ([`start_manager`] wires it up).

use super::watchers::{Change, Watchers};
use super::{Bus, BusError};
use crate::model::approval::ApprovalRequest;
use crate::permissions::Caller;
use crate::queue::{Manager, ManagerConfig, QueueError, QueueEvent, QueueEvents, QueueHandle};
use crate::store::Store;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use zbus::message::Header;
use zbus::object_server::{InterfaceRef, SignalEmitter};

pub use crate::queue::{QueueRequest, QueueState};

/// The served object.
#[derive(Debug)]
pub struct QueueObject {
    handle: QueueHandle,
    store: Arc<Store>,
    watchers: Arc<Watchers>,
}

impl QueueObject {
    /// An object showing and driving the manager behind `handle`.
    pub fn new(handle: QueueHandle, store: Arc<Store>) -> QueueObject {
        let watchers = Arc::new(Watchers::new(store.clone()));
        QueueObject {
            handle,
            store,
            watchers,
        }
    }

    fn snapshot(&self) -> QueueState {
        self.handle.snapshot()
    }

    async fn caller(
        &self,
        hdr: &Header<'_>,
        conn: &zbus::Connection,
    ) -> Result<(Caller, String), BusError> {
        let uid = super::caller::caller_uid(conn, hdr).await?;
        caller_for_uid(&self.store, uid)
    }
}

/// A trusted front end of this manager: root, the manager's own account and the service
/// account (the packaged web API, notifier and Slack app run as it while a system-wide manager
/// runs as root). Such a caller acts for the users it names (`AnswerFor`), and passes on what
/// it reads (`ListApprovals`, `WatchJobs`) only to those PRD §10 lets see it. Before, a root
/// manager mapped the service account to a user document it has not: the web API's
/// `ListApprovals` and `CancelJob` were refused, and no request was ever listed through the
/// web in system mode (tests/system/t_approvals.sh).
fn is_front_end(uid: u32) -> bool {
    uid == 0
        || uid == nix::unistd::geteuid().as_raw()
        || crate::trust::account::service_uid() == Some(uid)
}

/// Maps a caller's Unix uid to a PRD §10 caller (the rule of [`super::caller`]) and the name
/// to record it by (its user id, or its login for trusted callers).
pub fn caller_for_uid(store: &Store, uid: u32) -> Result<(Caller, String), BusError> {
    let caller = if is_front_end(uid) {
        Caller::Trusted
    } else {
        super::caller::caller_for_uid(store, uid, nix::unistd::geteuid().as_raw(), None)?
    };
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

    /// Approval requests of running jobs waiting for an answer that the caller may see
    /// (PRD §10: those of the jobs `view-job` shows them), oldest first: (job_id,
    /// request_id, tool, summary, input_json, deadline). A method, not a property: a
    /// property reads the same for every caller.
    async fn list_approvals(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<Vec<PendingApproval>, BusError> {
        let (caller, _) = self.caller(&hdr, conn).await?;
        Ok(self
            .handle
            .approvals_for(&self.store, &caller)
            .iter()
            .map(pending_row)
            .collect())
    }

    /// Answers approval request `request_id` of a running job: `allow` or deny (`message`
    /// is the reason the agent sees), `always` = the same tool is answered this way for the
    /// rest of the job. For the job's submitter, the project's owner and admins (PRD §10).
    async fn answer(
        &self,
        request_id: &str,
        allow: bool,
        always: bool,
        message: &str,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, by) = self.caller(&hdr, conn).await?;
        Ok(self
            .handle
            .answer(request_id, allow, always, message, caller, by)
            .await?)
    }

    /// `Answer` on behalf of user `user`, for a trusted front end (root or the manager's own
    /// account, e.g. agentstore-web): the manager applies PRD §10 to that user and records
    /// them as the one who answered. Anyone else is refused, whatever `user` says.
    #[allow(clippy::too_many_arguments)] // the D-Bus signature, plus zbus's header and connection
    async fn answer_for(
        &self,
        request_id: &str,
        allow: bool,
        always: bool,
        message: &str,
        user: &str,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let uid = super::caller::caller_uid(conn, &hdr).await?;
        let own = nix::unistd::geteuid().as_raw();
        if !is_front_end(uid) {
            return Err(BusError::permission_denied(format!(
                "AnswerFor is for trusted front ends (root, the queue manager's own account or {}); uid {uid} answers with Answer",
                crate::trust::account::SERVICE_ACCOUNT
            )));
        }
        // Acting for `user`: as root would (the named user's document decides, §10 applies).
        let caller = super::caller::caller_for_uid(&self.store, 0, own, Some(user))?;
        let by = caller.user_id().unwrap_or(user).to_string();
        Ok(self
            .handle
            .answer(request_id, allow, always, message, caller, by)
            .await?)
    }

    /// A running job asks for a permission; `deadline` (ISO 8601 UTC) is when it is denied
    /// if nobody answers. Signals reach every listener on the bus, so they carry ids only:
    /// what is asked is read with `ListApprovals`, which shows each caller its own.
    #[zbus(signal)]
    pub async fn approval_requested(
        emitter: &SignalEmitter<'_>,
        job_id: &str,
        request_id: &str,
        deadline: &str,
    ) -> zbus::Result<()>;

    /// A request left the list: answered (by a person or at its deadline) or dropped with
    /// its job. Ids only, as `ApprovalRequested`; the decision is on the job
    /// (`runtime.approvals`).
    #[zbus(signal)]
    pub async fn approval_answered(
        emitter: &SignalEmitter<'_>,
        job_id: &str,
        request_id: &str,
    ) -> zbus::Result<()>;

    /// Cancels a queued or running job: it ends in failed_jobs/ with "Job cancelled by …".
    async fn cancel_job(
        &self,
        id: &str,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, by) = self.caller(&hdr, conn).await?;
        Ok(self.handle.cancel(id, caller, by).await?)
    }

    /// Stops starting new jobs (running ones continue). Admins only.
    async fn pause(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, _) = self.caller(&hdr, conn).await?;
        Ok(self.handle.pause(&caller).await?)
    }

    /// Starts new jobs again. Admins only.
    async fn resume(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), BusError> {
        let (caller, _) = self.caller(&hdr, conn).await?;
        Ok(self.handle.resume(&caller).await?)
    }

    /// From now on, sends this connection `JobStateChanged` of each job its caller may see
    /// (PRD §10: what `view-job` shows them); with `replay`, first the changes since the
    /// manager started (the last 1,024). The signal is never broadcast (issue 27).
    async fn watch_jobs(
        &self,
        replay: bool,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<(), BusError> {
        let sender = hdr
            .sender()
            .ok_or_else(|| BusError::permission_denied("no sender"))?
            .to_owned()
            .into();
        let uid = super::caller::caller_uid(conn, &hdr).await?;
        let caller = if is_front_end(uid) || store_owner_uid(&self.store) == Some(uid) {
            // A front end, or the store's owner (who reads every job file anyway), passes
            // each event on only to a caller who may see it.
            Caller::Trusted
        } else {
            caller_for_uid(&self.store, uid)?.0
        };
        self.watchers
            .watch(&emitter, sender, uid, caller, replay)
            .await
            .map_err(BusError::Failed)
    }

    /// A job moved: `old` and `new` are `queued`, `running`, `finished` or `failed`. Sent only
    /// to the connections that called `WatchJobs`, each only for the jobs it may see.
    #[zbus(signal)]
    pub async fn job_state_changed(
        emitter: &SignalEmitter<'_>,
        id: &str,
        old: &str,
        new: &str,
    ) -> zbus::Result<()>;
}

/// The Unix account owning the store root (after links), when it can be read.
fn store_owner_uid(store: &Store) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(store.root()).ok().map(|m| m.uid())
}

/// One row of `ListApprovals`: (job_id, request_id, tool, summary, input_json, deadline).
pub type PendingApproval = (String, String, String, String, String, String);

fn pending_row(r: &ApprovalRequest) -> PendingApproval {
    (
        r.job_id.clone(),
        r.request_id.clone(),
        r.tool.clone(),
        r.summary.clone(),
        r.input.to_string(),
        r.deadline.to_string(),
    )
}

/// The manager's events as `org.agentstore.Queue1` signals: property changes
/// (`PropertiesChanged`) and `JobStateChanged`, each emitted before the manager goes on. It
/// keeps the connection (and with it the bus name) for the manager's life.
struct QueueSignals {
    iface: InterfaceRef<QueueObject>,
    watchers: Arc<Watchers>,
    /// Forgets watchers that leave the bus; it holds the connection, so it ends with this.
    forget: tokio::task::JoinHandle<()>,
    conn: zbus::Connection,
    /// Desktop notifications go to this bus (a session bus), never the system bus.
    notify: bool,
}

impl QueueSignals {
    async fn emit_event(&self, event: &QueueEvent) {
        let e = self.iface.signal_emitter();
        match event {
            QueueEvent::StateChanged { old, new } => {
                let obj = self.iface.get().await;
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
            QueueEvent::ApprovalRequested(r) => {
                if let Err(err) = QueueObject::approval_requested(
                    e,
                    &r.job_id,
                    &r.request_id,
                    &r.deadline.to_string(),
                )
                .await
                {
                    tracing::debug!("ApprovalRequested: {err}");
                }
                if self.notify {
                    // Best effort, never waited for: a desktop may or may not be there.
                    let conn = self.conn.clone();
                    let (title, body) = (
                        format!("Job {} asks to use {}", r.job_id, r.tool),
                        format!(
                            "{}\nApprove: orchestrator approve {} {}\nDenied at {} if nobody answers.",
                            r.summary, r.job_id, r.request_id, r.deadline
                        ),
                    );
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(
                            std::time::Duration::from_secs(5),
                            super::notify::desktop(&conn, &title, &body),
                        )
                        .await;
                    });
                }
            }
            QueueEvent::ApprovalAnswered { request, .. } => {
                if let Err(err) =
                    QueueObject::approval_answered(e, &request.job_id, &request.request_id).await
                {
                    tracing::debug!("ApprovalAnswered: {err}");
                }
            }
            QueueEvent::JobStateChanged { id, old, new } => {
                let change = Change {
                    id: id.clone(),
                    old: old.name().to_string(),
                    new: new.name().to_string(),
                };
                self.watchers.changed(e, change).await;
            }
        }
    }
}

impl Drop for QueueSignals {
    fn drop(&mut self) {
        self.forget.abort();
    }
}

impl QueueEvents for QueueSignals {
    fn emit<'a>(&'a self, event: &'a QueueEvent) -> BoxFuture<'a, ()> {
        Box::pin(self.emit_event(event))
    }
}

/// Serves `handle` as `org.agentstore.Queue1` under `queue_bus_name(queue)` on `bus`.
/// A name another manager owns is [`QueueError::AlreadyRunning`].
async fn serve(
    bus: Option<&Bus>,
    queue: &str,
    handle: QueueHandle,
    store: Arc<Store>,
) -> Result<Option<QueueSignals>, QueueError> {
    let Some(bus) = bus else {
        return Ok(None);
    };
    let path = super::queue_object_path(queue);
    let object = QueueObject::new(handle, store);
    let watchers = object.watchers.clone();
    let conn = bus
        .builder()
        .serve_at(path.as_str(), object)
        .name(super::queue_bus_name(queue))
        .replace_existing_names(false)
        .build()
        .await
        .map_err(|e| match e {
            zbus::Error::NameTaken => QueueError::AlreadyRunning(queue.to_string()),
            other => QueueError::Bus(other),
        })?;
    let iface = conn
        .object_server()
        .interface::<_, QueueObject>(path.as_str())
        .await?;
    let forget = super::watchers::forget_when_gone(&conn, watchers.clone());
    Ok(Some(QueueSignals {
        iface,
        watchers,
        forget,
        conn,
        notify: !bus.is_system(),
    }))
}

/// Opens queue `cfg.queue`'s manager, serves it on `cfg.bus` (taking the bus name before
/// anything in the store changes) and starts it: ready to [`Manager::run`].
pub async fn start_manager(cfg: ManagerConfig) -> Result<Manager, QueueError> {
    let (bus, queue) = (cfg.bus.clone(), cfg.queue.clone());
    let mut m = Manager::open(cfg).await?;
    if let Some(signals) = serve(bus.as_ref(), &queue, m.handle(), m.store()).await? {
        m.attach(Box::new(signals));
    }
    m.start().await
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
    /// Answers an approval request.
    fn answer(
        &self,
        request_id: &str,
        allow: bool,
        always: bool,
        message: &str,
    ) -> zbus::Result<()>;
    /// Answers an approval request on behalf of `user` (trusted callers only).
    fn answer_for(
        &self,
        request_id: &str,
        allow: bool,
        always: bool,
        message: &str,
        user: &str,
    ) -> zbus::Result<()>;
    /// ListApprovals: the waiting requests the caller may see.
    fn list_approvals(&self) -> zbus::Result<Vec<PendingApproval>>;
    /// ApprovalRequested (ids only).
    #[zbus(signal)]
    fn approval_requested(
        &self,
        job_id: String,
        request_id: String,
        deadline: String,
    ) -> zbus::Result<()>;
    /// ApprovalAnswered (ids only).
    #[zbus(signal)]
    fn approval_answered(&self, job_id: String, request_id: String) -> zbus::Result<()>;
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
    /// WatchJobs: JobStateChanged for this connection from now on (with `replay`, first the
    /// changes since the manager started).
    fn watch_jobs(&self, replay: bool) -> zbus::Result<()>;
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
