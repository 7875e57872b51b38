//! Running a job's agent (Claude Code, Codex, agentshell) in a folder: the job's own run, and
//! the integration job's hand-over of a merge conflict (issue 30), which gives the agent its
//! own prompt instead of the job's.

use super::{
    AgentCommand, Outcome, ResultFormat, WorkerArgs, agentshell_args, approval,
    approval_worker_path, claude, codex, run_and_judge, runas, start_broker,
};
use crate::model::{Job, JobType, QueueConfig};
use crate::store::Store;
use std::path::{Path, PathBuf};

/// What every agent run of a job shares.
pub(super) struct Cx<'a> {
    pub store: &'a Store,
    pub queue: &'a QueueConfig,
    pub args: &'a WorkerArgs,
    pub answers: &'a approval::Answers,
    pub env: &'a [(String, String)],
    pub home: &'a Path,
    pub run_as: &'a runas::RunAs,
    /// The agent runs as `run_as`, another account than this process's.
    pub switch: bool,
}

/// Runs `job`'s agent in `cwd`: with the job's prompt, or `prompt` when given.
pub(super) fn run(cx: &Cx, job: &mut Job, cwd: PathBuf, prompt: Option<String>) -> Outcome {
    let switch_to = cx.switch.then(|| cx.run_as.clone());
    match job.config.jobtype {
        JobType::Claude => {
            let prompt = match prompt {
                Some(p) => p,
                None => {
                    let Some(file) = claude::find_command(
                        &job.config.claude_command,
                        cx.home,
                        &cwd,
                        &claude::shipped_commands_dir(),
                    ) else {
                        return Outcome::fail(format!(
                            "Unknown Claude command: {}",
                            job.config.claude_command
                        ));
                    };
                    match claude::prompt_for(job, &file) {
                        Ok(p) => p,
                        Err(e) => return Outcome::fail(e),
                    }
                }
            };
            let program = match runas::program_for(
                crate::trust::Program::Claude,
                &cx.queue.claude_cli_path,
                cx.env,
                cx.run_as,
            ) {
                Ok(p) => p,
                Err(e) => return Outcome::fail(e),
            };
            let mut args_v = claude::claude_args(cx.queue, job);
            let format = if claude::wants_json(&args_v) {
                ResultFormat::ResultJson
            } else {
                ResultFormat::Text
            };
            let broker = if claude::asks_permissions(&args_v) {
                match start_broker(cx.queue, cx.args, cx.run_as.uid, cx.answers) {
                    Ok(b) => {
                        claude::add_approval_args(
                            &mut args_v,
                            &approval_worker_path(),
                            b.socket_name(),
                            b.deadline_seconds(),
                        );
                        Some(b)
                    }
                    Err(e) => return Outcome::fail(e),
                }
            } else {
                None
            };
            let cmd = AgentCommand {
                program,
                args: args_v,
                prompt,
                cwd,
                env: cx.env.to_vec(),
                switch_to,
                sandbox: None,
            };
            let approvals = broker.as_ref().map(|b| b.socket_name().to_string());
            let outcome = run_and_judge(
                cx.store,
                cx.args,
                cx.queue,
                job,
                &cmd,
                approvals.as_deref(),
                "Claude",
                &format,
            );
            if let Some(b) = broker {
                job.runtime.approvals = b.finish();
            }
            outcome
        }
        JobType::Codex => codex::run(
            cx.store,
            cx.queue,
            job,
            cx.args,
            cx.env.to_vec(),
            cx.home,
            cwd,
            cx.run_as,
            cx.switch,
            prompt,
        ),
        JobType::Agent => {
            let mut env = cx.env.to_vec();
            if let Some(m) = &job.config.model {
                env.retain(|(k, _)| k != "AGENTSHELL_MODEL");
                env.push(("AGENTSHELL_MODEL".into(), m.clone()));
            }
            // What agentshell's policy would ask a person about goes to the same approval
            // channel as Claude Code's permission requests.
            let program = match runas::program_for(
                crate::trust::Program::Agentshell,
                cx.queue.agentshell_path.as_deref().unwrap_or("agentshell"),
                &env,
                cx.run_as,
            ) {
                Ok(p) => p,
                Err(e) => return Outcome::fail(e),
            };
            let broker = match start_broker(cx.queue, cx.args, cx.run_as.uid, cx.answers) {
                Ok(b) => b,
                Err(e) => return Outcome::fail(e),
            };
            let cmd = AgentCommand {
                program,
                args: agentshell_args(broker.socket_name(), broker.deadline_seconds()),
                prompt: prompt.unwrap_or_else(|| claude::agent_prompt(job)),
                cwd,
                env,
                switch_to,
                sandbox: None,
            };
            let outcome = run_and_judge(
                cx.store,
                cx.args,
                cx.queue,
                job,
                &cmd,
                Some(broker.socket_name()),
                "Agent",
                &ResultFormat::ResultJson,
            );
            job.runtime.approvals = broker.finish();
            outcome
        }
        other => Outcome::fail(format!("a {other:?} job has no agent to run")),
    }
}
