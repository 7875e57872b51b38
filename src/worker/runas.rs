//! Who a job's agent runs as (DESIGN §6, issue 4): when the queue manager runs as root, the
//! project owner's Unix account (`unix_user` in the owner's user document, else the user id);
//! otherwise the manager's own account. The account must be one the machine allows
//! (`crate::trust::account`, issue 27): checked here again before the worker switches, whoever
//! started it with `--run-as`.

pub use crate::trust::account::{Account as RunAs, AccountError as RunAsError};

/// The account a job runs as: `name` (the manager's `--run-as`), else this process's own;
/// refused when this (root) process may not run jobs as it under the machine's rules.
pub fn for_job(name: Option<&str>) -> Result<RunAs, String> {
    let account = match name {
        Some(n) => RunAs::lookup(n),
        None => RunAs::current(),
    }
    .map_err(|e| e.to_string())?;
    let policy = crate::trust::Policy::load();
    crate::trust::check_run_as(&policy, &account).map_err(|e| e.to_string())?;
    Ok(account)
}

/// The program a queue names for the agent (`claude_cli_path`, `agentshell_path`), as the
/// path to execute: one the machine allows, trusted for the account that runs it
/// (`crate::trust::programs`). `env` is the agent's environment (its PATH).
pub fn program_for(
    which: crate::trust::Program,
    requested: &str,
    env: &[(String, String)],
    run_as: &RunAs,
) -> Result<String, String> {
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let policy = crate::trust::Policy::load();
    crate::trust::resolve_program(&policy, which, requested, path_var, run_as.uid)
        .map(|p| p.display().to_string())
        .map_err(|e| format!("Cannot start the agent: {e}"))
}
