//! Direct commands (PRD §6.2): answered from the store, filtered by PRD §10.

use super::RouteError;
use super::commands::help_text;
use crate::model::Message;
use crate::permissions::{self, Caller};
use crate::store::{Store, StoreError};
use serde_json::Value;

fn arg<'a>(msg: &'a Message, key: &str) -> Option<&'a str> {
    msg.content.get(key).and_then(Value::as_str)
}

fn required<'a>(msg: &'a Message, key: &str) -> Result<&'a str, RouteError> {
    arg(msg, key).ok_or_else(|| {
        RouteError::Invalid(format!(
            "{}: content.{key} is required (a string)",
            msg.command
        ))
    })
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn ignore(e: StoreError) {
    tracing::warn!("{e}");
}

/// Answers a direct command; the result goes into the response's `content.result`.
pub fn answer(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    match msg.command.as_str() {
        "help" => Ok(Value::String(help_text())),
        "list-users" => Ok(to_value(&permissions::visible_users(
            store,
            who,
            &mut ignore,
        )?)),
        "view-user" => {
            let id = arg(msg, "user").or(arg(msg, "id")).ok_or_else(|| {
                RouteError::Invalid("view-user: content.user is required (a string)".into())
            })?;
            Ok(to_value(&permissions::visible_user(store, who, id)?))
        }
        "list-projects" => {
            let all = store.projects(&mut ignore)?;
            Ok(to_value(
                &all.into_iter()
                    .filter(|p| who.can_see_project(p))
                    .collect::<Vec<_>>(),
            ))
        }
        "view-project" => {
            let id = arg(msg, "project")
                .or(msg.project.as_deref())
                .ok_or_else(|| RouteError::Invalid("view-project: project is required".into()))?;
            Ok(to_value(&permissions::visible_project(store, who, id)?))
        }
        "list-prds" => {
            let project = arg(msg, "project").or(msg.project.as_deref());
            if let Some(id) = project {
                permissions::visible_project(store, who, id)?;
            }
            let mut out = Vec::new();
            for (_, prd) in store.prds(project, &mut ignore)? {
                let p = store.project(&prd.project).ok();
                if who.can_see_prd(&prd, p.as_ref()) {
                    out.push(prd);
                }
            }
            Ok(to_value(&out))
        }
        "view-prd" => {
            let id = required(msg, "prd")?;
            Ok(to_value(&permissions::visible_prd(store, who, id)?))
        }
        "list-queues" => Ok(to_value(&store.queues(&mut ignore)?)),
        "view-queue" => {
            let id = required(msg, "queue")?;
            Ok(to_value(&store.queue(id)?))
        }
        "list-jobs" => list_jobs(store, msg, who),
        "view-job" => {
            let id = arg(msg, "job").or(arg(msg, "job_id")).ok_or_else(|| {
                RouteError::Invalid("view-job: content.job is required (a string)".into())
            })?;
            Ok(to_value(&permissions::visible_job(store, who, id)?.1))
        }
        "job-log" => super::joblog::answer(store, msg, who),
        // Machines (issue 13): every caller may see which machines serve the store, as anyone
        // who can read the store's `machines/` can.
        "list-machines" => {
            let all = store.machines();
            let now = crate::model::Timestamp::now();
            let after = store.config().machines.stale_after_seconds;
            let rows: Vec<_> = all.machines.iter().map(|m| m.view(&now, after)).collect();
            Ok(serde_json::json!({"machines": rows, "problems": all.problems}))
        }
        "view-machine" => {
            let host = required(msg, "host")?;
            crate::store::check_id("host", host)?;
            let all = store.machines();
            let m = all.get(host).ok_or_else(|| {
                RouteError::NotFound(format!(
                    "Machine not found: {host} (no heartbeat under machines/{host}/)"
                ))
            })?;
            let now = crate::model::Timestamp::now();
            let mut v = to_value(&m.view(&now, store.config().machines.stale_after_seconds));
            v["heartbeats"] = to_value(&m.daemons);
            Ok(v)
        }
        // Messages (PRD §4.6): requests and answers in messaging/, a user's own only.
        "list-messages" => {
            super::messages::list(store, who, &super::messages::filter_from(&msg.content)?)
        }
        "view-message" => {
            let id = arg(msg, "message").or(arg(msg, "id")).ok_or_else(|| {
                RouteError::Invalid("view-message: content.message is required (a string)".into())
            })?;
            super::messages::view(store, who, id)
        }
        "list-tasks" => super::tasks::listing::answer_list(store, msg, who),
        "view-task" => {
            let name = required(msg, "task")?;
            Ok(to_value(&super::tasks::listing::view(store, who, name)?))
        }
        other => Err(RouteError::Invalid(format!("Unknown command: {other}"))),
    }
}

