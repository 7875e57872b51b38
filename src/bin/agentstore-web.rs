//! `agentstore-web`: the HTTP API and dashboard, started by `agentstore-web.socket`.
#![deny(unsafe_code)]

use agentstore::store::resolve_daemon_root;
use agentstore::web::activation::{Listener, take_listeners};
use agentstore::web::args::Args;
use agentstore::web::{WebOptions, run};
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args = Args::parse();
    let mut listeners = match take_listeners() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("agentstore-web: {e}");
            return ExitCode::FAILURE;
        }
    };
    agentstore::systemd::init_logging("agentstore-web", "info");
    if let Some(p) = &args.listen {
        let _ = std::fs::remove_file(p);
        match std::os::unix::net::UnixListener::bind(p) {
            Ok(l) => listeners.push(("listen".into(), Listener::Unix(l))),
            Err(e) => {
                eprintln!("agentstore-web: {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        }
    }
    let (root, _) = resolve_daemon_root(args.root.as_deref());
    let Some(bus) = args.bus.for_daemon() else {
        eprintln!("agentstore-web: no D-Bus to reach the daemons on (--bus system or session)");
        return ExitCode::FAILURE;
    };
    let limits = args.limits();
    let token_file = args
        .token_file
        .or_else(|| agentstore::store::home_dir().map(|h| agentstore::web::auth::token_path(&h)));
    let opts = WebOptions {
        limits,
        root,
        bus,
        idle_exit: (args.idle_exit > 0).then(|| Duration::from_secs(args.idle_exit)),
        token_file,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentstore-web: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(opts, listeners, async {
        agentstore::systemd::shutdown_signal().await;
    })) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("agentstore-web: {e}");
            ExitCode::FAILURE
        }
    }
}
