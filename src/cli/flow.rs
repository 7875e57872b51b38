//! Issue 17 on the command line: `--priority`, `--after`, `--after-any` and the retry options
//! of the agent commands, sent as message content the orchestrator checks.

use clap::Args;
use serde_json::{Map, Value, json};

/// Priority, dependency and retry options of the agent commands.
#[derive(Debug, Args, Clone, Default)]
pub struct FlowArgs {
    /// Start order in the queue: low, normal (default), high or a number from -1000 to 1000
    /// (higher starts first; equal priorities start oldest first).
    #[arg(long, value_name = "low|normal|high|N", value_parser = parse_priority_arg, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// Start only after these jobs finished (comma-separated job ids, any queue); if one of
    /// them failed, this job fails with "dependency <id> failed".
    #[arg(long, value_name = "JOB[,JOB…]", value_delimiter = ',', value_parser = parse_after_arg)]
    pub after: Vec<String>,
    /// With --after: start once the jobs ended, whether they finished or failed.
    #[arg(long, requires = "after")]
    pub after_any: bool,
    /// Retry this job automatically: attempts in all, the first run included (replaces the
    /// queue's retry policy).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::model::flow::MAX_ATTEMPTS)))]
    pub max_attempts: Option<u32>,
    /// With --max-attempts: seconds to wait before each new attempt (default 0).
    #[arg(long, value_name = "SECONDS", requires = "max_attempts")]
    pub retry_backoff: Option<u64>,
    /// With --max-attempts: the failures to retry (comma-separated: worker_died, timeout,
    /// api_error, machine_lost; default all but api_error).
    #[arg(
        long,
        value_name = "KIND[,KIND…]",
        value_delimiter = ',',
        requires = "max_attempts"
    )]
    pub retry_on: Vec<String>,
}

fn parse_priority_arg(s: &str) -> Result<i32, String> {
    crate::model::flow::parse_priority(s)
}

/// One id of `--after`: an empty one (`--after "$UNSET"`, `--after a,,b`) is refused, never
/// dropped, so a job meant to wait never starts at once.
fn parse_after_arg(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(
            "an empty job id (expected JOB[,JOB…]: the ids of the jobs to wait for)".into(),
        );
    }
    Ok(t.to_string())
}

impl FlowArgs {
    /// Adds the options given to a message's content.
    pub fn add_to(&self, c: &mut Map<String, Value>) {
        if let Some(p) = self.priority {
            c.insert("priority".into(), json!(p));
        }
        if !self.after.is_empty() {
            c.insert("after".into(), json!(self.after));
        }
        if self.after_any {
            c.insert("after_any".into(), json!(true));
        }
        if let Some(n) = self.max_attempts {
            let mut r = Map::new();
            r.insert("max_attempts".into(), json!(n));
            if let Some(b) = self.retry_backoff {
                r.insert("backoff_seconds".into(), json!(b));
            }
            if !self.retry_on.is_empty() {
                r.insert("on".into(), json!(self.retry_on));
            }
            c.insert("retry".into(), Value::Object(r));
        }
    }
}

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, open_store};
use crate::model::Command as Op;
use crate::model::{DocKind, Job};
use crate::store::archive::parse_age;
use std::io::Write;

/// `retry --help`: what it prints and its exit status (also in the man page).
pub const RETRY_EXIT: &str = "Prints \"Job queued: <new id> (retry of <id>, queue <q>)\" for the job and for each job that failed only because it depended on it (--format json: those as a JSON array). The failed documents are left as they are.

Exit status:
  0  the new attempts were queued
  1  nothing was queued: the job is not found, not failed, already retried, has no attempts left (its max_attempts), or the caller may not change its project; or the store cannot be read or written
  2  a malformed command line";

/// `archive --help`: its report and exit status.
pub const ARCHIVE_EXIT: &str = "Reports each job moved (or, with --dry-run, that would move) and a summary; finished jobs the completion handler has not handled yet, name collisions and files it will not read (links, FIFOs, unreadable folders) are left in place and named (--format json: the whole report, its \"errors\" included).

