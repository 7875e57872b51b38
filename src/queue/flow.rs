//! Issue 17 in the queue manager: which queued jobs may start now (dependencies ended,
//! back-off over), failing a job whose dependency failed, and making the next attempt of a
//! job that failed in a way its retry policy covers.
//!
//! Dependencies are looked up by id (a few `stat`s per dependency in each queue's
//! finished/failed folders), never by listing history.

use super::Manager;
use crate::model::flow::{MAX_ATTEMPTS, retry_id};
use crate::model::{DocKind, Job, JobRuntime, JobStatus, RetryOn, RetryPolicy, Timestamp};
use crate::store::{Event, Store};
use std::time::Duration;
use tokio::time::Instant;

/// How often jobs waiting for dependencies in other queues are looked at again.
const DEPENDENCY_POLL: Duration = Duration::from_secs(2);

/// Where a dependency stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepState {
    /// Every dependency finished (or ended, with `after_any`).
    Ready,
    /// At least one is queued or running (or being retried).
    Waiting,
    /// This dependency failed (its last attempt) or does not exist.
    Failed(String),
}

/// The state of job `id` across queues, following its retries: a failed job whose retry
/// exists stands where its retry stands.
fn settled_state(store: &Store, queues: &[String], id: &str) -> Option<JobStatus> {
    let mut cur = id.to_string();
    for _ in 0..=MAX_ATTEMPTS {
        let found = queues.iter().find_map(|q| {
            [
                JobStatus::Finished,
                JobStatus::Failed,
                JobStatus::Queued,
                JobStatus::Running,
            ]
            .into_iter()
            .find(|s| crate::store::safe::is_file(&store.job_path(q, *s, &cur)))
        });
        match found {
            Some(JobStatus::Failed) => {
                let next = retry_id(&cur);
                if queues.iter().any(|q| {
                    JobStatus::ALL
                        .iter()
                        .any(|s| crate::store::safe::is_file(&store.job_path(q, *s, &next)))
                }) {
                    cur = next;
                    continue;
                }
                return Some(JobStatus::Failed);
            }
            Some(s) => return Some(s),
            None => return archived_state(store, queues, &cur),
        }
    }
    Some(JobStatus::Failed)
}

/// A job moved into `Queues/<q>/Jobs/archive/YYYY-MM/<state>/` (see `orchestrator archive`).
fn archived_state(store: &Store, queues: &[String], id: &str) -> Option<JobStatus> {
    for q in queues {
        let dir = store.queue_dir(q).join("Jobs").join("archive");
        let Ok(months) = std::fs::read_dir(&dir) else {
            continue;
        };
        for m in months.flatten() {
            for s in [JobStatus::Finished, JobStatus::Failed] {
                let p = m.path().join(s.dir()).join(format!("{id}.json"));
                if crate::store::safe::is_file(&p) {
                    return Some(s);
                }
            }
        }
    }
    None
}

/// Where the dependencies `after` of a job stand.
pub fn dependency_state(store: &Store, after: &[String], after_any: bool) -> DepState {
    let queues = store.queue_ids().unwrap_or_default();
    let mut waiting = false;
    for dep in after {
        match settled_state(store, &queues, dep) {
            Some(JobStatus::Finished) => {}
            Some(JobStatus::Failed) if after_any => {}
            Some(JobStatus::Failed) => {
                return DepState::Failed(format!("dependency {dep} failed"));
            }
            Some(JobStatus::Queued | JobStatus::Running) => waiting = true,
            None => {
                return DepState::Failed(format!("dependency {dep} not found in any queue"));
            }
        }
    }
    if waiting {
        DepState::Waiting
    } else {
        DepState::Ready
    }
}

/// Which kind of failure an end is, for retrying: `None` for ends never retried (a cancel,
/// an invalid job, a refused one).
pub fn failure_kind(error: &str) -> Option<RetryOn> {
    if error == super::WORKER_DIED {
        Some(RetryOn::WorkerDied)
    } else if error.starts_with("Job timeout after") {
        Some(RetryOn::Timeout)
    } else if error.contains("API Error") || error.contains("api_error") {
        Some(RetryOn::ApiError)
    } else {
        None
    }
}

/// The next attempt of failed job `failed` (`failed_id`), made new: same config, `attempt`
/// one more, `retry_of` the failed job, `not_before` after the back-off, fresh runtime.
pub fn next_attempt(failed: &Job, failed_id: &str, policy: &RetryPolicy) -> Option<Job> {
    let attempt = failed.config.attempt.unwrap_or(1);
    let policy = policy.bounded();
    if attempt >= policy.max_attempts {
        return None;
    }
    let mut job = failed.clone();
    let now = Timestamp::now();
    job.id = Some(retry_id(failed_id));
    job.schema_version = Some(crate::model::flow::SCHEMA_VERSION.to_string());
    job.config.attempt = Some(attempt.saturating_add(1));
    job.config.retry_of = Some(failed_id.to_string());
    job.config.queue_time = now;
    job.config.not_before =
        (policy.backoff_seconds > 0).then(|| now.plus_secs(policy.backoff_seconds));
    job.runtime = JobRuntime::queued();
    Some(job)
}

