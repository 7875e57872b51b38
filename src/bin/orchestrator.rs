//! `orchestrator`: the user CLI (PRD §5).
#![deny(unsafe_code)]

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = agentstore::cli::Cli::parse();
    match agentstore::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.message.is_empty() {
                eprintln!("error: {}", e.message);
            }
            ExitCode::from(u8::try_from(e.code).unwrap_or(1))
        }
    }
}
