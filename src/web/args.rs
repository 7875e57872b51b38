//! `agentstore-web`'s command line.

use crate::bus::BusChoice;
use clap::Parser;
use std::path::PathBuf;

/// The agentstore HTTP/JSON API and web dashboard. Normally started by systemd through
/// agentstore-web.socket (the listeners come in LISTEN_FDS); exits when idle and the socket
/// starts it again.
#[derive(Debug, Parser)]
#[command(name = "agentstore-web", version)]
pub struct Args {
    /// Store folder (default: AGENT_STORE_ROOT, config files, ~/Dropbox/AgentStore).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Bus the daemons are on: auto, system or session.
    #[arg(long, value_enum, default_value_t = BusChoice::Auto)]
    pub bus: BusChoice,
    /// Exit after this many seconds without a connection (0 = never).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub idle_exit: u64,
    /// Listen on this Unix socket too (without systemd; removed and re-made at start).
    #[arg(long, value_name = "PATH")]
    pub listen: Option<PathBuf>,
    /// The token file for TCP listeners (default ~/.config/agentstore/web-token; made, mode
    /// 0600, when missing).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}
