//! Moving a job between states: the final write in place, then one rename into the next
//! folder (DESIGN §4). A queued job, which any manager of its queue may take, is first
//! claimed by one rename into this machine's `Queues/<q>/.claimed/<host>/` — of racing
//! processes exactly one succeeds on one filesystem — and only then written, so a job is
//! never started or ended twice, and a job another process took is never written back into
//! being. Shared by the worker (normal ends) and the manager (starts; ends the worker cannot
//! report: crash, timeout, cancel; invalid files).

use crate::model::{DocKind, Job, JobStatus, Timestamp};
use crate::store::{Store, StoreError, write_atomic, write_json_atomic};
use serde_json::{Map, Value};
use std::path::PathBuf;

fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `job` over `Queues/<queue>/Jobs/<from>/<id>.json`, then moves it to the folder of
/// `job.runtime.status` ([`take_and_write`]: a queued job is claimed first; a job another
/// process took is `NotFound`, never written back). A job whose id already exists in the
/// destination ends in `failed_jobs/` under a collision name instead. Returns the new path.
pub fn write_and_move(
    store: &Store,
    queue: &str,
    id: &str,
    from: JobStatus,
    job: &Job,
) -> Result<PathBuf, StoreError> {
    write_and_move_from(store, queue, id, &store.job_path(queue, from, id), job)
}

/// [`write_and_move`] of the job at `src` (a start's claim).
pub fn write_and_move_from(
    store: &Store,
    queue: &str,
    id: &str,
    src: &std::path::Path,
    job: &Job,
) -> Result<PathBuf, StoreError> {
    let collided = |src: &std::path::Path, earlier: &str| {
        end_collided(store, queue, id, src, earlier, |error| {
            let mut failed = job.clone();
            let before = failed.runtime.error.take();
            set_failed(
                &mut failed,
                match before {
                    Some(e) => format!("{error}; the run's own error: {e}"),
                    None => error.to_string(),
                },
            );
            job_bytes(store, src, &failed)
        })
    };
    // A run ending under an id an earlier job already ended with in another final folder
    // (or in the archive) is a collision too: the no-replace move below sees only its own
    // destination.
    // Only while the run is still ours: a job another machine ended meanwhile (its file gone
    // from running_jobs/) is `NotFound` below, never written back into being.
    if matches!(job.runtime.status, JobStatus::Finished | JobStatus::Failed)
        && src.parent() == Some(store.jobs_dir(queue, JobStatus::Running).as_path())
        && crate::store::safe::exists(src)
        && let Some(earlier) = earlier_end(store, queue, id, job.runtime.status)
    {
        return collided(src, &earlier);
    }
    match take_and_write(store, queue, id, src, job) {
        Err(Taken::Exists(src)) => collided(
            &src,
            &format!("Queues/{queue}/Jobs/{}", job.runtime.status.dir()),
        ),
        Err(Taken::Failed(e)) => Err(e),
        Ok(p) => Ok(p),
    }
}

