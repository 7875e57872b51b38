//! `agentstore-notify`: delivers notices to desktops, Slack, Telegram, e-mail and webhooks
//! (issue 31), run by systemd (`agentstore-notify.service`).
#![deny(unsafe_code)]

use agentstore::notify::args::Args;
use agentstore::notify::daemon::{NotifyOptions, run};
use agentstore::store::resolve_daemon_root;
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args = Args::parse();
    agentstore::systemd::init_logging("agentstore-notify", "info");
    let (root, _) = resolve_daemon_root(args.root.as_deref());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentstore-notify: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = NotifyOptions {
        root,
        poll_interval: args.poll_ms.map(Duration::from_millis),
        once: args.once,
        config: None,
    };
    let result = rt.block_on(run(opts, async {
        agentstore::systemd::shutdown_signal().await;
    }));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("agentstore-notify: {e}");
            ExitCode::FAILURE
        }
    }
}
