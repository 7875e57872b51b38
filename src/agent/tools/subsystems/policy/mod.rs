//! Policy — the gate in front of every tool call.
//!
//! The default is ASK. A command is ALLOWED only when every simple command in it is on the
//! allow-list judged on what will really execute: the program is a known read-only one, every
//! option is one of its known read-only options (exact names; an abbreviation or anything else
//! is ASK), attached short-option values are parsed, no operand is an output file, the line
//! has no glob, expansion or unquoted metacharacter, every file operand resolves (symlinks
//! followed) inside the project root, the `env` asked for holds only harmless names, and no
//! secret placeholder goes to a program not listed in `secret_programs`. Or when the
//! configuration's `auto_allow` names it (never for a line naming a file that steers the agent).
//! The regex list is a complement — an extra reason to DENY — not the primary mechanism.
//!
//! Read-only `git` subcommands are allowed only while the config files git will read (see
//! `git_guard`, which also pins the repository and overrides hooks, fsmonitor and pagers for
//! every command) name no program (`diff.external`, textconv and filter drivers, includes), and
//! `REV:path` operands follow the same path rules as plain reads (`HEAD~1:.env` is a `.env`).
//! The splitter reports every construct `sh` may read differently (here-documents, `>&FILE`,
//! multi-digit descriptors, control characters); such a line is ASK.
//!
//! A file that holds a guarded secret value (see the secret broker) is read by no program
//! unasked — encoders, `cut` pieces and `grep -q` guesses get it out past redaction — and a
//! recursive read (`grep -r`, `rg`) is asked about when its tree holds such a file or a
//! `.env`. Remaining gaps (documented): files are judged at classification time; secrets the
//! broker does not know are not recognised in files; `git log -p`/`git show COMMIT` print
//! whatever history holds, and a blob read by its id (`git cat-file -p SHA`) has no path to
//! judge.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::agent::tools::shell_words;
use crate::agent::tools::subsystems::{commands, git_guard};

mod files;
mod git;

/// A policy verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// Run without asking.
    Allow,
    /// Refuse without asking.
    Deny,
    /// Run only if the human says yes.
    Ask,
}

/// A verdict with the human-readable reason shown to the user and written to the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason: String,
    /// An ASK that may not be answered "always for this session": it names a file that
    /// steers the agent, passes a secret, or sets an environment variable that can run code.
    #[serde(skip)]
    pub every_time: bool,
}

impl Decision {
    /// Allow, because `reason`.
    pub fn allow(reason: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Allow,
            reason: reason.into(),
            every_time: false,
        }
    }
    /// Deny, because `reason`.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            reason: reason.into(),
            every_time: false,
        }
    }
    /// The same decision, asked every time (never allowed for the rest of a session).
    pub fn every_time(mut self) -> Self {
        self.every_time = true;
        self
    }
    /// Ask the human, because `reason`.
    pub fn ask(reason: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Ask,
            reason: reason.into(),
            every_time: false,
        }
    }
}

/// The policy part of the configuration (`config.json` keys).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PolicyConfig {
    /// Commands allowed without asking, as argv prefixes: `"cargo test"` allows
    /// `cargo test --lib` but not `cargo testx` or `cargo build`.
    #[serde(default)]
    pub auto_allow: Vec<String>,
    /// Tools (other than `run_command`) allowed without asking, e.g. `"memory_write"`.
    #[serde(default)]
    pub allow_tools: Vec<String>,
    /// Extra deny regexes, added to the built-in ones.
    #[serde(default)]
    pub deny_patterns: Vec<String>,
    /// Programs that may receive secrets (`{{secret:NAME}}`) without asking, e.g. `"gh"`.
    /// Any other command that references a placeholder needs confirmation.
    #[serde(default)]
    pub secret_programs: Vec<String>,
}

/// A deny pattern in the configuration is not a valid regex.
#[derive(Debug, Error)]
#[error("invalid deny pattern `{pattern}`: {source}")]
pub struct PolicyError {
    pattern: String,
    #[source]
    source: regex::Error,
}