/// Moves job `id` from `src` (a start's claim, or `queued_jobs/` for a start that has no
/// claim of its own) to the folder of `job.runtime.status` and writes `job` there, as
/// [`write_and_move`] does, except that a job of the same id already there is an error
/// (`AlreadyExists`, nothing moved), not a collision to fail.
pub fn move_claimed(
    store: &Store,
    queue: &str,
    id: &str,
    src: &std::path::Path,
    job: &Job,
) -> Result<PathBuf, StoreError> {
    match take_and_write(store, queue, id, src, job) {
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

/// `Queues/<queue>/.claimed/`: one folder per machine of its start claims.
pub fn claims_root(store: &Store, queue: &str) -> PathBuf {
    store.queue_dir(queue).join(".claimed")
}

/// `Queues/<queue>/.claimed/<host>/`: the starts machine `host` has claimed and not yet
/// recorded (DESIGN §4, docs/machines.md).
pub fn claims_dir(store: &Store, queue: &str, host: &str) -> PathBuf {
    claims_root(store, queue).join(host)
}

/// Claims queued job `id` for a start by machine `host` before any worker exists: one
/// rename of `queued_jobs/<id>.json` to `Queues/<queue>/.claimed/<host>/<id>.json`. Of
/// several managers serving the queue from one filesystem exactly one rename succeeds; the
/// others get `NotFound` (taken). Returns the claim's path.
pub fn claim_queued(
    store: &Store,
    queue: &str,
    host: &str,
    id: &str,
) -> Result<PathBuf, StoreError> {
    let src = store.job_path(queue, JobStatus::Queued, id);
    let dir = claims_dir(store, queue, host);
    crate::store::safe::create_dir_all(&dir).map_err(io(&dir))?;
    let dst = dir.join(format!("{id}.json"));
    // Not synced: a claim is never a state of its own. Whoever moves it on syncs
    // `queued_jobs/` with the folder it lands in (`place_claim`, `take_and_write`), and a
    // claim a power loss leaves behind goes back to `queued_jobs/` (`give_back_left_claim`).
    crate::store::safe::rename_noreplace(&src, &dst).map_err(io(&src))?;
    Ok(dst)
}

/// Puts back claim `claim` of job `id` (never released to a worker: nothing of it ran)
/// into `queued_jobs/`, unchanged.
pub fn give_back_claim(
    store: &Store,
    queue: &str,
    id: &str,
    claim: &std::path::Path,
) -> Result<PathBuf, StoreError> {
    let dst = store.job_path(queue, JobStatus::Queued, id);
    crate::store::move_no_replace(claim, &dst).map_err(io(&dst))?;
    Ok(dst)
}

/// [`give_back_claim`] of a claim left behind (by a manager that stopped, or a lost
/// machine), found by a scan rather than held by the start that made it.
pub fn give_back_left_claim(
    store: &Store,
    queue: &str,
    id: &str,
    claim: &std::path::Path,
) -> Result<PathBuf, StoreError> {
    // Through a sync engine a claim's copy can outlive the job's move on (the delete of the
    // claim not yet applied here): a job found in another state is not queued again, and the
    // stale copy goes.
    if let Some(s) = [JobStatus::Running, JobStatus::Finished, JobStatus::Failed]
        .into_iter()
        .find(|s| crate::store::safe::exists(&store.job_path(queue, *s, id)))
    {
        let _ = crate::store::safe::remove_file(claim);
        return Err(StoreError::Io {
            path: claim.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("a stale claim: the job is in {}/ already", s.dir()),
            ),
        });
    }
    give_back_claim(store, queue, id, claim)
}

/// The claims of machine `host` in `queue`: (job id, path).
pub fn claims_of(store: &Store, queue: &str, host: &str) -> Vec<(String, PathBuf)> {
    let Ok(scan) = crate::store::scan_dir(&claims_dir(store, queue, host)) else {
        return Vec::new();
    };
    scan.documents
        .into_iter()
        .filter_map(|p| Some((crate::store::file_id(&p)?.to_string(), p.clone())))
        .collect()
}

/// Why [`take_and_write`] did not move a job.
enum Taken {
    /// The destination exists (an id collision): the source, not moved.
    Exists(PathBuf),
    Failed(StoreError),
}

/// Writes `job` over `src` in place, then moves it to the folder of its status with one
/// rename (never replacing), so a reader sees the document appear whole. A queued job is
/// first taken by this machine ([`take_queued`]): any manager of the queue may be taking it
/// too, and only one may write it. Any other `src` (this machine's claim, a running job) is
/// written only while it is still there: a job another process moved away is never written
/// back into being (`NotFound`).
fn take_and_write(
    store: &Store,
    queue: &str,
    id: &str,
    src: &std::path::Path,
    job: &Job,
) -> Result<PathBuf, Taken> {
    let dst = store.job_path(queue, job.runtime.status, id);
    let bytes = job_bytes(store, &dst, job).map_err(Taken::Failed)?;
    let queued = store.job_path(queue, JobStatus::Queued, id);
    let (src, taken) = if src == queued && dst != queued {
        (take_queued(store, queue, id).map_err(Taken::Failed)?, true)
    } else {
        (src.to_path_buf(), false)
    };
    if !crate::store::safe::exists(&src) {
        return Err(Taken::Failed(gone(&src)));
    }
    let put_back = |e: StoreError| {
        if taken {
            let _ = give_back_claim(store, queue, id, &src);
        }
        Taken::Failed(e)
    };
    if src == dst {
        write_atomic(&src, &bytes).map_err(|e| put_back(io(&src)(e)))?;
        return Ok(dst);
    }
    // The fewest syncs that keep the move durable: the written file and the folder it lands
    // in; for a claim (`claim_queued`, which syncs nothing), `queued_jobs/` where it came from
    // (a power loss never brings the job back there to run twice), not the claims folder (a
    // claim left next to the job in another state is stale and dropped,
    // `give_back_left_claim`); for any other move, the folder it leaves.
    let claimed =
        taken || src.parent().and_then(|d| d.parent()) == Some(claims_root(store, queue).as_path());
    crate::store::write_atomic_moved_on(&src, &bytes).map_err(|e| put_back(io(&src)(e)))?;
    let moved = if claimed {
        crate::store::safe::rename_noreplace(&src, &dst)
            .and_then(|()| crate::store::fsio::sync_parents(&dst, &queued))
    } else {
        crate::store::move_no_replace(&src, &dst)
    };
    match moved {
        Ok(()) => Ok(dst),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Taken::Exists(src)),
        Err(e) => Err(put_back(io(&dst)(e))),
    }
}

/// The error of a job that is no longer at `src`.
fn gone(src: &std::path::Path) -> StoreError {
    StoreError::Io {
        path: src.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the job is no longer there: another process took it (it was started, ended or failed elsewhere)",
        ),
    }
}

