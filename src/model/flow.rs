//! Job flow fields (issue 17): priority, dependencies, retry policy, schema version.

use serde::{Deserialize, Serialize};

/// Lowest priority a job may carry.
pub const PRIORITY_MIN: i32 = -1000;
/// Highest priority a job may carry.
pub const PRIORITY_MAX: i32 = 1000;
/// `--priority low`.
pub const PRIORITY_LOW: i32 = -10;
/// `--priority normal` (and a job without `priority`).
pub const PRIORITY_NORMAL: i32 = 0;
/// `--priority high`.
pub const PRIORITY_HIGH: i32 = 10;
/// Most jobs one job may wait for.
pub const MAX_AFTER: usize = 64;
/// Most attempts a retry policy may ask for (the first run included).
pub const MAX_ATTEMPTS: u32 = 100;
/// Longest pause between attempts (one day).
pub const MAX_BACKOFF_SECONDS: u64 = 86_400;

/// The schema version this build writes and understands (documents without one are v0.5).
pub const SCHEMA_VERSION: &str = "0.6";
/// The version of a document that carries none.
pub const SCHEMA_VERSION_ABSENT: &str = "0.5";

/// Parses `low|normal|high|N` (N within [`PRIORITY_MIN`]..=[`PRIORITY_MAX`]).
pub fn parse_priority(s: &str) -> Result<i32, String> {
    match s.trim() {
        "low" => Ok(PRIORITY_LOW),
        "normal" => Ok(PRIORITY_NORMAL),
        "high" => Ok(PRIORITY_HIGH),
        other => other
            .parse::<i32>()
            .ok()
            .filter(|p| (PRIORITY_MIN..=PRIORITY_MAX).contains(p))
            .ok_or_else(|| {
                format!(
                    "priority {other:?} is not low, normal, high or a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}"
                )
            }),
    }
}

/// How a priority is shown: its name when it has one, else the number.
pub fn priority_name(p: Option<i32>) -> String {
    match p.unwrap_or(PRIORITY_NORMAL) {
        PRIORITY_LOW => "low".into(),
        PRIORITY_NORMAL => "normal".into(),
        PRIORITY_HIGH => "high".into(),
        n => n.to_string(),
    }
}

/// The priority a picker uses: the job's, clamped to the bounds whatever schema a store carries.
pub fn effective_priority(p: Option<i32>) -> i32 {
    p.unwrap_or(PRIORITY_NORMAL)
        .clamp(PRIORITY_MIN, PRIORITY_MAX)
}

/// Why a job failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// The worker died without reporting (kill -9, OOM, crash).
    WorkerDied,
    /// The job ran past its timeout.
    Timeout,
    /// The agent reported an API error.
    ApiError,
    /// The machine that ran it went away (its job was found running with no worker).
    MachineLost,
}

impl RetryOn {
    /// JSON name.
    pub fn name(self) -> &'static str {
        match self {
            RetryOn::WorkerDied => "worker_died",
            RetryOn::Timeout => "timeout",
            RetryOn::ApiError => "api_error",
            RetryOn::MachineLost => "machine_lost",
        }
    }
}

/// A retry policy: per queue (`queue.json` `config.retry`), overridable per job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first run included (1 = never retried).
    pub max_attempts: u32,
    /// Pause before each new attempt.
    #[serde(default)]
    pub backoff_seconds: u64,
    /// Which failures are retried (absent: worker_died, timeout, machine_lost).
    #[serde(default = "default_on")]
    pub on: Vec<RetryOn>,
}

fn default_on() -> Vec<RetryOn> {
    vec![RetryOn::WorkerDied, RetryOn::Timeout, RetryOn::MachineLost]
}

impl RetryPolicy {
    /// The same policy with its numbers within bounds (a loosened store schema cannot lift them).
    pub fn bounded(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.min(MAX_ATTEMPTS),
            backoff_seconds: self.backoff_seconds.min(MAX_BACKOFF_SECONDS),
            on: self.on.clone(),
        }
    }
}

