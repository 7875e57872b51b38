//! `orchestratord`: the orchestrator daemon (PRD §6), run by systemd.
#![deny(unsafe_code)]

use agentstore::orchestrator::DaemonError;
use agentstore::orchestrator::daemon::{Args, DaemonOptions, run};
use agentstore::store::resolve_daemon_root;
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args = Args::parse();
    agentstore::systemd::init_logging("orchestratord", "info");
    let (root, _) = resolve_daemon_root(args.root.as_deref());
    if args.removed_no_bus {
        eprintln!(
            "orchestratord: {}",
            agentstore::systemd::bus_choice::removed_flag("--no-bus")
        );
        return ExitCode::from(2);
    }
    let bus = args.bus.for_daemon();
    let opts = DaemonOptions {
        root,
        idle_exit: args.idle_exit.map(Duration::from_secs),
        sweep_interval: args.sweep_interval.map(Duration::from_secs),
        no_inotify: args.no_inotify,
        standby: args.standby,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("orchestratord: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let frontend = agentstore::bus::orchestrator::DbusFrontend::new(bus);
    let result = rt.block_on(run(opts, frontend, async {
        agentstore::systemd::shutdown_signal().await;
    }));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ DaemonError::AlreadyRunning(_)) => {
            tracing::error!("{e}");
            eprintln!("orchestratord: {e}");
            ExitCode::from(agentstore::systemd::EXIT_ALREADY_RUNNING)
        }
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("orchestratord: {e}");
            ExitCode::FAILURE
        }
    }
}
