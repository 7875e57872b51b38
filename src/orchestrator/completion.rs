//! Finished-job handling (PRD §6.5). Each finished job is handled once: its effects are
//! idempotent (a document written whole, a PRD whose id is the job's, a PRD moved only from
//! the state before), and `runtime.handled` is set afterwards, so a crash in between only
//! repeats harmless work. What was handled is also recorded in the handled-log
//! ([`super::handled`]), so finished history is never re-read.

use super::DAEMON;
use super::handled::Completions;
use crate::model::{Command, DocKind, Job, JobStatus, Prd, PrdState, Timestamp};
use crate::store::grouped::GroupedWrite;
use crate::store::{Event, JobLocation, Record, Store, StoreError, move_no_replace};
use serde_json::{Map, Value};

/// What handling did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// Job id.
    pub job_id: String,
    /// What was done.
    pub action: String,
}

/// The useful text of a job's output: Claude's `result` when the output is its JSON, else
/// the output itself.
pub fn result_text(job: &Job) -> String {
    job.result_text()
}

/// Jobs handled in one batch: their flags are written with one grouped sync
/// ([`crate::store::grouped`]), their handled-log lines with one append.
pub const BATCH: usize = 512;

/// What one batch did.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Jobs handled now (their flag written and synced).
    pub handled: Vec<Handled>,
    /// Jobs to record in the handled-log: the handled ones and those whose flag was set
    /// already.
    pub done: Vec<(String, String)>,
    /// Jobs whose flag could not be written: looked at again at the next sweep.
    pub retry: Vec<(String, String)>,
    /// Jobs that could not be read: looked at again once their file changes.
    pub unreadable: Vec<(String, String, std::path::PathBuf)>,
    /// The first write error, if any (the batch goes on without that job).
    pub error: Option<StoreError>,
}

/// Handles the finished jobs `batch` names (from [`Completions::next_batch`]). Each handled
/// job's effects are written (each durable on its own), then its `runtime.handled` flag:
/// the flags of the whole batch are staged and made durable together (one file-system sync
/// and one folder sync, instead of two syncs per job), and only the jobs whose flag is on
/// disk are returned as done, for the handled-log. A crash anywhere leaves each job either
/// with its new flag or with its old file (its effects, idempotent, are done again on the
/// next pass); a log line never runs ahead of its flag. A job whose flag is already set
/// (handled before a crash lost the log line, or by an older version) is only logged.
pub fn process_batch(store: &Store, batch: &[(String, String)]) -> BatchOutcome {
    let mut out = BatchOutcome::default();
    let mut group = GroupedWrite::new();
    let mut staged: Vec<(JobLocation, String)> = Vec::new();
    for (queue, id) in batch {
        let path = store.job_path(queue, JobStatus::Finished, id);
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            continue; // moved on meanwhile (or not a regular file: never followed)
        }
        let loc = JobLocation {
            queue: queue.clone(),
            status: JobStatus::Finished,
            id: id.clone(),
            path,
        };
        let mut job = match store.job(&loc) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!("skipping finished job: {e}");
                out.unreadable.push((loc.queue, loc.id, loc.path));
                continue;
            }
        };
        if job.runtime.handled == Some(true) {
            out.done.push((loc.queue, loc.id));
            continue;
        }
        let action = {
            let _span = tracing::info_span!("job", job_id = %loc.id, queue = %loc.queue).entered();
            match handle_one(store, &loc, &job) {
                // The handler failed the job (a create-tasks answer refused): it is in
                // failed_jobs/ now, marked handled.
                Ok(a) if !crate::store::safe::exists(&loc.path) => {
                    store.record(Record::warn(
                        Event::new(DAEMON, "job_failed_on_completion")
                            .job(&loc.id)
                            .queue(&loc.queue)
                            .detail(&a),
                        format!("finished job failed by its handler: {a}"),
                    ));
                    out.done.push((loc.queue, loc.id));
                    continue;
                }
                Ok(a) => a,
                Err(e) => {
                    store.record(Record::warn(
                        Event::new(DAEMON, "completion_failed")
                            .job(&loc.id)
                            .detail(e.to_string()),
                        format!("completion handler failed: {e}"),
                    ));
                    format!("failed: {e}")
                }
            }
        };
        job.runtime.handled = Some(true);
        // The job is finished: its worker is gone, so the orchestrator may write it now.
        let written = store
            .doc_bytes(DocKind::Job, &loc.path, &job)
            .and_then(|bytes| {
                group
                    .stage(&loc.path, &bytes)
                    .map_err(|source| StoreError::Io {
                        path: loc.path.clone(),
                        source,
                    })
            });
        match written {
            Ok(()) => staged.push((loc, action)),
            Err(e) => {
                tracing::warn!(job_id = %loc.id, queue = %loc.queue, "cannot write the handled flag: {e}");
                out.retry.push((loc.queue, loc.id));
                out.error.get_or_insert(e);
            }
        }
    }
    for ((loc, action), result) in staged.into_iter().zip(group.commit()) {
        if let Err(source) = result {
            tracing::warn!(job_id = %loc.id, queue = %loc.queue, "cannot write the handled flag: {source}");
            out.retry.push((loc.queue, loc.id));
            out.error.get_or_insert(StoreError::Io {
                path: loc.path,
                source,
            });
            continue;
        }
        store.record(Record::info(
            Event::new(DAEMON, "job_handled")
                .job(&loc.id)
                .queue(&loc.queue)
                .detail(&action),
            format!("finished job handled: {action}"),
        ));
        out.handled.push(Handled {
            job_id: loc.id.clone(),
            action,
        });
        out.done.push((loc.queue, loc.id));
    }
    out
}

