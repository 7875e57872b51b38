//! A PRD's integration (issue 30), the orchestrator's side: when every task of a PRD is done
//! (cancelled ones left out), one `integrate` job is queued on the queue of the last task's
//! job, as the same user, naming the tasks' branches in dependency order and the project's
//! check command; the worker merges them ([`crate::worker::integrate`]). When that job ends,
//! the PRD moves on: `complete` when everything merged and the check passed, `review` with
//! what failed otherwise (the conflicting task is marked `review` too, naming the files).

use super::done::report;
use super::fanout::TASK_KEY;
use crate::model::integration::{INTEGRATE_KEY, Plan, PlannedTask, Report};
use crate::model::{DocKind, Job, JobStatus, PrdState, Task, TaskStatus, Timestamp};
use crate::store::{JobLocation, Store, StoreError};
use serde_json::Value;

/// The command of an integration job.
pub const INTEGRATE: &str = "integrate";

/// The integration branch of a PRD.
pub fn branch_name(prd: &str) -> String {
    format!("agentstore/{prd}/integration")
}

/// The plan for `tasks` (all of one PRD): the done tasks with a commit, in dependency order.
pub fn plan(prd: &str, tasks: &[Task], check_command: Option<Vec<String>>) -> Plan {
    Plan {
        prd: prd.to_string(),
        branch: branch_name(prd),
        tasks: super::graph::order(tasks)
            .into_iter()
            // A task marked for review by an earlier integration of the same commits counts.
            .filter(|t| matches!(t.status, TaskStatus::Done | TaskStatus::Review))
            .filter_map(|t| {
                Some(PlannedTask {
                    task: t.id.clone(),
                    branch: t.branch.clone()?,
                    commit: Some(t.commit.clone()?),
                    title: Some(t.title.clone()),
                })
            })
            .collect(),
        check_command,
    }
}

/// The job id of the integration of `plan`: one per set of commits, so a task retried since
/// gets a new integration and a completion handled twice queues one.
pub fn job_id(plan: &Plan) -> String {
    let mut key = format!("integrate\u{0}{}", plan.prd);
    for t in &plan.tasks {
        key.push('\u{0}');
        key.push_str(&t.task);
        key.push('=');
        key.push_str(t.commit.as_deref().unwrap_or(""));
    }
    super::super::job_id_for(&key)
}

/// Every task of `task`'s PRD has ended: queues the integration job (from `template`, the
/// last task's job, on its queue `queue`), or, with nothing to merge (not a git project),
/// completes the PRD with its report.
pub fn all_done(
    store: &Store,
    queue: &str,
    template: &Job,
    tasks: &[Task],
    prd_id: &str,
) -> Result<String, StoreError> {
    let (_, prd_path, mut prd) = store.find_prd(prd_id)?;
    let check = store
        .project(&prd.project)
        .ok()
        .and_then(|p| p.check_command);
    let plan = plan(prd_id, tasks, check);
    if plan.tasks.is_empty() {
        let moved = super::super::completion::prd_finished(store, prd_id, report(tasks))?;
        return Ok(format!("nothing to merge (no task has a branch): {moved}"));
    }
    let id = job_id(&plan);
    if store.find_job(&id).is_ok() {
        return Ok(format!("integration job {id} already queued"));
    }
    let mut job = template.clone();
    job.id = Some(id.clone());
    job.runtime = crate::model::JobRuntime::queued();
    let c = &mut job.config;
    c.queue_time = Timestamp::now();
    c.command = Some(INTEGRATE.into());
    c.task_description = format!(
        "Integrate the {} task branch(es) of PRD {} into {} and run the project's check",
        plan.tasks.len(),
        prd_id,
        plan.branch
    );
    c.after = None;
    c.after_any = None;
    c.supporting_data.remove(TASK_KEY);
    c.supporting_data.insert(
        INTEGRATE_KEY.into(),
        serde_json::to_value(&plan).unwrap_or(Value::Null),
    );
    if !prd.jobs.contains(&id) {
        prd.jobs.push(id.clone());
        prd.update_time = Timestamp::now();
        store.write_doc(DocKind::Prd, &prd_path, &prd)?;
    }
    store.write_doc(
        DocKind::Job,
        &store.job_path(queue, JobStatus::Queued, &id),
        &job,
    )?;
    Ok(format!(
        "integration job {id} queued ({} branch(es) into {})",
        plan.tasks.len(),
        plan.branch
    ))
}

/// A finished integration job: the PRD moves to `complete` or `review`.
pub fn ended(store: &Store, loc: &JobLocation, job: &Job) -> Result<String, StoreError> {
    let Some(Ok(plan)) = job
        .config
        .supporting_data
        .get(INTEGRATE_KEY)
        .map(|v| serde_json::from_value::<Plan>(v.clone()))
    else {
        return Ok("integration job names no plan".into());
    };
    let out = job.runtime.output.as_deref().unwrap_or("");
    let result: Report = match serde_json::from_str(out) {
        Ok(r) => r,
        Err(e) => {
            return Ok(format!(
                "integration job {}'s output is not its report ({e}); PRD {} left as it is",
                loc.id, plan.prd
            ));
        }
    };
    let (_, _, prd) = store.find_prd(&plan.prd)?;
    let mut tasks = store.tasks_of(&prd.project, &prd.id, &mut |_| {})?;
    // Tasks retried since the plan was made: a newer integration follows; this one is old.
    let now = super::integrate::plan(&plan.prd, &tasks, plan.check_command.clone());
    if job_id(&now) != job_id(&plan) {
        return Ok(format!(
            "PRD {}'s tasks changed since integration {}; left alone",
            plan.prd, loc.id
        ));
    }
    let to = match result.status.as_str() {
        "merged" | "not_git" => PrdState::Complete,
        _ => PrdState::Review,
    };
    if let Some(t) = &result.conflict_task
        && let Some(task) = tasks.iter_mut().find(|x| x.id == *t)
        && task.status == TaskStatus::Done
    {
        task.status = TaskStatus::Review;
        task.error = Some(format!("integration: {}", result.summary));
        task.update_time = Timestamp::now();
        let path = store.task_path(&task.project, &task.prd, &task.id);
        store.write_doc(DocKind::Task, &path, task)?;
    }
    let mut rep = report(&tasks);
    if let Value::Object(m) = &mut rep {
        m.insert(
            "integration".into(),
            serde_json::to_value(&result).unwrap_or(Value::Null),
        );
        m.insert("integration_job".into(), Value::String(loc.id.clone()));
        m.insert("summary".into(), Value::String(result.summary.clone()));
    }
    let moved = super::super::completion::prd_ended(store, &plan.prd, to, rep)?;
    if to == PrdState::Review {
        store.notice_graph_blocked(
            &plan.prd,
            &format!("integration/{}", loc.id),
            &format!(
                "The integration needs a person ({}): {}",
                result.status, result.summary
            ),
        );
    }
    Ok(format!(
        "integration {}: {}; {moved}",
        result.status, result.summary
    ))
}
