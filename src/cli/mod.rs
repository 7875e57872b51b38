//! The `orchestrator` command line (PRD §5): clap definitions and one handler file per
//! command group.

mod admin;
mod agent;
mod approvals;
mod browse;
mod cancel_unserved;
pub mod complete;
mod conflicts;
mod daemon;
mod demo;
mod doctor;
mod doctor_codex;
mod flow;
mod history;
mod job_keys;
mod job_view;
mod jobs;
mod machines;
mod messages;
pub mod notify;
mod pending_job;
mod projects;
mod remote;
pub mod render;
mod session;
mod setup;
mod tasks;
mod web;

pub use render::Format;
pub use session::{Session, session_path};

use crate::model::Command as Op;
use crate::model::{JobStatus, Permission};
use crate::store::{Store, StoreError, resolve_root};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Drive and inspect an AgentStore: users, projects, PRDs, queues and agent jobs.
///
/// The store is the folder named by --root, else $AGENT_STORE_ROOT, else `agent_store_root`
/// in ~/.config/agentstore/config.yaml or /etc/agentstore/config.yaml, else
/// ~/Dropbox/AgentStore.
#[derive(Debug, Parser)]
#[command(
    name = "orchestrator",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_long_help = EXIT_STATUS
)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `orchestrator --help` and the man page: the exit status of every command (`<command>
/// --help` tells more for retry, archive, migrate and pipeline).
pub const EXIT_STATUS: &str = "Exit status:
  0  done (`--follow SECONDS`: the job finished, or still ran when SECONDS ran out, saying so)
  1  an error, printed as \"error: …\" on stderr: not found, refused (permissions, bad input naming the field), the store or a daemon unreachable; also a job that failed under `--follow`, `validate` finding an invalid document, and `archive`/`migrate` leaving some file as it is (each named)
  2  a malformed command line (unknown option, bad value)
  3  `daemon status`: orchestratord is not running";

/// Options every command takes.
#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Queue to use instead of the project's default (agent commands); filter (list-jobs).
    #[arg(add = crate::cli::complete::queue(), long, global = true, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// Wait up to SECONDS for the result (agent commands: the outbox answer; view-job: the
    /// job to finish).
    #[arg(long, global = true, value_name = "SECONDS")]
    pub follow: Option<u64>,
    /// Show debug output on stderr.
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// Store folder (overrides AGENT_STORE_ROOT and config files).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Bus to find orchestratord on: auto (the session bus if there is one, then the system
    /// bus; $AGENTSTORE_BUS=session|system|none narrows it), system, session, none (write
    /// agent commands into the inbox), or a D-Bus address (unix:path=…). Only a daemon
    /// serving this store is used.
    #[arg(long, global = true, value_name = "BUS", default_value_t = crate::bus::BusChoice::Auto)]
    pub bus: crate::bus::BusChoice,
    /// Removed (was `--bus none`): recognised only to say so.
    #[arg(long = "no-dbus", global = true, hide = true)]
    pub removed_no_dbus: bool,
}

impl GlobalArgs {
    /// The buses to look for orchestratord on, in order (empty: inbox only).
    pub fn client_buses(&self) -> Vec<crate::bus::Bus> {
        self.bus.client_buses()
    }

    /// The one bus for commands that need one (systemctl, queue managers): the first to try,
    /// else the system bus.
    pub fn first_bus(&self) -> crate::bus::Bus {
        self.bus.first_bus()
    }

    /// True when the bus is named (`--bus`, `AGENTSTORE_BUS`) rather than left to `auto`.
    fn bus_named(&self) -> bool {
        self.bus != crate::bus::BusChoice::Auto
            || std::env::var_os("AGENTSTORE_BUS").is_some_and(|v| !v.is_empty())
    }

    /// The bus to browse a store this user cannot read: that is the packaged system store,
    /// whose daemon is on the system bus unless the bus is named (--bus, AGENTSTORE_BUS).
    pub fn unreadable_store_bus(&self) -> crate::bus::Bus {
        if self.bus_named() {
            self.first_bus()
        } else {
            crate::bus::Bus::System
        }
    }

