//! agent-worker, the job harness (PRD §8, DESIGN §6): validates the job in `running_jobs/`,
//! runs it (`noop`, `claude`, `agent`), records what happened and moves the file to
//! `finished_jobs/` or `failed_jobs/`. While it runs, only this process writes the job file.

/// `agent-worker`'s exit status when it failed because the store was full.
pub use crate::model::WORKER_EXIT_STORE_FULL as EXIT_STORE_FULL;

/// True when `e`'s chain holds an I/O error of a full disk (ENOSPC, EDQUOT).
pub fn is_store_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| matches!(io.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
    })
}

pub mod accounting;
mod agents;
pub mod approval;
pub mod args;
pub mod capture;
pub mod claude;
pub mod codex;
pub mod codex_model;
pub mod confine;
pub mod integrate;
pub mod mcp;
pub mod process;
pub mod project_side;
mod push;
pub mod read_as;
pub mod relay;
pub mod runas;
pub mod worktree;

use crate::model::{Job, JobStatus, JobType, QueueConfig};
use crate::store::jobfile::{fail_raw, write_and_move};
use crate::store::{Store, StoreError, read_limited};
use accounting::ResultFormat;
use capture::OUTPUT_LIMIT;
use process::{AgentCommand, AgentOutput, agent_env, run_agent};
use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::time::Duration;

mod judge;

pub use judge::*;

/// Output of a successful no-op job (PRD M4).
pub const NOOP_OUTPUT: &str = "No-op job completed successfully";

/// Lines of agent output copied to the journal at most (the job file keeps up to 10 MiB).
const JOURNAL_LINES: usize = 20_000;

/// What the worker is asked to run.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    /// Store root.
    pub root: PathBuf,
    /// Queue name.
    pub queue: String,
    /// Job id (file stem in `running_jobs/`).
    pub job_id: String,
    /// Account the agent runs as (the manager passes it when it runs as root).
    pub run_as: Option<String>,
    /// Wait for a `go` line on stdin before doing anything (the manager's start gate: the
    /// job file is written and the process placed in its scope first).
    pub gate: bool,
}

/// Errors that stop the worker before it owns a job.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The manager closed the gate without `go` (it could not start the job).
    #[error("start aborted by the queue manager")]
    Aborted,
    /// The store cannot be opened or the job file read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A Slurm relay step could not take its input or give its end (`relay`).
    #[error("Slurm relay: {0}")]
    Relay(String),
}

/// How a job ended, before it is written.
#[derive(Debug, Default)]
struct Outcome {
    error: Option<String>,
    output: Option<String>,
    exit_code: Option<i32>,
    cost_usd: Option<f64>,
    usage: Option<crate::model::TokenUsage>,
    num_turns: Option<u64>,
    session_id: Option<String>,
    failed: bool,
}

impl Outcome {
    fn fail(error: impl Into<String>) -> Outcome {
        Outcome {
            error: Some(error.into()),
            failed: true,
            ..Outcome::default()
        }
    }
}

/// The most read from the gate (`go` and the queue's settings).
const MAX_GATE_LINE: u64 = 1 << 20;

/// The queue's settings on the gate's second line, when the manager handed them over and
/// this worker can read them (`None`: none, or from a manager of another version — the
/// worker then reads queue.json itself).
fn handed_config(line: &str) -> Option<QueueConfig> {
    serde_json::from_str::<QueueConfig>(line.trim_end_matches('\n')).ok()
}

