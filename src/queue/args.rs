//! The `queue-manager` command line (clap definitions; the binary in `src/bin/` wires it).

use std::path::PathBuf;

/// Run the queue manager of one queue in the foreground (systemd: queue-manager@NAME).
#[derive(Debug, clap::Parser)]
#[command(name = "queue-manager", version)]
pub struct Args {
    /// Queue name (Queues/<NAME>/queue.json).
    #[arg(long)]
    pub queue: String,
    /// Store root (else AGENT_STORE_ROOT, config files, ~/Dropbox/AgentStore).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Bus to serve org.agentstore.Queue1 on: auto (system bus when run as the system service,
    /// else the session bus if there is one, else none), system, session, none, or a D-Bus
    /// address (unix:path=…).
    #[arg(long, value_name = "BUS", default_value_t = crate::systemd::BusChoice::Auto)]
    pub bus: crate::systemd::BusChoice,
    /// How to start jobs (default: the queue's `launcher`, else auto).
    #[arg(long, value_enum)]
    pub launcher: Option<crate::model::Launcher>,
    /// The agent-worker binary (default: next to this program, else on PATH).
    #[arg(long, value_name = "PATH")]
    pub worker: Option<PathBuf>,
    /// Exit after this many seconds with nothing queued and nothing of this host running
    /// (0 = never); default: `idle_exit_seconds` of the store's config.yaml. Its `.path`
    /// and `.timer` units start it again when a job is queued.
    #[arg(long, value_name = "SECONDS")]
    pub idle_exit: Option<u64>,
}
