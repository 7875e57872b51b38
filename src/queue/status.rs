//! What the queue manager reports (PRD §4.5, §7): `queue.json`'s runtime, the state its
//! handle shows and the events of each step (on D-Bus: `org.agentstore.Queue1`'s properties
//! and `JobStateChanged` signals).

use super::Manager;
use super::handle::{QueueEvent, QueueState};
use crate::model::{DocKind, JobStatus, Timestamp};

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

    /// Writes `queue.json`'s runtime (PRD §4.5); `reset` = the startup reset. Returns the
    /// served state before and after, for [`Self::flush_signals`] (`None` on the reset).
    pub(super) fn write_runtime(&mut self, reset: bool) -> Option<(QueueState, QueueState)> {
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
        doc.runtime.slurm_status = self.slurm.status.clone();
        let (slurm_running, slurm_pending) = self.slurm.counts();
        if reset {
            doc.runtime.active_jobs = 0;
            doc.runtime.queued_jobs = 0;
            doc.runtime.last_update = None;
        } else {
            doc.runtime.active_jobs =
                u32::try_from(self.running.len() + slurm_running).unwrap_or(u32::MAX);
            doc.runtime.queued_jobs = self
                .queued
                .saturating_add(u32::try_from(slurm_pending).unwrap_or(u32::MAX));
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