/// Runs one job to its end; returns the state it ended in.
pub fn run(args: &WorkerArgs) -> Result<JobStatus, WorkerError> {
    if args.gate {
        // Started by a queue manager (which no longer does it between fork and exec): this
        // worker's own session and process group, before the gate, so the manager's
        // process-group signals after the release reach everything the job starts.
        if let Err(e) = nix::unistd::setsid() {
            tracing::warn!("cannot start a session of its own: {e}");
        }
    }
    // Read-only preparation before the gate, overlapping the manager's placement of this
    // process: the store's configuration read and the schemas of the documents the worker
    // reads and writes compiled. Nothing of the job is touched before `go`; an error here is
    // reported after it, as before.
    let opened = Store::open(&args.root);
    if let Ok(s) = &opened {
        s.validator().prepare(&[crate::model::DocKind::Job]);
    }
    // The queue's settings as the manager read and checked them, when it hands them over.
    let mut handed: Option<QueueConfig> = None;
    // The job's approval key, on the gate's third line (see `approval`): without it no
    // answer in the store can be told from a forged one, so none is taken.
    let mut key: Option<String> = None;
    if args.gate {
        let mut gate = std::io::stdin().lock().take(MAX_GATE_LINE);
        let mut line = String::new();
        let _ = gate.read_line(&mut line);
        if line.trim() != "go" {
            give_back_unstarted(args);
            return Err(WorkerError::Aborted);
        }
        // The manager closes the gate right after these lines: never a wait here.
        let mut settings = String::new();
        if gate.read_line(&mut settings).is_ok() {
            handed = handed_config(&settings);
        }
        let mut line3 = String::new();
        if gate.read_line(&mut line3).is_ok() {
            key = approval::handed_key(&line3);
        }
    }
    if key.is_none() {
        // A Slurm batch step has no gate: its manager put the key in sbatch's environment.
        key = std::env::var(crate::model::approval::APPROVAL_KEY_ENV)
            .ok()
            .and_then(|k| approval::handed_key(&k));
    }
    let answers = key.map_or(approval::Answers::Unkeyed, approval::Answers::Store);
    let (status, _) = run_job(args, opened?, handed, &answers)?;
    Ok(status)
}

