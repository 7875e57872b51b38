//! `org.agentstore.Orchestrator1` at `/org/agentstore/Orchestrator1`: the orchestrator's
//! D-Bus API (server side) and its client proxy.
//!
//! A thin adapter: each method finds the caller's uid, hands the call to the orchestrator
//! service (`orchestrator::service`), and translates its answer and errors into D-Bus
//! (`bus::error`); [`DbusFrontend`] serves the object for the daemon and turns what a pass
//! answered into signals.

use super::BusError;
use super::caller::caller_uid;
use super::{Bus, ORCHESTRATOR_NAME, ORCHESTRATOR_PATH};
use crate::orchestrator::DaemonError;
use crate::orchestrator::service::CycleReport;
use crate::orchestrator::service::{self, Frontend};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;

pub use crate::orchestrator::service::Shared;

/// The D-Bus object.
#[derive(Debug, Clone)]
pub struct OrchestratorObject {
    shared: Arc<Shared>,
}

impl OrchestratorObject {
    /// An object serving `shared`.
    pub fn new(shared: Arc<Shared>) -> OrchestratorObject {
        OrchestratorObject { shared }
    }

    /// The typed signals for the inbox messages one pass answered, in order: each message's
    /// `MessageProcessed`, then its `JobCreated`. (D-Bus `Submit` emits its own.) Signals
    /// reach every listener on the bus, so they carry ids only (PRD §10, DESIGN §9: every
    /// reader is authorized): what was asked and answered is in the answer (the D-Bus reply,
    /// the outbox file), the job is read with `view-job`.
    pub async fn emit_cycle_signals(emitter: &SignalEmitter<'_>, report: &CycleReport) {
        for (cid, _command, _status, _project, job) in &report.answered {
            if let Err(e) = Self::message_processed(emitter, cid).await {
                tracing::debug!("MessageProcessed: {e}");
            }
            if let Some(j) = job
                && let Err(e) = Self::job_created(emitter, &j.id, &j.queue).await
            {
                tracing::debug!("JobCreated: {e}");
            }
        }
    }
}

/// Answers longer than this are followed by giving freed memory back (malloc_trim).
const BIG_ANSWER_BYTES: usize = 1 << 20;

