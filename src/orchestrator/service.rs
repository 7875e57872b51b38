//! The orchestrator service: the state the daemon loop and its front end share
//! ([`Shared`]), what a submission and a sweep do ([`submit`], [`sweep`]), and the
//! [`Frontend`] the daemon serves through. The front end (D-Bus, `bus::orchestrator`) only
//! translates calls and errors; every decision is made here or below.

use super::caller::caller_for_uid;
use super::error::DaemonError;
use super::{Outcome, RouteError};
use crate::model::{DocKind, Message, Timestamp};
use crate::store::Store;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::task::JoinSet;

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
    /// Active, standby or read-only ([`crate::orchestrator::standby`]).
    pub role: Mutex<crate::orchestrator::standby::Role>,
    /// The holder's lease and the messages held back after a take-over (a copy of the
    /// seat's, published by the lock thread).
    pub lease: Mutex<crate::orchestrator::standby::Lease>,
    /// Event-driven completion handling: the handled-log and the jobs reported finished.
    pub completions: Mutex<crate::orchestrator::handled::Completions>,
    /// Job heads for `ListJobs`, kept between calls (folders re-listed only when changed).
    pub job_index: Mutex<crate::store::listing::JobIndex>,
    /// The heartbeat and the machines' states ([`crate::orchestrator::machines`]).
    pub machines: Mutex<crate::orchestrator::machines::MachineWatch>,
    /// The blocking work of the loop and of calls ([`Shared::run_blocking`]); `None` once
    /// the daemon is stopping. Drained before the store lock is let go.
    tasks: Mutex<Option<JoinSet<()>>>,
    /// Calls' work running at once at most ([`CALLS_AT_ONCE`]): 50 clients queue on the
    /// runtime instead of each taking a thread of its own (issue 33: 6 threads grew to 59).
    calls: Arc<tokio::sync::Semaphore>,
}

/// D-Bus calls (`Submit`, `ListJobs`, `Sweep`) whose work runs at once at most; the daemon's
/// own loop never waits for them (it takes no permit).
pub const CALLS_AT_ONCE: usize = 4;

impl Shared {
    /// Wraps an opened store.
    pub fn new(store: Store) -> Arc<Shared> {
        let machines = Mutex::new(crate::orchestrator::machines::MachineWatch::new(&store));
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
            role: Mutex::new(crate::orchestrator::standby::Role::Standby(
                crate::orchestrator::standby::STARTING.into(),
            )),
            lease: Mutex::new(Default::default()),
            completions: Mutex::new(crate::orchestrator::handled::Completions::new()),
            job_index: Mutex::new(Default::default()),
            machines,
            tasks: Mutex::new(Some(JoinSet::new())),
            calls: Arc::new(tokio::sync::Semaphore::new(CALLS_AT_ONCE)),
        })
    }

    /// Runs `work` on a blocking thread, tracked so that shutdown waits for it (a call's
    /// write is never cut off by the daemon letting the store lock go). Refused once the
    /// daemon is stopping.
    pub async fn run_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, RouteError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut tasks = self.tasks.lock();
            let Some(set) = tasks.as_mut() else {
                return Err(RouteError::Unavailable(
                    "orchestratord is stopping and took nothing of this call; call again (activation starts it anew)".into(),
                ));
            };
            while set.try_join_next().is_some() {}
            set.spawn_blocking(move || {
                let _ = tx.send(work());
            });
        }
        rx.await
            .map_err(|_| RouteError::Failed("the daemon's work stopped before it answered".into()))
    }

    /// [`Shared::run_blocking`] for a call: at most [`CALLS_AT_ONCE`] at a time, the others
    /// waiting their turn without a thread. The turn is held until the work ends, even when
    /// the caller stops waiting for it.
    pub async fn run_call<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, RouteError> {
        let turn =
            self.calls.clone().acquire_owned().await.map_err(|_| {
                RouteError::Unavailable("orchestratord is stopping; call again".into())
            })?;
        self.run_blocking(move || {
            let out = work();
            drop(turn);
            out
        })
        .await
    }

    /// Refuses new work and waits for the work under way.
    pub async fn drain(&self) {
        let set = self.tasks.lock().take();
        if let Some(mut set) = set {
            while set.join_next().await.is_some() {}
        }
    }

    /// Why the store cannot be written now, if it cannot.
    pub fn read_only_reason(&self) -> Option<String> {
        self.read_only.lock().clone()
    }

    /// The role now (`active`, `standby`, `read-only`).
    pub fn role_name(&self) -> &'static str {
        self.role.lock().name()
    }

    /// Why this process answers nothing that changes the store now: a standby names the
    /// lock's holder.
    /// A call that arrives while the daemon is still taking the lock (the bus name is owned
    /// first) waits for it, up to 10 s.
    pub fn standby_reason(&self) -> Option<String> {
        use crate::orchestrator::standby::Role;
        let starting = || {
            matches!(&*self.role.lock(),
                Role::Standby(w) if w == crate::orchestrator::standby::STARTING)
        };
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while starting() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        match &*self.role.lock() {
            Role::Standby(why) => Some(format!("this orchestratord is a standby ({why})")),
            Role::Settling => {
                Some("this orchestratord has just taken the store lock over and is settling".into())
            }
            Role::Active => self.lapsed_reason(),
            Role::ReadOnly(_) => None,
        }
    }

    /// Why an active holder answers nothing right now: its lock was last written longer ago
    /// than its lease (it was stopped or suspended, or its disk is full), so another machine
    /// may have taken over.
    pub fn lapsed_reason(&self) -> Option<String> {
        let lease = self.lease.lock();
        lease.lapsed_for().map(|s| {
            format!(
                "this orchestratord last wrote the store lock {s} s ago, longer than its lease; it answers again once it has written the lock and settled"
            )
        })
    }
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

