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
    /// Bus the daemons are on: auto, system, session, or a D-Bus address (unix:path=…).
    #[arg(long, value_name = "BUS", default_value_t = BusChoice::Auto)]
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
    /// Seconds a client has to send a request's head, from when the server waits for it (on a
    /// kept-alive connection: from the previous answer, so also the keep-alive idle limit).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = seconds)]
    pub header_timeout: f64,
    /// Seconds a client has to send a request's body, from its head.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0, value_parser = seconds)]
    pub body_timeout: f64,
    /// Seconds a connection may move no byte either way (a stalled body, an answer not read)
    /// before it is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0, value_parser = seconds)]
    pub idle_timeout: f64,
    /// Open connections one caller (a Unix user; all of loopback TCP) may hold; more are
    /// answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_caller: u32,
    /// Open connections in all; more are answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 86400]")),
    }
}

impl Args {
    /// The timeouts and connection bounds these arguments set.
    pub fn limits(&self) -> crate::web::conn::Limits {
        crate::web::conn::Limits {
            header_timeout: std::time::Duration::from_secs_f64(self.header_timeout),
            body_timeout: std::time::Duration::from_secs_f64(self.body_timeout),
            idle_timeout: std::time::Duration::from_secs_f64(self.idle_timeout),
            per_caller: self.max_connections_per_caller as usize,
            total: self.max_connections as usize,
        }
    }
}