    /// The bus of the daemons serving this CLI's store: with `--bus auto` (and no
    /// `AGENTSTORE_BUS`), the system bus when the store came from the system configuration
    /// (the packaged system store), else [`first_bus`](Self::first_bus).
    pub fn store_bus(&self) -> crate::bus::Bus {
        if !self.bus_named() {
            let (_, source) = resolve_root(self.root.as_deref());
            if source
                == crate::store::RootSource::ConfigFile(PathBuf::from(crate::store::SYSTEM_CONFIG))
            {
                return crate::bus::Bus::System;
            }
        }
        self.first_bus()
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Set the user name the CLI acts as (writes ~/.orchestrator_config.json).
    Login {
        /// A user id from users/.
        username: String,
    },
    /// Set the current project (used when --project is not given).
    SetProject {
        /// A project id.
        #[arg(add = crate::cli::complete::project())]
        project_id: String,
    },
    /// Set the current PRD (used when --prd is not given).
    SetPrd {
        /// A PRD id.
        #[arg(add = crate::cli::complete::prd())]
        prd_id: String,
    },
    /// List all users (admins only once logged in as a user).
    ListUsers,
    /// List jobs in every queue, oldest first.
    ListJobs {
        /// Only jobs in this state.
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// Only jobs of this project.
        #[arg(add = crate::cli::complete::project(), long)]
        project: Option<String>,
        /// List the archived jobs (Queues/<q>/Jobs/archive/) instead.
        #[arg(long)]
        archived: bool,
    },
    /// List all projects.
    ListProjects,
    /// List PRDs of one project, or of all.
    ListPrds {
        /// Only PRDs of this project.
        #[arg(add = crate::cli::complete::project(), long)]
        project: Option<String>,
    },
    /// List tasks (issue 30), of one PRD, one project or all, optionally in one state.
    ListTasks {
        /// Only this PRD's tasks.
        #[arg(long)]
        prd: Option<String>,
        /// Only this project's tasks.
        #[arg(long)]
        project: Option<String>,
        /// Only tasks in this state (pending, ready, running, review, done, failed, cancelled).
        #[arg(long)]
        status: Option<String>,
    },
    /// Show one task: PRD/TASK.
    ViewTask {
        /// The PRD id and the task id, as PRD/TASK.
        task: String,
    },
    /// Start a failed, cancelled or review task again, with those that failed after it.
    ///
    /// Start a failed, cancelled or review task again (a new job from its last one), with
    /// the tasks of its PRD that failed after it.
    RetryTask {
        /// The PRD id and the task id, as PRD/TASK.
        task: String,
    },
    /// Cancel a task (and ask its queue manager to cancel its queued or running job).
    CancelTask {
        /// The PRD id and the task id, as PRD/TASK.
        task: String,
    },
    /// Change a task before its job starts (or after it failed or was cancelled).
    SetTask {
        /// The PRD id and the task id, as PRD/TASK.
        task: String,
        /// New title.
        #[arg(long)]
        title: Option<String>,
        /// New description.
        #[arg(long)]
        description: Option<String>,
        /// The tasks it depends on, comma-separated (TASK of its PRD, or PRD/TASK); an empty
        /// value removes every dependency.
        #[arg(long)]
        depends_on: Option<String>,
    },
    /// List all queues with their runtime counters.
    ListQueues,
    /// Show one user.
    ViewUser {
        /// User id.
        #[arg(add = crate::cli::complete::user())]
        user_id: String,
    },
    /// Show one job, output included (--follow N waits for it to finish).
    ViewJob {
        /// Job id.
        #[arg(add = crate::cli::complete::job())]
        job_id: String,
    },
    /// Show one project.
    ViewProject {
        /// Project id.
        #[arg(add = crate::cli::complete::project())]
        project_id: String,
    },
    /// Show one PRD.
    ViewPrd {
        /// PRD id.
        #[arg(add = crate::cli::complete::prd())]
        prd_id: String,
    },
    /// Show one queue.
    ViewQueue {
        /// Queue name.
        queue_name: String,
    },
    /// Create the store skeleton (PRD §3), config.yaml, schemas and the default queue.
    Init,
    /// Check documents against their schemas: files, folders, or the whole store.
    Validate {
        /// Files or folders; the whole store when none is given.
        paths: Vec<PathBuf>,
        /// Schema to use for every file (default: inferred from where the file is).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
    },
    /// Add a user document.
    AddUser(admin::AddUserArgs),
    /// Change a user's notification settings (sinks, events, quiet hours, chat ids).
    SetUser(notify::SetUserArgs),
    /// Check notification sinks end to end (`notify test --sink slack`).
    Notify {
        /// What to do.
        #[command(subcommand)]
        action: notify::NotifyAction,
    },
    /// What notifications were sent, and which failed and why.
    Notifications(notify::NotificationsArgs),
    /// Add a project document and its PRD folders.
    AddProject(admin::AddProjectArgs),
    /// Change a project's folder or research document (its owner or an admin).
    ///
    /// Change a project's folder (--directory; a default research document moves with it)
    /// or its research document (--code-research-document): its owner or an admin. New
    /// jobs and retries of failed ones run in the new folder; queued jobs keep theirs.
    EditProject(projects::EditProjectArgs),
    /// Add a queue and its job folders.
    AddQueue(admin::AddQueueArgs),
    /// Change settings of an existing queue (any config field; the runtime is kept).
    SetQueue(admin::SetQueueArgs),
    /// Create a PRD from a description (agent command; prints "Job queued: <id>").
    CreatePrd(agent::AgentArgs),
    /// Research the project's code and document it (agent command).
    ResearchCode(agent::AgentArgs),
    /// Generate tasks from a PRD (agent command).
    CreateTasks(agent::PrdArgs),
    /// Implement a PRD's tasks (agent command).
    ImplementTasks(agent::PrdArgs),
    /// Create the project's virtualenv: a job runs `venvman create` on the compute host.
    CreateEnvironment(agent::EnvArgs),
    /// Start, stop or inspect the orchestrator daemon (systemd unit).
    Daemon {
        /// What to do.
        #[command(subcommand)]
        action: daemon::DaemonAction,
    },
    /// Run one job end to end in a throwaway store, each step timed (no root, no network).
    ///
    /// Run the whole job path once, no root, no network: a throwaway store, orchestratord and
    /// a queue manager as children (session bus if present, else none), one research-code
    /// job (the built-in no-op, or the real Claude Code when `claude` and a key are present),
    /// each step with its time, then the result. --keep leaves the store to explore.
    Demo(demo::DemoArgs),
    /// Set up per-user mode on this machine (store, user, project, queue, units); re-runnable.
    ///
    /// Set up per-user mode on this machine, re-runnable: the store, your user document and
    /// login, a project (--project/--directory), the queue this machine serves, the config and
    /// unit drop-ins that point the user units at the store, and `agentstore.target` enabled.
    Setup(setup::SetupArgs),
    /// Give your own queue managers' jobs a key (e.g. ANTHROPIC_API_KEY), read from stdin.
    ///
    /// Give the jobs of your own (per-user) queue managers a key, read from standard input
    /// (`printf %s "$KEY" | orchestrator set-job-key ANTHROPIC_API_KEY`): kept in a 0600
    /// file, named as the systemd credential job-env.NAME of queue-manager@.service, and the
    /// running queue managers restarted (their jobs go on), so the next job has it.
    SetJobKey(job_keys::SetJobKeyArgs),
    /// Print where the web dashboard and HTTP API listen, and open the dashboard.
    ///
    /// Print where the HTTP API and web dashboard listen (agentstore-web.socket), and open
    /// the dashboard with xdg-open when a desktop session exists and a loopback TCP listener
    /// is configured.
    Web(web::WebArgs),
    /// Cancel a queued or running job (asks its queue manager over D-Bus).
    CancelJob {
        /// Job id.
        #[arg(add = crate::cli::complete::job())]
        job_id: String,
    },
    /// List the approval requests waiting for an answer, with the commands that answer.
    ///
    /// List the approval requests of running jobs waiting for an answer (every queue whose
    /// manager is up); --follow N then prints each request and answer for N seconds.
    Approvals,
    /// Allow a running job's approval request (REQ: its number, aN, or the full id).
    Approve {
        /// Job id.
        #[arg(add = crate::cli::complete::job())]
        job_id: String,
        /// Request: `3`, `a3` or `JOB-a3`.
        request: String,
        /// Also allow the same tool for the rest of the job.
        #[arg(long)]
        always: bool,
    },
    /// Deny a running job's approval request; the agent sees the reason.
    Deny {
        /// Job id.
        #[arg(add = crate::cli::complete::job())]
        job_id: String,
        /// Request: `3`, `a3` or `JOB-a3`.
        request: String,
        /// Why (the agent sees it).
        #[arg(long, default_value = "")]
        reason: String,
        /// Also deny the same tool for the rest of the job.
        #[arg(long)]
        always: bool,
    },
    /// Show a job's log from the journal (--follow N streams it).
    ///
    /// Show a job's output from the journal (JOB_ID=); --follow N streams it until the job
    /// ends or N seconds pass. Without a journal, the output stored in the job file.
    Logs {
        /// Job id.
        #[arg(add = crate::cli::complete::job())]
        job_id: String,
    },
    /// Try a failed job again as a new job, with the jobs that failed because of it.
    ///
    /// Try a failed job again as a new job (attempt + 1, retry_of the failed one), with the
    /// jobs that failed because they depended on it.
    #[command(after_long_help = flow::RETRY_EXIT)]
    Retry {
        /// Id of the failed job.
        #[arg(add = crate::cli::complete::job())]
        job_id: String,
    },
    /// Move finished and failed jobs older than --older-than into Jobs/archive/.
    ///
    /// Move finished and failed jobs older than --older-than into
    /// Queues/<q>/Jobs/archive/YYYY-MM/ (list them with `list-jobs --archived`).
    #[command(after_long_help = flow::ARCHIVE_EXIT)]
    Archive(flow::ArchiveArgs),
    /// Upgrade the store's documents and schema copies to this version's schema
    /// (idempotent; --dry-run reports only).
    #[command(after_long_help = flow::MIGRATE_EXIT)]
    Migrate(flow::MigrateArgs),
    /// Queue research-code → create-prd → create-tasks → implement-tasks as dependent jobs.
    #[command(after_long_help = flow::PIPELINE_EXIT)]
    Pipeline(flow::PipelineArgs),
    /// List the machines sharing the store (from their heartbeats under machines/), silent
    /// ones marked "stale for 3m12s".
    ListMachines,
    /// This machine's key in the store (made from /etc/machine-id) and its host name.
    ThisMachine,
    /// Show one machine: its state, daemons, queues and each daemon's heartbeat.
    ViewMachine {
        /// The machine's key (`this-machine`, `list-machines`), or a host name it had.
        host: String,
    },
    /// List the requests and answers in messaging/, newest first.
    ///
    /// List the messages in messaging/ (requests in inbox/ and processed_inbox/, answers in
    /// outbox/ and processed_outbox/), newest first; your own, or every one for admins. As
    /// text, a request's STATUS is its answer's (`waiting` until one comes); at 80 columns
    /// USER, PROJECT and DIR are left out when they do not fit.
    ListMessages(messages::ListMessagesArgs),
    /// Show one message (ID: its file name without .json) with its answer or request.
    ViewMessage {
        /// Message id (as list-messages shows it).
        message_id: String,
    },
    /// List the sync engines' conflict copies in the store, or keep one side of one.
    ///
    /// List the sync engines' conflict copies in the store (in place, or set aside under
    /// conflicts/ by the daemons): path, engine (syncthing, dropbox, nextcloud, owncloud),
    /// device if the name says, modification time, size, original and whether it exists.
    /// `conflicts resolve PATH --keep original|copy` keeps one side.
    Conflicts {
        /// What to do (none: list).
        #[command(subcommand)]
        action: Option<conflicts::ConflictsAction>,
    },
    /// List the validator's rejections of every machine, oldest first.
    ///
    /// List the validator's rejections (JSONValidation/errors.out) of every machine, oldest
    /// first: each machine writes errors@<host>.out beside the PRD's errors.out.
    ListErrors,
    /// Check this machine's set-up end to end and say what to fix.
    ///
    /// Check this machine's set-up end to end (store, bus, units, lingering, agent programs
    /// and credentials of the queues served here, clock, disk) and say what to fix. Exit
    /// status 1 when a check failed (warnings alone: 0); --format json for scripts.
    Doctor,
    /// List the store's events of every machine in time order (default: this month).
    ///
    /// List the store's events (logs/events-YYYY-MM.jsonl) of every machine in time order:
    /// each machine writes events-YYYY-MM@<host>.jsonl. Default: this month.
    ListEvents {
        /// Month as YYYY-MM, or `all`.
        #[arg(long)]
        month: Option<String>,
    },
}

/// `--status` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StatusArg {
    /// Waiting to start.
    Queued,
    /// Running now.
    Running,
    /// Finished successfully.
    Finished,
    /// Failed.
    Failed,
}