/// The daemon's front end: how callers reach it besides the inbox (D-Bus, served by
/// `bus::orchestrator::DbusFrontend`), or nothing. The daemon knows no D-Bus: it asks the
/// front end to start serving and to announce what each pass answered.
pub trait Frontend: Send {
    /// Starts serving `shared` (for D-Bus: takes the well-known name; a name owned by
    /// another instance is [`DaemonError::AlreadyRunning`]).
    fn serve(
        &mut self,
        shared: Arc<Shared>,
    ) -> impl Future<Output = Result<(), DaemonError>> + Send;

    /// Announces the inbox messages one pass answered, in order (`MessageProcessed`, then
    /// the message's `JobCreated`).
    fn announce(&self, report: &CycleReport) -> impl Future<Output = ()> + Send;

    /// Announces that the role ([`Shared::role_name`]) changed (`Role`'s change signal).
    fn role_changed(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Announces machines that went stale or came back (`MachineStateChanged`).
    fn machines_changed(
        &self,
        _changes: &[crate::orchestrator::machines::MachineChange],
    ) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// No front end: the inbox only.
#[derive(Debug, Clone, Copy, Default)]
pub struct InboxOnly;

impl Frontend for InboxOnly {
    async fn serve(&mut self, _shared: Arc<Shared>) -> Result<(), DaemonError> {
        Ok(())
    }

    async fn announce(&self, _report: &CycleReport) {}
}

/// Parses, fills defaults, validates and handles a message submitted by Unix user `uid`
/// (PRD §4.2; `correlation_id`, `queue_time`, `source` and `status` may be omitted).
pub fn submit(shared: &Shared, text: &str, uid: u32) -> Result<Outcome, RouteError> {
    let store = &shared.store;
    let mut value: serde_json::Value = crate::model::strict::parse_value(text.as_bytes())
        .map_err(|e| RouteError::Invalid(format!("Invalid message format: not valid JSON: {e}")))?;
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
        return Err(RouteError::Invalid(format!(
            "Invalid message format: {rej}"
        )));
    }
    let msg: Message = serde_json::from_value(value)
        .map_err(|e| RouteError::Invalid(format!("Invalid message format: {e}")))?;
    let _span = tracing::info_span!("message", correlation_id = %msg.correlation_id).entered();
    let who = caller_for_uid(store, uid, shared.own_uid, msg.user.as_deref())?;
    if !super::commands::is_direct(&msg.command)
        && let Some(why) = shared.standby_reason()
    {
        return Err(RouteError::Failed(format!(
            "{why}; only list-* and view-* commands are answered here; write the message to messaging/inbox/ or ask the active orchestrator"
        )));
    }
    if !super::commands::is_direct(&msg.command)
        && let Some(why) = shared.read_only_reason()
    {
        return Err(RouteError::Failed(format!(
            "orchestratord is read-only for now: {why}; only list-* and view-* commands are answered until the store can be written"
        )));
    }
    let _guard = shared.routing.lock();
    let outcome = super::handle(store, &msg, &who);
    shared.messages_processed.fetch_add(1, Ordering::Relaxed);
    if outcome.error.is_some() {
        shared.errors.fetch_add(1, Ordering::Relaxed);
    }
    if outcome.job.as_ref().is_some_and(|j| j.new) {
        shared.jobs_created.fetch_add(1, Ordering::Relaxed);
    }
    // The record first, then the outbox copy it vouches for: killed between the two, an
    // answer is never left without its `message_answered` (issue 34). A caller that got no
    // answer submits again with the same correlation id; the job it made is found, not made
    // twice, and recorded then (`audit::job_needs_record`).
    let recorded = super::record_given_answer(
        store,
        &msg.correlation_id,
        &outcome,
        &format!("D-Bus uid {uid}"),
    );
    if recorded {
        leave_in_outbox(store, &msg, &outcome);
    } else {
        tracing::warn!(
            correlation_id = %msg.correlation_id,
            "the answer is not left in the outbox: its record could not be written now"
        );
    }
    Ok(outcome)
}

/// The audit trail (PRD §4.2, issue 11): the answer to a D-Bus submission that does
/// something (agent commands, create-environment; not the read-only browsing commands) is
/// also written to `messaging/outbox/<correlation_id>.json`, as a file submission's would be,
/// so other machines see it through the synced folder. An answer already there (a reused
/// correlation id) is never replaced; a failure to write is logged and does not fail the call.
fn leave_in_outbox(store: &Store, msg: &Message, outcome: &Outcome) {
    if super::commands::is_direct(&msg.command) || !crate::model::is_safe_id(&msg.correlation_id) {
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
