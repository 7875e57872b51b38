//! The commands a message may carry (PRD §5, §6.2, and the upkeep and task commands we
//! added), as one typed enum: every door (the inbox, D-Bus `Submit`, the CLI, the web) names
//! a command by a [`Command`], parsed once from the message's `command` text, and the
//! orchestrator dispatches on it (`orchestrator::commands`). A name that is not here is
//! refused with [`UnknownCommand`] (the PRD's own words, "Unknown command: X").

use std::fmt;
use std::str::FromStr;

/// What answering a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    /// Answered from the store at once (`list-*`, `view-*`, `help`, `job-log`): reads only,
    /// so any orchestratord (a standby, a read-only one) may answer it.
    Direct,
    /// Becomes a job (the agent commands and `create-environment`).
    Job,
    /// Writes the store (`retry`, `archive`, `migrate`, the task commands): only the active
    /// orchestratord answers it.
    Upkeep,
}

macro_rules! commands {
    ($( $variant:ident = $name:literal, $kind:ident, $claude:expr ; )*) => {
        /// A command a message may carry.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Command {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Command {
            /// Every command, in the order `help` lists them.
            pub const ALL: &'static [Command] = &[$(Command::$variant),*];

            /// The command's name as messages spell it.
            pub fn name(self) -> &'static str {
                match self {
                    $(Command::$variant => $name,)*
                }
            }

            /// What answering it does.
            pub fn kind(self) -> CommandKind {
                match self {
                    $(Command::$variant => CommandKind::$kind,)*
                }
            }

            /// The Claude command an agent command's job runs (PRD §6.4
            /// `AGENT_COMMAND_MAPPING`); `None` for every other command.
            pub fn claude_command(self) -> Option<&'static str> {
                match self {
                    $(Command::$variant => $claude,)*
                }
            }
        }
    };
}

commands! {
    Help = "help", Direct, None;
    ListUsers = "list-users", Direct, None;
    ListProjects = "list-projects", Direct, None;
    ListPrds = "list-prds", Direct, None;
    ListJobs = "list-jobs", Direct, None;
    ListQueues = "list-queues", Direct, None;
    ViewUser = "view-user", Direct, None;
    ViewProject = "view-project", Direct, None;
    ViewPrd = "view-prd", Direct, None;
    ViewJob = "view-job", Direct, None;
    JobLog = "job-log", Direct, None;
    ViewQueue = "view-queue", Direct, None;
    ListMachines = "list-machines", Direct, None;
    ViewMachine = "view-machine", Direct, None;
    ListMessages = "list-messages", Direct, None;
    ViewMessage = "view-message", Direct, None;
    ListTasks = "list-tasks", Direct, None;
    ViewTask = "view-task", Direct, None;
    CreatePrd = "create-prd", Job, Some("prd-creator");
    ResearchCode = "research-code", Job, Some("code-researcher");
    CreateTasks = "create-tasks", Job, Some("task-creator");
    ImplementTasks = "implement-tasks", Job, Some("task-implementer");
    CreateEnvironment = "create-environment", Job, None;
    Retry = "retry", Upkeep, None;
    Archive = "archive", Upkeep, None;
    Migrate = "migrate", Upkeep, None;
    RetryTask = "retry-task", Upkeep, None;
    CancelTask = "cancel-task", Upkeep, None;
    SetTask = "set-task", Upkeep, None;
}

impl Command {
    /// The command named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Command> {
        Command::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// True for the commands answered from the store at once.
    pub fn is_direct(self) -> bool {
        self.kind() == CommandKind::Direct
    }

    /// True for the commands that become jobs.
    pub fn creates_job(self) -> bool {
        self.kind() == CommandKind::Job
    }

    /// The agent command whose job runs Claude command `claude` (jobs written by hand carry
    /// no command; it is inferred from the Claude command).
    pub fn for_claude_command(claude: &str) -> Option<Command> {
        Command::ALL
            .iter()
            .copied()
            .find(|c| c.claude_command() == Some(claude))
    }

    /// The commands of one kind, in `help`'s order.
    pub fn of_kind(kind: CommandKind) -> impl Iterator<Item = Command> {
        Command::ALL
            .iter()
            .copied()
            .filter(move |c| c.kind() == kind)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A message named a command that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unknown command: {0}")]
pub struct UnknownCommand(pub String);

impl FromStr for Command {
    type Err = UnknownCommand;

    fn from_str(s: &str) -> Result<Command, UnknownCommand> {
        Command::parse(s).ok_or_else(|| UnknownCommand(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_command_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in Command::ALL {
            assert!(seen.insert(c.name()), "{} twice", c.name());
            assert_eq!(c.name().parse::<Command>(), Ok(*c));
        }
        assert_eq!(
            "list-job".parse::<Command>(),
            Err(UnknownCommand("list-job".into()))
        );
        assert_eq!(Command::parse("LIST-JOBS"), None);
    }

    #[test]
    fn agent_commands_map_to_their_claude_commands_both_ways() {
        let agents: Vec<_> = Command::ALL
            .iter()
            .filter(|c| c.claude_command().is_some())
            .collect();
        assert_eq!(agents.len(), 4);
        for c in agents {
            assert!(c.creates_job());
            assert_eq!(
                Command::for_claude_command(c.claude_command().unwrap_or_default()),
                Some(*c)
            );
        }
        assert!(Command::CreateEnvironment.creates_job());
        assert!(Command::ListJobs.is_direct());
        assert_eq!(Command::Retry.kind(), CommandKind::Upkeep);
    }
}
