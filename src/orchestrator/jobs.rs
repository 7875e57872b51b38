//! Agent commands become job files (PRD §6.3, §6.4).

use super::RouteError;
use crate::model::{
    Command, DocKind, Job, JobConfig, JobRuntime, JobStatus, JobType, MAX_TIMEOUT_SECONDS, Message,
    Prd, Project, RESEARCH_DOCUMENT_KEY, Timestamp, VENVMAN_KEY, permission_widening_arg_for,
};
use crate::permissions::Caller;
use crate::store::Store;
use serde_json::{Map, Value};

/// Namespace for job ids derived from correlation ids (UUID v5). Deriving the id makes job
/// creation idempotent: a restart after a crash finds the job it already wrote.
const JOB_ID_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x8f1c_2a6e_5b3d_4c7a_9e0f_1a2b_3c4d_5e6f);

/// Default job timeout when the message gives none (PRD §6.4).
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 1800;

/// The job made for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedJob {
    /// Job id.
    pub id: String,
    /// Queue it went to.
    pub queue: String,
    /// Path relative to the store root.
    pub path: String,
    /// False when the job already existed (a message answered again after a crash).
    pub new: bool,
}

/// The job id for a message.
pub fn job_id_for(correlation_id: &str) -> String {
    uuid::Uuid::new_v5(&JOB_ID_NAMESPACE, correlation_id.as_bytes()).to_string()
}

/// PRD §6.3: the message's `content.queue`, else the project's `default_queue`, else
/// `queues_default`; each named queue must exist.
pub fn select_queue(store: &Store, msg: &Message, project: &Project) -> Result<String, RouteError> {
    if let Some(q) = msg.content.get("queue").filter(|q| !q.is_null()) {
        let q = q.as_str().ok_or_else(|| {
            RouteError::Invalid("content.queue must be a string (a queue name)".into())
        })?;
        return if store.queue_exists(q) {
            Ok(q.to_string())
        } else {
            Err(RouteError::NotFound(format!("Queue not found: {q}")))
        };
    }
    if !project.default_queue.is_empty() {
        let q = &project.default_queue;
        return if store.queue_exists(q) {
            Ok(q.clone())
        } else {
            Err(RouteError::NotFound(format!(
                "Project queue not found: {q}"
            )))
        };
    }
    let q = &store.config().queues_default;
    if store.queue_exists(q) {
        Ok(q.clone())
    } else {
        Err(RouteError::NotFound(format!(
            "Default queue not found: {q}"
        )))
    }
}

fn content_str<'a>(msg: &'a Message, key: &str) -> Result<Option<&'a str>, RouteError> {
    match msg.content.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RouteError::Invalid(format!(
            "content.{key} must be a string"
        ))),
    }
}

/// Renders a PRD as plain text for a prompt.
pub fn format_prd(prd: &Prd) -> String {
    prd.to_prompt()
}

/// `supporting_data.venvman` of a `create-environment` job: `python` (a version such as
/// `3.11`; never an option), `install_deps` and `force` (booleans).
pub fn venvman_options(msg: &Message) -> Result<Value, RouteError> {
    let python = content_str(msg, "python")?;
    if let Some(v) = python {
        let ok = !v.is_empty()
            && v.len() <= 64
            && !v.starts_with('-')
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-' | '/'));
        if !ok {
            return Err(RouteError::Invalid(format!(
                "content.python {v:?} is not a Python version (letters, digits and . _ + - /, not starting with -)"
            )));
        }
    }
    let flag = |key: &str| match msg.content.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RouteError::Invalid(format!(
            "content.{key} must be true or false"
        ))),
    };
    Ok(serde_json::json!({
        "python": python,
        "install_deps": flag("install_deps")?,
        "force": flag("force")?,
    }))
}