/// Runs the job in `running_jobs/` of `store` to its end (after the gate, if any): the state
/// it ended in and where its file is now.
fn run_job(
    args: &WorkerArgs,
    store: Store,
    handed: Option<QueueConfig>,
    answers: &approval::Answers,
) -> Result<(JobStatus, PathBuf), WorkerError> {
    let (q, id) = (args.queue.as_str(), args.job_id.as_str());
    let path = store.job_path(q, JobStatus::Running, id);
    let bytes = read_limited(&path)?;
    let mut job: Job = match store.parse_doc(crate::model::DocKind::Job, &path, &bytes) {
        Ok(j) => j,
        Err(StoreError::Invalid { rejection, .. }) => {
            let error = format!("Invalid job file: {rejection}");
            tracing::error!(job_id = %id, queue = %q, "{error}");
            let at = fail_raw(&store, q, id, JobStatus::Running, &bytes, &error)?;
            record(&store, q, id, "job_failed", &error);
            return Ok((JobStatus::Failed, at));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(job_id = %id, queue = %q, project = %job.config.project,
        "running {:?} job", job.config.jobtype);
    let outcome = match handed.map_or_else(|| store.queue(q).map(|q| q.config), Ok) {
        Ok(config) => execute(&store, &config, &mut job, args, answers),
        Err(e) => Outcome::fail(format!("Cannot read queue {q}: {e}")),
    };
    let ended = finish(&store, q, id, job, outcome)?;
    if args.gate {
        // A process of its own (started by a manager) that exits right after: its compiled
        // schemas are not worth freeing one allocation at a time.
        std::mem::forget(store);
    }
    Ok(ended)
}

/// The gate closed without `go`: the manager died (or gave up) after it placed the job in
/// `running_jobs/` naming this worker and before it released it. Nothing of the job ran, so
/// a job file naming this process is put back into `queued_jobs/` (to be started again)
/// instead of being left to be failed as a dead worker. A job not in `running_jobs/`, or
/// naming another process, is left alone. This process is alive until the move is done, so
/// a manager adopting meanwhile sees it move, never a dead worker's job.
fn give_back_unstarted(args: &WorkerArgs) {
    let (q, id) = (args.queue.as_str(), args.job_id.as_str());
    let Ok(store) = Store::open(&args.root) else {
        return;
    };
    let path = store.job_path(q, JobStatus::Running, id);
    let Ok(mut job) = store.read_doc::<Job>(crate::model::DocKind::Job, &path) else {
        return;
    };
    if job.runtime.process_id != Some(std::process::id()) {
        return;
    }
    let r = &mut job.runtime;
    r.status = JobStatus::Queued;
    r.start_time = None;
    r.process_id = None;
    r.unit = None;
    r.host = None;
    match write_and_move(&store, q, id, JobStatus::Running, &job) {
        Ok(_) => {
            tracing::warn!(job_id = %id, queue = %q, "start aborted before the job ran: put back into queued_jobs");
            record(
                &store,
                q,
                id,
                "job_requeued",
                "start aborted before the job ran",
            );
        }
        Err(e) => {
            tracing::warn!(job_id = %id, queue = %q, "start aborted; cannot put the job back: {e}")
        }
    }
}

fn record(store: &Store, q: &str, id: &str, event: &str, detail: &str) {
    let mut e = crate::store::Event::new("agent-worker", event)
        .job(id)
        .queue(q);
    if !detail.is_empty() {
        e = e.detail(detail);
    }
    store.record_event(&e);
}

fn finish(
    store: &Store,
    q: &str,
    id: &str,
    mut job: Job,
    o: Outcome,
) -> Result<(JobStatus, PathBuf), StoreError> {
    let r = &mut job.runtime;
    r.status = if o.failed {
        JobStatus::Failed
    } else {
        JobStatus::Finished
    };
    r.finish_time = Some(crate::model::Timestamp::now());
    r.error = o.error;
    r.output = o.output;
    r.exit_code = o.exit_code.or(r.exit_code);
    r.cost_usd = o.cost_usd;
    r.usage = o.usage;
    r.num_turns = o.num_turns;
    r.session_id = o.session_id;
    let status = r.status;
    let detail = r.error.clone().unwrap_or_default();
    let at = write_and_move(store, q, id, JobStatus::Running, &job)?;
    match status {
        JobStatus::Failed => {
            tracing::warn!(job_id = %id, queue = %q, "job failed: {detail}");
            record(store, q, id, "job_failed", &detail);
        }
        _ => {
            tracing::info!(job_id = %id, queue = %q, "job finished");
            record(store, q, id, "job_finished", &detail);
        }
    }
    store.notice_job_ended(q, id);
    Ok((status, at))
}

/// Why a job could not have its queue's credentials (`slurm`: it is a Slurm batch step, on a
/// node where the manager's credentials folder need not be: docs/codex-and-credentials.md).
fn credentials_failure(e: &str, slurm: bool) -> String {
    if slurm {
        format!(
            "The queue's credentials: {e} (a Slurm job: the queue manager's credentials are on \
             its own machine only, and job-env keys do not reach Slurm jobs on other nodes)"
        )
    } else {
        format!("The queue's credentials: {e}")
    }
}

fn execute(
    store: &Store,
    queue: &QueueConfig,
    job: &mut Job,
    args: &WorkerArgs,
    answers: &approval::Answers,
) -> Outcome {
    let run_as = match runas::for_job(args.run_as.as_deref()) {
        Ok(r) => r,
        Err(e) => return Outcome::fail(e),
    };
    let switch = run_as.uid != nix::unistd::geteuid().as_raw();
    let mut env = agent_env(std::env::vars(), &run_as, !switch);
    // The keys the queue manager's unit holds for its jobs (systemd credentials `job-env.*`).
    match crate::systemd::credentials::job_environment() {
        Ok(vars) => {
            env.retain(|(k, _)| !vars.iter().any(|(n, _)| n == k));
            env.extend(vars);
            env.sort();
        }
        Err(e) => {
            let slurm = std::env::var_os("SLURM_JOB_ID").is_some();
            return Outcome::fail(credentials_failure(&e, slurm));
        }
    }
    let home = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| run_as.home.clone());
    let cwd = PathBuf::from(&job.config.working_directory);
    if job.config.jobtype != JobType::Noop && !cwd.is_dir() {
        // Issue 32: say where, and the fix (a project folder renamed after its jobs were
        // queued is the usual cause).
        return Outcome::fail(format!(
            "Working directory does not exist: {} (on {}); if the project moved: \
             `orchestrator edit-project {} --directory NEW_DIR`, then `orchestrator retry` the job",
            job.config.working_directory,
            crate::store::identity::display_hostname(),
            job.config.project
        ));
    }
    let cx = agents::Cx {
        store,
        queue,
        args,
        answers,
        env: &env,
        home: &home,
        run_as: &run_as,
        switch,
    };
    // Issue 30: a PRD's integration job merges its tasks' branches (the agent only for a
    // conflict, when the queue says so).
    if job.config.jobtype != JobType::Venvman
        && let Some(plan) = integrate::plan_of(job)
    {
        return integrate::outcome(&cx, job, plan);
    }
    // Issue 30: a task's job works in its own git worktree and branch (pushed when the
    // project names where).
    let remote = push::remote_of(store, job);
    let task_space = worktree::for_task(
        job,
        &env,
        &home,
        switch.then(|| run_as.clone()),
        remote.as_deref(),
    );
    let (git, workspace) = match task_space {
        Ok(Some((git, ws))) => {
            job.runtime.worktree = Some(ws.note.clone());
            (Some(git), Some(ws))
        }
        Ok(None) => (None, None),
        Err(e) => return Outcome::fail(e),
    };
    let cwd = workspace.as_ref().map_or(cwd, |w| w.cwd.clone());
    let mut outcome = match job.config.jobtype {
        JobType::Noop => noop(job),
        JobType::Venvman => {
            match project_side::venvman_command(
                job,
                env.clone(),
                &home,
                switch.then(|| run_as.clone()),
            ) {
                Ok(cmd) => run_and_judge(
                    store,
                    args,
                    queue,
                    job,
                    &cmd,
                    None,
                    "venvman",
                    &ResultFormat::Text,
                ),
                Err(e) => Outcome::fail(e),
            }
        }
        JobType::Claude | JobType::Codex | JobType::Agent => agents::run(&cx, job, cwd, None),
    };
    if !outcome.failed
        && let (Some(git), Some(ws)) = (&git, &workspace)
    {
        match worktree::commit(git, ws, job) {
            Ok(c) => {
                if c.is_some()
                    && let (Some(r), Some(b)) = (&remote, &ws.branch)
                {
                    job.runtime.push = Some(push::branch(git, &ws.cwd, r, b));
                }
                job.runtime.commit = c;
            }
            Err(e) => {
                outcome.failed = true;
                outcome.error = Some(format!("the task's work could not be committed: {e}"));
            }
        }
    }
    // A research job leaves its result in the project's document itself, as its user.
    if !outcome.failed
        && let Some(doc) = project_side::research_document(store, job)
    {
        let text = crate::model::result_text(outcome.output.as_deref().unwrap_or(""));
        let written = project_side::write_as_job_user(
            &doc,
            &text,
            env,
            std::path::Path::new("/"),
            switch.then(|| run_as.clone()),
        );
        match written {
            Ok(()) => tracing::info!(job_id = %args.job_id, queue = %args.queue,
                "wrote the research document {}", doc.display()),
            Err(e) => {
                outcome.failed = true;
                outcome.error = Some(match outcome.error.take() {
                    Some(prev) => format!("{e}; {prev}"),
                    None => e,
                });
            }
        }
    }
    outcome
}

/// `agentshell exec --json` with the job's approval channel; the prompt comes on stdin.
fn agentshell_args(socket: &str, deadline: u64) -> Vec<String> {
    vec![
        "exec".into(),
        "--json".into(),
        "--approvals".into(),
        socket.into(),
        "--approval-deadline".into(),
        deadline.to_string(),
        "--".into(),
        "-".into(),
    ]
}

/// Starts listening for the job's approval requests (the queue's policy, the agent's uid).
fn start_broker(
    queue: &QueueConfig,
    args: &WorkerArgs,
    uid: u32,
    answers: &approval::Answers,
) -> Result<approval::Broker, String> {
    approval::Broker::start(
        args.root.clone(),
        &args.queue,
        &args.job_id,
        queue.approvals.clone().unwrap_or_default(),
        uid,
        answers.clone(),
    )
    .map_err(|e| format!("Cannot open the approval channel: {e}"))
}

/// The `agent-worker` the agent starts as its approvals MCP server: this program
/// (`AGENTSTORE_WORKER_PATH` overrides, for a worker run from a copy).
fn approval_worker_path() -> PathBuf {
    std::env::var_os("AGENTSTORE_WORKER_PATH")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| PathBuf::from("agent-worker"))
}

