//! `jobtype: claude` and `jobtype: agent`: the command line and the prompt (the JSON result
//! both print is read by `accounting`, with Codex's events).

use crate::model::{Job, QueueConfig};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where the package installs the agent command files it ships (`share/commands/` in the
/// repository): code-researcher, prd-creator, task-creator, task-implementer.
pub const SHIPPED_COMMANDS_DIR: &str = "/usr/share/agentstore/claude-commands";

/// The folder of shipped command files: `AGENTSTORE_COMMANDS_DIR` (tests, other prefixes),
/// else [`SHIPPED_COMMANDS_DIR`]. When the command is not there either, [`find_command`]
/// falls back to the same text built into the binary.
pub fn shipped_commands_dir() -> PathBuf {
    std::env::var_os("AGENTSTORE_COMMANDS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SHIPPED_COMMANDS_DIR))
}

/// A command file and who reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandFile {
    /// In `~/.claude/commands/` or the project's `.claude/commands/`: Claude Code finds it
    /// itself, so the prompt is `/<command> …`.
    Claude(PathBuf),
    /// Shipped with the package, where Claude Code does not look: the worker puts its text
    /// into the prompt (`$ARGUMENTS` replaced by the task).
    Shipped(PathBuf),
    /// Not installed anywhere (a binary built from a clone, a `cargo install`): the same text
    /// as the shipped file, built into the binary, used the same way.
    BuiltIn(&'static str),
}

/// The four shipped command files, built in: the last place the worker looks, so the agent
/// commands work out of the box wherever the binary came from.
const BUILT_IN_COMMANDS: [(&str, &str); 4] = [
    (
        "code-researcher",
        include_str!("../../share/commands/code-researcher.md"),
    ),
    (
        "prd-creator",
        include_str!("../../share/commands/prd-creator.md"),
    ),
    (
        "task-creator",
        include_str!("../../share/commands/task-creator.md"),
    ),
    (
        "task-implementer",
        include_str!("../../share/commands/task-implementer.md"),
    ),
];

fn command_rel(command: &str) -> Option<PathBuf> {
    let parts: Vec<&str> = command.split(':').collect();
    let safe = !command.is_empty()
        && parts
            .iter()
            .all(|p| crate::model::is_safe_id(p) && !p.contains(".."));
    if !safe {
        return None;
    }
    let mut rel = PathBuf::new();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            rel.push(format!("{p}.md"));
        } else {
            rel.push(p);
        }
    }
    Some(rel)
}

/// Where `<command>.md` may live: the run-as user's `~/.claude/commands/` and the project's
/// `.claude/commands/`. A namespaced command `a:b` is `a/b.md`, as Claude Code names them.
pub fn command_file(command: &str, home: &Path, project_dir: &Path) -> Option<PathBuf> {
    let rel = command_rel(command)?;
    [
        home.join(".claude/commands"),
        project_dir.join(".claude/commands"),
    ]
    .into_iter()
    .map(|d| d.join(&rel))
    .find(|p| p.is_file())
}

/// [`command_file`], then the shipped commands in `shipped` (the user's and the project's
/// own files win).
pub fn find_command(
    command: &str,
    home: &Path,
    project_dir: &Path,
    shipped: &Path,
) -> Option<CommandFile> {
    if let Some(p) = command_file(command, home, project_dir) {
        return Some(CommandFile::Claude(p));
    }
    let p = shipped.join(command_rel(command)?);
    if p.is_file() {
        return Some(CommandFile::Shipped(p));
    }
    BUILT_IN_COMMANDS
        .iter()
        .find(|(name, _)| *name == command)
        .map(|(_, text)| CommandFile::BuiltIn(text))
}

/// Largest shipped command file read into a prompt.
pub const MAX_COMMAND_FILE: u64 = 256 * 1024;

