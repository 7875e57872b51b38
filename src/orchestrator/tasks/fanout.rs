//! `implement-tasks` for a PRD with task documents (issue 30): one `implement-task` job per
//! task, each `after` the jobs of the tasks it depends on, so the queue runs them with its
//! own parallelism on whichever machines serve it. Everything is checked before the first
//! job is written; job ids derive from the message and the task, so a message answered
//! again finds the jobs it made.

use super::graph;
use crate::model::{DocKind, Job, JobStatus, Prd, Task, TaskRef, TaskStatus, Timestamp};
use crate::store::Store;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The command of a task's job (its Claude command is `task-implementer`).
pub const IMPLEMENT_TASK: &str = "implement-task";

pub use crate::model::TASK_KEY;

/// One task's job, planned.
pub(super) struct Planned {
    pub(super) task: Task,
    pub(super) job_id: String,
    pub(super) after: Vec<String>,
    pub(super) bases: Vec<String>,
    pub(super) exists: bool,
}

/// [`fan_out`] for a message: the jobs written, the PRD's `jobs` naming them (provenance).
/// The answer names the first task's job; `content.tasks` of the answer lists them all.
pub fn queued(
    store: &Store,
    template: &Job,
    queue: &str,
    prd_path: &std::path::Path,
    prd: &Prd,
    project: &crate::model::Project,
) -> Result<super::super::CreatedJob, super::super::RouteError> {
    let mut template = template.clone();
    if let Some(doc) = &project.code_research_document {
        template
            .config
            .supporting_data
            .insert("research_document".into(), Value::String(doc.clone()));
    }
    let jobs = fan_out(store, &template, queue, prd)
        .map_err(|e| super::super::RouteError::Invalid(format!("implement-tasks: {e}")))?;
    let Some((_, first)) = jobs.first() else {
        return Err(super::super::RouteError::Invalid(format!(
            "implement-tasks: every task of PRD {} is done or cancelled; nothing to queue (retry one with orchestrator retry-task)",
            prd.id
        )));
    };
    let mut prd = prd.clone();
    let before = prd.jobs.len();
    for (_, j) in &jobs {
        if !prd.jobs.contains(j) {
            prd.jobs.push(j.clone());
        }
    }
    if prd.jobs.len() != before {
        prd.update_time = Timestamp::now();
        store.write_doc(DocKind::Prd, prd_path, &prd)?;
    }
    let path = store.job_path(queue, JobStatus::Queued, first);
    Ok(super::super::CreatedJob {
        path: store.relative(&path).display().to_string(),
        queue: queue.to_string(),
        id: first.clone(),
        new: true,
    })
}

/// The (task, job) pairs a message's fan-out made, for its answer.
pub fn answer(store: &Store, correlation_id: &str, prd_id: &str) -> Option<Value> {
    let (_, _, prd) = store.find_prd(prd_id).ok()?;
    let tasks = store.tasks_of(&prd.project, &prd.id, &mut |_| {}).ok()?;
    let map: serde_json::Map<String, Value> = tasks
        .iter()
        .map(|t| (t.id.clone(), task_job_id(correlation_id, prd_id, &t.id)))
        .filter(|(_, j)| store.find_job(j).is_ok())
        .map(|(t, j)| (t, Value::String(j)))
        .collect();
    (!map.is_empty()).then_some(Value::Object(map))
}

/// The job id of `task`'s job for message `correlation_id`.
pub fn task_job_id(correlation_id: &str, prd: &str, task: &str) -> String {
    super::super::job_id_for(&format!("{correlation_id}\u{0}task\u{0}{prd}\u{0}{task}"))
}

