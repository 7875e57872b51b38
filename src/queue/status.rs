//! What the queue manager reports (PRD §4.5, §7): the queue's runtime (in this machine's
//! `Queues/<q>/runtime@<host>.json`, never in the user's `queue.json`, and only when it
//! changed), the state its handle shows and the events of each step (on D-Bus:
//! `org.agentstore.Queue1`'s properties and `JobStateChanged` signals).

use super::Manager;
use super::handle::{QueueEvent, QueueState};
use crate::model::{JobStatus, QueueRuntime, Timestamp};

impl Manager {
    pub(super) async fn signal(&mut self, id: &str, old: JobStatus, new: JobStatus) {
        self.pending.push((id.to_string(), old, new));
    }

    /// Emits, in this order, the state change of the step (`changed`: the state before
    /// and after), then the job moves it made: a client (or a proxy's property cache) sees
    /// the new counts before the moves they count. Awaited here, never from a spawned task,
    /// so the order on the bus is the order of the calls.
    pub(super) async fn flush_signals(&mut self, changed: Option<(QueueState, QueueState)>) {
        let pending = std::mem::take(&mut self.pending);
        let Some(events) = &self.events else { return };
        if let Some((old, new)) = changed
            && old != new
        {
            events.emit(&QueueEvent::StateChanged { old, new }).await;
        }
        for (id, old, new) in pending {
            events
                .emit(&QueueEvent::JobStateChanged { id, old, new })
                .await;
        }
    }
    // ---- runtime -----------------------------------------------------------------------

    /// Writes this machine's runtime of the queue (PRD §4.5's fields) when it changed;
    /// `reset` = the startup reset. Returns the served state before and after, for
    /// [`Self::flush_signals`] (`None` on the reset).
    pub(super) fn write_runtime(&mut self, reset: bool) -> Option<(QueueState, QueueState)> {
        let q = self.cfg.queue.clone();
        let now = Timestamp::now();
        let (slurm_running, slurm_pending) = self.slurm.counts();
        let runtime = if reset {
            QueueRuntime {
                process_id: Some(std::process::id()),
                active_jobs: 0,
                last_update: None,
                queued_jobs: 0,
                host: Some(self.host.clone()),
                paused: Some(self.paused),
                slurm_status: self.slurm.status(),
            }
        } else {
            QueueRuntime {
                process_id: Some(std::process::id()),
                active_jobs: u32::try_from(self.running.len() + slurm_running).unwrap_or(u32::MAX),
                last_update: Some(now),
                queued_jobs: self
                    .queued
                    .saturating_add(u32::try_from(slurm_pending).unwrap_or(u32::MAX)),
                host: Some(self.host.clone()),
                paused: Some(self.paused),
                slurm_status: self.slurm.status(),
            }
        };
        if let Err(e) = self.store.write_queue_runtime(&q, &self.host, &runtime) {
            tracing::warn!(
                queue = %q,
                "cannot write {}: {e}",
                self.store
                    .relative(&self.store.queue_runtime_path(&q, &self.host))
                    .display()
            );
        }
        if reset {
            return None;
        }
        let new = QueueState {
            worker_count: self.config.worker_count,
            active_jobs: runtime.active_jobs,
            queued_jobs: runtime.queued_jobs,
            paused: self.paused,
            last_update: now.to_string(),
        };
        let old = {
            let mut s = self.state.lock();
            std::mem::replace(&mut *s, new.clone())
        };
        Some((old, new))
    }
}
