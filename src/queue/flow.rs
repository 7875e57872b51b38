//! Issue 17 in the queue manager: which queued jobs may start now (dependencies ended,
//! back-off over), failing a job whose dependency failed, and making the next attempt of a
//! job that failed in a way its retry policy covers.
//!
//! Dependencies are looked up by id (a few `stat`s per dependency in each queue's
//! finished/failed folders), never by listing history.

use super::Manager;
use crate::model::flow::{MAX_ATTEMPTS, next_attempt, retry_id};
use crate::model::{Command, DocKind, Job, JobStatus, RetryOn, Timestamp};
use crate::store::{Event, Store};
use serde_json::Value;
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
/// exists stands where its retry stands. With the file of the job it settled on.
pub fn settled_state(
    store: &Store,
    queues: &[String],
    id: &str,
) -> Option<(JobStatus, std::path::PathBuf)> {
    let mut cur = id.to_string();
    for _ in 0..=MAX_ATTEMPTS {
        let found = queues
            .iter()
            .find_map(|q| {
                [
                    JobStatus::Finished,
                    JobStatus::Failed,
                    JobStatus::Queued,
                    JobStatus::Running,
                ]
                .into_iter()
                .map(|s| (s, store.job_path(q, s, &cur)))
                .find(|(_, p)| crate::store::safe::is_file(p))
            })
            // Between queued_jobs/ and running_jobs/ a job being started is in its start claim:
            // still queued for whoever looks (never "not found", never its failed predecessor).
            .or_else(|| store.claim_of(queues, &cur).map(|p| (JobStatus::Queued, p)));
        match found {
            Some((JobStatus::Failed, p)) => {
                let next = retry_id(&cur);
                if queues.iter().any(|q| {
                    JobStatus::ALL
                        .iter()
                        .any(|s| crate::store::safe::is_file(&store.job_path(q, *s, &next)))
                }) || store.claim_of(queues, &next).is_some()
                {
                    cur = next;
                    continue;
                }
                return Some((JobStatus::Failed, p));
            }
            Some(found) => return Some(found),
            None => return crate::store::archive::find_archived(store, queues, &cur),
        }
    }
    None
}

/// How long a pipeline step waits for a step before it that is in no queue yet: the steps
/// are four inbox messages, and a synced folder may deliver them in any order (one whose
/// predecessor never comes fails after this, naming it).
pub const PIPELINE_ARRIVAL_GRACE_SECONDS: f64 = 3600.0;