/// Queues one job per task of `prd` from `template` (the implement-tasks job as it would
/// have been made: queue, user, timeout, supporting data). Returns (task id, job id) in
/// dependency order; tasks already done or cancelled are left out.
pub fn fan_out(
    store: &Store,
    template: &Job,
    queue: &str,
    prd: &Prd,
) -> Result<Vec<(String, String)>, String> {
    let tasks = store
        .tasks_of(&prd.project, &prd.id, &mut |e| {
            tracing::warn!("task document skipped: {e}")
        })
        .map_err(|e| e.to_string())?;
    if tasks.is_empty() {
        return Err(format!("PRD {} has no task documents", prd.id));
    }
    let who = super::create::job_caller(store, template);
    graph::check(store, &who, &tasks)?;
    let correlation = template
        .config
        .correlation_id
        .clone()
        .unwrap_or_else(|| prd.id.clone());
    let mut plan: Vec<Planned> = Vec::new();
    let mut job_of: BTreeMap<String, String> = BTreeMap::new();
    for t in graph::order(&tasks) {
        let job_id = task_job_id(&correlation, &prd.id, &t.id);
        let exists = store.find_job(&job_id).is_ok();
        if !exists && matches!(t.status, TaskStatus::Done | TaskStatus::Cancelled) {
            continue;
        }
        let mut after = Vec::new();
        let mut bases = Vec::new();
        for d in t.dependencies() {
            let dep = if d.prd == prd.id {
                tasks.iter().find(|x| x.id == d.task).cloned()
            } else {
                store.task(&d).ok().map(|(_, x)| x)
            }
            .ok_or_else(|| format!("task {}: dependency {d} not found", t.id))?;
            if dep.project == t.project {
                bases.push(Task::branch_name(&dep.prd, &dep.id));
            }
            if let Some(j) = job_of.get(&d.to_string()) {
                after.push(j.clone());
                continue;
            }
            match dep.status {
                TaskStatus::Done => {}
                TaskStatus::Cancelled | TaskStatus::Failed | TaskStatus::Review => {
                    return Err(format!(
                        "task {}: dependency {d} is {}; retry it (orchestrator retry-task) or change the dependencies (set-task) first",
                        t.id,
                        dep.status.name()
                    ));
                }
                _ => match dep.jobs.last() {
                    Some(j) => after.push(j.clone()),
                    None => {
                        return Err(format!(
                            "task {}: dependency {d} has no job yet; implement PRD {} first",
                            t.id, d.prd
                        ));
                    }
                },
            }
        }
        job_of.insert(
            TaskRef {
                prd: prd.id.clone(),
                task: t.id.clone(),
            }
            .to_string(),
            job_id.clone(),
        );
        plan.push(Planned {
            task: t.clone(),
            job_id,
            after,
            bases,
            exists,
        });
    }
    let mut out = Vec::with_capacity(plan.len());
    for p in plan {
        if !p.exists {
            write_task_job(store, template, queue, prd, &p)?;
        }
        out.push((p.task.id.clone(), p.job_id.clone()));
    }
    Ok(out)
}

pub(super) fn write_task_job(
    store: &Store,
    template: &Job,
    queue: &str,
    prd: &Prd,
    p: &Planned,
) -> Result<(), String> {
    let t = &p.task;
    let branch = Task::branch_name(&prd.id, &t.id);
    let mut job = template.clone();
    job.id = Some(p.job_id.clone());
    job.runtime = crate::model::JobRuntime::queued();
    let c = &mut job.config;
    c.queue_time = Timestamp::now();
    c.command = Some(IMPLEMENT_TASK.into());
    c.claude_command = "task-implementer".into();
    c.task_description = prompt(t, prd);
    if let Some(Value::String(doc)) = c.supporting_data.get("research_document") {
        c.task_description.push_str(&format!(
            "\nResearch document (code research of the project): {doc}\n"
        ));
    }
    c.after = (!p.after.is_empty()).then(|| p.after.clone());
    c.after_any = None;
    c.supporting_data.insert(
        TASK_KEY.into(),
        json!({
            "id": t.id,
            "prd": prd.id,
            "project": t.project,
            "branch": branch,
            "bases": p.bases,
        }),
    );
    let path = store.job_path(queue, JobStatus::Queued, &p.job_id);
    // The task first: a crash between leaves a task naming a job that is not there yet,
    // which the message answered again writes.
    let task_path = store.task_path(&t.project, &t.prd, &t.id);
    let mut task = t.clone();
    if !task.jobs.contains(&p.job_id) {
        task.jobs.push(p.job_id.clone());
    }
    task.status = if p.after.is_empty() {
        TaskStatus::Ready
    } else {
        TaskStatus::Pending
    };
    task.branch = Some(branch);
    task.error = None;
    task.update_time = Timestamp::now();
    store
        .write_doc(DocKind::Task, &task_path, &task)
        .map_err(|e| e.to_string())?;
    store
        .write_doc(DocKind::Job, &path, &job)
        .map_err(|e| e.to_string())
}

/// A task's prompt: the task alone, with the PRD (and its research document, named) as
/// context.
fn prompt(t: &Task, prd: &Prd) -> String {
    let mut s = format!(
        "Implement task {} of PRD \"{}\": {}\n\n{}\n",
        t.id, prd.title, t.title, t.description
    );
    if !t.acceptance_criteria.is_empty() {
        s.push_str("\nAcceptance criteria:\n");
        for a in &t.acceptance_criteria {
            s.push_str(&format!("- {a}\n"));
        }
    }
    s.push_str(
        "\nDo this task only; other tasks of the PRD are done by other jobs. Context, the PRD:\n\n",
    );
    let mut context = prd.clone();
    // The list of every task is not this job's business.
    context.content.remove("tasks");
    s.push_str(&context.to_prompt());
    s
}

