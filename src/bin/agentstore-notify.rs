//! `agentstore-notify`: delivers notices to desktops, Slack, Telegram, e-mail and webhooks
//! (issue 31), run by systemd (`agentstore-notify.service`).
#![deny(unsafe_code)]

use agentstore::notify::args::Args;
use agentstore::notify::daemon::{LeadTask, NotifyOptions, run_leading};
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
    // The Slack app (Socket Mode) runs beside the deliveries on the machine that sends; it
    // answers approvals through the queue managers on this bus.
    let (choice, bus) = (args.bus.clone(), args.bus.for_daemon());
    let lead: LeadTask = Box::new(move |store, cfg| {
        let slack = cfg.slack.clone()?;
        if !slack.socket_mode() {
            return None;
        }
        let root = store.root().to_path_buf();
        let timeout = Duration::from_secs(cfg.retry.timeout_secs.clamp(1, 600));
        Some(Box::pin(async move {
            let Some(bus) = bus else {
                tracing::error!(
                    "slack socket mode: no bus to answer approvals on (--bus {choice})"
                );
                return;
            };
            let conn = match bus.builder().build().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(
                        "slack socket mode: no bus to answer approvals on ({bus} bus): {e}"
                    );
                    return;
                }
            };
            let store = match agentstore::store::Store::open(&root) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("slack socket mode: {e}");
                    return;
                }
            };
            match agentstore::slackapp::SlackApp::new(&slack, store, conn, timeout) {
                Ok(Some(app)) => agentstore::slackapp::socket::run(app).await,
                Ok(None) => {}
                Err(why) => tracing::error!("slack socket mode cannot work: {why}"),
            }
        }))
    });
    let result = rt.block_on(run_leading(
        opts,
        async {
            agentstore::systemd::shutdown_signal().await;
        },
        Some(lead),
    ));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("agentstore-notify: {e}");
            ExitCode::FAILURE
        }
    }
}