Exit status:
  0  every job old enough was moved (or would be)
  1  some job or folder could not be read or moved (each named as \"error: …\"; the others were moved), --older-than is malformed, the caller is not an admin, or the store cannot be opened
  2  a malformed command line";

/// `migrate --help`: its report and exit status.
pub const MIGRATE_EXIT: &str = "Reports each schema copy and job document upgraded (or, with --dry-run, that would be), then a summary; queued and running jobs are left to their daemons. Documents it cannot upgrade (unparseable, newer than this agentstore, over 16 MiB) and files it will not read (links, FIFOs, unreadable folders) are left as they are and named (--format json: the whole report, its \"errors\" included). Running it again changes nothing more.

Exit status:
  0  the store is (or would be) at this version's schema
  1  some file was left as it is (each named as \"error: …\"; the rest was upgraded), the caller is not an admin, or the store cannot be opened or written
  2  a malformed command line";

/// `pipeline --help`: its output and exit status.
pub const PIPELINE_EXIT: &str = "Sends the four steps in order, each as its agent command would (printing what that command prints), then one line naming the four job ids. Each step waits for the one before (--after); a failed step fails the steps after it with \"dependency <id> failed\", and `orchestrator retry <id>` of the failed step queues it and the rest again. `view-prd <create-prd step id>` shows the chain and where it stands.

Exit status:
  0  the four steps were sent
  1  a step could not be sent (the project is not found or not the caller's, the store cannot be written, or orchestratord refused it); the steps printed before it stay queued
  2  a malformed command line (e.g. a --priority that is not low, normal, high or -1000..1000)";

/// Options of `archive`.
#[derive(Debug, Args, Clone)]
pub struct ArchiveArgs {
    /// Age of the jobs to archive, by when they ended: e.g. 30d, 12h, 2w (units: s seconds,
    /// m minutes, h hours, d days, w weeks; a bare number is days).
    #[arg(long, value_name = "AGE")]
    pub older_than: String,
    /// Report what would move; move nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Options of `migrate`.
#[derive(Debug, Args, Clone)]
pub struct MigrateArgs {
    /// Report what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs upkeep command `command` (retry, archive, migrate): through orchestratord when one
/// serves this store (over D-Bus; it alone may write the packaged system store), else here,
/// on a store this user may write, with the same rules and the same report.
pub(super) fn upkeep(
    g: &GlobalArgs,
    command: Op,
    content: Map<String, Value>,
) -> Result<Value, CliError> {
    if super::remote::store_unreadable(g) {
        return super::remote::ask(g, command, content);
    }
    let store = open_store(g)?;
    let user = super::Session::load().ok().and_then(|s| s.username);
    let msg = super::agent::message(command, None, content, user);
    if let Some(answer) = super::agent::submit_if_served(g, &store, &msg)? {
        return Ok(answer.content.get("result").cloned().unwrap_or(Value::Null));
    }
    let who = super::browse::caller(&store)?;
    crate::orchestrator::upkeep::answer(&store, command, &msg, &who)
        .map_err(|e| CliError::new(e.to_string()))
}

fn strs(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn count(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// `retry JOB`.
pub(super) fn retry(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let r = upkeep(g, Op::Retry, c)?;
    let done = r
        .get("retried")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match g.format {
        Format::Json => write_json(out, &done)?,
        Format::Text => {
            for r in &done {
                writeln!(
                    out,
                    "Job queued: {} (retry of {}, queue {})",
                    field(r, "job_id"),
                    field(r, "retry_of"),
                    field(r, "queue")
                )?;
            }
        }
    }
    Ok(())
}

/// `archive --older-than AGE [--dry-run]`.
pub(super) fn archive(g: &GlobalArgs, out: &mut dyn Write, a: ArchiveArgs) -> CliResult {
    parse_age(&a.older_than).map_err(CliError::new)?;
    let mut c = Map::new();
    c.insert("older_than".into(), json!(a.older_than));
    c.insert("dry_run".into(), json!(a.dry_run));
    let r = upkeep(g, Op::Archive, c)?;
    let errors = strs(&r, "errors");
    let verb = if a.dry_run { "would move" } else { "moved" };
    match g.format {
        Format::Json => write_json(out, &r)?,
        Format::Text => {
            let moved = r.get("moved").and_then(Value::as_array);
            for m in moved.into_iter().flatten() {
                let (q, st) = (field(m, "queue"), field(m, "status"));
                let dir = crate::model::JobStatus::from_name(st).map_or(st, |s| s.dir());
                writeln!(
                    out,
                    "{verb} {q}/{dir}/{} → {q}/Jobs/archive/{}/{dir}",
                    field(m, "id"),
                    field(m, "month")
                )?;
            }
            let listed = moved.map_or(0, Vec::len) as u64;
            let total = count(&r, "moved_count");
            if total > listed {
                writeln!(out, "… and {} more", total - listed)?;
            }
            writeln!(
                out,
                "{total} of {} ended jobs {verb} (ended before {}); {} finished but not yet handled, {} name collisions, {} errors",
                count(&r, "seen"),
                field(&r, "cutoff"),
                strs(&r, "not_handled").len(),
                strs(&r, "collisions").len(),
                errors.len()
            )?;
        }
    }
    report_errors(out, g, &errors, "job(s) could not be archived")
}

/// Lists `errors` (text format) and fails when there are any.
fn report_errors(out: &mut dyn Write, g: &GlobalArgs, errors: &[String], what: &str) -> CliResult {
    if g.format == Format::Text {
        for e in errors {
            writeln!(out, "error: {e}")?;
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(format!("{} {what}", errors.len())))
    }
}

/// `migrate [--dry-run]`.
pub(super) fn migrate(g: &GlobalArgs, out: &mut dyn Write, a: MigrateArgs) -> CliResult {
    let mut c = Map::new();
    c.insert("dry_run".into(), json!(a.dry_run));
    let r = upkeep(g, Op::Migrate, c)?;
    let errors = strs(&r, "errors");
    match g.format {
        Format::Json => write_json(out, &r)?,
        Format::Text => {
            let verb = if a.dry_run {
                "would upgrade"
            } else {
                "upgraded"
            };
            let (schemas, upgraded) = (strs(&r, "schemas"), strs(&r, "upgraded"));
            let (from, to) = (field(&r, "from"), field(&r, "to"));
            for p in schemas.iter().chain(&upgraded) {
                writeln!(out, "{verb} {p}")?;
            }
            if r.get("config").and_then(Value::as_bool) == Some(true) {
                writeln!(out, "{verb} config.yaml (schema_version {from} → {to})")?;
            }
            writeln!(
                out,
                "store schema {from} → {to}: {} schema copies and {} job documents {verb}, {} already current, {} queued/running left as they are, {} errors",
                schemas.len(),
                upgraded.len(),
                count(&r, "current"),
                count(&r, "in_use"),
                errors.len()
            )?;
            if r.get("restart_daemons").and_then(Value::as_bool) == Some(true) {
                writeln!(
                    out,
                    "restart the daemons that have this store open (systemctl restart agentstore.target) so they load the new schemas"
                )?;
            }
        }
    }
    report_errors(out, g, &errors, "file(s) could not be upgraded")
}

/// Options of `pipeline`.
#[derive(Debug, Args, Clone)]
pub struct PipelineArgs {
    /// Project (default: the current project from `set-project`).
    #[arg(add = crate::cli::complete::project(), long)]
    pub project: Option<String>,
    /// What the PRD is about (the research step gets it too).
    #[arg(long)]
    pub task: String,
    /// Timeout of each step in seconds (default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Job type of every step: claude (default), agent or noop.
    #[arg(long, value_parser = ["claude", "agent", "codex", "noop"])]
    pub jobtype: Option<String>,
    /// Model for `--jobtype agent`.
    #[arg(long)]
    pub model: Option<String>,
    /// Start order of every step (low, normal, high or -1000..1000).
    #[arg(long, value_name = "low|normal|high|N", value_parser = parse_priority_arg, allow_hyphen_values = true)]
    pub priority: Option<i32>,
}

pub use crate::model::flow::PIPELINE_STEPS;

/// `pipeline --project P --task "…"`: four agent commands, each waiting for the one before
/// (`after`); the PRD is the create-prd job's (the completion handler names it after that
/// job), so create-tasks and implement-tasks name it before it exists and read it when they
/// start.
pub(super) fn pipeline(g: &GlobalArgs, out: &mut dyn Write, a: PipelineArgs) -> CliResult {
    let s = super::session::Session::load().map_err(CliError::new)?;
    let project = super::agent::project_or_current(a.project.clone(), &s)?;
    let cids: Vec<String> = PIPELINE_STEPS
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let ids: Vec<String> = cids
        .iter()
        .map(|c| crate::orchestrator::job_id_for(c))
        .collect();
    let prd = ids[1].clone();
    let mut g1 = g.clone();
    g1.follow = None;
    for (i, step) in PIPELINE_STEPS.iter().enumerate() {
        let task = match *step {
            Op::ResearchCode | Op::CreatePrd => a.task.clone(),
            Op::CreateTasks => format!("Create implementation tasks for the PRD of: {}", a.task),
            _ => format!("Implement the tasks of the PRD of: {}", a.task),
        };
        let step_args = super::agent::AgentArgs {
            project: None,
            task: Some(task),
            timeout: a.timeout,
            jobtype: a.jobtype.clone(),
            model: a.model.clone(),
            claude_extra_args: Vec::new(),
            flow: FlowArgs {
                priority: a.priority,
                ..FlowArgs::default()
            },
        };
        let mut c = super::agent::common_content(&step_args, &g.queue);
        if i > 0 {
            c.insert("after".into(), json!([ids[i - 1]]));
        }
        if i >= 2 {
            c.insert("prd".into(), json!(prd));
        }
        c.insert(
            "pipeline".into(),
            json!({"step": step.name(), "steps": ids, "prd": prd, "task": a.task}),
        );
        let mut msg = super::agent::message(*step, Some(project.clone()), c, s.username.clone());
        msg.correlation_id = cids[i].clone();
        super::agent::send(&g1, out, msg)?;
    }
    if g.format == Format::Text {
        writeln!(
            out,
            "Pipeline: {} (research-code) → {} (create-prd, also the PRD's id) → {} (create-tasks) → {} (implement-tasks); follow it with `orchestrator view-prd {prd}`",
            ids[0], ids[1], ids[2], ids[3]
        )?;
    }
    Ok(())
}

/// For `view-prd`: the pipeline that made the PRD, one line per step with where it stands
/// (following retries). Nothing when the PRD was not made by a pipeline.
pub(super) fn show_chain(
    store: &crate::store::Store,
    out: &mut dyn Write,
    prd: &crate::model::Prd,
) -> CliResult {
    let Ok(loc) = store.find_job(&prd.id) else {
        return Ok(());
    };
    let Ok(job) = store.job(&loc) else {
        return Ok(());
    };
    let Some(steps) = job
        .config
        .supporting_data
        .get("pipeline")
        .and_then(|p| p.get("steps"))
        .and_then(Value::as_array)
    else {
        return Ok(());
    };
    let queues = store.queue_ids().unwrap_or_default();
    writeln!(out, "\npipeline:")?;
    for (step, id) in PIPELINE_STEPS
        .iter()
        .zip(steps.iter().filter_map(Value::as_str))
    {
        let (state, detail) = match crate::queue::flow::settled_state(store, &queues, id) {
            Some((s, path)) => {
                let doc: Option<Job> = store.read_doc(DocKind::Job, &path).ok();
                let at = crate::store::file_id(&path).unwrap_or(id).to_string();
                let mut d = String::new();
                if at != id {
                    d.push_str(&format!(" (as retry {at})"));
                }
                if let Some(e) = doc.and_then(|j| j.runtime.error) {
                    d.push_str(&format!(": {e}"));
                }
                (s.name().to_string(), d)
            }
            None => ("missing".to_string(), String::new()),
        };
        writeln!(out, "  {step:<16} {id}  {state}{detail}")?;
    }
    Ok(())
}