/// Compares two `major.minor` schema versions; `None` when one does not parse.
pub fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let parse = |s: &str| -> Option<(u32, u32)> {
        let (maj, min) = s.split_once('.').unwrap_or((s, "0"));
        Some((maj.parse().ok()?, min.parse().ok()?))
    };
    Some(parse(a)?.cmp(&parse(b)?))
}

/// The next attempt of failed job `failed` (`failed_id`), made new: same config, `attempt`
/// one more, `retry_of` the failed job, `not_before` after the back-off, fresh runtime.
/// `None` when `policy` allows no more attempts (`None` policy: a retry by hand, no back-off, at
/// most [`MAX_ATTEMPTS`]).
pub fn next_attempt(
    failed: &super::Job,
    failed_id: &str,
    policy: Option<&RetryPolicy>,
) -> Option<super::Job> {
    let attempt = failed.config.attempt.unwrap_or(1);
    let (max, backoff) = match policy.map(RetryPolicy::bounded) {
        Some(p) => (p.max_attempts, p.backoff_seconds),
        None => (MAX_ATTEMPTS, 0),
    };
    if attempt >= max {
        return None;
    }
    let mut job = failed.clone();
    let now = super::Timestamp::now();
    job.id = Some(retry_id(failed_id));
    job.schema_version = Some(SCHEMA_VERSION.to_string());
    job.config.attempt = Some(attempt.saturating_add(1));
    job.config.retry_of = Some(failed_id.to_string());
    job.config.queue_time = now;
    job.config.not_before = (backoff > 0).then(|| now.plus_secs(backoff));
    job.runtime = super::JobRuntime::queued();
    Some(job)
}

/// Namespace of retry job ids (UUID v5 of the failed job's id).
const RETRY_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x5d2e_91a4_7c3b_4f60_8e1d_2b3c_4d5e_6f70);

/// The error of a job failed because its dependency `dep` failed (the queue manager writes
/// it; `retry` and the notices recognise a job stopped by another by it).
pub fn dependency_failed(dep: &str) -> String {
    format!("dependency {dep} failed")
}

/// Whether `job` failed only because one of its `after` jobs failed (the notice of the one
/// that failed first is the one a person needs).
pub fn stopped_by_dependency(job: &super::Job) -> bool {
    let Some(error) = job.runtime.error.as_deref() else {
        return false;
    };
    job.config
        .after
        .iter()
        .flatten()
        .any(|d| error == dependency_failed(d))
}

/// The id of the job that retries failed job `failed_id`. Derived, so a retry is made at most
/// once per failed attempt (a restart finds the one it already wrote), and a dependent job can
/// follow a chain of attempts by id alone.
pub fn retry_id(failed_id: &str) -> String {
    uuid::Uuid::new_v5(&RETRY_NAMESPACE, failed_id.as_bytes()).to_string()
}

/// The four steps of a pipeline (`orchestrator pipeline`), in order.
pub const PIPELINE_STEPS: [super::Command; 4] = [
    super::Command::ResearchCode,
    super::Command::CreatePrd,
    super::Command::CreateTasks,
    super::Command::ImplementTasks,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_parse_by_name_and_number_within_bounds() {
        assert_eq!(parse_priority("low"), Ok(PRIORITY_LOW));
        assert_eq!(parse_priority("high"), Ok(PRIORITY_HIGH));
        assert_eq!(parse_priority("-1000"), Ok(-1000));
        assert!(parse_priority("1001").unwrap_err().contains("1001"));
        assert!(parse_priority("urgent").is_err());
        assert_eq!(priority_name(None), "normal");
        assert_eq!(priority_name(Some(7)), "7");
        assert_eq!(effective_priority(Some(i32::MAX)), PRIORITY_MAX);
    }

    #[test]
    fn versions_compare_numerically() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("0.5", "0.6"), Some(Less));
        assert_eq!(compare_versions("0.10", "0.6"), Some(Greater));
        assert_eq!(compare_versions("1", "0.6"), Some(Greater));
        assert_eq!(compare_versions("x", "0.6"), None);
    }
}