impl From<StatusArg> for JobStatus {
    fn from(s: StatusArg) -> JobStatus {
        match s {
            StatusArg::Queued => JobStatus::Queued,
            StatusArg::Running => JobStatus::Running,
            StatusArg::Finished => JobStatus::Finished,
            StatusArg::Failed => JobStatus::Failed,
        }
    }
}

/// `--permissions` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PermissionArg {
    /// All commands.
    Admin,
    /// Own projects only.
    User,
}

impl From<PermissionArg> for Permission {
    fn from(p: PermissionArg) -> Permission {
        match p {
            PermissionArg::Admin => Permission::Admin,
            PermissionArg::User => Permission::User,
        }
    }
}

/// `--launcher` values: the model's own enum (clap derives `ValueEnum` on it).
pub use crate::model::Launcher as LauncherArg;

/// A failed command: what to print and the exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// Printed as `error: <message>`.
    pub message: String,
    /// Process exit code.
    pub code: i32,
}

impl CliError {
    /// Exit code 1 with this message.
    pub fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 1,
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> CliError {
        CliError::new(e.to_string())
    }
}

impl From<crate::permissions::Refused> for CliError {
    fn from(e: crate::permissions::Refused) -> CliError {
        match e {
            crate::permissions::Refused::Store(e) => e.into(),
            crate::permissions::Refused::Denied(why) => {
                CliError::new(format!("permission denied: {why}"))
            }
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        // A closed pipe (`orchestrator list-jobs | head`) is not an error worth a message.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return CliError {
                message: String::new(),
                code: 0,
            };
        }
        CliError::new(e.to_string())
    }
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;