/// Builds, validates and writes the job for an agent command; appends it to the PRD's
/// `jobs` at once (provenance). Idempotent per correlation id.
pub fn create_job(
    store: &Store,
    command: Command,
    msg: &Message,
    who: &Caller,
) -> Result<CreatedJob, RouteError> {
    let environment = command == Command::CreateEnvironment;
    let claude_command = if environment {
        "venvman"
    } else {
        command.claude_command().ok_or_else(|| {
            RouteError::Invalid(format!("{command}: not a command that creates a job"))
        })?
    };
    let project_id = msg
        .project
        .as_deref()
        .or(content_str(msg, "project")?)
        .ok_or_else(|| {
            RouteError::Invalid(format!(
                "{}: project is required (message field `project`)",
                msg.command
            ))
        })?;
    // PRD §10: collaborators may see a project, only its owner (or an admin) creates jobs.
    let project = crate::permissions::project_for_new_job(store, who, project_id)?;
    let queue = select_queue(store, msg, &project)?;
    let id = job_id_for(&msg.correlation_id);
    let asked_by = msg
        .user
        .clone()
        .or_else(|| who.user_id().map(str::to_string));
    if let Ok(existing) = store.find_job(&id) {
        // The same message again (a restart after a crash) gets the job it made. A message of
        // someone else that reuses the correlation id learns nothing about the other's job.
        let same = store.job(&existing).is_ok_and(|j| {
            j.config.user == asked_by
                && j.config.correlation_id.as_deref() == Some(msg.correlation_id.as_str())
        });
        if !same {
            return Err(RouteError::Invalid(format!(
                "correlation_id {} is already in use; send this message with a new correlation_id",
                msg.correlation_id
            )));
        }
        return Ok(CreatedJob {
            path: store.relative(&existing.path).display().to_string(),
            queue: existing.queue,
            id,
            new: false,
        });
    }

    // The PRD this job works on, if any.
    let prd_id = content_str(msg, "prd")?;
    let prd = match prd_id {
        Some(p) if super::flow::prd_pending(msg, p) => None,
        Some(p) => Some(store.find_prd(p)?),
        None if matches!(command, Command::CreateTasks | Command::ImplementTasks) => {
            return Err(RouteError::Invalid(format!(
                "{}: content.prd is required (a PRD id)",
                msg.command
            )));
        }
        None => None,
    };
    let task = content_str(msg, "task")?;
    let task_description = match (command, &prd) {
        (Command::ResearchCode, _) => {
            let mut t = format!(
                "Review the {} codebase and document key components, architecture, and APIs.",
                project.id
            );
            if let Some(extra) = task {
                t.push_str(&format!("\n\n{extra}"));
            }
            t
        }
        (Command::CreateTasks, Some((_, _, prd))) => {
            format!(
                "Create implementation tasks for PRD: {}\n\n{}",
                prd.title,
                format_prd(prd)
            )
        }
        (Command::ImplementTasks, Some((_, _, prd))) => {
            format!(
                "Implement the tasks for PRD: {}\n\n{}",
                prd.title,
                format_prd(prd)
            )
        }
        (Command::CreateEnvironment, _) => format!(
            "Create the virtual environment of project {} in {} with venvman.",
            project.id, project.directory
        ),
        _ => task
            .ok_or_else(|| {
                RouteError::Invalid(format!(
                    "{}: content.task is required (a string)",
                    msg.command
                ))
            })?
            .to_string(),
    };

    // Issue 30: the tasks come back as a JSON block, one task document each.
    let task_description = if command == Command::CreateTasks {
        format!("{task_description}\n\n{}", super::tasks::FORMAT_REQUEST)
    } else {
        task_description
    };
    let mut supporting = Map::new();
    supporting.insert(
        "project_directory".into(),
        Value::String(project.directory.clone()),
    );
    supporting.insert(
        "project_repository".into(),
        project
            .git_repository
            .clone()
            .map(Value::String)
            .unwrap_or(Value::Null),
    );
    if let Some((_, _, prd)) = &prd {
        supporting.insert(
            "prd".into(),
            serde_json::to_value(prd).unwrap_or(Value::Null),
        );
    }
    match msg.content.get("supporting_data") {
        None | Some(Value::Null) => {}
        Some(Value::Object(extra)) => supporting.extend(extra.clone()),
        Some(_) => {
            return Err(RouteError::Invalid(
                "content.supporting_data must be an object".into(),
            ));
        }
    }
    // Set after the message's own supporting data, so the project's settings win: the job
    // writes the research document where the project says (as the job's user, on the
    // compute host), and runs venvman with these options only.
    if command == Command::ResearchCode
        && let Some(doc) = &project.code_research_document
    {
        supporting.insert(RESEARCH_DOCUMENT_KEY.into(), Value::String(doc.clone()));
    }
    if environment {
        supporting.insert(VENVMAN_KEY.into(), venvman_options(msg)?);
    }
    let extra_args = match msg.content.get("claude_extra_args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                RouteError::Invalid("content.claude_extra_args must be an array of strings".into())
            })?,
        Some(_) => {
            return Err(RouteError::Invalid(
                "content.claude_extra_args must be an array of strings".into(),
            ));
        }
    };
    let timeout = match msg.content.get("timeout") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT_SECONDS,
        Some(v) => v
            .as_u64()
            .filter(|t| (1..=MAX_TIMEOUT_SECONDS).contains(t))
            .ok_or_else(|| {
                RouteError::Invalid(format!(
                    "content.timeout must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECONDS} (30 days)"
                ))
            })?,
    };
    let jobtype = match content_str(msg, "jobtype")? {
        None | Some("venvman") if environment => JobType::Venvman,
        Some(other) if environment => {
            return Err(RouteError::Invalid(format!(
                "create-environment: content.jobtype {other:?} cannot be set (its job always runs venvman)"
            )));
        }
        None | Some("claude") => JobType::Claude,
        Some("agent") => JobType::Agent,
        Some("codex") => JobType::Codex,
        Some("noop") => JobType::Noop,
        Some(other) => {
            return Err(RouteError::Invalid(format!(
                "content.jobtype {other:?} is not one of claude, agent, codex, noop"
            )));
        }
    };
    if let Some(arg) = permission_widening_arg_for(jobtype, &extra_args) {
        let allowed = store
            .queue(&queue)
            .map(|q| q.config.allow_permission_args == Some(true))
            .unwrap_or(false);
        if !allowed {
            return Err(RouteError::PermissionDenied(format!(
                "content.claude_extra_args: {arg:?} would change the agent's permissions, which queue {queue} does not allow (its allow_permission_args is not true)"
            )));
        }
    }

    let flow = super::flow::job_flow(store, msg, &id, who)?;
    let mut job = Job {
        schema_version: None,
        id: Some(id.clone()),
        config: JobConfig {
            claude_extra_args: extra_args,
            supporting_data: supporting,
            timeout_seconds: Some(timeout),
            queue: Some(queue.clone()),
            command: Some(msg.command.clone()),
            prd: prd.as_ref().map(|(_, _, p)| p.id.clone()),
            correlation_id: Some(msg.correlation_id.clone()),
            user: asked_by,
            model: content_str(msg, "model")?.map(str::to_string),
            ..JobConfig::new(
                project.id.clone(),
                project.directory.clone(),
                jobtype,
                claude_command,
                task_description,
            )
        },
        runtime: JobRuntime::queued(),
    };
    flow.apply(&mut job);
    // Issue 30: a PRD with task documents is implemented one job per task.
    if command == Command::ImplementTasks
        && let Some((_, prd_path, prd)) = &prd
        && store.has_tasks(&prd.project, &prd.id)
    {
        return super::tasks::fanout::queued(store, &job, &queue, prd_path, prd, &project);
    }
    let path = store.job_path(&queue, JobStatus::Queued, &id);
    store
        .write_doc(DocKind::Job, &path, &job)
        .map_err(|e| match e {
            crate::store::StoreError::Invalid { rejection, .. } => {
                RouteError::Invalid(format!("Invalid job structure: {rejection}"))
            }
            other => other.into(),
        })?;

    if let Some((_, prd_path, mut prd)) = prd
        && !prd.jobs.contains(&id)
    {
        prd.jobs.push(id.clone());
        prd.update_time = Timestamp::now();
        store.write_doc(DocKind::Prd, &prd_path, &prd)?;
    }
    Ok(CreatedJob {
        path: store.relative(&path).display().to_string(),
        queue,
        id,
        new: true,
    })
}