/// Built-in deny rules: (regex, reason).
const BUILTIN_DENY: &[(&str, &str)] = &[
    (
        r"\brm\s+(?:-\S+\s+)*(?:/|~|\$HOME|\$\{HOME\})/?\*?(?:\s|$)",
        "removes the filesystem root or the home directory",
    ),
    (
        r#"(?:^|[\s/'"=<>])\.env(?:\.[\w.-]*)?(?:$|[\s'"/;|&)])"#,
        "touches a .env file (credentials)",
    ),
    (r"\.ssh(?:/|\b)", "touches ~/.ssh"),
    (r"\.aws(?:/|\b)", "touches ~/.aws"),
    (r"\.pem\b", "touches a .pem key"),
    (
        r"\bid_(?:rsa|dsa|ecdsa|ed25519)\b",
        "touches a private SSH key",
    ),
    (
        r"\b(?:curl|wget)\b[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b",
        "pipes a download into a shell",
    ),
    (r"\bmkfs(?:\.\w+)?\b", "formats a filesystem"),
    (r"\bdd\b.*\bof=/dev/", "writes to a raw device"),
    (r":\(\)\s*\{.*\};\s*:", "fork bomb"),
];

/// Environment variable names the model may set through `run_command`'s `env` without asking:
/// locale, time zone and display settings, which change no program's behaviour beyond output.
const HARMLESS_ENV: &[&str] = &[
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "NO_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    "RUST_BACKTRACE",
    "RUST_LOG",
];

/// Whether an environment variable can make a program run code or read other files
/// (never allowed without asking, whatever the configuration says).
fn env_can_execute(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "GIT_", "LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "NODE_", "BASH_", "ZDOTDIR", "PAGER",
        "LESS", "RIPGREP", "CARGO", "RUSTC", "RUSTUP", "SSH_", "GPG", "GNUPG", "JQ_",
    ];
    const NAMES: &[&str] = &[
        "PATH",
        "ENV",
        "IFS",
        "PS4",
        "SHELL",
        "SHELLOPTS",
        "HOME",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "TMPDIR",
        "MANPAGER",
        "PROMPT_COMMAND",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "MAGIC",
        "POSIXLY_CORRECT",
        "GREP_OPTIONS",
        "TAR_OPTIONS",
        "GCONV_PATH",
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "RESOLV_HOST_CONF",
    ];
    NAMES.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Files and folders that steer the agent or the user's shell: writing them changes what a
/// later session does (its system prompt, its policy) or runs code later.
const STEERING: &[&str] = &[
    ".agentshell",
    "CLAUDE.md",
    "MEMORY.md",
    "AGENTS.md",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".envrc",
    ".gitconfig",
    ".git/config",
    ".git/hooks",
    ".git/info",
    ".gitattributes",
    ".cargo/config",
    "rust-toolchain",
    ".config/fish",
];

/// The steering file a word names, if any.
pub fn steering_file(word: &str) -> Option<&'static str> {
    STEERING.iter().copied().find(|s| word.contains(s))
}

/// The gate: built-in rules plus configuration, for one project root.
#[derive(Debug)]
pub struct Policy {
    deny: Vec<(Regex, String)>,
    auto_allow: Vec<Vec<String>>,
    allow_tools: Vec<String>,
    secret_programs: Vec<String>,
    /// The canonical project root; every path must resolve inside it.
    root: PathBuf,
    /// Secret values (name, value) whose files a command may not read unasked: a program
    /// can print a file in a form redaction does not know (`od -to1`, `tr a-z b-za`, pieces
    /// of `cut -c`), or answer a guess about it (`grep -q`).
    secret_values: Vec<(String, String)>,
    /// Whether the repository's history holds a credentials file (`.env`), asked of git once.
    history_credentials: std::sync::OnceLock<bool>,
}

/// Why reading a credentials file is refused.
const CREDENTIALS: &str = "touches a .env file (credentials)";

/// How one simple command was judged.
enum SegmentJudgement {
    ReadOnly,
    Denied(String),
    AutoAllowed(String),
    Unknown(String),
}

/// The placeholder syntax of the secret broker.
const PLACEHOLDER_OPEN: &str = "{{secret:";

