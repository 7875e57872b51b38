//! The queue manager's handle: how a front end (D-Bus, `bus::queue`) sees and drives a
//! manager without knowing its insides — a state snapshot, a request channel whose requests
//! are authorized here (PRD §10), and the events of each step, pushed in order to the
//! [`QueueEvents`] sink the front end attached.

use super::QueueError;
use crate::model::JobStatus;
use crate::model::approval::{ApprovalAnswer, ApprovalRequest};
use crate::permissions::Caller;
use crate::store::Store;
use futures_util::future::BoxFuture;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

/// What the served properties show.
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
pub type Reply = oneshot::Sender<Result<(), QueueError>>;

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
    /// Answer an approval request of a running job (the loop checks the job's project).
    Answer {
        /// `<job_id>-a<n>-<random>`.
        request_id: String,
        /// Allow or deny.
        allow: bool,
        /// Answer the same tool this way for the rest of the job.
        always: bool,
        /// Reason (the agent sees it on a deny).
        message: String,
        /// Who asks.
        caller: Caller,
        /// Caller's name for the record.
        by: String,
        /// Answer.
        reply: Reply,
    },
}

/// What a step of the manager changed, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueEvent {
    /// The served state changed (before, after); sent before the job moves it counts.
    StateChanged {
        /// Before.
        old: QueueState,
        /// After.
        new: QueueState,
    },
    /// A job moved from one folder to another.
    JobStateChanged {
        /// Job id.
        id: String,
        /// Where it was.
        old: JobStatus,
        /// Where it is.
        new: JobStatus,
    },
    /// A running job asks for a permission (the pending list already has it).
    ApprovalRequested(ApprovalRequest),
    /// A request was answered (by a person, a deadline) or dropped with its job.
    ApprovalAnswered {
        /// The request.
        request: ApprovalRequest,
        /// Its answer (`None`: the job ended first).
        answer: Option<ApprovalAnswer>,
    },
}

/// Where a manager sends its events (the D-Bus front end turns them into signals). Each is
/// awaited before the manager goes on, so the order a listener sees is the order of the
/// steps, and a caller's reply comes after the events of its request.
pub trait QueueEvents: Send + Sync {
    /// Publishes one event.
    fn emit<'a>(&'a self, event: &'a QueueEvent) -> BoxFuture<'a, ()>;
}

/// A front end's view of one queue manager.
#[derive(Debug, Clone)]
pub struct QueueHandle {
    queue: String,
    state: Arc<Mutex<QueueState>>,
    approvals: Arc<Mutex<Vec<ApprovalRequest>>>,
    requests: mpsc::Sender<QueueRequest>,
}

impl QueueHandle {
    pub(super) fn new(
        queue: String,
        state: Arc<Mutex<QueueState>>,
        approvals: Arc<Mutex<Vec<ApprovalRequest>>>,
        requests: mpsc::Sender<QueueRequest>,
    ) -> QueueHandle {
        QueueHandle {
            queue,
            state,
            approvals,
            requests,
        }
    }

    /// The approval requests waiting for an answer, oldest first (all of them: for the
    /// manager's own use; a reader gets [`QueueHandle::approvals_for`]).
    pub fn pending_approvals(&self) -> Vec<ApprovalRequest> {
        self.approvals.lock().clone()
    }

    /// The approval requests waiting for an answer that `caller` may see (PRD §10: those of
    /// the jobs `view-job` shows them), oldest first.
    pub fn approvals_for(&self, store: &Store, caller: &Caller) -> Vec<ApprovalRequest> {
        let mut all = self.pending_approvals();
        if caller.is_admin() {
            return all;
        }
        all.retain(|r| super::approval::may_see_request(store, &self.queue, r, caller));
        all
    }

    /// Answers approval request `request_id` for `caller` (recorded as `by`): admins, the
    /// job's user and those who may modify its project (PRD §10).
    pub async fn answer(
        &self,
        request_id: &str,
        allow: bool,
        always: bool,
        message: &str,
        caller: Caller,
        by: String,
    ) -> Result<(), QueueError> {
        let (request_id, message) = (request_id.to_string(), message.to_string());
        self.send(|reply| QueueRequest::Answer {
            request_id,
            allow,
            always,
            message,
            caller,
            by,
            reply,
        })
        .await
    }

    /// The state as of the manager's last step.
    pub fn snapshot(&self) -> QueueState {
        self.state.lock().clone()
    }

    /// Cancels a queued or running job for `caller` (recorded as `by`): admins, the job's
    /// user and those who may modify its project.
    pub async fn cancel(&self, id: &str, caller: Caller, by: String) -> Result<(), QueueError> {
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
    pub async fn pause(&self, caller: &Caller) -> Result<(), QueueError> {
        caller
            .require_admin(crate::permissions::Denied::PauseQueue)
            .map_err(|d| QueueError::PermissionDenied(d.to_string()))?;
        self.send(|reply| QueueRequest::Pause { reply }).await
    }

    /// Starts new jobs again. Admins only.
    pub async fn resume(&self, caller: &Caller) -> Result<(), QueueError> {
        caller
            .require_admin(crate::permissions::Denied::ResumeQueue)
            .map_err(|d| QueueError::PermissionDenied(d.to_string()))?;
        self.send(|reply| QueueRequest::Resume { reply }).await
    }

    async fn send(&self, make: impl FnOnce(Reply) -> QueueRequest) -> Result<(), QueueError> {
        let (tx, rx) = oneshot::channel();
        let stopping = || QueueError::Failed("the queue manager is stopping".into());
        self.requests.send(make(tx)).await.map_err(|_| stopping())?;
        rx.await.map_err(|_| stopping())?
    }
}
