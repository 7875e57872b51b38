//! `orchestrator doctor`'s check of a queue's Codex CLI (`codex_cli_path`, issue 35), beside
//! the Claude Code one: a path the queue names that is not there fails (its codex jobs would
//! fail at start); the default `codex` missing from PATH only warns (a queue that never runs
//! codex jobs does not need it).

use super::doctor::{Check, Verdict, check, find_program};
use crate::model::Queue;

/// The `codex:<queue>` check.
pub(super) fn codex_check(queue: &str, q: &Queue) -> Check {
    let name = format!("codex:{queue}");
    let named = q.config.codex_cli_path.clone();
    let program = named.clone().unwrap_or_else(|| "codex".to_string());
    if let Some(p) = find_program(&program) {
        return check(
            &name,
            Verdict::Ok,
            format!("{program} is {}", p.display()),
            None,
        );
    }
    // Nobody asked for Codex on this queue: its absence is no fault (a Claude-only machine),
    // only worth a word on how to add it.
    if named.is_none() {
        return check(
            &name,
            Verdict::Ok,
            format!(
                "codex is not installed (needed only for codex jobs of {queue}; npm install -g @openai/codex to run them)"
            ),
            None,
        );
    }
    check(
        &name,
        Verdict::Fail,
        format!(
            "{program} (Queues/{queue}/queue.json's codex_cli_path) not found (PATH={}): codex jobs of {queue} fail",
            std::env::var("PATH").unwrap_or_default()
        ),
        Some(format!(
            "install the Codex CLI (npm install -g @openai/codex), or set codex_cli_path in Queues/{queue}/queue.json to its full path (and list it under programs: codex: in this machine's config.yaml)"
        )),
    )
}