/// Opens the store the global options point at.
pub fn open_store(g: &GlobalArgs) -> Result<Store, CliError> {
    let (root, source) = resolve_root(g.root.as_deref());
    if g.verbose {
        eprintln!("store root: {} ({source:?})", root.display());
    }
    if !root.is_dir() {
        return Err(CliError::new(format!(
            "no AgentStore at {} (chosen by {source}); create one with `orchestrator init --root {}`, or `orchestrator setup` for per-user mode",
            root.display(),
            root.display()
        )));
    }
    Ok(Store::open(root)?)
}

/// Runs a parsed command line, writing to stdout.
pub fn run(cli: Cli) -> CliResult {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let g = &cli.global;
    if g.removed_no_dbus {
        return Err(CliError::new(crate::systemd::bus_choice::removed_flag(
            "--no-dbus",
        )));
    }
    // A store this user may not read (the packaged system store): browse through the daemon.
    if remote::store_unreadable(g)
        && let Some(result) = remote::run(g, &mut out, &cli.command)
    {
        return result;
    }
    match cli.command {
        Command::Login { username } => browse::login(g, &mut out, &username),
        Command::SetProject { project_id } => browse::set_project(g, &mut out, &project_id),
        Command::SetPrd { prd_id } => browse::set_prd(g, &mut out, &prd_id),
        Command::ListUsers => browse::list_users(g, &mut out),
        Command::ListJobs {
            project,
            archived: true,
            ..
        } => browse::list_archived(g, &mut out, project.as_deref()),
        Command::ListJobs {
            status, project, ..
        } => browse::list_jobs(g, &mut out, status.map(Into::into), project.as_deref()),
        Command::ListProjects => browse::list_projects(g, &mut out),
        Command::ListPrds { project } => browse::list_prds(g, &mut out, project.as_deref()),
        Command::ListQueues => browse::list_queues(g, &mut out),
        Command::ViewUser { user_id } => browse::view_user(g, &mut out, &user_id),
        Command::ViewJob { job_id } => browse::view_job(g, &mut out, &job_id),
        Command::ViewProject { project_id } => browse::view_project(g, &mut out, &project_id),
        Command::ViewPrd { prd_id } => browse::view_prd(g, &mut out, &prd_id),
        Command::ListTasks {
            prd,
            project,
            status,
        } => tasks::list_tasks(g, &mut out, prd, project, status),
        Command::ViewTask { task } => tasks::view_task(g, &mut out, &task),
        Command::RetryTask { task } => tasks::retry_task(g, &mut out, &task),
        Command::CancelTask { task } => tasks::cancel_task(g, &mut out, &task),
        Command::SetTask {
            task,
            title,
            description,
            depends_on,
        } => tasks::set_task(g, &mut out, &task, title, description, depends_on),
        Command::ViewQueue { queue_name } => browse::view_queue(g, &mut out, &queue_name),
        Command::Init => admin::init(g, &mut out),
        Command::Validate { paths, kind } => admin::validate(g, &mut out, &paths, kind.as_deref()),
        Command::AddUser(a) => admin::add_user(g, &mut out, a),
        Command::AddProject(a) => admin::add_project(g, &mut out, a),
        Command::EditProject(a) => projects::edit_project(g, &mut out, a),
        Command::SetUser(a) => notify::set_user(g, &mut out, a),
        Command::Notify { action } => notify::run(g, &mut out, action),
        Command::Notifications(a) => notify::list(g, &mut out, &a),
        Command::AddQueue(a) => admin::add_queue(g, &mut out, a),
        Command::SetQueue(a) => admin::set_queue(g, &mut out, a),
        Command::CreatePrd(a) => agent::simple(g, &mut out, Op::CreatePrd, a),
        Command::ResearchCode(a) => agent::simple(g, &mut out, Op::ResearchCode, a),
        Command::CreateTasks(a) => agent::with_prd(g, &mut out, Op::CreateTasks, a),
        Command::ImplementTasks(a) => agent::with_prd(g, &mut out, Op::ImplementTasks, a),
        Command::CreateEnvironment(a) => agent::create_environment(g, &mut out, a),
        Command::Daemon { action } => daemon::run(g, &mut out, action),
        Command::Demo(a) => demo::run(g, &mut out, a),
        Command::Setup(a) => setup::run(g, &mut out, a),
        Command::Web(a) => web::run(g, &mut out, &a),
        Command::SetJobKey(a) => job_keys::run(g, &mut out, a),
        Command::CancelJob { job_id } => jobs::cancel_job(g, &mut out, &job_id),
        Command::Logs { job_id } => jobs::logs(g, &mut out, &job_id),
        Command::Approvals => approvals::list(g, &mut out),
        Command::Approve {
            job_id,
            request,
            always,
        } => approvals::answer(g, &mut out, &job_id, &request, true, always, ""),
        Command::Deny {
            job_id,
            request,
            reason,
            always,
        } => approvals::answer(g, &mut out, &job_id, &request, false, always, &reason),
        Command::Retry { job_id } => flow::retry(g, &mut out, &job_id),
        Command::Archive(a) => flow::archive(g, &mut out, a),
        Command::Migrate(a) => flow::migrate(g, &mut out, a),
        Command::Pipeline(a) => flow::pipeline(g, &mut out, a),
        Command::ListMachines => machines::list(g, &mut out),
        Command::ThisMachine => machines::this(g, &mut out),
        Command::ViewMachine { host } => machines::view(g, &mut out, &host),
        Command::ListMessages(a) => messages::list(g, &mut out, &a),
        Command::ViewMessage { message_id } => messages::view(g, &mut out, &message_id),
        Command::Conflicts { action } => conflicts::run(g, &mut out, action),
        Command::ListErrors => history::list_errors(g, &mut out),
        Command::ListEvents { month } => history::list_events(g, &mut out, month.as_deref()),
        Command::Doctor => doctor::run(g, &mut out),
    }
}
