//! The queue manager's part in many machines (issue 13): its heartbeat
//! (`machines/<host>/queue-manager.<queue>.json`), failing the running jobs of a machine that
//! stopped reporting, and stopping its own workers whose jobs another machine failed while
//! this one was silent.

use super::{EndCause, Manager};
use crate::model::{DocKind, Job, JobStatus, Timestamp};
use crate::store::Record;
use crate::store::machines::is_machine_lost_error;

impl Manager {
    /// True when `host` (a job's `runtime.host`) names this machine: its key, or one it had
    /// before (its heartbeat's `formerly`: a store from before machine ids).
    pub(super) fn is_this_machine(&self, host: &str) -> bool {
        host == self.host
            || self
                .heartbeat
                .as_ref()
                .is_some_and(|hb| hb.formerly.iter().any(|f| f == host))
    }

    /// Writes the heartbeat (`stopped`: the last one, at a clean stop).
    pub(super) fn write_heartbeat(&mut self, stopped: bool) {
        let hb = self.heartbeat.get_or_insert_with(|| {
            self.store.new_heartbeat(
                "queue-manager",
                Some(&self.cfg.queue),
                self.store.config().machines.heartbeat().as_secs(),
            )
        });
        hb.last_seen = Timestamp::now();
        hb.stopped = stopped;
        // This machine's own word on what it runs (see `Heartbeat::running`).
        hb.running = if stopped {
            Vec::new()
        } else {
            let mut ids: Vec<String> = self.running.keys().cloned().collect();
            ids.extend(self.slurm.job_ids().cloned());
            ids.sort();
            ids
        };
        if let Err(e) = self.store.write_heartbeat(hb) {
            tracing::warn!(queue = %self.cfg.queue, "cannot write the heartbeat: {e}");
        }
    }

    /// Every heartbeat: the beat, then the jobs of silent machines and our own jobs ended
    /// elsewhere.
    pub(super) async fn on_heartbeat(&mut self) {
        self.write_heartbeat(false);
        let q = self.cfg.queue.clone();
        let machines = self.store.machines();
        for lost in self.store.fail_lost_jobs(&q, &self.host, &machines) {
            let path = self.store.job_path(&q, JobStatus::Failed, &lost.id);
            self.store.notice_job_ended(&q, &lost.id);
            if let Ok(job) = self.store.read_doc::<Job>(DocKind::Job, &path) {
                self.retry_if_due(&lost.id, &job, &lost.error);
            }
            self.signal(&lost.id, JobStatus::Running, JobStatus::Failed)
                .await;
        }
        self.stop_jobs_ended_elsewhere().await;
        self.check_served_elsewhere();
    }

    /// One queue served from several machines through a sync engine: whether this manager
    /// serves it or stands down, and when it fences itself (see `handover.rs`). On one
    /// filesystem (`machines.shared_filesystem`) every manager serves.
    pub(super) fn check_served_elsewhere(&mut self) {
        let machines_cfg = self.store.config().machines.clone();
        if machines_cfg.shared_filesystem {
            return;
        }
        let Some(mine) = self.heartbeat.as_ref().map(|h| h.started) else {
            return;
        };
        let now = Timestamp::now();
        let q = self.cfg.queue.clone();
        let machines = self.store.machines();
        let others: Vec<&crate::store::machines::Heartbeat> = machines
            .machines
            .iter()
            .filter(|m| m.host != self.host)
            .flat_map(|m| m.daemons.iter())
            .filter(|d| d.daemon == "queue-manager" && d.queue.as_deref() == Some(q.as_str()))
            .collect();
        let timing = super::handover::Timing::from_config(&machines_cfg);
        let host = self.host.clone();
        for change in self.handover.look((&mine, &host), &others, &now, &timing) {
            let record = match change {
                super::handover::Change::StandDown(h) => {
                    let text = format!(
                        "queue {q} is also served by machine {h}, whose manager started first; the store is not declared one filesystem (machines.shared_filesystem), and through a sync engine a start cannot be claimed atomically across machines, so this manager starts no job while {h} serves the queue"
                    );
                    Record::warn(self.event("queue_served_elsewhere").detail(&text), text)
                }
                super::handover::Change::Serve => {
                    let text = format!(
                        "queue {q}: no other machine serves it now; this manager starts jobs again"
                    );
                    Record::info(self.event("queue_served_here").detail(&text), text)
                }
                super::handover::Change::Fenced {
                    hosts,
                    lapsed,
                    secs,
                } => {
                    let why = if lapsed {
                        "this manager was stopped or suspended for longer than the stale time"
                            .to_string()
                    } else {
                        format!(
                            "the manager of {q} on {} is in sight again",
                            hosts.join(", ")
                        )
                    };
                    let text = format!(
                        "queue {q}: {why}; it may have served the queue meanwhile, so this manager starts no job for {secs} s, until it has learnt that this one serves"
                    );
                    Record::warn(self.event("queue_fenced").detail(&text), text)
                }
            };
            self.record(record);
        }
    }

    /// Our workers whose job is no longer in `running_jobs/` but in `failed_jobs/` with the
    /// lost-machine error: this machine was silent (a partition, a suspended laptop) and
    /// another process failed the job. The worker is stopped (its end is not written: the
    /// job ended already) and why is recorded.
    async fn stop_jobs_ended_elsewhere(&mut self) {
        let q = self.cfg.queue.clone();
        let ids: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.end.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if crate::store::safe::exists(&self.store.job_path(&q, JobStatus::Running, &id)) {
                continue;
            }
            let path = self.store.job_path(&q, JobStatus::Failed, &id);
            let Ok(job) = self.store.read_doc::<Job>(DocKind::Job, &path) else {
                continue;
            };
            let Some(error) = job.runtime.error.filter(|e| is_machine_lost_error(e)) else {
                continue;
            };
            self.record(Record::warn(
                self.event("job_stopped").job(&id).detail(&error),
                format!(
                    "job {id} was failed elsewhere while this machine was not reporting ({error}); stopping its worker"
                ),
            ));
            self.stop_job(
                &id,
                EndCause::Cancelled("its machine being judged lost".into()),
            )
            .await;
        }
    }
}