/// The prompt for `claude` with this command file: `/<command> <task>` and the supporting
/// data for a file Claude Code finds itself; for a shipped file, its text (front matter
/// removed) with `$ARGUMENTS` replaced by the task and the supporting data (appended when
/// the text has no `$ARGUMENTS`).
pub fn prompt_for(job: &Job, file: &CommandFile) -> Result<String, String> {
    let path = match file {
        CommandFile::Claude(_) => return Ok(claude_prompt(job)),
        CommandFile::BuiltIn(text) => return Ok(fill_arguments(job, text)),
        CommandFile::Shipped(p) => p,
    };
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > MAX_COMMAND_FILE {
        return Err(format!(
            "{}: {} bytes, more than the {MAX_COMMAND_FILE} a command file may have",
            path.display(),
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(fill_arguments(job, &text))
}

/// A shipped command's text (front matter removed) with `$ARGUMENTS` replaced by the task
/// and the supporting data (appended when the text has no `$ARGUMENTS`).
pub fn fill_arguments(job: &Job, text: &str) -> String {
    let body = strip_front_matter(text);
    let arguments = format!("{}{}", job.config.task_description, supporting_lines(job));
    if body.contains("$ARGUMENTS") {
        body.replace("$ARGUMENTS", &arguments)
    } else {
        format!("{body}\n\n{arguments}")
    }
}

/// The text after a leading `---` … `---` YAML block, if any.
fn strip_front_matter(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("---\n") else {
        return text;
    };
    match rest.find("\n---\n") {
        Some(end) => rest[end + 5..].trim_start_matches('\n'),
        None => text,
    }
}

/// True when `args` already has this flag (`--flag`, `--flag=…`).
fn has_flag(args: &[String], names: &[&str]) -> bool {
    args.iter().any(|a| {
        names
            .iter()
            .any(|n| a == n || a.starts_with(&format!("{n}=")))
    })
}

/// `claude` arguments: queue defaults, job extras, then `-p` and `--output-format json`
/// unless already given. The prompt goes on stdin, never in argv.
pub fn claude_args(queue: &QueueConfig, job: &Job) -> Vec<String> {
    let mut args: Vec<String> = queue.claude_default_args.clone();
    args.extend(job.config.claude_extra_args.iter().cloned());
    if !has_flag(&args, &["-p", "--print"]) {
        args.insert(0, "-p".to_string());
    }
    if !has_flag(&args, &["--output-format"]) {
        args.push("--output-format".into());
        args.push("json".into());
    }
    args
}

/// True when Claude Code with these arguments may ask for permissions, so the worker gives
/// it the approvals MCP server: not when permissions are skipped
/// (`--dangerously-skip-permissions`, `--permission-mode bypassPermissions`) or the arguments
/// already name a permission prompt tool.
pub fn asks_permissions(args: &[String]) -> bool {
    if has_flag(
        args,
        &["--dangerously-skip-permissions", "--permission-prompt-tool"],
    ) {
        return false;
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mode = if a == "--permission-mode" {
            it.next().map(String::as_str)
        } else {
            a.strip_prefix("--permission-mode=")
        };
        if mode == Some("bypassPermissions") {
            return false;
        }
    }
    true
}

/// Adds the approvals MCP server (`worker mcp-approvals`, talking to `socket`) and makes its
/// tool Claude Code's permission prompt tool.
pub fn add_approval_args(args: &mut Vec<String>, worker: &Path, socket: &str, deadline: u64) {
    args.push("--mcp-config".into());
    args.push(super::mcp::mcp_config(worker, socket, deadline));
    args.push("--permission-prompt-tool".into());
    args.push(super::mcp::PERMISSION_TOOL.into());
}

/// True when the arguments ask for the JSON result.
pub fn wants_json(args: &[String]) -> bool {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--output-format" {
            return it.next().is_some_and(|v| v == "json");
        }
        if let Some(v) = a.strip_prefix("--output-format=") {
            return v == "json";
        }
    }
    false
}

/// The supporting data as `- key: value` lines (strings bare, anything else as JSON).
fn supporting_lines(job: &Job) -> String {
    let mut s = String::new();
    if job.config.supporting_data.is_empty() {
        return s;
    }
    s.push_str("\n\nSupporting Data:\n");
    for (k, v) in &job.config.supporting_data {
        let v = match v {
            Value::String(t) => t.clone(),
            other => other.to_string(),
        };
        s.push_str(&format!("- {k}: {v}\n"));
    }
    s
}

/// The prompt for `claude`: `/<command> <task>` and the supporting data.
pub fn claude_prompt(job: &Job) -> String {
    format!(
        "/{} {}{}",
        job.config.claude_command,
        job.config.task_description,
        supporting_lines(job)
    )
}

/// The prompt for the built-in agent: the task and the supporting data.
pub fn agent_prompt(job: &Job) -> String {
    format!("{}{}", job.config.task_description, supporting_lines(job))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobConfig, JobRuntime, JobType};

    fn job(extra: &[&str]) -> Job {
        let mut data = serde_json::Map::new();
        data.insert("dir".into(), Value::String("/src".into()));
        data.insert("n".into(), serde_json::json!(3));
        Job {
            schema_version: None,
            id: None,
            config: JobConfig {
                claude_extra_args: extra.iter().map(|s| s.to_string()).collect(),
                supporting_data: data,
                ..JobConfig::new("P", "/tmp", JobType::Claude, "greet", "World")
            },
            runtime: JobRuntime::queued(),
        }
    }

    #[test]
    fn args_do_not_duplicate_print_or_format() {
        let mut q = QueueConfig::defaults("q");
        q.claude_default_args = vec!["-p".into(), "--dangerously-skip-permissions".into()];
        assert_eq!(
            claude_args(&q, &job(&["--model", "x"])),
            [
                "-p",
                "--dangerously-skip-permissions",
                "--model",
                "x",
                "--output-format",
                "json"
            ]
        );
        q.claude_default_args = vec![];
        let a = claude_args(&q, &job(&["--output-format=text"]));
        assert_eq!(a, ["-p", "--output-format=text"]);
        assert!(!wants_json(&a));
        assert!(wants_json(&claude_args(&q, &job(&[]))));
    }

    #[test]
    fn approvals_only_when_claude_may_ask() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(asks_permissions(&v(&[
            "-p",
            "--permission-mode",
            "acceptEdits"
        ])));
        assert!(!asks_permissions(&v(&[
            "-p",
            "--dangerously-skip-permissions"
        ])));
        assert!(!asks_permissions(&v(&[
            "--permission-mode",
            "bypassPermissions"
        ])));
        assert!(!asks_permissions(&v(&[
            "--permission-mode=bypassPermissions"
        ])));
        assert!(!asks_permissions(&v(&[
            "--permission-prompt-tool",
            "mcp__x__y"
        ])));
        let mut a = v(&["-p"]);
        add_approval_args(&mut a, Path::new("/usr/bin/agent-worker"), "s1", 30);
        assert_eq!(a[1], "--mcp-config");
        let cfg: Value = serde_json::from_str(&a[2]).unwrap();
        assert_eq!(
            cfg["mcpServers"]["agentstore"]["args"],
            serde_json::json!(["mcp-approvals", "--socket", "s1", "--deadline", "30"])
        );
        assert_eq!(
            a[3..],
            ["--permission-prompt-tool", "mcp__agentstore__approve"]
        );
    }

    #[test]
    fn prompt_is_slash_command_and_data() {
        assert_eq!(
            claude_prompt(&job(&[])),
            "/greet World\n\nSupporting Data:\n- dir: /src\n- n: 3\n"
        );
    }

    #[test]
    fn command_files() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        let proj = d.path().join("proj");
        std::fs::create_dir_all(home.join(".claude/commands/ns")).unwrap();
        std::fs::create_dir_all(proj.join(".claude/commands")).unwrap();
        std::fs::write(home.join(".claude/commands/greet.md"), "x").unwrap();
        std::fs::write(home.join(".claude/commands/ns/deep.md"), "x").unwrap();
        std::fs::write(proj.join(".claude/commands/local.md"), "x").unwrap();
        assert!(command_file("greet", &home, &proj).is_some());
        assert!(command_file("ns:deep", &home, &proj).is_some());
        assert!(command_file("local", &home, &proj).is_some());
        assert!(command_file("missing", &home, &proj).is_none());
        assert!(command_file("../greet", &home, &proj).is_none());
        assert!(command_file("", &home, &proj).is_none());
    }

    #[test]
    fn shipped_commands_come_after_the_users_and_the_projects() {
        let t = tempfile::tempdir().unwrap();
        let (home, proj, shipped) = (t.path().join("h"), t.path().join("p"), t.path().join("s"));
        std::fs::create_dir_all(&shipped).unwrap();
        std::fs::write(
            shipped.join("code-researcher.md"),
            "---\ndescription: x\n---\nResearch: $ARGUMENTS\nEnd.\n",
        )
        .unwrap();
        let found = find_command("code-researcher", &home, &proj, &shipped).unwrap();
        assert_eq!(
            found,
            CommandFile::Shipped(shipped.join("code-researcher.md"))
        );
        let p = prompt_for(&job(&[]), &found).unwrap();
        assert!(
            p.starts_with("Research: World\n\nSupporting Data:\n"),
            "{p}"
        );
        assert!(p.ends_with("End.\n"), "{p}");
        assert!(!p.contains("description:"), "{p}");
        for dir in [proj.join(".claude/commands"), home.join(".claude/commands")] {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("code-researcher.md"), "own").unwrap();
            let found = find_command("code-researcher", &home, &proj, &shipped).unwrap();
            assert_eq!(found, CommandFile::Claude(dir.join("code-researcher.md")));
            assert_eq!(
                prompt_for(&job(&[]), &found).unwrap(),
                claude_prompt(&job(&[]))
            );
        }
        assert_eq!(find_command("../x", &home, &proj, &shipped), None);
        assert_eq!(find_command("nope", &home, &proj, &shipped), None);
    }

    /// Issue 11: from a clone (nothing installed, no shipped folder) the four commands still
    /// work — the built-in text, the same as the shipped files.
    #[test]
    fn the_four_commands_are_built_in_when_nothing_is_installed() {
        let t = tempfile::tempdir().unwrap();
        let (home, proj, shipped) = (t.path().join("h"), t.path().join("p"), t.path().join("s"));
        for c in [
            "code-researcher",
            "prd-creator",
            "task-creator",
            "task-implementer",
        ] {
            let found = find_command(c, &home, &proj, &shipped).unwrap();
            let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("share/commands/{c}.md"));
            let text = std::fs::read_to_string(file).unwrap();
            assert_eq!(
                found,
                CommandFile::BuiltIn(Box::leak(text.into_boxed_str())),
                "{c}"
            );
            let p = prompt_for(&job(&[]), &found).unwrap();
            assert!(p.contains("World") && !p.contains("$ARGUMENTS"), "{c}: {p}");
        }
        assert_eq!(
            find_command("code-researcher-x", &home, &proj, &shipped),
            None
        );
    }

    #[test]
    fn the_repository_ships_the_four_prd_commands() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("share/commands");
        for c in [
            "code-researcher",
            "prd-creator",
            "task-creator",
            "task-implementer",
        ] {
            let text = std::fs::read_to_string(dir.join(format!("{c}.md"))).unwrap();
            assert!(text.contains("$ARGUMENTS"), "{c}");
            assert!(!strip_front_matter(&text).starts_with("---"), "{c}");
        }
    }
}
