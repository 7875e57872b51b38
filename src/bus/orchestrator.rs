//! `org.agentstore.Orchestrator1` at `/org/agentstore/Orchestrator1`: the orchestrator's
//! D-Bus API (server side) and its client proxy.

use super::BusError;
use super::caller::{caller_for_uid, caller_uid};
use crate::model::{DocKind, Message, Timestamp};
use crate::orchestrator::daemon::CycleReport;
use crate::orchestrator::{self, DAEMON};
use crate::store::{Event, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;

/// State shared by the daemon loop and the D-Bus object.
#[derive(Debug)]
pub struct Shared {
    /// The store.
    pub store: Store,
    /// Serialises routing: the loop and D-Bus calls never handle messages at the same time.
    pub routing: Mutex<()>,
    /// Messages answered since start.
    pub messages_processed: AtomicU64,
    /// Jobs created since start.
    pub jobs_created: AtomicU64,
    /// Messages answered with an error since start.
    pub errors: AtomicU64,
    /// End of the last loop.
    pub last_loop: Mutex<Option<Timestamp>>,
    /// Bumped on every call, so the idle timer restarts.
    pub activity: AtomicU64,
    /// Our own uid: calls from it (and root) are trusted.
    pub own_uid: u32,
    /// Why the store cannot be written, while it cannot (a full disk): the daemon then
    /// answers only read-only commands.
    pub read_only: Mutex<Option<String>>,
    /// Event-driven completion handling: the handled-log and the jobs reported finished.
    pub completions: Mutex<crate::orchestrator::handled::Completions>,
    /// Job heads for `ListJobs`, kept between calls (folders re-listed only when changed).
    pub job_index: Mutex<crate::store::listing::JobIndex>,
}

impl Shared {
    /// Wraps an opened store.
    pub fn new(store: Store) -> Arc<Shared> {
        Arc::new(Shared {
            store,
            routing: Mutex::new(()),
            messages_processed: AtomicU64::new(0),
            jobs_created: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_loop: Mutex::new(None),
            activity: AtomicU64::new(0),
            own_uid: nix::unistd::getuid().as_raw(),
            read_only: Mutex::new(None),
            completions: Mutex::new(crate::orchestrator::handled::Completions::new()),
            job_index: Mutex::new(Default::default()),
        })
    }
}

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
    /// `MessageProcessed`, then its `JobCreated`. (D-Bus `Submit` emits its own.)
    pub async fn emit_cycle_signals(emitter: &SignalEmitter<'_>, report: &CycleReport) {
        for (cid, command, status, project, job) in &report.answered {
            if let Err(e) = Self::message_processed(emitter, cid, command, status).await {
                tracing::debug!("MessageProcessed: {e}");
            }
            if let Some(j) = job
                && let Err(e) = Self::job_created(emitter, &j.id, &j.queue, project).await
            {
                tracing::debug!("JobCreated: {e}");
            }
        }
    }
}

