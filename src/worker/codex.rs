//! `jobtype: codex` (issue 35): the Codex CLI run headless, `codex exec --json`, the prompt
//! on stdin. Its JSONL events are the job's output; the thread id, the turns and the tokens
//! (priced by the one table, `accounting`) land in the same job fields as Claude's.
//!
//! Approvals and the sandbox map to Codex's own settings: `codex exec` cannot hand a
//! question to our approval channel (it has no permission-prompt tool), so its approval
//! policy is `never` — what it would ask a person about is refused at once, as an unattended
//! job's ASK is (DESIGN §6). Its sandbox: in a queue confined by the kernel (`sandbox`
//! on, Landlock around Codex and everything it runs) that one is the wall and Codex's own
//! is off (`danger-full-access`: its bubblewrap cannot start inside Landlock); otherwise
//! the queue's approvals choose it: `workspace-write` (writes in the project only, no
//! network) unless the queue allows every request without a human (`default: allow`, no
//! rules), which adds network access. A queue whose `codex_default_args` name a sandbox or
//! an approval policy keeps its own.

use super::accounting::AgentRun;
use super::capture::Captured;
use super::claude;
use super::codex_model;
use crate::model::approval::Decision;
use crate::model::{Job, QueueConfig, TokenUsage};
use serde_json::Value;
use std::path::Path;

/// The prompt for Codex: an agent command (the four shipped ones, or the user's or the
/// project's own `.claude/commands/` file, which Codex does not read itself) filled in
/// with the task and the supporting data; without a command, the task and the data. The
/// user's or project's file is read with the rights of `account` (the job's account when the
/// worker switches to it; `None` when it already runs as it): never the worker's own.
pub fn prompt(
    job: &Job,
    home: &Path,
    cwd: &Path,
    account: Option<&super::runas::RunAs>,
) -> Result<String, String> {
    let command = &job.config.claude_command;
    if command.is_empty() {
        return Ok(claude::agent_prompt(job));
    }
    let file = claude::find_command(command, home, cwd, &claude::shipped_commands_dir())
        .ok_or_else(|| format!("Unknown agent command: {command}"))?;
    match file {
        // Codex does not know Claude's slash commands: the file's text goes in the prompt.
        claude::CommandFile::Claude(p) => {
            let text = super::read_as::read_to_string_as(&p, account, claude::MAX_COMMAND_FILE)?;
            Ok(claude::fill_arguments(job, &text))
        }
        other => claude::prompt_for(job, &other),
    }
}

/// True when `args` has one of these options (`--x`, `--x=…`).
fn has_option(args: &[String], names: &[&str]) -> bool {
    args.iter().any(|a| {
        names
            .iter()
            .any(|n| a == n || a.starts_with(&format!("{n}=")))
    })
}

/// The values of `-c`/`--config` settings in `args`, as `key=value` text.
fn config_settings(args: &[String]) -> impl Iterator<Item = &str> {
    let mut it = args.iter();
    std::iter::from_fn(move || {
        loop {
            let a = it.next()?;
            if a == "-c" || a == "--config" {
                return it.next().map(String::as_str);
            }
            if let Some(v) = a.strip_prefix("--config=") {
                return Some(v);
            }
        }
    })
}

fn sets(args: &[String], key: &str) -> bool {
    config_settings(args).any(|kv| kv.split('=').next().map(str::trim) == Some(key))
}

/// The sandbox settings for the queue (see the module's doc).
fn sandbox_args(queue: &QueueConfig) -> Vec<String> {
    if queue.sandboxed() {
        // The queue's Landlock sandbox confines Codex and all it runs; Codex's own (bubblewrap)
        // cannot start inside it ("error building bubblewrap command: Permission denied").
        return vec!["--sandbox".into(), "danger-full-access".into()];
    }
    let everything_allowed = queue
        .approvals
        .as_ref()
        .is_some_and(|p| p.default == Decision::Allow && p.rules.is_empty());
    let mut v: Vec<String> = vec!["--sandbox".into(), "workspace-write".into()];
    if everything_allowed {
        v.push("-c".into());
        v.push("sandbox_workspace_write.network_access=true".into());
    }
    v
}