fn noop(job: &Job) -> Outcome {
    let secs = job
        .config
        .supporting_data
        .get("sleep_seconds")
        .and_then(|v| v.as_f64())
        .unwrap_or(5.0)
        .clamp(0.0, 86_400.0);
    println!("Starting no-op job...");
    std::thread::sleep(Duration::from_secs_f64(secs));
    println!("Job complete!");
    Outcome {
        output: Some(NOOP_OUTPUT.into()),
        exit_code: Some(0),
        ..Outcome::default()
    }
}

/// Runs the agent, records its PID in the job file, and turns its exit and JSON result into
/// an outcome.
/// Confine `cmd` as the queue says (issue 28): the rules, `TMPDIR` = the job's scratch
/// directory, and the job's record of what the sandbox allows. `approvals`: the agent talks to
/// the worker's approval channel.
fn confine_job(
    queue: &QueueConfig,
    job: &mut Job,
    cmd: &AgentCommand,
    approvals: Option<&str>,
) -> Result<AgentCommand, String> {
    let home = cmd
        .env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| PathBuf::from("/"));
    let path_var = cmd
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    let mut programs: Vec<PathBuf> =
        project_side::find_program(&cmd.program, path_var.as_deref(), &home)
            .into_iter()
            .collect();
    if approvals.is_some() {
        programs.push(approval_worker_path());
    }
    let Some(sandbox) = confine::for_job(confine::JobContext {
        queue,
        jobtype: &job.config.jobtype,
        cwd: &cmd.cwd,
        home: &home,
        env: &cmd.env,
        programs: &programs,
        switch_to: cmd.switch_to.as_ref(),
        approvals,
    })?
    else {
        return Ok(cmd.clone());
    };
    let mut confined = cmd.clone();
    let scratch = sandbox.scratch.display().to_string();
    confined
        .env
        .retain(|(k, _)| !matches!(k.as_str(), "TMPDIR" | "TMP" | "TEMP" | "RES_OPTIONS"));
    for k in ["TMPDIR", "TMP", "TEMP"] {
        confined.env.push((k.into(), scratch.clone()));
    }
    // UDP is refused in the sandbox: glibc's resolver asks over TCP.
    confined.env.push(("RES_OPTIONS".into(), "use-vc".into()));
    job.runtime.sandbox = Some(sandbox.summary.clone());
    confined.sandbox = Some(sandbox);
    Ok(confined)
}

#[allow(clippy::too_many_arguments)]
fn run_and_judge(
    store: &Store,
    args: &WorkerArgs,
    queue: &QueueConfig,
    job: &mut Job,
    cmd: &AgentCommand,
    approvals: Option<&str>,
    what: &str,
    format: &ResultFormat,
) -> Outcome {
    let cmd = match confine_job(queue, job, cmd, approvals) {
        Ok(c) => c,
        Err(e) => return Outcome::fail(e),
    };
    let watch = cmd
        .sandbox
        .as_ref()
        .map(|_| confine::before_run(&mut job.runtime.sandbox));
    let outcome = run_confined(store, args, job, &cmd, what, format);
    if let (Some(s), Some(watch)) = (&cmd.sandbox, watch) {
        job.runtime.sandbox_refused = s.after_run(watch, job.runtime.llm_process_id);
    }
    outcome
}

#[cfg(test)]
mod tests;
