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

/// The model `args` name (`-m X`, `--model X`, `--model=X`, `-c model="X"`); the last wins,
/// as for Codex. `None`: the one its configuration chooses ([`run_model`]).
pub fn model_of(args: &[String]) -> Option<String> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-m" || a == "--model" {
            found = it.next().cloned();
        } else if let Some(m) = a.strip_prefix("--model=") {
            found = Some(m.to_string());
        } else if (a == "-c" || a == "--config")
            && let Some(kv) = it.next()
            && let Some((k, v)) = kv.split_once('=')
            && k.trim() == "model"
        {
            found = Some(v.trim().trim_matches('"').to_string());
        }
    }
    found
}

/// The model Codex runs on when neither its command line nor a config.toml names one: the
/// default of the Codex CLI that `.ci/install-codex.sh` pins (0.169.0). tests/codex_real.rs
/// checks that the real CLI still asks the model endpoint for it: change both together.
pub const DEFAULT_MODEL: &str = "gpt-6.1-sol";

/// The largest config.toml read for the model (Codex's own are a few kilobytes).
const MAX_CONFIG: u64 = 1 << 20;

/// The machine's Codex configuration, below the account's own (Codex reads it too).
const SYSTEM_CONFIG: &str = "/etc/codex/config.toml";

/// The profile `args` choose (`-p X`, `--profile X`, `--profile=X`, `-c profile="X"`); the
/// last wins.
fn profile_of(args: &[String]) -> Option<String> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-p" || a == "--profile" {
            found = it.next().cloned();
        } else if let Some(p) = a.strip_prefix("--profile=") {
            found = Some(p.to_string());
        } else if (a == "-c" || a == "--config")
            && let Some(kv) = it.next()
            && let Some((k, v)) = kv.split_once('=')
            && k.trim() == "profile"
        {
            found = Some(v.trim().trim_matches('"').to_string());
        }
    }
    found
}

/// What one config.toml says of the model: its `model`, its `profile`, and the `model` of
/// each of its `[profiles.NAME]`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConfigModel {
    /// The top-level `model`.
    pub model: Option<String>,
    /// The top-level `profile`.
    pub profile: Option<String>,
    /// `profiles.NAME.model`, by NAME.
    pub profiles: std::collections::BTreeMap<String, Option<String>>,
}