/// The most bytes of jobs (or messages) one `list-jobs` (`list-messages`) answer carries.
/// Well under a D-Bus reply's bound: an answer is held as a JSON tree (about five times its
/// text) and then as text twice (the answer, the D-Bus message), so 16 MiB answers took
/// orchestratord to 150 MB; 2 MiB keeps it near 35 MB at 100,000 jobs. More: slices
/// (`offset`, `limit`), or `ListJobs` pages.
pub const MAX_LIST_BYTES: usize = 2 << 20;

fn number(msg: &Message, key: &str) -> Result<Option<usize>, RouteError> {
    whole_number(&msg.content, "list-jobs", key)
}

/// `content.<key>` of a `command` message as a whole number ≥ 0 (`None` when absent or null).
pub(super) fn whole_number(
    content: &serde_json::Map<String, Value>,
    command: &str,
    key: &str,
) -> Result<Option<usize>, RouteError> {
    match content.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                RouteError::Invalid(format!(
                    "{command}: content.{key} must be a whole number ≥ 0, not {v}"
                ))
            }),
    }
}

/// `list-jobs`: job documents without `runtime.output` (use `view-job` for that), filtered by
/// `content.status`, `content.project` and `content.queue`, oldest first; `content.offset`
/// and `content.limit` take a slice. Ordered by the job index and read one document at a
/// time; an answer that would pass [`MAX_LIST_BYTES`] is refused with what to do instead —
/// before any document is read when the index alone shows it cannot fit (each job takes at
/// least [`least_job_bytes`]), and otherwise as soon as the documents read pass the bound;
/// either way what was read is given back to the system before the refusal.
fn list_jobs(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    use crate::store::listing::{JobFilter, JobIndex, release_memory};
    known_keys(msg, &["status", "project", "queue", "offset", "limit"])?;
    for k in ["status", "project", "queue"] {
        text_or_null(msg, k)?;
    }
    let status = arg(msg, "status")
        .map(|s| crate::model::JobStatus::from_filter("list-jobs: content.status", s))
        .transpose()
        .map_err(RouteError::Invalid)?;
    let offset = number(msg, "offset")?.unwrap_or(0);
    let limit = number(msg, "limit")?.unwrap_or(usize::MAX);
    let filter = JobFilter {
        status,
        project: arg(msg, "project").map(str::to_string),
        queue: arg(msg, "queue").map(str::to_string),
    };
    permissions::check_job_filter(store, who, &filter)?;
    let too_big = |fit: String| {
        RouteError::Invalid(format!(
            "list-jobs: the answer would be over {MAX_LIST_BYTES} bytes ({fit}); ask for a slice with content.offset and content.limit, narrow it with content.status, content.project or content.queue, or page through ListJobs on D-Bus"
        ))
    };
    let mut visible = permissions::Visibility::new(store, who);
    let mut index = JobIndex::default();
    let mut listing = index.listing(store, &filter);
    // From the index alone: the jobs of the slice at their shortest.
    let least = least_job_bytes();
    let (mut floor, mut count, mut seen) = (2usize, 0usize, 0usize);
    for l in listing.by_ref() {
        if count >= limit {
            break;
        }
        if !visible.admits(&l.head.project, l.head.user.as_deref()) {
            continue;
        }
        seen += 1;
        if seen <= offset {
            continue;
        }
        count += 1;
        floor += least + l.id.len() + 1;
        if floor > MAX_LIST_BYTES {
            drop(listing);
            release_memory();
            return Err(too_big(format!(
                "{count} of the jobs asked for take at least {floor} bytes"
            )));
        }
    }
    if let Err(e) = listing.rewind() {
        return Err(RouteError::Failed(format!("list-jobs: job index: {e}")));
    }
    let (mut jobs, mut bytes, mut seen) = (Vec::new(), 2usize, 0usize);
    for l in listing {
        if jobs.len() >= limit {
            break;
        }
        if !visible.admits(&l.head.project, l.head.user.as_deref()) {
            continue;
        }
        seen += 1;
        if seen <= offset {
            continue;
        }
        let Ok(Some(mut job)) = visible.document(&l) else {
            continue;
        };
        job.runtime.output = None;
        bytes += json_len(&job) + 1;
        if bytes > MAX_LIST_BYTES {
            let fit = jobs.len();
            drop(jobs);
            release_memory();
            return Err(too_big(format!("{fit} jobs fit")));
        }
        // As the answer's value at once: the job itself is not kept beside it.
        jobs.push(to_value(&job));
    }
    Ok(Value::Array(jobs))
}