/// Records the end of a batch in `completions` (its handled-log lines, its retries). A log
/// that cannot be written (a full disk, a FIFO or folder planted under its name) costs a
/// warning, never the pass: the jobs' flags are set, so they are not handled twice (after a
/// restart each is read once more).
pub fn finish_batch(
    store: &Store,
    completions: &mut Completions,
    batch: &[(String, String)],
    out: &BatchOutcome,
) {
    if let Err(e) = completions.finish(store, batch, &out.done, &out.retry, &out.unreadable) {
        tracing::warn!(
            "handled-log not written: {e}; the jobs are handled (their runtime.handled is set)"
        );
    }
}

/// Handles every finished job `completions` names (reported by the watcher, or found by its
/// backstop sweep) that the handled-log does not list yet, a batch at a time
/// ([`process_batch`]). Jobs the log names are never read again. Fails with the first
/// write error after handling every other job.
pub fn handle_finished_jobs(
    store: &Store,
    completions: &mut Completions,
) -> Result<Vec<Handled>, StoreError> {
    let mut done = Vec::new();
    let mut error = None;
    loop {
        let batch = completions.next_batch(store, BATCH);
        if batch.is_empty() {
            break;
        }
        let mut out = process_batch(store, &batch);
        finish_batch(store, completions, &batch, &out);
        done.append(&mut out.handled);
        if error.is_none() {
            error = out.error.take();
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

fn handle_one(store: &Store, loc: &JobLocation, job: &Job) -> Result<String, StoreError> {
    // Jobs written by hand carry no command; it is inferred from the Claude command.
    let named = job.config.command.as_deref();
    let command = match named {
        Some(c) => Command::parse(c),
        None => Command::for_claude_command(&job.config.claude_command),
    };
    match (command, named.unwrap_or_default()) {
        (Some(Command::ResearchCode), _) => {
            let what = match job
                .config
                .supporting_data
                .get(crate::model::RESEARCH_DOCUMENT_KEY)
                .and_then(Value::as_str)
            {
                Some(doc) if store.holds(std::path::Path::new(doc)) => {
                    write_store_document(std::path::Path::new(doc), &result_text(job))?;
                    format!("research document {doc} (in the store, written here)")
                }
                Some(doc) => format!("research document {doc}"),
                None => "research without a code_research_document".to_string(),
            };
            project_work_recorded(store, job, &what)
        }
        (Some(Command::CreateEnvironment), _) => project_work_recorded(
            store,
            job,
            &format!("environment in {}", job.config.working_directory),
        ),
        (Some(Command::CreatePrd), _) => prd_created(store, loc, job),
        (Some(Command::CreateTasks), _) => tasks_created(store, loc, job),
        // A task's and an integration's jobs: ours, not a message's command.
        (None, super::tasks::IMPLEMENT_TASK) => super::tasks::done::task_job_ended(store, loc, job),
        (None, super::tasks::INTEGRATE) => super::tasks::integrate::ended(store, loc, job),
        (Some(Command::ImplementTasks), _) => {
            prd_moved(store, loc, job, PrdState::Running, PrdState::Complete)
        }
        _ => Ok("nothing to do".into()),
    }
}

/// A research document the project keeps inside the store (a store record, not a project
/// file): written by the store's daemon, never through a link (beneath the store root the
/// whole path is checked; the document itself is replaced by a rename).
fn write_store_document(path: &std::path::Path, text: &str) -> Result<(), StoreError> {
    let io = |p: &std::path::Path| {
        let p = p.to_path_buf();
        move |source| StoreError::Io { path: p, source }
    };
    if let Some(dir) = path.parent() {
        crate::store::safe::create_dir_all(dir).map_err(io(dir))?;
        crate::store::safe::refuse_linked_dir(dir).map_err(io(dir))?;
    }
    crate::store::write_atomic(path, text.as_bytes()).map_err(io(path))
}

/// `research-code` and `create-environment` changed the project's own folder: the job did
/// that on the compute host as its user (the research document, the venv). The orchestrator
/// only records it (PRD §6.5: the project's `update_time`); it never touches the project's
/// folder, which may not even exist on this machine.
fn project_work_recorded(store: &Store, job: &Job, what: &str) -> Result<String, StoreError> {
    let mut project = store.project(&job.config.project)?;
    project.update_time = Timestamp::now();
    store.write_doc(DocKind::Project, &store.project_path(&project.id), &project)?;
    let host = job.runtime.host.as_deref().unwrap_or("the compute host");
    Ok(format!("recorded: {what} (made by the job on {host})"))
}

fn prd_created(store: &Store, loc: &JobLocation, job: &Job) -> Result<String, StoreError> {
    let project = store.project(&job.config.project)?;
    if store.find_prd(&loc.id).is_ok() {
        return Ok(format!("PRD {} exists", loc.id));
    }
    let text = result_text(job);
    let title = text
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or(&job.config.task_description)
        .chars()
        .take(120)
        .collect::<String>();
    let mut content = Map::new();
    content.insert("document".into(), Value::String(text));
    content.insert(
        "request".into(),
        Value::String(job.config.task_description.clone()),
    );
    let now = Timestamp::now();
    let prd = Prd {
        id: loc.id.clone(),
        project: project.id.clone(),
        title,
        version: "1.0".into(),
        owner: job.config.user.clone().unwrap_or(project.owner.clone()),
        status: PrdState::Queued,
        created_time: now,
        update_time: now,
        content,
        jobs: vec![loc.id.clone()],
        implementation_report: None,
    };
    let path = store
        .prd_dir(&project.id, PrdState::Queued)
        .join(format!("{}.json", prd.id));
    store.write_doc(DocKind::Prd, &path, &prd)?;
    Ok(format!("created PRD {}", prd.id))
}

/// `create-tasks`: the tasks written from the agent's answer (or the job failed, refusing
/// it), then the PRD moves to running.
fn tasks_created(store: &Store, loc: &JobLocation, job: &Job) -> Result<String, StoreError> {
    let Some(prd_id) = job_prd(job) else {
        return Ok("job names no PRD".into());
    };
    // A no-op job (demos, tests of the pipeline's order) answers no task list: the PRD
    // moves on as before task documents, with no tasks.
    if job.config.jobtype == crate::model::JobType::Noop {
        return prd_moved(store, loc, job, PrdState::Queued, PrdState::Running);
    }
    match super::tasks::create::created(store, loc, job, &prd_id)? {
        super::tasks::create::Created::Refused(why) => Ok(why),
        super::tasks::create::Created::Tasks(ids) => {
            store.notice_tasks_created(&prd_id, &ids);
            let moved = prd_moved(store, loc, job, PrdState::Queued, PrdState::Running)?;
            // A pipeline's last step fans out too (it waits for this job to be handled).
            let step = super::tasks::fanout::pipeline_step(store, job, &prd_id)
                .unwrap_or_else(|e| {
                    tracing::warn!(prd = %prd_id, "the pipeline's implement-tasks step did not fan out: {e}");
                    format!("; the pipeline's implement-tasks step did not fan out ({e}): it runs as one job")
                });
            Ok(format!(
                "{} task(s) written ({}); {moved}{step}",
                ids.len(),
                ids.join(", ")
            ))
        }
    }
}

/// The PRD a job works on.
fn job_prd(job: &Job) -> Option<String> {
    job.config.prd.clone().or_else(|| {
        job.config
            .supporting_data
            .get("prd")?
            .get("id")?
            .as_str()
            .map(str::to_string)
    })
}

/// Every task of PRD `prd_id` is done (issue 30): the PRD moves to complete (from queued or
/// running) with `report`.
pub(super) fn prd_finished(
    store: &Store,
    prd_id: &str,
    report: Value,
) -> Result<String, StoreError> {
    prd_ended(store, prd_id, PrdState::Complete, report)
}

/// Moves PRD `prd_id` to `to` (complete, or review) with `report` as its implementation
/// report; a PRD already complete is left alone.
pub(super) fn prd_ended(
    store: &Store,
    prd_id: &str,
    to: PrdState,
    report: Value,
) -> Result<String, StoreError> {
    let (state, path, mut prd) = store.find_prd(prd_id)?;
    if state == PrdState::Complete {
        return Ok(format!("PRD {prd_id} already complete"));
    }
    prd.status = to;
    prd.update_time = Timestamp::now();
    prd.implementation_report = Some(report);
    store.write_doc(DocKind::Prd, &path, &prd)?;
    if state == to {
        return Ok(format!("PRD {prd_id} stays {}", to.name()));
    }
    let dest_dir = store.prd_dir(&prd.project, to);
    crate::store::safe::create_dir_all(&dest_dir).map_err(|source| StoreError::Io {
        path: dest_dir.clone(),
        source,
    })?;
    move_no_replace(&path, &dest_dir.join(format!("{prd_id}.json"))).map_err(|source| {
        StoreError::Io {
            path: path.clone(),
            source,
        }
    })?;
    Ok(format!("PRD {prd_id} → {}", to.dir()))
}

fn prd_moved(
    store: &Store,
    loc: &JobLocation,
    job: &Job,
    from: PrdState,
    to: PrdState,
) -> Result<String, StoreError> {
    let Some(prd_id) = job.config.prd.clone().or_else(|| {
        job.config
            .supporting_data
            .get("prd")?
            .get("id")?
            .as_str()
            .map(str::to_string)
    }) else {
        return Ok("job names no PRD".into());
    };
    let (state, path, mut prd) = store.find_prd(&prd_id)?;
    if state == to {
        return Ok(format!("PRD {prd_id} already {}", to.name()));
    }
    if state != from {
        return Ok(format!(
            "PRD {prd_id} is {}, expected {}; left alone",
            state.name(),
            from.name()
        ));
    }
    prd.status = to;
    prd.update_time = Timestamp::now();
    if !prd.jobs.contains(&loc.id) {
        prd.jobs.push(loc.id.clone());
    }
    // Task documents listed (issue 30) stay the PRD's list; otherwise the answer's text.
    if from == PrdState::Queued && !prd.content.get("tasks").is_some_and(Value::is_array) {
        // The tasks feed the implementation step through the PRD (issue 17 pipelines).
        prd.content
            .insert("tasks".into(), Value::String(result_text(job)));
    }
    if to == PrdState::Complete {
        prd.implementation_report = Some(Value::String(result_text(job)));
    }
    // Write the new state in place, then rename into the new folder: a crash between leaves
    // a consistent document that the next sweep moves.
    store.write_doc(DocKind::Prd, &path, &prd)?;
    let dest_dir = store.prd_dir(&prd.project, to);
    crate::store::safe::create_dir_all(&dest_dir).map_err(|source| StoreError::Io {
        path: dest_dir.clone(),
        source,
    })?;
    let dest = dest_dir.join(format!("{prd_id}.json"));
    move_no_replace(&path, &dest).map_err(|source| StoreError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(format!("PRD {prd_id} → {}", to.dir()))
}
