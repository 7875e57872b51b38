//! The commands a message may carry (PRD §5, §6.2) and their Claude command mapping.

/// Commands answered directly from the store.
pub const DIRECT_COMMANDS: [&str; 18] = [
    "help",
    "list-users",
    "list-projects",
    "list-prds",
    "list-jobs",
    "list-queues",
    "view-user",
    "view-project",
    "view-prd",
    "view-job",
    "job-log",
    "view-queue",
    "list-machines",
    "view-machine",
    "list-messages",
    "view-message",
    "list-tasks",
    "view-task",
];

/// Agent commands and the Claude command each job runs (PRD §6.4 `AGENT_COMMAND_MAPPING`).
pub const AGENT_COMMANDS: [(&str, &str); 4] = [
    ("create-prd", "prd-creator"),
    ("research-code", "code-researcher"),
    ("create-tasks", "task-creator"),
    ("implement-tasks", "task-implementer"),
];

/// Creates a `venvman` job: the environment is made by the job on the compute host, as the
/// job's user, inside its scope (never by the orchestrator).
pub const CREATE_ENVIRONMENT: &str = "create-environment";

/// True for the commands that become jobs (the agent commands and `create-environment`).
pub fn creates_job(command: &str) -> bool {
    command == CREATE_ENVIRONMENT || claude_command_for(command).is_some()
}

/// The Claude command for an agent command.
pub fn claude_command_for(command: &str) -> Option<&'static str> {
    AGENT_COMMANDS
        .iter()
        .find(|(c, _)| *c == command)
        .map(|(_, cc)| *cc)
}

/// True for commands answered from the store.
pub fn is_direct(command: &str) -> bool {
    DIRECT_COMMANDS.contains(&command)
}

/// The answer to `help`.
pub fn help_text() -> String {
    let mut s = String::from(
        "agentstore orchestrator commands (PRD §5)\n\nDirect commands (answered at once):\n",
    );
    for c in DIRECT_COMMANDS {
        s.push_str(&format!("  {c}\n"));
    }
    s.push_str("\nAgent commands (create a job; content: task, queue, timeout, claude_extra_args, supporting_data, jobtype, model):\n");
    for (c, cc) in AGENT_COMMANDS {
        s.push_str(&format!("  {c:<16} runs Claude command /{cc}\n"));
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
