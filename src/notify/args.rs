//! `agentstore-notify`'s command line.

use clap::Parser;
use std::path::PathBuf;

/// Deliver the store's notices (job failed, approval waiting, …) to each user's chosen sinks
/// — desktop, Slack, Telegram, e-mail, signed webhooks — exactly once per sink. Settings:
/// `notify:` in /etc/agentstore/config.yaml (system) or ~/.config/agentstore/config.yaml.
#[derive(Debug, Parser)]
#[command(name = "agentstore-notify", version)]
pub struct Args {
    /// The store (default: as the other daemons resolve it).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Backstop interval in milliseconds (default: notify.poll_interval_ms, else 2000).
    #[arg(long, value_name = "MS")]
    pub poll_ms: Option<u64>,
    /// One pass, then exit.
    #[arg(long)]
    pub once: bool,
    /// Bus the queue managers are on, for the Slack app's approval answers: auto (system bus
    /// when run as the system service, else the session bus if there is one), system,
    /// session, none, or a D-Bus address (unix:path=…).
    #[arg(long, value_name = "BUS", default_value_t = crate::systemd::BusChoice::Auto)]
    pub bus: crate::systemd::BusChoice,
}
