//! `list-jobs` and `view-job` as messages ask them (the inbox, D-Bus `Submit`): the jobs PRD
//! §10 lets the caller see, walked by [`super::job_listing::VisibleJobs`] like every other
//! listing of jobs.

use super::job_listing::{VisibleJobs, job_filter};
use crate::model::{Command, Job, Message};
use crate::orchestrator::RouteError;
use crate::orchestrator::content::{
    MAX_LIST_BYTES, arg, known_content_keys, required_or, text_or_null, to_value, whole_number,
};
use crate::permissions::{self, Caller, Refused};
use crate::store::{JobLocation, Store};
use serde_json::Value;

/// `view-job ID`: where the job is and its document.
pub fn view(store: &Store, who: &Caller, id: &str) -> Result<(JobLocation, Job), Refused> {
    permissions::visible_job(store, who, id)
}

pub(super) fn answer_view(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    let id = required_or(msg, "job", "job_id")?;
    Ok(to_value(&view(store, who, id)?.1))
}

/// `list-jobs`: job documents without `runtime.output` (use `view-job` for that), filtered by
/// `content.status`, `content.project` and `content.queue`, oldest first; `content.offset`
/// and `content.limit` take a slice. Ordered by the job index and read one document at a
/// time; an answer that would pass [`MAX_LIST_BYTES`] is refused with what to do instead —
/// before any document is read when the index alone shows it cannot fit (each job takes at
/// least [`least_job_bytes`]), and otherwise as soon as the documents read pass the bound;
/// either way what was read is given back to the system before the refusal.
pub(super) fn answer_list(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    use crate::store::listing::{JobIndex, release_memory};
    known_content_keys(
        &msg.content,
        &msg.command,
        &["status", "project", "queue", "offset", "limit"],
    )?;
    for k in ["status", "project", "queue"] {
        text_or_null(msg, k)?;
    }
    let filter = job_filter(
        arg(msg, "status"),
        arg(msg, "project"),
        arg(msg, "queue"),
        "list-jobs: content.status",
    )
    .map_err(RouteError::Invalid)?;
    let number = |key: &str| whole_number(&msg.content, Command::ListJobs.name(), key);
    let offset = number("offset")?.unwrap_or(0);
    let limit = number("limit")?.unwrap_or(usize::MAX);
    let too_big = |fit: String| {
        RouteError::Invalid(format!(
            "list-jobs: the answer would be over {MAX_LIST_BYTES} bytes ({fit}); ask for a slice with content.offset and content.limit, narrow it with content.status, content.project or content.queue, or page through ListJobs on D-Bus"
        ))
    };
    let mut index = JobIndex::default();
    let mut listing = VisibleJobs::open(store, who, &filter, &mut index, false)?;
    // From the index alone: the jobs of the slice at their shortest.
    let least = least_job_bytes();
    let (mut floor, mut count) = (2usize, 0usize);
    listing.skip_visible(offset);
    for l in listing.by_ref() {
        if count >= limit {
            break;
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
    let (mut jobs, mut bytes) = (Vec::new(), 2usize);
    listing.skip_visible(offset);
    while let Some(l) = listing.next() {
        if jobs.len() >= limit {
            break;
        }
        let Ok(Some(mut job)) = listing.document(&l) else {
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