#[zbus::interface(name = "org.agentstore.Orchestrator1")]
impl OrchestratorObject {
    /// Handles one message (a PRD §4.2 document as JSON) and returns the response document.
    /// Direct commands are answered at once; agent commands return the created job
    /// (`content.job_id`, `queue`, `job_path`); the upkeep commands `retry` (content.job),
    /// `archive` (content.older_than, dry_run) and `migrate` (content.dry_run) write the store
    /// as the daemon and return their report in `content.result` (retry: the project's owner
    /// or an admin; archive, migrate: admins). `correlation_id`, `queue_time`, `source` and
    /// `status` may be omitted. Errors: org.agentstore.Error.InvalidMessage, .NotFound,
    /// .PermissionDenied, .Failed; .Unavailable while the daemon stops (nothing was done: call
    /// again and activation starts the next instance).
    #[zbus(out_args("response"))]
    async fn submit(
        &self,
        message: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<String, BusError> {
        self.shared.activity.fetch_add(1, Ordering::Relaxed);
        let uid = caller_uid(conn, &hdr).await?;
        let shared = self.shared.clone();
        let mut outcome = self
            .shared
            .run_call(move || service::submit(&shared, &message, uid))
            .await??;
        let r = &outcome.response;
        let _ = Self::message_processed(&emitter, &r.correlation_id).await;
        if let Some(job) = outcome.job.as_ref().filter(|j| j.new) {
            let _ = Self::job_created(&emitter, &job.id, &job.queue).await;
        }
        if let Some(e) = outcome.error {
            return Err(e.into());
        }
        let text = serde_json::to_string(&outcome.response)
            .map_err(|e| BusError::Failed(e.to_string()))?;
        let command = std::mem::take(&mut outcome.response.command);
        // A big answer (a long list-jobs) leaves many small freed blocks behind: give them
        // back to the system rather than keep the peak for the daemon's lifetime.
        let big = text.len() > BIG_ANSWER_BYTES;
        drop(outcome.response);
        // An answer over the bus's message limit would be refused by the bus (and cost the
        // daemon its connection and its name): answer with an error that says what to do.
        if text.len() > super::listing::MAX_REPLY_BYTES {
            let len = text.len();
            drop(text);
            crate::store::listing::release_memory();
            return Err(BusError::Failed(format!(
                "the answer to {command} is {len} bytes, over the {} bytes one D-Bus reply may carry; list jobs page by page (ListJobs, as `orchestrator list-jobs` does) or narrow the request",
                super::listing::MAX_REPLY_BYTES
            )));
        }
        if big {
            crate::store::listing::release_memory();
        }
        Ok(text)
    }

    /// One page of jobs, oldest `queue_time` first (ties by id), as a JSON array of job
    /// documents without `runtime.output` (use view-job for that). `filter` may hold
    /// `status` (queued, running, finished, failed), `project`, `queue`, `user` (the
    /// user a trusted caller acts for), `fields` (all, summary) and `after` (a cursor: the
    /// page starts just past `<seconds>.<nanoseconds>/<queue>/<id>` of a listed job, the
    /// last of the previous page: its queue_time as Unix seconds and nine digits, its queue
    /// and id; whatever was added or removed before it; `offset` is then not used). `limit` 0 means the default (500); at most 5000 jobs
    /// and about 4 MiB go in one page, so an answer always fits a D-Bus message. Returns the
    /// page, how many jobs match in all, and the offset of the next page (= `total` when
    /// this was the last). Errors: org.agentstore.Error.InvalidMessage, .NotFound,
    /// .PermissionDenied.
    #[zbus(out_args("jobs", "total", "next_offset"))]
    async fn list_jobs(
        &self,
        filter: std::collections::HashMap<String, String>,
        offset: u32,
        limit: u32,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(String, u32, u32), BusError> {
        self.shared.activity.fetch_add(1, Ordering::Relaxed);
        let uid = caller_uid(conn, &hdr).await?;
        let shared = self.shared.clone();
        self.shared
            .run_call(move || super::listing::list_jobs_page(&shared, uid, &filter, offset, limit))
            .await?
    }

    /// Processes the inbox and finished jobs now; returns how many items were handled.
    /// Messages it answers are announced with `MessageProcessed` (and `JobCreated`), as the
    /// daemon's own loop announces them.
    #[zbus(out_args("handled"))]
    async fn sweep(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<u32, BusError> {
        self.shared.activity.fetch_add(1, Ordering::Relaxed);
        let uid = caller_uid(conn, &hdr).await?;
        let shared = self.shared.clone();
        let report = self
            .shared
            .run_call(move || crate::orchestrator::pass::sweep(&shared, uid))
            .await??;
        Self::emit_cycle_signals(&emitter, &report).await;
        Ok(u32::try_from(report.handled).unwrap_or(u32::MAX))
    }

    /// Package version.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    /// The store folder.
    #[zbus(property(emits_changed_signal = "const"))]
    fn store_root(&self) -> String {
        self.shared.store.root().display().to_string()
    }

    /// Messages answered since start.
    #[zbus(property(emits_changed_signal = "false"))]
    fn messages_processed(&self) -> u64 {
        self.shared.messages_processed.load(Ordering::Relaxed)
    }

    /// Jobs created since start.
    #[zbus(property(emits_changed_signal = "false"))]
    fn jobs_created(&self) -> u64 {
        self.shared.jobs_created.load(Ordering::Relaxed)
    }

    /// Messages answered with an error since start.
    #[zbus(property(emits_changed_signal = "false"))]
    fn errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    /// End of the last loop (`YYYY-MM-DDTHH:MM:SSZ`, empty before the first).
    #[zbus(property(emits_changed_signal = "false"))]
    fn last_loop_time(&self) -> String {
        self.shared
            .last_loop
            .lock()
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    /// Machines sharing the store whose heartbeats stopped for longer than
    /// `machines.stale_after_seconds` (host names, sorted).
    #[zbus(property)]
    fn stale_machines(&self) -> Vec<String> {
        self.shared.machines.lock().stale_hosts()
    }

    /// This orchestratord's role (issue 13, failover): `active` (holds the store lock and
    /// answers), `standby` (another machine holds the lock; this one takes over when that one
    /// goes silent; calls that change the store are refused) or `read-only` (the store
    /// cannot be written).
    #[zbus(property)]
    fn role(&self) -> String {
        self.shared.role_name().to_string()
    }

    /// A machine went stale (`stale` true: no heartbeat since `last_seen`) or reports again.
    #[zbus(signal)]
    pub async fn machine_state_changed(
        emitter: &SignalEmitter<'_>,
        host: &str,
        stale: bool,
        last_seen: &str,
    ) -> zbus::Result<()>;

    /// A message was answered (D-Bus or inbox). Its id only: the command and the outcome are
    /// the sender's, in the answer (the D-Bus reply, `messaging/outbox/<id>.json`).
    #[zbus(signal)]
    pub async fn message_processed(
        emitter: &SignalEmitter<'_>,
        correlation_id: &str,
    ) -> zbus::Result<()>;

    /// A job was created in `queue` (queues are public: their bus names are). The job's
    /// project and everything else are read with `view-job`, which PRD §10 authorizes.
    #[zbus(signal)]
    pub async fn job_created(
        emitter: &SignalEmitter<'_>,
        job_id: &str,
        queue: &str,
    ) -> zbus::Result<()>;
}

/// The daemon's D-Bus front end: serves [`OrchestratorObject`] under
/// `org.agentstore.Orchestrator1` on the chosen bus (none: the inbox only) and emits the
/// signals of each pass.
#[derive(Debug)]
pub struct DbusFrontend {
    bus: Option<Bus>,
    conn: Option<zbus::Connection>,
}

impl DbusFrontend {
    /// A front end on `bus` (`None`: no D-Bus).
    pub fn new(bus: Option<Bus>) -> DbusFrontend {
        DbusFrontend { bus, conn: None }
    }
}

impl DbusFrontend {
    /// The served object, once serving.
    async fn object(&self) -> Option<zbus::object_server::InterfaceRef<OrchestratorObject>> {
        self.conn
            .as_ref()?
            .object_server()
            .interface::<_, OrchestratorObject>(ORCHESTRATOR_PATH)
            .await
            .ok()
    }
}

impl Frontend for DbusFrontend {
    async fn serve(&mut self, shared: Arc<Shared>) -> Result<(), DaemonError> {
        let Some(kind) = &self.bus else {
            return Ok(());
        };
        let built = kind
            .builder()
            .serve_at(ORCHESTRATOR_PATH, OrchestratorObject::new(shared))
            .name(ORCHESTRATOR_NAME)
            .replace_existing_names(false)
            .allow_name_replacements(false)
            .build()
            .await;
        match built {
            Ok(c) => {
                self.conn = Some(c);
                Ok(())
            }
            Err(zbus::Error::NameTaken) => Err(DaemonError::AlreadyRunning(format!(
                "Orchestrator already running: {ORCHESTRATOR_NAME} is owned on the {kind} bus"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// The D-Bus signals for messages answered from the inbox (D-Bus calls emit their own),
    /// typed and in order.
    async fn announce(&self, report: &CycleReport) {
        let Some(conn) = &self.conn else { return };
        match SignalEmitter::new(conn, ORCHESTRATOR_PATH) {
            Ok(emitter) => OrchestratorObject::emit_cycle_signals(&emitter, report).await,
            Err(e) => tracing::debug!("cannot emit signals: {e}"),
        }
    }

    /// `Role`'s change.
    async fn role_changed(&self) {
        let Some(iface) = self.object().await else {
            return;
        };
        let _ = iface.get().await.role_changed(iface.signal_emitter()).await;
    }

    /// `StaleMachines`' change, then `MachineStateChanged` for each machine.
    async fn machines_changed(&self, changes: &[crate::orchestrator::machines::MachineChange]) {
        let Some(iface) = self.object().await else {
            return;
        };
        let e = iface.signal_emitter();
        // The property first: a client reacting to a signal reads the new list.
        let _ = iface.get().await.stale_machines_changed(e).await;
        for c in changes {
            if let Err(err) =
                OrchestratorObject::machine_state_changed(e, &c.host, c.stale, &c.last_seen).await
            {
                tracing::debug!("MachineStateChanged: {err}");
            }
        }
    }
}

/// Makes `call` again while orchestratord answers `org.agentstore.Error.Unavailable` (it is
/// stopping after its idle time, or being restarted, and took nothing of the call), for up to
/// a minute: once the old process has gone, the next call starts a new one through bus
/// activation. Any other answer is returned as it is.
pub async fn again_while_stopping<T, F, Fut>(mut call: F) -> zbus::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = zbus::Result<T>>,
{
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut pause = std::time::Duration::from_millis(50);
    loop {
        match call().await {
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == super::error::UNAVAILABLE
                    && std::time::Instant::now() < end =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// `Submit` through [`again_while_stopping`]: what every front end calls.
pub async fn submit_when_up(proxy: &Orchestrator1Proxy<'_>, message: &str) -> zbus::Result<String> {
    again_while_stopping(|| proxy.submit(message)).await
}

/// Client side of `org.agentstore.Orchestrator1`.
#[zbus::proxy(
    interface = "org.agentstore.Orchestrator1",
    default_service = "org.agentstore.Orchestrator1",
    default_path = "/org/agentstore/Orchestrator1"
)]
pub trait Orchestrator1 {
    /// See the server's `Submit`.
    fn submit(&self, message: &str) -> zbus::Result<String>;
    /// See the server's `Sweep`.
    fn sweep(&self) -> zbus::Result<u32>;
    /// See the server's `ListJobs`.
    fn list_jobs(
        &self,
        filter: std::collections::HashMap<&str, &str>,
        offset: u32,
        limit: u32,
    ) -> zbus::Result<(String, u32, u32)>;
    /// Package version.
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
    /// Store folder.
    #[zbus(property)]
    fn store_root(&self) -> zbus::Result<String>;
    /// Messages answered.
    #[zbus(property)]
    fn messages_processed(&self) -> zbus::Result<u64>;
    /// Jobs created.
    #[zbus(property)]
    fn jobs_created(&self) -> zbus::Result<u64>;
    /// Messages answered with an error.
    #[zbus(property)]
    fn errors(&self) -> zbus::Result<u64>;
    /// Last loop time.
    #[zbus(property)]
    fn last_loop_time(&self) -> zbus::Result<String>;
    /// See the server's `StaleMachines`.
    #[zbus(property)]
    fn stale_machines(&self) -> zbus::Result<Vec<String>>;
    /// See the server's `Role`.
    #[zbus(property)]
    fn role(&self) -> zbus::Result<String>;
    /// See the server's `MachineStateChanged`.
    #[zbus(signal)]
    fn machine_state_changed(&self, host: &str, stale: bool, last_seen: &str) -> zbus::Result<()>;
    /// See the server's `MessageProcessed`.
    #[zbus(signal)]
    fn message_processed(&self, correlation_id: &str) -> zbus::Result<()>;
    /// See the server's `JobCreated`.
    #[zbus(signal)]
    fn job_created(&self, job_id: &str, queue: &str) -> zbus::Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn named(name: &str) -> zbus::Error {
        zbus::Error::MethodError(
            zbus::names::OwnedErrorName::try_from(name).unwrap(),
            Some("why".into()),
            zbus::message::Message::method_call("/", "Ping")
                .build(&())
                .unwrap(),
        )
    }

    fn unavailable() -> zbus::Error {
        named(super::super::error::UNAVAILABLE)
    }

    /// A call refused by a stopping daemon is made again; the next instance's answer is the
    /// caller's.
    #[tokio::test]
    async fn a_call_refused_while_stopping_is_made_again() {
        let calls = AtomicU32::new(0);
        let got = again_while_stopping(|| async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(unavailable())
            } else {
                Ok("answered")
            }
        })
        .await
        .unwrap();
        assert_eq!(got, "answered");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    /// Any other error is the caller's at once (a refusal is never retried).
    #[tokio::test]
    async fn other_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let got: zbus::Result<()> = again_while_stopping(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(named("org.agentstore.Error.PermissionDenied"))
        })
        .await;
        assert!(got.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// A daemon that has begun to stop refuses new work with the error callers retry on,
    /// never with a plain failure (what a CLI racing an idle exit used to print).
    #[tokio::test]
    async fn a_stopping_daemon_answers_unavailable() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = crate::store::Store::init(&d.path().join("S")).unwrap();
        let shared = crate::orchestrator::service::Shared::new(store);
        shared.drain().await;
        let refused = shared.run_blocking(|| ()).await.unwrap_err();
        let e = BusError::from(refused);
        assert_eq!(
            zbus::DBusError::name(&e).as_str(),
            super::super::error::UNAVAILABLE
        );
    }
}
