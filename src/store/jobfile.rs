//! Ending a job: the final write in place, then one rename into `finished_jobs/` or
//! `failed_jobs/` (DESIGN §4). Shared by the worker (normal ends) and the manager (ends the
//! worker cannot report: crash, timeout, cancel; invalid files).

use crate::model::{DocKind, Job, JobStatus, Timestamp};
use crate::store::{Store, StoreError, move_no_replace, write_json_atomic};
use serde_json::{Map, Value};
use std::path::PathBuf;

fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `job` over `Queues/<queue>/Jobs/<from>/<id>.json`, then moves it to the folder of
/// `job.runtime.status`. Returns the new path.
pub fn write_and_move(
    store: &Store,
    queue: &str,
    id: &str,
    from: JobStatus,
    job: &Job,
) -> Result<PathBuf, StoreError> {
    let src = store.job_path(queue, from, id);
    match store.write_doc(DocKind::Job, &src, job) {
        Ok(()) => {}
        // A document we cannot make valid still ends: written as it is, the rejection is in
        // errors.out already.
        Err(StoreError::Invalid { .. }) => write_json_atomic(&src, job).map_err(io(&src))?,
        Err(e) => return Err(e),
    }
    let dst = store.job_path(queue, job.runtime.status, id);
    if src != dst {
        move_no_replace(&src, &dst).map_err(io(&dst))?;
    }
    Ok(dst)
}

/// Fails a job whose file does not parse as a job: sets `runtime.status/error/finish_time`
/// in whatever JSON object is there (or wraps unparseable text), and moves it to
/// `failed_jobs/`.
pub fn fail_raw(
    store: &Store,
    queue: &str,
    id: &str,
    from: JobStatus,
    bytes: &[u8],
    error: &str,
) -> Result<PathBuf, StoreError> {
    let src = store.job_path(queue, from, id);
    let mut doc = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => m,
        _ => {
            let mut m = Map::new();
            m.insert(
                "unparseable_content".into(),
                Value::String(String::from_utf8_lossy(bytes).into_owned()),
            );
            m
        }
    };
    let runtime = doc
        .entry("runtime")
        .or_insert_with(|| Value::Object(Map::new()));
    if !runtime.is_object() {
        *runtime = Value::Object(Map::new());
    }
    if let Value::Object(r) = runtime {
        r.insert("status".into(), Value::String("failed".into()));
        r.insert("error".into(), Value::String(error.to_string()));
        r.insert(
            "finish_time".into(),
            Value::String(Timestamp::now().to_string()),
        );
    }
    write_json_atomic(&src, &Value::Object(doc)).map_err(io(&src))?;
    let dst = store.job_path(queue, JobStatus::Failed, id);
    move_no_replace(&src, &dst).map_err(io(&dst))?;
    Ok(dst)
}

/// Marks `job` failed with `error` now.
pub fn set_failed(job: &mut Job, error: impl Into<String>) {
    job.runtime.status = JobStatus::Failed;
    job.runtime.error = Some(error.into());
    job.runtime.finish_time = Some(Timestamp::now());
}