/// How the output of a pipeline's implement-tasks step that fanned out begins.
const FANNED_OUT: &str = "Fanned out into";

/// The pipeline's last step (issue 30): once a pipeline's create-tasks job `create` wrote
/// PRD `prd_id`'s task documents, the pipeline's implement-tasks job (queued, waiting for
/// `create` to be handled, so no queue manager has started it) fans out like
/// `implement-tasks --prd`: one job per task from it, and the step itself ends finished
/// without running, its output naming the task jobs. The PRD then ends through its tasks'
/// integration, as any fanned-out PRD. Handled again (a crash before `create` was marked
/// handled), it finds the jobs it made and ends the step the same way.
pub fn pipeline_step(store: &Store, create: &Job, prd_id: &str) -> Result<String, String> {
    let Some(p) = create.config.supporting_data.get("pipeline") else {
        return Ok(String::new());
    };
    let steps: Vec<&str> = p
        .get("steps")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let at = crate::model::flow::PIPELINE_STEPS
        .iter()
        .position(|c| *c == crate::model::Command::CreateTasks);
    let Some(step_id) = at.and_then(|i| steps.get(i + 1)) else {
        return Ok(String::new());
    };
    let Ok(loc) = store.find_job(step_id) else {
        return Ok(format!(
            "; the pipeline's implement-tasks job {step_id} is not here"
        ));
    };
    let queued = store.job_path(&loc.queue, JobStatus::Queued, step_id);
    if loc.status != JobStatus::Queued {
        // Ended here before, and a crash left the queued copy: it goes.
        if loc.status == JobStatus::Finished
            && std::fs::symlink_metadata(&queued).is_ok()
            && store.job(&loc).is_ok_and(|j| {
                j.runtime
                    .output
                    .as_deref()
                    .is_some_and(|o| o.starts_with(FANNED_OUT))
            })
        {
            let _ = crate::store::safe::remove_file(&queued);
        }
        return Ok(String::new());
    }
    let mut step = store.job(&loc).map_err(|e| e.to_string())?;
    if step.config.command.as_deref() != Some(crate::model::Command::ImplementTasks.name())
        || step.config.prd.as_deref() != Some(prd_id)
    {
        return Ok(String::new());
    }
    let (_, prd_path, mut prd) = store.find_prd(prd_id).map_err(|e| e.to_string())?;
    let project = store.project(&prd.project).map_err(|e| e.to_string())?;
    let mut template = step.clone();
    // The task jobs are not pipeline steps (a step's prompt is completed when it starts).
    template.config.supporting_data.remove("pipeline");
    if let Some(doc) = &project.code_research_document {
        template
            .config
            .supporting_data
            .insert("research_document".into(), Value::String(doc.clone()));
    }
    if template.config.correlation_id.is_none() {
        template.config.correlation_id = Some(step_id.to_string());
    }
    let jobs = fan_out(store, &template, &loc.queue, &prd)?;
    let before = prd.jobs.len();
    for (_, j) in &jobs {
        if !prd.jobs.contains(j) {
            prd.jobs.push(j.clone());
        }
    }
    if prd.jobs.len() != before {
        prd.update_time = Timestamp::now();
        store
            .write_doc(DocKind::Prd, &prd_path, &prd)
            .map_err(|e| e.to_string())?;
    }
    let list: Vec<String> = jobs.iter().map(|(t, j)| format!("{t} → {j}")).collect();
    let now = Timestamp::now();
    step.runtime.status = JobStatus::Finished;
    step.runtime.start_time = Some(now);
    step.runtime.finish_time = Some(now);
    step.runtime.exit_code = Some(0);
    step.runtime.handled = Some(true);
    step.runtime.output = Some(format!(
        "{FANNED_OUT} {} task job(s), one per task of PRD {prd_id}, each in its own worktree: {}",
        jobs.len(),
        list.join(", ")
    ));
    // The finished document first, then the queued one goes: a crash between leaves both,
    // and the next pass (create-tasks handled again) removes the queued one.
    let dest = store.job_path(&loc.queue, JobStatus::Finished, step_id);
    if std::fs::symlink_metadata(&dest).is_err() {
        store
            .write_doc_new(DocKind::Job, &dest, &step)
            .map_err(|e| e.to_string())?;
    }
    match crate::store::safe::remove_file(&loc.path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("{}: {e}", loc.path.display()));
        }
        _ => {}
    }
    Ok(format!(
        "; the pipeline's implement-tasks job {step_id} fanned out into {} task job(s)",
        jobs.len()
    ))
}