/// `codex` arguments: `exec --json`, the sandbox and approval settings (unless the queue's
/// defaults name them), the queue's defaults, the job's model, the job's own arguments, and
/// `-` (the prompt comes on stdin, never in argv).
pub fn codex_args(queue: &QueueConfig, job: &Job) -> Vec<String> {
    let mut args: Vec<String> = [
        "exec",
        "--json",
        "--color",
        "never",
        "--skip-git-repo-check",
    ]
    .map(String::from)
    .to_vec();
    let defaults = &queue.codex_default_args;
    let bypass = has_option(
        defaults,
        &["--dangerously-bypass-approvals-and-sandbox", "--yolo"],
    );
    if !bypass
        && !has_option(defaults, &["-s", "--sandbox", "--full-auto"])
        && !sets(defaults, "sandbox_mode")
    {
        args.extend(sandbox_args(queue));
    }
    if !bypass
        && !has_option(defaults, &["-a", "--ask-for-approval"])
        && !sets(defaults, "approval_policy")
    {
        args.push("-c".into());
        args.push("approval_policy=\"never\"".into());
    }
    args.extend(defaults.iter().cloned());
    if let Some(m) = &job.config.model
        && model_of(&job.config.claude_extra_args).is_none()
    {
        args.push("--model".into());
        args.push(m.clone());
    }
    args.extend(job.config.claude_extra_args.iter().cloned());
    args.push("-".into());
    args
}

/// The model `args` name (`-m X`, `--model X`, `--model=X`, `-c model="X"`; the last wins, as
/// for Codex). `None`: the one its configuration chooses ([`codex_model::run_model`]).
pub fn model_of(args: &[String]) -> Option<String> {
    codex_model::CommandLine::parse(args).names_model()
}

pub use super::codex_model::DEFAULT_MODEL;

/// The lines of what Codex wrote to stdout: all of it when it fit, else the head and the
/// tail (from its first whole line; the bytes between are gone, and so are their events).
fn lines(out: &Captured) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = out.head.split(|b| *b == b'\n').collect();
    if out.truncated() {
        v.pop(); // the head's last line is cut
        let overlap = (out.head.len() + out.tail.len()).saturating_sub(out.total as usize);
        let tail = &out.tail[overlap.min(out.tail.len())..];
        let from = tail
            .iter()
            .position(|b| *b == b'\n')
            .map_or(tail.len(), |p| p + 1);
        v.extend(tail[from..].split(|b| *b == b'\n'));
    }
    v
}

/// Reads Codex's JSONL events (`thread.started`, `item.completed`, `turn.completed`,
/// `turn.failed`, `error`): the last agent message is the result, the thread id the session,
/// each completed turn's usage adds up to the tokens, priced for `model`. A run with no
/// completed turn failed (its last error is the reason); lines that are not events are
/// passed over. Err when there is no event at all.
pub fn parse_events(out: &Captured, model: Option<&str>) -> Result<AgentRun, String> {
    let mut run = AgentRun::default();
    let mut seen = false;
    let (mut turns, mut failed) = (0u64, false);
    let mut usage = TokenUsage::default();
    let mut cached = 0u64;
    let mut last_error: Option<String> = None;
    for line in lines(out) {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let Some(kind) = v.get("type").and_then(Value::as_str) else {
            continue;
        };
        seen = true;
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        match kind {
            "thread.started" => run.session_id = text("/thread_id"),
            "item.completed" => match v.pointer("/item/type").and_then(Value::as_str) {
                Some("agent_message") => run.result = text("/item/text"),
                Some("error") => last_error = text("/item/message"),
                _ => {}
            },
            "turn.completed" => {
                turns += 1;
                let n = |k: &str| {
                    v.pointer(&format!("/usage/{k}"))
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                };
                usage.input_tokens += n("input_tokens");
                usage.output_tokens += n("output_tokens");
                cached += n("cached_input_tokens");
            }
            "turn.failed" => {
                failed = true;
                last_error = text("/error/message").or(last_error);
            }
            "error" => last_error = text("/message"),
            _ => {}
        }
    }
    if !seen {
        return Err("no JSON events on stdout".into());
    }
    if failed || turns == 0 {
        run.is_error = true;
        run.result = Some(last_error.unwrap_or_else(|| "no turn completed".into()));
    }
    if turns > 0 {
        usage.cached_input_tokens = Some(cached);
        run.num_turns = Some(turns);
        run.usage = Some(usage);
        run.cost_usd = super::accounting::priced(model, usage);
    }
    Ok(run)
}