impl Policy {
    /// Build the policy for the project at `root`; fails on an invalid configured deny regex.
    pub fn new(config: &PolicyConfig, root: &Path) -> Result<Self, PolicyError> {
        let mut deny = Vec::new();
        for (pattern, reason) in BUILTIN_DENY {
            let re = Regex::new(pattern).map_err(|source| PolicyError {
                pattern: (*pattern).to_string(),
                source,
            })?;
            deny.push((re, (*reason).to_string()));
        }
        for pattern in &config.deny_patterns {
            let re = Regex::new(pattern).map_err(|source| PolicyError {
                pattern: pattern.clone(),
                source,
            })?;
            deny.push((re, format!("matches configured deny pattern `{pattern}`")));
        }
        Ok(Self {
            deny,
            auto_allow: config
                .auto_allow
                .iter()
                .map(|e| shell_words::words(e))
                .filter(|w| !w.is_empty())
                .collect(),
            allow_tools: config.allow_tools.clone(),
            secret_programs: config.secret_programs.clone(),
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            secret_values: Vec::new(),
            history_credentials: std::sync::OnceLock::new(),
        })
    }

    /// The same policy, knowing the secret values whose files are not read unasked.
    pub fn with_secret_values(mut self, values: Vec<(String, String)>) -> Self {
        self.secret_values = values;
        self
    }

    /// Judge a tool other than `run_command` that changes state (e.g. `memory_write`).
    pub fn classify_tool(&self, tool: &str, what: &str) -> Decision {
        if self.allow_tools.iter().any(|t| t == tool) {
            Decision::allow(format!("{tool} is allowed by config allow_tools"))
        } else {
            Decision::ask(format!("{tool} {what}"))
        }
    }

    /// Judge a shell command line that would run with `cwd = root` and no extra environment.
    pub fn classify_command(&self, command: &str) -> Decision {
        self.classify_run(command, &BTreeMap::new())
    }

    /// Judge `run_command`: the command line plus the `env` it asks for.
    pub fn classify_run(&self, command: &str, env: &BTreeMap<String, String>) -> Decision {
        let decision = self.classify_inner(command, env);
        if decision.verdict != Verdict::Ask {
            return decision;
        }
        // Say so when the command names a file that steers the agent or the shell.
        let parsed = shell_words::parse(command).ok().unwrap_or_default();
        let git_config = parsed
            .segments
            .iter()
            .any(|a| a.len() > 2 && a[0] == "git" && a[1] == "config")
            .then_some(".git/config");
        let steering = git_config
            .or_else(|| {
                parsed
                    .segments
                    .iter()
                    .flatten()
                    .chain(&parsed.inputs)
                    .find_map(|w| steering_file(w))
            })
            .or_else(|| steering_file(command));
        match steering {
            Some(file) => Decision::ask(format!(
                "{}; it names `{file}`, a file that steers the agent or the shell (writing it changes later sessions)",
                decision.reason
            ))
            .every_time(),
            None => decision,
        }
    }

