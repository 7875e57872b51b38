//! One module per command (issue 29; pueue's `message_handler/` is the anchor): the typed
//! [`Command`] a message names is parsed once ([`parse`]) and dispatched here, a screen
//! long. The direct commands' modules hold typed functions (`users::view`,
//! `jobs::view`, …) that the CLI's local path calls too, and the `answer_*` that read a
//! message's content for the inbox and D-Bus `Submit` (the web asks over `Submit`); every
//! job listing walks [`job_listing::VisibleJobs`].

pub mod job_listing;
pub mod jobs;
mod machines;
pub mod prds;
pub mod projects;
pub mod queues;
pub mod users;

use super::RouteError;
use crate::model::{Command, CommandKind, Message};
use crate::permissions::Caller;
use crate::store::Store;
use serde_json::Value;

pub use jobs::least_job_bytes;

/// The command `msg` names; an unknown one is refused in the PRD's words.
pub fn parse(msg: &Message) -> Result<Command, RouteError> {
    msg.command
        .parse::<Command>()
        .map_err(|e| RouteError::Invalid(e.to_string()))
}

/// True when `command` names a command answered from the store at once.
pub fn is_direct(command: &str) -> bool {
    Command::parse(command).is_some_and(Command::is_direct)
}

/// True when `command` names a command that becomes a job.
pub fn creates_job(command: &str) -> bool {
    Command::parse(command).is_some_and(Command::creates_job)
}

/// Answers the direct command `command` (the one `msg` names); the result goes into the
/// response's `content.result`.
pub fn answer(
    store: &Store,
    command: Command,
    msg: &Message,
    who: &Caller,
) -> Result<Value, RouteError> {
    use Command as C;
    match command {
        C::Help => Ok(Value::String(help_text())),
        C::ListUsers => users::answer_list(store, who),
        C::ViewUser => users::answer_view(store, msg, who),
        C::ListProjects => projects::answer_list(store, who),
        C::ViewProject => projects::answer_view(store, msg, who),
        C::ListPrds => prds::answer_list(store, msg, who),
        C::ViewPrd => prds::answer_view(store, msg, who),
        C::ListQueues => queues::answer_list(store),
        C::ViewQueue => queues::answer_view(store, msg),
        C::ListJobs => jobs::answer_list(store, msg, who),
        C::ViewJob => jobs::answer_view(store, msg, who),
        C::JobLog => super::joblog::answer(store, msg, who),
        C::ListMachines => machines::answer_list(store),
        C::ViewMachine => machines::answer_view(store, msg),
        // Messages (PRD §4.6): requests and answers in messaging/, a user's own only.
        C::ListMessages => super::messages::answer_list(store, msg, who),
        C::ViewMessage => super::messages::answer_view(store, msg, who),
        C::ListTasks => super::tasks::listing::answer_list(store, msg, who),
        C::ViewTask => super::tasks::listing::answer_view(store, msg, who),
        other => Err(RouteError::Invalid(format!(
            "{other}: not a direct command"
        ))),
    }
}

/// The answer to `help`.
pub fn help_text() -> String {
    let mut s = String::from(
        "agentstore orchestrator commands (PRD §5)\n\nDirect commands (answered at once):\n",
    );
    for c in Command::of_kind(CommandKind::Direct) {
        s.push_str(&format!("  {c}\n"));
    }
    s.push_str("\nAgent commands (create a job; content: task, queue, timeout, claude_extra_args, supporting_data, jobtype, model):\n");
    for c in Command::of_kind(CommandKind::Job) {
        if let Some(cc) = c.claude_command() {
            s.push_str(&format!("  {:<16} runs Claude command /{cc}\n", c.name()));
        }
    }
    s.push_str("  create-environment  a job that runs `venvman create` for the project on the compute host (content: python, install_deps, force)\n");
    s.push_str("\nStore upkeep (answered by orchestratord, which may write the store):\n");
    s.push_str("  retry            content: job (a failed job; owner or admin)\n");
    s.push_str("  archive          content: older_than (e.g. 30d), dry_run (admins)\n");
    s.push_str("  migrate          content: dry_run (admins)\n");
    s.push_str("  retry-task       content: task (PRD/TASK, failed, cancelled or in review; the project's owner or an admin)\n");
    s.push_str("  cancel-task      content: task (PRD/TASK; owner or admin)\n");
    s.push_str("  set-task         content: task (PRD/TASK), title, description, depends_on (before its job starts; owner or admin)\n");
    s
}
