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
    // A running job whose file is gone was ended elsewhere (its machine was judged lost and
    // another process failed it): never write it back into being.
    if from == JobStatus::Running && !crate::store::safe::exists(&src) {
        return Err(StoreError::Io {
            path: src,
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the job is no longer running: it was ended elsewhere",
            ),
        });
    }
    match store.write_doc(DocKind::Job, &src, job) {
        Ok(()) => {}
        // A document we cannot make valid still ends: written as it is, the rejection is in
        // errors.out already.
        Err(StoreError::Invalid { .. }) => write_json_atomic(&src, job).map_err(io(&src))?,
        Err(e) => return Err(e),
    }
    let dst = store.job_path(queue, job.runtime.status, id);
    if src == dst {
        return Ok(dst);
    }
    match move_no_replace(&src, &dst) {
        Ok(()) => Ok(dst),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            end_collided(store, queue, id, &src, job.runtime.status, |error| {
                let mut failed = job.clone();
                let earlier = failed.runtime.error.take();
                set_failed(
                    &mut failed,
                    match earlier {
                        Some(e) => format!("{error}; the run's own error: {e}"),
                        None => error.to_string(),
                    },
                );
                write_json_atomic(&src, &failed).map_err(io(&src))
            })
        }
        Err(e) => Err(io(&dst)(e)),
    }
}

/// The name a job that collided with an existing file of the same id ends under:
/// `failed_jobs/<id>.collision-<n>.json`, the first free `n`.
pub fn collision_path(store: &Store, queue: &str, id: &str, n: u32) -> PathBuf {
    store
        .jobs_dir(queue, JobStatus::Failed)
        .join(format!("{id}.collision-{n}.json"))
}

/// Ends a job whose move into `to` failed because `<to>/<id>.json` exists (a job with the
/// same id ended before): `rewrite` writes the job in place as failed with the given error,
/// then it moves to a disambiguated name in `failed_jobs/`, so it never stays behind in
/// `running_jobs/` and neither file is lost.
fn end_collided(
    store: &Store,
    queue: &str,
    id: &str,
    src: &std::path::Path,
    to: JobStatus,
    rewrite: impl FnOnce(&str) -> Result<(), StoreError>,
) -> Result<PathBuf, StoreError> {
    let n = (1..u32::MAX)
        .find(|n| std::fs::symlink_metadata(collision_path(store, queue, id, *n)).is_err())
        .unwrap_or(u32::MAX);
    let mut dst = collision_path(store, queue, id, n);
    let error = format!(
        "Job id {id} already exists in Queues/{queue}/Jobs/{}/ (an earlier job with the same id); this run ended as Queues/{queue}/Jobs/{}/{}",
        to.dir(),
        JobStatus::Failed.dir(),
        dst.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    tracing::error!(job_id = %id, queue = %queue, "{error}");
    rewrite(&error)?;
    let mut n = n;
    loop {
        match move_no_replace(src, &dst) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < u32::MAX => {
                n += 1;
                dst = collision_path(store, queue, id, n);
            }
            Err(e) => return Err(io(&dst)(e)),
        }
    }
    store.record_event(
        &crate::store::Event::new("agentstore", "job_id_collision")
            .job(id)
            .queue(queue)
            .detail(&error),
    );
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
    let mut doc = failed_raw_doc(bytes, error);
    write_json_atomic(&src, &Value::Object(doc.clone())).map_err(io(&src))?;
    let dst = store.job_path(queue, JobStatus::Failed, id);
    match move_no_replace(&src, &dst) {
        Ok(()) => Ok(dst),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            end_collided(store, queue, id, &src, JobStatus::Failed, |collided| {
                if let Some(Value::Object(r)) = doc.get_mut("runtime") {
                    r.insert(
                        "error".into(),
                        Value::String(format!("{collided}; the run's own error: {error}")),
                    );
                }
                write_json_atomic(&src, &Value::Object(doc)).map_err(io(&src))
            })
        }
        Err(e) => Err(io(&dst)(e)),
    }
}

/// The JSON object of a job file that does not parse as a job, marked failed with `error`
/// (unparseable text is kept under `unparseable_content`).
fn failed_raw_doc(bytes: &[u8], error: &str) -> Map<String, Value> {
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
    doc
}

/// Rewrites `path` (a job file that does not parse as a job, already where it ends) as
/// failed with `error`.
pub fn rewrite_failed_raw(
    path: &std::path::Path,
    bytes: &[u8],
    error: &str,
) -> Result<(), StoreError> {
    write_json_atomic(path, &Value::Object(failed_raw_doc(bytes, error))).map_err(io(path))
}

/// Marks `job` failed with `error` now.
pub fn set_failed(job: &mut Job, error: impl Into<String>) {
    job.runtime.status = JobStatus::Failed;
    job.runtime.error = Some(error.into());
    job.runtime.finish_time = Some(Timestamp::now());
}