    fn classify_inner(&self, command: &str, env: &BTreeMap<String, String>) -> Decision {
        for (re, reason) in &self.deny {
            if re.is_match(command) {
                return Decision::deny(reason.clone());
            }
        }
        // Placeholders are the broker's, not the shell's: judge the line with a plain word in
        // their place, and remember that secrets are passed.
        let mut secrets_used = Vec::new();
        let mut line = String::with_capacity(command.len());
        let mut rest = command;
        while let Some(start) = rest.find(PLACEHOLDER_OPEN) {
            let after = &rest[start + PLACEHOLDER_OPEN.len()..];
            let Some(end) = after.find("}}") else {
                break;
            };
            secrets_used.push(after[..end].trim().to_string());
            line.push_str(&rest[..start]);
            line.push_str("SECRET");
            rest = &after[end + 2..];
        }
        line.push_str(rest);
        for value in env.values() {
            if value.contains(PLACEHOLDER_OPEN) {
                secrets_used.push("(in env)".to_string());
            }
        }
        let parsed = match shell_words::parse(&line) {
            Ok(p) => p,
            Err(e) => return Decision::ask(format!("cannot parse the command: {e}")),
        };
        if parsed.segments.is_empty() {
            return Decision::deny("empty command");
        }
        // The deny rules also see the words as the shell will pass them (`.e''nv` is `.env`).
        for argv in &parsed.segments {
            let joined = argv.join(" ");
            for (re, reason) in &self.deny {
                if re.is_match(&joined) {
                    return Decision::deny(reason.clone());
                }
            }
        }
        if !parsed.issues.is_empty() {
            return Decision::ask(parsed.issues.join("; "));
        }
        // The environment the model asked for.
        for name in env.keys() {
            if env_can_execute(name) {
                return Decision::ask(format!(
                    "sets environment variable {name}, which can make programs run code or read other files"
                ))
                .every_time();
            }
        }
        if let Some(name) = env
            .keys()
            .find(|n| !HARMLESS_ENV.contains(&n.as_str()) && !n.starts_with("LC_"))
        {
            return Decision::ask(format!(
                "sets environment variable {name}, which is not known to be harmless"
            ));
        }
        if !secrets_used.is_empty() {
            let programs: Vec<&str> = parsed.segments.iter().map(|a| a[0].as_str()).collect();
            if let Some(p) = programs
                .iter()
                .find(|p| !self.secret_programs.iter().any(|s| s == *p))
            {
                return Decision::ask(format!(
                    "passes secret {} to `{p}`, which is not in config secret_programs",
                    secrets_used.join(", ")
                ))
                .every_time();
            }
        }
        for input in &parsed.inputs {
            if let Err(why) = self.confine(input) {
                return why;
            }
        }
        let mut read_only = Vec::new();
        let mut allowed_by = Vec::new();
        for argv in &parsed.segments {
            match self.judge(argv) {
                SegmentJudgement::ReadOnly => read_only.push(argv[0].clone()),
                SegmentJudgement::AutoAllowed(entry) => {
                    if let Some(file) = argv.iter().find_map(|w| steering_file(w)) {
                        return Decision::ask(format!(
                            "`{entry}` is auto-allowed, but the command names `{file}`"
                        ))
                        .every_time();
                    }
                    allowed_by.push(entry)
                }
                SegmentJudgement::Unknown(reason) => return Decision::ask(reason),
                SegmentJudgement::Denied(reason) => return Decision::deny(reason),
            }
        }
        if allowed_by.is_empty() {
            read_only.dedup();
            Decision::allow(format!("read-only: {}", read_only.join(", ")))
        } else {
            allowed_by.dedup();
            Decision::allow(format!(
                "allowed by config auto_allow: {}",
                allowed_by.join(", ")
            ))
        }
    }

    fn judge(&self, argv: &[String]) -> SegmentJudgement {
        if let Some(prefix) = self
            .auto_allow
            .iter()
            .find(|p| argv.len() >= p.len() && argv[..p.len()] == p[..])
        {
            return SegmentJudgement::AutoAllowed(prefix.join(" "));
        }
        let program = argv[0].as_str();
        let args = &argv[1..];
        let result = match program {
            "env" | "hostname" if args.is_empty() => Ok(()),
            "env" => Err("with arguments runs another command or changes the environment".into()),
            "ps" => judge_ps(args),
            "find" => self.judge_find(args),
            "git" => self.judge_git(args),
            _ => match commands::lookup(program) {
                Some(spec) => self
                    .judge_spec(&spec, args)
                    .and_then(|()| self.judge_recursive(program, args)),
                None => Err("is not known to be read-only".into()),
            },
        };
        match result {
            Ok(()) => SegmentJudgement::ReadOnly,
            Err(why) if why == CREDENTIALS => SegmentJudgement::Denied(why),
            Err(why) if why.starts_with('`') => SegmentJudgement::Unknown(why),
            Err(why) => SegmentJudgement::Unknown(format!("`{program}` {why}")),
        }
    }

