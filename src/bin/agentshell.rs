//! `agentshell`: wiring only — argv and the process's termination signal into
//! `agentstore::agent::app`. See `agentstore::agent` for the layers and the headless contract.
#![deny(unsafe_code)]

use std::process::ExitCode;

use agentstore::agent::app;
use agentstore::agent::cli::Cli;
use clap::Parser;

fn main() -> ExitCode {
    app::main(Cli::parse(), || {
        Box::pin(async { agentstore::systemd::termination_signal().await.to_string() })
    })
}