impl Manager {
    /// The queued jobs in `ordered` that may start now, and how many were failed because a
    /// dependency failed. Sets when to look again at those still waiting.
    pub(super) async fn flow_filter(&mut self, ordered: &[String]) -> (Vec<String>, usize) {
        let now = Timestamp::now();
        let mut out = Vec::with_capacity(ordered.len());
        let mut wake: Option<Instant> = None;
        let mut failed = Vec::new();
        for id in ordered {
            let Some(head) = self.index.head(id) else {
                out.push(id.clone());
                continue;
            };
            if let Some(nb) = head.not_before {
                let left = now.seconds_until(&nb);
                if left > 0.0 {
                    let at = Instant::now() + Duration::from_secs_f64(left.min(86_400.0));
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                    continue;
                }
            }
            if head.after.is_empty() {
                out.push(id.clone());
                continue;
            }
            match dependency_state(&self.store, &head.after, head.after_any) {
                DepState::Ready => out.push(id.clone()),
                DepState::Waiting => {
                    let at = Instant::now() + DEPENDENCY_POLL;
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                }
                DepState::Failed(why) => failed.push((id.clone(), why)),
            }
        }
        self.flow_wake = wake;
        let n = failed.len();
        for (id, why) in failed {
            let path = self.store.job_path(&self.cfg.queue, JobStatus::Queued, &id);
            match self.store.read_doc::<Job>(DocKind::Job, &path) {
                Ok(job) => self.fail_owned(&id, JobStatus::Queued, job, why).await,
                Err(_) => self.fail_invalid(&id, JobStatus::Queued).await,
            }
            self.index.forget(&id);
        }
        (out, n)
    }

    /// Before failed job `id` is written failed with `error`: writes its next attempt into
    /// queued_jobs/ when its retry policy (its own, else the queue's) covers the failure.
    /// The retry is written first, so a dependent job never sees the failure without it.
    pub(super) fn retry_if_due(&mut self, id: &str, job: &Job, error: &str) {
        let Some(kind) = failure_kind(error) else {
            return;
        };
        let Some(policy) = job.config.retry.as_ref().or(self.config.retry.as_ref()) else {
            return;
        };
        if !policy.on.contains(&kind) {
            return;
        }
        let Some(next) = next_attempt(job, id, policy) else {
            return;
        };
        let q = self.cfg.queue.clone();
        let new_id = retry_id(id);
        if JobStatus::ALL
            .iter()
            .any(|s| crate::store::safe::is_file(&self.store.job_path(&q, *s, &new_id)))
        {
            return; // made before a restart
        }
        let path = self.store.job_path(&q, JobStatus::Queued, &new_id);
        match self.store.write_doc(DocKind::Job, &path, &next) {
            Ok(()) => {
                let text = format!(
                    "job {id} failed ({}); attempt {} queued as {new_id}",
                    kind.name(),
                    next.config.attempt.unwrap_or(2)
                );
                tracing::info!(job_id = %id, queue = %q, "{text}");
                self.store.append_daemon_log(&self.log_file, &text);
                self.store.record_event(
                    &Event::new("queue-manager", "job_retried")
                        .job(id)
                        .queue(&q)
                        .project(&job.config.project)
                        .detail(text),
                );
            }
            Err(e) => {
                tracing::error!(job_id = %id, queue = %q, "cannot queue the retry of the job: {e}")
            }
        }
    }
}

impl Manager {
    /// After a worker reported its job failed (an API error): its next attempt, when due.
    pub(super) fn retry_reported(&mut self, id: &str) {
        let path = self.store.job_path(&self.cfg.queue, JobStatus::Failed, id);
        if let Ok(job) = self.store.read_doc::<Job>(DocKind::Job, &path) {
            let error = job.runtime.error.clone().unwrap_or_default();
            self.retry_if_due(id, &job, &error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_covered_failures_are_retried() {
        assert_eq!(
            failure_kind(super::super::WORKER_DIED),
            Some(RetryOn::WorkerDied)
        );
        assert_eq!(
            failure_kind("Job timeout after 5s (limit: 5s)"),
            Some(RetryOn::Timeout)
        );
        assert_eq!(failure_kind("Job cancelled by chenry"), None);
        assert_eq!(failure_kind("Invalid job file: x"), None);
        assert_eq!(failure_kind("dependency a failed"), None);
    }
}