/// Where the dependencies `after` of a job stand. With `handled`, a finished dependency
/// counts only once the orchestrator's completion handler has handled it (a pipeline step
/// reads what that handling wrote: the PRD). With `arriving` (a pipeline step queued less
/// than [`PIPELINE_ARRIVAL_GRACE_SECONDS`] ago), a dependency in no queue is still to come.
pub fn dependency_state(
    store: &Store,
    after: &[String],
    after_any: bool,
    handled: bool,
    arriving: bool,
) -> DepState {
    let queues = store.queue_ids().unwrap_or_default();
    let handled = handled && store.config().orchestrator.enable_job_completion_handler;
    let mut waiting = false;
    for dep in after {
        match settled_state(store, &queues, dep) {
            Some((JobStatus::Finished, p)) => {
                if handled
                    && !store
                        .read_doc::<Job>(DocKind::Job, &p)
                        .is_ok_and(|j| j.runtime.handled == Some(true))
                {
                    waiting = true;
                }
            }
            Some((JobStatus::Failed, _)) if after_any => {}
            Some((JobStatus::Failed, _)) => {
                return DepState::Failed(crate::model::flow::dependency_failed(dep));
            }
            Some((JobStatus::Queued | JobStatus::Running, _)) => waiting = true,
            None if arriving => waiting = true,
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

/// How many jobs a cycle check walks at most (beyond, the job is left to wait).
const MAX_CYCLE_WALK: usize = 1_000;

/// The dependency cycle through queued job `id` (whose dependencies are `after`), as
/// "dependency cycle a -> b -> a", if one exists. Only submission checks for cycles; a
/// document dropped straight into queued_jobs/ (or a synced one) may close one, and its
/// jobs would then wait for each other forever. Walks the `after` lists of the queued
/// dependencies (following retries), at most [`MAX_CYCLE_WALK`] jobs.
pub fn dependency_cycle(
    store: &Store,
    queues: &[String],
    id: &str,
    after: &[String],
) -> Option<String> {
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut stack: Vec<(String, Vec<String>)> = after
        .iter()
        .map(|d| (d.clone(), vec![id.to_string(), d.clone()]))
        .collect();
    while let Some((cur, path)) = stack.pop() {
        if cur == id {
            return Some(format!("dependency cycle {}", path.join(" -> ")));
        }
        if !seen.insert(cur.clone()) || seen.len() > MAX_CYCLE_WALK {
            continue;
        }
        let Some((JobStatus::Queued, p)) = settled_state(store, queues, &cur) else {
            continue;
        };
        let Ok(job) = store.read_doc::<Job>(DocKind::Job, &p) else {
            continue;
        };
        for next in job.config.after.unwrap_or_default() {
            let mut np = path.clone();
            np.push(next.clone());
            stack.push((next, np));
        }
    }
    None
}

/// Which kind of failure an end is, for retrying: `None` for ends never retried (a cancel,
/// an invalid job, a refused one).
pub fn failure_kind(error: &str) -> Option<RetryOn> {
    if error == super::WORKER_DIED {
        Some(RetryOn::WorkerDied)
    } else if error.starts_with("Job timeout after") {
        Some(RetryOn::Timeout)
    } else if crate::store::machines::is_machine_lost_error(error) {
        Some(RetryOn::MachineLost)
    } else if error.contains("API Error") || error.contains("api_error") {
        Some(RetryOn::ApiError)
    } else {
        None
    }
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
            let Some(head) = self.index.head(id).cloned() else {
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
            let arriving =
                head.pipeline && head.queue_time.claimed_age(&now) < PIPELINE_ARRIVAL_GRACE_SECONDS;
            match dependency_state(
                &self.store,
                &head.after,
                head.after_any,
                head.pipeline,
                arriving,
            ) {
                DepState::Ready => out.push(id.clone()),
                DepState::Waiting if !head.acyclic => {
                    let queues = self.store.queue_ids().unwrap_or_default();
                    match dependency_cycle(&self.store, &queues, id, &head.after) {
                        Some(why) => failed.push((id.clone(), why)),
                        None => {
                            self.index.mark_acyclic(id);
                            let at = Instant::now() + DEPENDENCY_POLL;
                            wake = Some(wake.map_or(at, |w| w.min(at)));
                        }
                    }
                }
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
        let Some(next) = next_attempt(job, id, Some(policy)) else {
            self.store
                .notice_retry_exhausted(&self.cfg.queue, id, job, error);
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
    /// A pipeline step's prompt, completed when it starts from what the step before it left:
    /// create-prd gets the research job's result, create-tasks and implement-tasks the PRD
    /// (with the tasks once create-tasks is handled). Done once (`pipeline.filled`).
    pub(super) fn fill_pipeline_step(&self, job: &mut Job) -> Result<(), String> {
        let Some(Value::Object(mut p)) = job.config.supporting_data.get("pipeline").cloned() else {
            return Ok(());
        };
        if p.get("filled") == Some(&Value::Bool(true)) {
            return Ok(());
        }
        let step = p
            .get("step")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match Command::parse(&step) {
            Some(Command::CreatePrd) => {
                let queues = self.store.queue_ids().unwrap_or_default();
                let dep = job.config.after.as_ref().and_then(|a| a.first()).cloned();
                if let Some(dep) = dep
                    && let Some((JobStatus::Finished, path)) =
                        settled_state(&self.store, &queues, &dep)
                    && let Ok(research) = self.store.read_doc::<Job>(DocKind::Job, &path)
                {
                    let text = research.result_text();
                    if !text.trim().is_empty() {
                        job.config
                            .task_description
                            .push_str(&format!("\n\n## Code research (job {dep})\n{text}"));
                    }
                }
            }
            Some(Command::CreateTasks | Command::ImplementTasks) => {
                let prd_id = job
                    .config
                    .prd
                    .clone()
                    .ok_or_else(|| "pipeline step names no PRD (config.prd)".to_string())?;
                let (_, _, prd) = self.store.find_prd(&prd_id).map_err(|e| {
                    format!("the PRD of this pipeline ({prd_id}) is missing: {e}; the create-prd step made none")
                })?;
                if prd.project != job.config.project {
                    return Err(format!(
                        "the PRD of this pipeline ({prd_id}) belongs to project {}, not {}",
                        prd.project, job.config.project
                    ));
                }
                job.config
                    .task_description
                    .push_str(&format!("\n\n{}", prd.to_prompt()));
                job.config.supporting_data.insert(
                    "prd".into(),
                    serde_json::to_value(&prd).unwrap_or(Value::Null),
                );
            }
            _ => {}
        }
        p.insert("filled".into(), Value::Bool(true));
        job.config
            .supporting_data
            .insert("pipeline".into(), Value::Object(p));
        Ok(())
    }

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
