//! `orchestrator`: the user CLI (PRD §5).
#![deny(unsafe_code)]

use clap::{CommandFactory, Parser};
use std::process::ExitCode;

fn main() -> ExitCode {
    // `COMPLETE=bash orchestrator` prints the shell's registration script; the shell then
    // calls back with the words typed so far, answered here (ids from the store) and exit.
    clap_complete::CompleteEnv::with_factory(agentstore::cli::Cli::command).complete();
    let cli = agentstore::cli::Cli::parse();
    match agentstore::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.message.is_empty() {
                agentstore::cli::render::eprint_message("error: ", &e.message);
            }
            ExitCode::from(u8::try_from(e.code).unwrap_or(1))
        }
    }
}