/// Takes queued job `id` for this machine (its claim, [`claim_queued`]) so that only this
/// process writes it; `NotFound` when another took it first.
fn take_queued(store: &Store, queue: &str, id: &str) -> Result<PathBuf, StoreError> {
    let host = crate::store::hostname();
    let host = if crate::model::is_safe_id(&host) {
        host
    } else {
        "this-host".to_string()
    };
    claim_queued(store, queue, &host, id).map_err(|e| match e {
        StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            gone(&store.job_path(queue, JobStatus::Queued, id))
        }
        e => e,
    })
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

/// Where an earlier job with id `id` ended, other than the folder a job ending as `status`
/// moves to (that one its no-replace move checks): the other final folder, then each
/// archive month's final folders. The folder, relative to the store; `None` when the id is
/// free.
fn earlier_end(store: &Store, queue: &str, id: &str, status: JobStatus) -> Option<String> {
    let exists = |p: &std::path::Path| crate::store::safe::exists(p);
    for other in [JobStatus::Finished, JobStatus::Failed] {
        if other != status && exists(&store.job_path(queue, other, id)) {
            return Some(format!("Queues/{queue}/Jobs/{}", other.dir()));
        }
    }
    let archive = crate::store::archive::archive_root(store, queue);
    let months = crate::store::scan_subdirs(&archive).unwrap_or_default();
    for month in months {
        for state in [JobStatus::Finished, JobStatus::Failed] {
            let dir = archive.join(&month).join(state.dir());
            if exists(&dir.join(format!("{id}.json"))) {
                return Some(store.relative(&dir).display().to_string());
            }
        }
    }
    None
}

/// The name a job that collided with an existing file of the same id ends under:
/// `failed_jobs/<id>.collision-<n>.json`, the first free `n`.
pub fn collision_path(store: &Store, queue: &str, id: &str, n: u32) -> PathBuf {
    store
        .jobs_dir(queue, JobStatus::Failed)
        .join(format!("{id}.collision-{n}.json"))
}

/// Ends a job whose id an earlier job ended with (`<earlier>/<id>.json` exists, `earlier`
/// the folder relative to the store): it moves to a disambiguated name in `failed_jobs/` with the content
/// `failed` gives for the error (the job failed with it), so it never stays behind in
/// `running_jobs/` and neither file is lost.
fn end_collided(
    store: &Store,
    queue: &str,
    id: &str,
    src: &std::path::Path,
    earlier: &str,
    failed: impl FnOnce(&str) -> Result<Vec<u8>, StoreError>,
) -> Result<PathBuf, StoreError> {
    // As in `take_and_write`: a run whose job another process moved away (a machine that
    // judged this one lost failed it) never writes it back into being, here as a collision.
    if !crate::store::safe::exists(src) {
        return Err(gone(src));
    }
    let n = (1..u32::MAX)
        .find(|n| std::fs::symlink_metadata(collision_path(store, queue, id, *n)).is_err())
        .unwrap_or(u32::MAX);
    let mut dst = collision_path(store, queue, id, n);
    let error = format!(
        "Job id {id} already exists in {earlier}/ (an earlier job with the same id); this run ended as Queues/{queue}/Jobs/{}/{}",
        JobStatus::Failed.dir(),
        dst.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    tracing::error!(job_id = %id, queue = %queue, "{error}");
    let bytes = failed(&error)?;
    write_atomic(src, &bytes).map_err(io(src))?;
    let mut n = n;
    loop {
        match crate::store::move_no_replace(src, &dst) {
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
    let mut src = store.job_path(queue, from, id);
    let dst = store.job_path(queue, JobStatus::Failed, id);
    if from == JobStatus::Queued {
        src = take_queued(store, queue, id)?;
    } else if !crate::store::safe::exists(&src) {
        return Err(gone(&src));
    }
    let mut doc = failed_raw_doc(bytes, error);
    write_json_atomic(&src, &Value::Object(doc.clone())).map_err(io(&src))?;
    match crate::store::move_no_replace(&src, &dst) {
        // A queued job's claim left `queued_jobs/` unsynced (`claim_queued`).
        Ok(()) if from == JobStatus::Queued => {
            let queued = store.job_path(queue, JobStatus::Queued, id);
            crate::store::sync_parent(&queued).map_err(io(&queued))?;
            Ok(dst)
        }
        Ok(()) => Ok(dst),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let earlier = format!("Queues/{queue}/Jobs/{}", JobStatus::Failed.dir());
            end_collided(store, queue, id, &src, &earlier, |collided| {
                if let Some(Value::Object(r)) = doc.get_mut("runtime") {
                    r.insert(
                        "error".into(),
                        Value::String(format!("{collided}; the run's own error: {error}")),
                    );
                }
                crate::store::writes::json_bytes(&src, &Value::Object(doc))
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
