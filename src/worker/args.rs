//! The `agent-worker` command line (clap definitions; the binary in `src/bin/` wires it).

use std::path::PathBuf;

/// Run one AgentStore job from running_jobs/ and move it to finished_jobs/ or failed_jobs/.
#[derive(Debug, clap::Parser)]
#[command(
    name = "agent-worker",
    version,
    after_help = "agent-worker mcp-approvals --socket NAME [--deadline SECONDS]: the stdio MCP server \
                  the worker gives `claude -p` (--mcp-config, --permission-prompt-tool \
                  mcp__agentstore__approve); each permission request goes to the job's \
                  worker and from there to the queue's rules or a person (orchestrator approvals)."
)]
pub struct Args {
    /// Store root.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Queue name.
    #[arg(long)]
    pub queue: String,
    /// Run the agent as this Unix user (the queue manager passes it when it runs as root).
    #[arg(long, value_name = "USER")]
    pub run_as: Option<String>,
    /// Wait for `go` on stdin before starting (set by the queue manager).
    #[arg(long)]
    pub gate: bool,
    /// A Slurm batch step as the job's own account (set by a root queue manager): the job
    /// and the queue's settings come on stdin, the job's end goes to stdout; the store
    /// (`--root`) is never opened.
    #[arg(long, conflicts_with_all = ["gate", "run_as"])]
    pub relay: bool,
    /// Job id (file stem in Queues/<queue>/Jobs/running_jobs/).
    pub job_id: String,
}

/// `agent-worker mcp-approvals`: the stdio MCP server Claude Code starts for a job; its tool
/// `approve` (Claude Code's `--permission-prompt-tool`) asks the job's worker.
#[derive(Debug, clap::Parser)]
#[command(name = "agent-worker mcp-approvals", version)]
pub struct McpArgs {
    /// The worker's abstract approval socket.
    #[arg(long, value_name = "NAME")]
    pub socket: String,
    /// Seconds the worker waits for a person; this server denies by itself 10 s later.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::model::approval::DEFAULT_DEADLINE_SECONDS)]
    pub deadline: u64,
}