/// Refuses a content key a listing does not know (a misspelt filter would otherwise list
/// everything, as if no filter had been given).
pub(super) fn known_keys(msg: &Message, known: &[&str]) -> Result<(), RouteError> {
    known_content_keys(&msg.content, &msg.command, known)
}

/// [`known_keys`] for a content map.
pub(super) fn known_content_keys(
    content: &serde_json::Map<String, Value>,
    command: &str,
    known: &[&str],
) -> Result<(), RouteError> {
    match content.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(RouteError::Invalid(format!(
            "{command}: unknown content key {k:?} (known: {})",
            known.join(", ")
        ))),
    }
}

/// Refuses `content.<key>` when it is there and neither a string nor null (a filter given
/// as a number or a list would otherwise be no filter at all).
fn text_or_null(msg: &Message, key: &str) -> Result<(), RouteError> {
    match msg.content.get(key) {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(v) => Err(RouteError::Invalid(format!(
            "{}: content.{key} must be a string, not {v}",
            msg.command
        ))),
    }
}

/// Bytes of `v` as compact JSON, counted without building the text.
fn json_len<T: serde::Serialize>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => 0,
    }
}

/// The fewest bytes any listed job document takes as compact JSON, besides its id: the keys
/// every job carries (those written whatever their value), each value at its shortest (a
/// string `""`, a number or `null` one byte, an empty array or object). 0 if unknown.
pub fn least_job_bytes() -> usize {
    static LEAST: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LEAST.get_or_init(|| {
        let bare = serde_json::json!({
            "config": {"project": "", "working_directory": "", "queue_time": "2025-01-01T00:00:00Z",
                "jobtype": "noop", "claude_command": "", "claude_extra_args": [],
                "task_description": "", "supporting_data": {}, "timeout_seconds": null},
            "runtime": {"status": "queued", "start_time": null, "finish_time": null,
                "process_id": null, "llm_process_id": null, "error": null, "output": null}
        });
        match serde_json::from_value::<crate::model::Job>(bare) {
            Ok(job) => shortest(&to_value(&job)),
            Err(_) => 0,
        }
    })
}

fn shortest(v: &Value) -> usize {
    match v {
        Value::Object(m) => {
            2 + m.len().saturating_sub(1)
                + m.iter()
                    .map(|(k, v)| k.len() + 3 + shortest(v))
                    .sum::<usize>()
        }
        Value::Array(_) | Value::String(_) => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The floor is a floor: no job, however small its fields, serialises shorter; and it is
    /// high enough to refuse 100,000 jobs from the index alone.
    #[test]
    fn least_job_bytes_is_a_lower_bound() {
        let least = least_job_bytes();
        assert!(least * 100_000 > MAX_LIST_BYTES, "{least}");
        let small = serde_json::json!({
            "config": {"project": "", "working_directory": "", "queue_time": "2025-01-01T00:00:00Z",
                "jobtype": "noop", "claude_command": "", "claude_extra_args": [],
                "task_description": "", "supporting_data": {}, "timeout_seconds": 0},
            "runtime": {"status": "failed", "start_time": null, "finish_time": null,
                "process_id": 1, "llm_process_id": 2, "error": "", "output": null}
        });
        let job: crate::model::Job = serde_json::from_value(small).unwrap();
        assert!(json_len(&job) >= least, "{} < {least}", json_len(&job));
        assert_eq!(json_len(&job), to_value(&job).to_string().len());
    }
}