#[zbus::interface(name = "org.agentstore.Orchestrator1")]
impl OrchestratorObject {
    /// Handles one message (a PRD §4.2 document as JSON) and returns the response document.
    /// Direct commands are answered at once; agent commands return the created job
    /// (`content.job_id`, `queue`, `job_path`). `correlation_id`, `queue_time`, `source` and
    /// `status` may be omitted. Errors: org.agentstore.Error.InvalidMessage, .NotFound,
    /// .PermissionDenied, .Failed.
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
        let outcome = tokio::task::spawn_blocking(move || submit_blocking(&shared, &message, uid))
            .await
            .map_err(|e| BusError::Failed(e.to_string()))??;
        let r = &outcome.response;
        let status = if outcome.error.is_some() {
            "error"
        } else {
            "done"
        };
        let _ = Self::message_processed(&emitter, &r.correlation_id, &r.command, status).await;
        if let Some(job) = outcome.job.as_ref().filter(|j| j.new) {
            let project = r.project.clone().unwrap_or_default();
            let _ = Self::job_created(&emitter, &job.id, &job.queue, &project).await;
        }
        if let Some(e) = outcome.error {
            return Err(e.into());
        }
        let text = serde_json::to_string(&outcome.response)
            .map_err(|e| BusError::Failed(e.to_string()))?;
        // An answer over the bus's message limit would be refused by the bus (and cost the
        // daemon its connection and its name): answer with an error that says what to do.
        if text.len() > super::listing::MAX_REPLY_BYTES {
            return Err(BusError::Failed(format!(
                "the answer to {} is {} bytes, over the {} bytes one D-Bus reply may carry; list jobs page by page (ListJobs, as `orchestrator list-jobs` does) or narrow the request",
                outcome.response.command,
                text.len(),
                super::listing::MAX_REPLY_BYTES
            )));
        }
        Ok(text)
    }

    /// One page of jobs, oldest `queue_time` first (ties by id), as a JSON array of job
    /// documents without `runtime.output` (use view-job for that). `filter` may hold
    /// `status` (queued, running, finished, failed), `project`, `queue`, and `user` (the
    /// user a trusted caller acts for). `limit` 0 means the default (500); at most 5000 jobs
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
        tokio::task::spawn_blocking(move || {
            super::listing::list_jobs_page(&shared, uid, &filter, offset, limit)
        })
        .await
        .map_err(|e| BusError::Failed(e.to_string()))?
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
        let who = caller_for_uid(&self.shared.store, uid, self.shared.own_uid, None)?;
        if !who.is_admin() {
            return Err(BusError::permission_denied("only admins can sweep"));
        }
        if let Some(why) = self.shared.read_only.lock().ok().and_then(|r| r.clone()) {
            return Err(BusError::Failed(format!(
                "orchestratord is read-only for now: {why}"
            )));
        }
        if let Ok(mut c) = self.shared.completions.lock() {
            c.request_full_sweep();
        }
        let shared = self.shared.clone();
        let report =
            tokio::task::spawn_blocking(move || crate::orchestrator::daemon::cycle_report(&shared))
                .await?
                .map_err(|e| BusError::Failed(e.to_string()))?;
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
            .map(|t| t.map(|t| t.to_string()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// A message was answered (D-Bus or inbox).
    #[zbus(signal)]
    pub async fn message_processed(
        emitter: &SignalEmitter<'_>,
        correlation_id: &str,
        command: &str,
        status: &str,
    ) -> zbus::Result<()>;

    /// A job was created.
    #[zbus(signal)]
    pub async fn job_created(
        emitter: &SignalEmitter<'_>,
        job_id: &str,
        queue: &str,
        project: &str,
    ) -> zbus::Result<()>;
}

/// Parses, fills defaults, validates and handles a submitted message.
fn submit_blocking(
    shared: &Shared,
    text: &str,
    uid: u32,
) -> Result<orchestrator::Outcome, BusError> {
    let store = &shared.store;
    let mut value: serde_json::Value =
        crate::model::strict::parse_value(text.as_bytes()).map_err(|e| {
            BusError::InvalidMessage(format!("Invalid message format: not valid JSON: {e}"))
        })?;
    if let Some(obj) = value.as_object_mut() {
        obj.entry("correlation_id")
            .or_insert_with(|| uuid::Uuid::new_v4().to_string().into());
        obj.entry("source").or_insert_with(|| "user".into());
        obj.entry("queue_time")
            .or_insert_with(|| Timestamp::now().to_string().into());
        obj.entry("status").or_insert_with(|| "queued".into());
        obj.entry("content")
            .or_insert_with(|| serde_json::json!({}));
    }
    if let Err(rej) = store.validator().validate(DocKind::Message, &value) {
        let bytes = value.to_string().into_bytes();
        store.log_rejection(std::path::Path::new("dbus-submit.json"), &bytes, &rej);
        return Err(BusError::InvalidMessage(format!(
            "Invalid message format: {rej}"
        )));
    }
    let msg: Message = serde_json::from_value(value)
        .map_err(|e| BusError::InvalidMessage(format!("Invalid message format: {e}")))?;
    let who = caller_for_uid(store, uid, shared.own_uid, msg.user.as_deref())?;
    if !orchestrator::commands::is_direct(&msg.command)
        && let Some(why) = shared.read_only.lock().ok().and_then(|r| r.clone())
    {
        return Err(BusError::Failed(format!(
            "orchestratord is read-only for now: {why}; only list-* and view-* commands are answered until the store can be written"
        )));
    }
    let _guard = shared
        .routing
        .lock()
        .map_err(|_| BusError::Failed("routing lock poisoned".into()))?;
    let outcome = orchestrator::handle(store, &msg, &who);
    leave_in_outbox(store, &msg, &outcome);
    shared.messages_processed.fetch_add(1, Ordering::Relaxed);
    if outcome.error.is_some() {
        shared.errors.fetch_add(1, Ordering::Relaxed);
    }
    let mut ev = Event::new(DAEMON, "message_answered")
        .correlation(&msg.correlation_id)
        .detail(format!(
            "{} (D-Bus uid {uid}) → {}",
            msg.command,
            outcome.response.error.as_deref().unwrap_or("done")
        ));
    if let Some(p) = &msg.project {
        ev = ev.project(p);
    }
    store.record_event(&ev);
    if let Some(job) = outcome.job.as_ref().filter(|j| j.new) {
        shared.jobs_created.fetch_add(1, Ordering::Relaxed);
        store.record_event(
            &Event::new(DAEMON, "job_created")
                .job(&job.id)
                .queue(&job.queue)
                .correlation(&msg.correlation_id),
        );
        tracing::info!(job_id = %job.id, queue = %job.queue, correlation_id = %msg.correlation_id, "job created");
    }
    tracing::info!(correlation_id = %msg.correlation_id, "answered {} over D-Bus", msg.command);
    Ok(outcome)
}

/// The audit trail (PRD §4.2, issue 11): the answer to a D-Bus submission that does
/// something (agent commands, create-environment; not the read-only browsing commands) is
/// also written to `messaging/outbox/<correlation_id>.json`, as a file submission's would be,
/// so other machines see it through the synced folder. An answer already there (a reused
/// correlation id) is never replaced; a failure to write is logged and does not fail the call.
fn leave_in_outbox(store: &crate::store::Store, msg: &Message, outcome: &orchestrator::Outcome) {
    if orchestrator::commands::is_direct(&msg.command)
        || !crate::model::is_safe_id(&msg.correlation_id)
    {
        return;
    }
    let name = format!("{}.json", msg.correlation_id);
    let path = store.outbox().join(&name);
    if path.exists() || store.processed_outbox().join(&name).exists() {
        return;
    }
    if let Err(e) = store.write_doc(DocKind::Message, &path, &outcome.response) {
        tracing::warn!(correlation_id = %msg.correlation_id, "cannot leave the answer in the outbox: {e}");
    }
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
    /// See the server's `MessageProcessed`.
    #[zbus(signal)]
    fn message_processed(
        &self,
        correlation_id: &str,
        command: &str,
        status: &str,
    ) -> zbus::Result<()>;
    /// See the server's `JobCreated`.
    #[zbus(signal)]
    fn job_created(&self, job_id: &str, queue: &str, project: &str) -> zbus::Result<()>;
}