impl ConfigModel {
    /// Reads the keys above from config.toml's `text`; Err when it is not TOML (Codex then
    /// refuses to start) or a key has the wrong type. The error names a line, never quotes
    /// one: the file may hold a token.
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let at = e.span().map_or(0, |s| s.start).min(text.len());
            let line = text.as_bytes()[..at]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1;
            format!("not valid TOML (line {line})")
        })?;
        let string = |t: &toml::Table, key: &str| -> Result<Option<String>, String> {
            match t.get(key) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{key}` is not a string")),
            }
        };
        let mut profiles = std::collections::BTreeMap::new();
        if let Some(p) = table.get("profiles") {
            let p = p.as_table().ok_or("`profiles` is not a table")?;
            for (name, v) in p {
                let t = v
                    .as_table()
                    .ok_or_else(|| format!("`profiles.{name}` is not a table"))?;
                profiles.insert(name.clone(), string(t, "model")?);
            }
        }
        Ok(ConfigModel {
            model: string(&table, "model")?,
            profile: string(&table, "profile")?,
            profiles,
        })
    }
}

/// The model Codex chooses from its configuration layers, the account's over the machine's
/// (`layers` lowest first), when the command line names none: the chosen profile's `model`
/// (the profile from `profile` on the command line, else the last layer that names one),
/// else the last layer's top-level `model`, else [`DEFAULT_MODEL`]. Err when the chosen
/// profile is in no layer (Codex refuses to start then).
pub fn model_from_config(layers: &[ConfigModel], profile: Option<&str>) -> Result<String, String> {
    let profile = profile
        .map(str::to_string)
        .or_else(|| layers.iter().rev().find_map(|l| l.profile.clone()));
    if let Some(p) = &profile {
        let mut defined = false;
        for l in layers.iter().rev() {
            match l.profiles.get(p) {
                Some(Some(m)) => return Ok(m.clone()),
                Some(None) => defined = true,
                None => {}
            }
        }
        if !defined {
            return Err(format!("the Codex profile `{p}` is not in its config.toml"));
        }
    }
    Ok(layers
        .iter()
        .rev()
        .find_map(|l| l.model.clone())
        .unwrap_or_else(|| DEFAULT_MODEL.to_string()))
}

/// The account's config.toml: `$CODEX_HOME/config.toml` when the job's environment sets
/// `CODEX_HOME`, else `~/.codex/config.toml` (`home`: the job's HOME).
pub fn config_path(env: &[(String, String)], home: &Path) -> std::path::PathBuf {
    match env.iter().find(|(k, _)| k == "CODEX_HOME") {
        Some((_, dir)) if !dir.is_empty() => Path::new(dir).join("config.toml"),
        _ => home.join(".codex").join("config.toml"),
    }
}

/// The model a Codex run with `args` uses, for its price: the one `args` name; else the one
/// its configuration chooses ([`model_from_config`]: the machine's `/etc/codex/config.toml`
/// and the account's config.toml, read with the account's rights — `account`: the job's
/// account when the worker switches to it); else Codex's default. Err (the cost is then
/// unknown, never guessed) when a config.toml that is there cannot be read or parsed.
pub fn run_model(
    args: &[String],
    env: &[(String, String)],
    home: &Path,
    account: Option<&super::runas::RunAs>,
) -> Result<String, String> {
    run_model_with(args, env, home, account, Path::new(SYSTEM_CONFIG))
}

/// [`run_model`] with the machine's config.toml at `system`.
fn run_model_with(
    args: &[String],
    env: &[(String, String)],
    home: &Path,
    account: Option<&super::runas::RunAs>,
    system: &Path,
) -> Result<String, String> {
    if let Some(m) = model_of(args) {
        return Ok(m);
    }
    let mut layers = Vec::new();
    if system.exists() {
        let text = super::read_as::read_to_string_as(system, None, MAX_CONFIG)?;
        layers.push(ConfigModel::parse(&text).map_err(|e| format!("{}: {e}", system.display()))?);
    }
    let user = config_path(env, home);
    if user.exists() {
        let text = super::read_as::read_to_string_as(&user, account, MAX_CONFIG)?;
        layers.push(ConfigModel::parse(&text).map_err(|e| format!("{}: {e}", user.display()))?);
    }
    model_from_config(&layers, profile_of(args).as_deref())
}

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
    let prompt = match self::prompt(job, home, &cwd, switch.then_some(run_as)) {
        Ok(p) => p,
        Err(e) => return Outcome::fail(e),
    };
    let args_v = codex_args(queue, job);
    // The model named here, else the one Codex's configuration chooses: its price is the
    // job's cost. A config that cannot be read leaves the cost unknown (and says why).
    let model = match run_model(&args_v, &env, home, switch.then_some(run_as)) {
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

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_model_comes_from_the_config_when_the_command_line_names_none() {
        let user = ConfigModel::parse(
            "# mine\nmodel = \"gpt-5-mini\"\nmodel_provider = \"fake\"\n\n\
             [profiles.deep]\nmodel = 'o3'\n[profiles.plain]\napproval_policy = \"never\"\n\
             [model_providers.fake]\nname = \"fake\"\nmodel = \"not-this-one\"\n",
        )
        .unwrap();
        assert_eq!(user.model.as_deref(), Some("gpt-5-mini"));
        let system = ConfigModel::parse("model = \"gpt-4.1\"\nprofile = \"deep\"\n").unwrap();
        // The account's model over the machine's; none at all: Codex's default.
        assert_eq!(
            model_from_config(std::slice::from_ref(&user), None).unwrap(),
            "gpt-5-mini"
        );
        assert_eq!(
            model_from_config(&[ConfigModel::default()], None).unwrap(),
            DEFAULT_MODEL
        );
        assert_eq!(model_from_config(&[], None).unwrap(), DEFAULT_MODEL);
        // A profile: chosen by the command line, else by a layer's `profile`; one without
        // a model falls back to the top-level model; one nowhere is Codex's error.
        assert_eq!(
            model_from_config(std::slice::from_ref(&user), Some("deep")).unwrap(),
            "o3"
        );
        assert_eq!(
            model_from_config(&[system.clone(), user.clone()], None).unwrap(),
            "o3"
        );
        assert_eq!(
            model_from_config(std::slice::from_ref(&user), Some("plain")).unwrap(),
            "gpt-5-mini"
        );
        assert!(model_from_config(std::slice::from_ref(&user), Some("nope")).is_err());
        assert_eq!(
            profile_of(&strings(&["-p", "a", "--profile=b", "-c", "profile=\"c\""])).as_deref(),
            Some("c")
        );
        // Not TOML, or a model that is not a string: an error that names the line only.
        let e = ConfigModel::parse("model = \"x\"\nexperimental_bearer_token = sk-SECRET\n")
            .unwrap_err();
        assert_eq!(e, "not valid TOML (line 2)");
        assert!(ConfigModel::parse("model = 5\n").is_err());
        assert!(ConfigModel::parse("profiles = 1\n").is_err());
    }

    #[test]
    fn run_model_reads_the_accounts_codex_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let codex_home = dir.path().join("codex-home");
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(home.join(".codex/config.toml"), "model = \"gpt-5-nano\"\n").unwrap();
        std::fs::write(codex_home.join("config.toml"), "model = \"o4-mini\"\n").unwrap();
        let set = vec![("CODEX_HOME".to_string(), codex_home.display().to_string())];
        let system = dir.path().join("etc-codex.toml");
        let model = |args: &[&str], env: &[(String, String)], home: &Path| {
            run_model_with(&strings(args), env, home, None, &system)
        };
        assert_eq!(config_path(&[], &home), home.join(".codex/config.toml"));
        assert_eq!(model(&[], &[], &home).unwrap(), "gpt-5-nano");
        assert_eq!(model(&[], &set, &home).unwrap(), "o4-mini");
        assert_eq!(model(&["--model", "gpt-5"], &set, &home).unwrap(), "gpt-5");
        let nobody = dir.path().join("nobody");
        assert_eq!(model(&[], &[], &nobody).unwrap(), DEFAULT_MODEL);
        // The machine's config is below the account's.
        std::fs::write(&system, "model = \"gpt-4.1\"\n").unwrap();
        assert_eq!(model(&[], &[], &nobody).unwrap(), "gpt-4.1");
        assert_eq!(model(&[], &set, &home).unwrap(), "o4-mini");
        std::fs::write(codex_home.join("config.toml"), "model = [\n").unwrap();
        let e = model(&[], &set, &home).unwrap_err();
        assert!(e.contains("config.toml: not valid TOML"), "{e}");
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
