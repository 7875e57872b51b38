//! Moving a job between states: one rename into the next folder (`running_jobs/` for a
//! start's claim, `finished_jobs/` or `failed_jobs/` for an end), then the write in place —
//! the rename is the claim, so one job is never started or ended twice (DESIGN §4). Shared by the worker (normal ends) and the manager (ends the
//! worker cannot report: crash, timeout, cancel; invalid files).

use crate::model::{DocKind, Job, JobStatus, Timestamp};
use crate::store::{Store, StoreError, move_then_write, write_atomic, write_json_atomic};
use serde_json::{Map, Value};
use std::path::PathBuf;

fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Moves `Queues/<queue>/Jobs/<from>/<id>.json` to the folder of `job.runtime.status` and
/// writes `job` there: the move first, as a claim ([`move_then_write`]), so of several
/// processes ending, starting or failing one job at once exactly one does, and a job another
/// process moved away is never written back into being (`NotFound`: it was started, ended or
/// failed elsewhere). A job whose id already exists in the destination ends in `failed_jobs/`
/// under a collision name instead. Returns the new path.
pub fn write_and_move(
    store: &Store,
    queue: &str,
    id: &str,
    from: JobStatus,
    job: &Job,
) -> Result<PathBuf, StoreError> {
    match take_and_write(store, queue, id, from, job) {
        Err(Taken::Exists(src)) => {
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
                job_bytes(store, &src, &failed)
            })
        }
        Err(Taken::Failed(e)) => Err(e),
        Ok(p) => Ok(p),
    }
}

/// Claims queued job `id` for a start on this machine before any worker exists: moves it
/// from `queued_jobs/` into `running_jobs/` and writes `job` (marked running on this host by
/// the caller) there ([`move_then_write`]). Of several queue managers serving the queue from
/// one filesystem exactly one claims it; the others get `NotFound`. `AlreadyExists` when a
/// job of the same id is running (nothing moved).
pub fn claim_queued(store: &Store, queue: &str, id: &str, job: &Job) -> Result<PathBuf, StoreError> {
    match take_and_write(store, queue, id, JobStatus::Queued, job) {
        Ok(p) => Ok(p),
        Err(Taken::Failed(e)) => Err(e),
        Err(Taken::Exists(_)) => {
            let dst = store.job_path(queue, job.runtime.status, id);
            Err(StoreError::Io {
                path: dst,
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a job with this id is already there",
                ),
            })
        }
    }
}

/// Why [`take_and_write`] did not move a job.
enum Taken {
    /// The destination exists (an id collision): the source, not moved.
    Exists(PathBuf),
    Failed(StoreError),
}

/// [`move_then_write`] of `job` from `<from>/<id>.json` to the folder of its status (written
/// in place when that is `from`, only while the file is still there).
fn take_and_write(
    store: &Store,
    queue: &str,
    id: &str,
    from: JobStatus,
    job: &Job,
) -> Result<PathBuf, Taken> {
    let src = store.job_path(queue, from, id);
    let dst = store.job_path(queue, job.runtime.status, id);
    let bytes = job_bytes(store, &dst, job).map_err(Taken::Failed)?;
    let gone = || {
        Taken::Failed(StoreError::Io {
            path: src.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "the job is no longer in {}/: another process took it (it was started, ended or failed elsewhere)",
                    from.dir()
                ),
            ),
        })
    };
    if src == dst {
        // A job another process moved away is never written back into being.
        if !crate::store::safe::exists(&src) {
            return Err(gone());
        }
        return write_atomic(&src, &bytes)
            .map(|_| dst.clone())
            .map_err(|e| Taken::Failed(io(&src)(e)));
    }
    match move_then_write(&src, &dst, &bytes) {
        Ok(()) => Ok(dst),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !crate::store::safe::exists(&src) => {
            Err(gone())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Taken::Exists(src)),
        Err(e) => Err(Taken::Failed(io(&dst)(e))),
    }
}

/// `job` as written to `path`: validated, or — a document we cannot make valid still ends —
/// as it is (the rejection is in errors.out already).
fn job_bytes(store: &Store, path: &std::path::Path, job: &Job) -> Result<Vec<u8>, StoreError> {
    match store.doc_bytes(DocKind::Job, path, job) {
        Ok(b) => Ok(b),
        Err(StoreError::Invalid { .. }) => crate::store::writes::json_bytes(path, job),
        Err(e) => Err(e),
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
/// same id ended before): it moves to a disambiguated name in `failed_jobs/` with the content
/// `failed` gives for the error (the job failed with it), so it never stays behind in
/// `running_jobs/` and neither file is lost.
fn end_collided(
    store: &Store,
    queue: &str,
    id: &str,
    src: &std::path::Path,
    to: JobStatus,
    failed: impl FnOnce(&str) -> Result<Vec<u8>, StoreError>,
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
    let bytes = failed(&error)?;
    let mut n = n;
    loop {
        match move_then_write(src, &dst, &bytes) {
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
/// `failed_jobs/` (the move first, as in [`write_and_move`]).
pub fn fail_raw(
    store: &Store,
    queue: &str,
    id: &str,
    from: JobStatus,
    bytes: &[u8],
    error: &str,
) -> Result<PathBuf, StoreError> {
    let src = store.job_path(queue, from, id);
    let dst = store.job_path(queue, JobStatus::Failed, id);
    let mut doc = failed_raw_doc(bytes, error);
    let content = crate::store::writes::json_bytes(&dst, &Value::Object(doc.clone()))?;
    match move_then_write(&src, &dst, &content) {
        Ok(()) => Ok(dst),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            end_collided(store, queue, id, &src, JobStatus::Failed, |collided| {
                if let Some(Value::Object(r)) = doc.get_mut("runtime") {
                    r.insert(
                        "error".into(),
                        Value::String(format!("{collided}; the run's own error: {error}")),
                    );
                }
                crate::store::writes::json_bytes(&src, &Value::Object(doc))
            })
        }
        Err(e) => Err(io(&src)(e)),
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