    /// Check `args` against a program's allow-list.
    fn judge_spec(&self, spec: &commands::Spec, args: &[String]) -> Result<(), String> {
        use commands::Operands;
        let mut operands: Vec<&str> = Vec::new();
        let mut pattern_given = false;
        let mut i = 0;
        let mut options_done = false;
        while i < args.len() {
            let a = args[i].as_str();
            i += 1;
            if options_done || a == "-" || !a.starts_with('-') {
                operands.push(a);
                continue;
            }
            if a == "--" {
                options_done = true;
                continue;
            }
            if let Some(long) = a.strip_prefix("--") {
                let (name, value) = match long.split_once('=') {
                    Some((n, v)) => (format!("--{n}"), Some(v)),
                    None => (a.to_string(), None),
                };
                let name = name.as_str();
                if spec.long_flags.contains(&name) && value.is_none() {
                    continue;
                }
                if spec.long_optional.contains(&name) {
                    continue;
                }
                let is_path = spec.long_paths.contains(&name);
                if spec.long_values.contains(&name) || is_path {
                    let v = match value {
                        Some(v) => v.to_string(),
                        None => {
                            let Some(v) = args.get(i) else {
                                return Err(format!("option {name} needs a value"));
                            };
                            i += 1;
                            v.clone()
                        }
                    };
                    if matches!(name, "--regexp" | "--file") {
                        pattern_given = true;
                    }
                    if is_path {
                        self.confine_str(&v)?;
                    }
                    continue;
                }
                return Err(format!("option `{name}` is not known to be read-only"));
            }
            // A short cluster: flags, then possibly one option taking a value.
            let cluster = &a[1..];
            if spec.numeric_option && cluster.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            for (pos, c) in cluster.char_indices() {
                if spec.flags.contains(c) {
                    continue;
                }
                let is_path = spec.short_paths.contains(c);
                if spec.short_values.contains(c) || is_path {
                    let attached = &cluster[pos + c.len_utf8()..];
                    let v = if attached.is_empty() {
                        let Some(v) = args.get(i) else {
                            return Err(format!("option -{c} needs a value"));
                        };
                        i += 1;
                        v.clone()
                    } else {
                        attached.to_string()
                    };
                    if c == 'e' || c == 'f' {
                        pattern_given = true;
                    }
                    if is_path {
                        self.confine_str(&v)?;
                    }
                    break;
                }
                return Err(format!("option `-{c}` is not known to be read-only"));
            }
        }
        let files: &[&str] = match spec.operands {
            Operands::None if !operands.is_empty() => {
                return Err("takes no operands here".into());
            }
            Operands::None | Operands::Text => &[],
            Operands::Paths => &operands,
            Operands::OnePath if operands.len() > 1 => {
                return Err("with a second operand writes that file".into());
            }
            Operands::OnePath => &operands,
            Operands::PatternThenPaths if !pattern_given => operands.get(1..).unwrap_or(&[]),
            Operands::PatternThenPaths => &operands,
            Operands::FilterThenPaths => {
                // jq modules are read from a search path outside the root
                if let Some(filter) = operands.first()
                    && (filter.contains("import") || filter.contains("include"))
                {
                    return Err(
                        "with `import`/`include` reads modules from outside the root".into(),
                    );
                }
                operands.get(1..).unwrap_or(&[])
            }
            Operands::DateFormat => {
                if let Some(op) = operands.iter().find(|o| !o.starts_with('+')) {
                    return Err(format!("with operand `{op}` sets the clock"));
                }
                &[]
            }
        };
        for f in files {
            self.confine_str(f)?;
        }
        Ok(())
    }
}

/// `ps` only in the common forms that show no environments (`e` would show other processes').
fn judge_ps(args: &[String]) -> Result<(), String> {
    const FORMS: &[&str] = &[
        "aux",
        "ax",
        "-ef",
        "-eF",
        "-e",
        "-f",
        "-A",
        "-a",
        "x",
        "a",
        "u",
        "ux",
        "-ely",
        "-H",
        "--forest",
        "-o",
        "pid,ppid,cmd",
        "pid,cmd",
        "-p",
    ];
    match args
        .iter()
        .find(|a| !FORMS.contains(&a.as_str()) && !a.chars().all(|c| c.is_ascii_digit()))
    {
        Some(a) => Err(format!(
            "with `{a}` is not known to be harmless (e shows environments)"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