/// Runs a Codex job: the program the machine allows, the prompt, the arguments, then the
/// worker's common run and judgement (its JSONL read by [`parse_events`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    store: &crate::store::Store,
    queue: &QueueConfig,
    job: &mut Job,
    args: &super::WorkerArgs,
    env: Vec<(String, String)>,
    home: &Path,
    cwd: std::path::PathBuf,
    run_as: &super::runas::RunAs,
    switch: bool,
    given_prompt: Option<String>,
) -> super::Outcome {
    use super::{AgentCommand, Outcome, ResultFormat, run_and_judge, runas};
    let program = match runas::program_for(
        crate::trust::Program::Codex,
        queue.codex_cli_path.as_deref().unwrap_or("codex"),
        &env,
        run_as,
    ) {
        Ok(p) => p,
        Err(e) => return Outcome::fail(e),
    };
    let prompt = match given_prompt.map_or_else(
        || self::prompt(job, home, &cwd, switch.then_some(run_as)),
        Ok,
    ) {
        Ok(p) => p,
        Err(e) => return Outcome::fail(e),
    };
    let args_v = codex_args(queue, job);
    // The model named here, else the one Codex's configuration chooses: its price is the
    // job's cost. A config that cannot be read leaves the cost unknown (and says why).
    let model = match codex_model::run_model(&args_v, &env, home, &cwd, switch.then_some(run_as)) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(
                "the model of Codex job {}: {e}",
                job.id.as_deref().unwrap_or("?")
            );
            None
        }
    };
    let format = ResultFormat::CodexEvents { model };
    let cmd = AgentCommand {
        program,
        args: args_v,
        prompt,
        cwd,
        env,
        switch_to: switch.then(|| run_as.clone()),
        sandbox: None,
    };
    run_and_judge(store, args, queue, job, &cmd, None, "Codex", &format)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::approval::ApprovalPolicy;
    use crate::model::{JobConfig, JobRuntime, JobType};

    fn job(model: Option<&str>, extra: &[&str]) -> Job {
        Job {
            schema_version: None,
            id: None,
            config: JobConfig {
                claude_extra_args: extra.iter().map(|s| s.to_string()).collect(),
                model: model.map(str::to_string),
                ..JobConfig::new("P", "/tmp", JobType::Codex, "code-researcher", "x")
            },
            runtime: JobRuntime::queued(),
        }
    }

    fn captured(text: &str) -> Captured {
        Captured {
            head: text.as_bytes().to_vec(),
            tail: Vec::new(),
            total: text.len() as u64,
        }
    }

    #[test]
    fn approvals_map_to_the_sandbox_and_never_asking() {
        let mut q = QueueConfig::defaults("q");
        q.sandbox = None;
        let a = codex_args(&q, &job(Some("gpt-5"), &[]));
        assert_eq!(
            a,
            [
                "exec",
                "--json",
                "--color",
                "never",
                "--skip-git-repo-check",
                "--sandbox",
                "workspace-write",
                "-c",
                "approval_policy=\"never\"",
                "--model",
                "gpt-5",
                "-"
            ]
        );
        q.approvals = Some(ApprovalPolicy {
            rules: vec![],
            default: Decision::Allow,
            deadline_seconds: 30,
        });
        let a = codex_args(&q, &job(None, &[]));
        assert!(
            a.windows(2)
                .any(|w| w == ["-c", "sandbox_workspace_write.network_access=true"]),
            "{a:?}"
        );
        let mut confined = q.clone();
        confined.sandbox = Some(crate::model::SandboxSetting {
            enabled: true,
            connect_ports: vec![],
        });
        let a = codex_args(&confined, &job(None, &[]));
        assert!(
            a.windows(2)
                .any(|w| w == ["--sandbox", "danger-full-access"]),
            "{a:?}"
        );
        q.codex_default_args = vec!["-s".into(), "read-only".into(), "-m".into(), "o3".into()];
        let a = codex_args(&q, &job(Some("gpt-5"), &["--model", "gpt-5-mini"]));
        assert!(!a.contains(&"workspace-write".to_string()), "{a:?}");
        assert_eq!(model_of(&a).as_deref(), Some("gpt-5-mini"));
        assert_eq!(a.last().map(String::as_str), Some("-"));
        q.codex_default_args = vec!["--dangerously-bypass-approvals-and-sandbox".into()];
        let a = codex_args(&q, &job(None, &[]));
        assert!(
            !a.iter()
                .any(|x| x == "--sandbox" || x.contains("approval_policy")),
            "{a:?}"
        );
        assert_eq!(
            model_of(&["-c".into(), "model=\"o4\"".into()]).as_deref(),
            Some("o4")
        );
    }

    #[test]
    fn events_give_the_result_tokens_and_thread() {
        let out = concat!(
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            "\n",
            r#"{"type":"turn.started"}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"ls","exit_code":0}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"All done"}}"#,
            "\n",
            r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":400,"output_tokens":50,"reasoning_output_tokens":10}}"#,
            "\n",
        );
        let r = parse_events(&captured(out), Some("gpt-5")).unwrap();
        assert!(!r.is_error);
        assert_eq!(r.result.as_deref(), Some("All done"));
        assert_eq!(r.session_id.as_deref(), Some("th-1"));
        assert_eq!(r.num_turns, Some(1));
        assert_eq!(
            r.usage,
            Some(TokenUsage {
                input_tokens: 1000,
                output_tokens: 50,
                cached_input_tokens: Some(400)
            })
        );
        assert!(r.cost_usd.is_some_and(|c| c > 0.0));
        assert_eq!(parse_events(&captured(out), None).unwrap().cost_usd, None);
    }

    #[test]
    fn a_run_without_a_completed_turn_failed() {
        let out = concat!(
            r#"{"type":"thread.started","thread_id":"th-2"}"#,
            "\n",
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
            "\n",
            r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}"#,
            "\n",
        );
        let r = parse_events(&captured(out), Some("gpt-5")).unwrap();
        assert!(r.is_error);
        assert_eq!(
            r.result.as_deref(),
            Some("unexpected status 401 Unauthorized")
        );
        assert_eq!((r.usage, r.cost_usd), (None, None));
        let killed = r#"{"type":"thread.started","thread_id":"th-3"}"#;
        assert!(parse_events(&captured(killed), None).unwrap().is_error);
        assert!(parse_events(&captured("Error: no config\n"), None).is_err());
    }

    #[test]
    fn a_truncated_stream_still_gives_its_last_turn() {
        let head = format!(
            "{}\n{}",
            r#"{"type":"thread.started","thread_id":"th-4"}"#,
            "x".repeat(50)
        );
        let tail = format!(
            "{}\n{}\n",
            "y".repeat(10),
            r#"{"type":"turn.completed","usage":{"input_tokens":7,"output_tokens":3}}"#
        );
        let out = Captured {
            head: head.into_bytes(),
            tail: tail.into_bytes(),
            total: 10_000,
        };
        let r = parse_events(&out, None).unwrap();
        assert_eq!(r.session_id.as_deref(), Some("th-4"));
        assert_eq!(r.usage.map(|u| u.input_tokens), Some(7));
    }
}
