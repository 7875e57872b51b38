//! The queue manager's part in many machines (issue 13): its heartbeat
//! (`machines/<host>/queue-manager.<queue>.json`), failing the running jobs of a machine that
//! stopped reporting, and stopping its own workers whose jobs another machine failed while
//! this one was silent.

use super::{EndCause, Manager};
use crate::model::{DocKind, Job, JobStatus, Timestamp};
use crate::store::Record;
use crate::store::machines::{Heartbeat, is_machine_lost_error};

impl Manager {
    /// Writes the heartbeat (`stopped`: the last one, at a clean stop).
    pub(super) fn write_heartbeat(&mut self, stopped: bool) {
        let hb = self.heartbeat.get_or_insert_with(|| {
            Heartbeat::new(
                "queue-manager",
                Some(&self.cfg.queue),
                self.store.config().machines.heartbeat().as_secs(),
            )
        });
        hb.last_seen = Timestamp::now();
        hb.stopped = stopped;
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
            if let Ok(job) = self.store.read_doc::<Job>(DocKind::Job, &path) {
                self.retry_if_due(&lost.id, &job, &lost.error);
            }
            self.signal(&lost.id, JobStatus::Running, JobStatus::Failed)
                .await;
        }
        self.stop_jobs_ended_elsewhere().await;
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
