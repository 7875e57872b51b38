//! agentshell's sandbox for `run_command`: one per session, with its own scratch directory.
//!
//! A command may read the system trees ([`super::system_read_paths`]), the project, the
//! scratch directory and the toolchains in the home directory (`~/.cargo` without its
//! credentials, `~/.rustup`, `~/.local/bin`, `~/.local/lib`, git's configuration) — not the
//! home directory as a whole, so `~/.agentshell`, `~/.ssh`, `~/.aws`, `~/.gnupg`,
//! `~/.config/gh`, `~/.netrc`, `~/.docker`… are out. It may write the project and the scratch
//! directory (and cargo's download cache when the user allowed network), except
//! `.git/hooks`, `.git/config` (a `.git` file, when the project is a worktree),
//! `.agentshell/` and other agents' settings ([`AGENT_SETTINGS`]), which stay read-only. No
//! TCP unless the user allowed network for that command; no signals or abstract sockets
//! outside the sandbox; no ptrace of the agent; `no_new_privs`; the environment is an
//! allow-list ([`command_env`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::leftovers::{Snapshot, move_aside};
use super::{Compiled, Prepared, SandboxError, SandboxPolicy, Support};

/// Environment variables a command gets from agentshell's own environment, by exact name.
const ENV_EXACT: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "JAVA_HOME",
    "GOROOT",
    "GOPATH",
    "VIRTUAL_ENV",
];

/// Whether a variable of agentshell's environment reaches commands. An allow-list: anything
/// else (`DATABASE_URL`, `SSH_AUTH_SOCK`, `DBUS_SESSION_BUS_ADDRESS`, …) stays out unless the
/// command asks for it with `env` (and the policy agrees).
pub fn passes_to_commands(name: &str) -> bool {
    ENV_EXACT.contains(&name) || name.starts_with("LC_")
}

/// The environment of one command: the allow-listed part of `inherited`, the scratch
/// directory as `TMPDIR` (and `TMP`, `TEMP`, `XDG_CACHE_HOME`), then what the command asked
/// for and the secrets it named (`extra`).
pub fn command_env(
    inherited: impl Iterator<Item = (String, String)>,
    scratch: &Path,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        inherited.filter(|(k, _)| passes_to_commands(k)).collect();
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    let tmp = scratch.display().to_string();
    for k in ["TMPDIR", "TMP", "TEMP"] {
        env.insert(k.into(), tmp.clone());
    }
    env.insert(
        "XDG_CACHE_HOME".into(),
        scratch.join(".cache").display().to_string(),
    );
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Paths under the home directory a command may read: toolchains, not credentials.
fn home_read_paths(home: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = [
        ".rustup",
        ".local/bin",
        ".local/lib",
        ".gitconfig",
        ".config/git",
        ".cargo/bin",
        ".cargo/config.toml",
        ".cargo/config",
        ".cargo/env",
        ".pyenv",
        ".nvm",
        ".volta",
        ".bun/bin",
        "go/bin",
        "go/pkg/mod",
    ]
    .iter()
    .map(|p| home.join(p))
    .collect();
    // The crates cargo already has; cargo takes its lock file next to them.
    for p in [".cargo/registry", ".cargo/git"] {
        paths.push(home.join(p));
    }
    paths
}

/// The `run_command` sandbox of one session.
#[derive(Debug)]
pub struct CommandSandbox {
    compiled: Compiled,
    /// For commands the policy judged read-only: the project is not writable at all (only
    /// the scratch directory is), so no mount namespace is needed for the protected subpaths
    /// (cheaper), and a parser mistake cannot turn a "read-only" command into a writer.
    read_only: Compiled,
    scratch: PathBuf,
    /// Steering files absent when the session began, removed when a command makes them.
    absent: Vec<PathBuf>,
    /// Nested repositories and agent settings as they were when the session began.
    leftovers: Snapshot,
}

impl CommandSandbox {
    /// The sandbox for commands in `root`, for a user whose home is `home` (None: no home
    /// paths), with a new scratch directory under `tmp`.
    pub fn new(
        root: &Path,
        home: Option<&Path>,
        tmp: &Path,
        support: Support,
    ) -> Result<Self, SandboxError> {
        let scratch = tmp.join(format!("agentshell-{}", uuid::Uuid::new_v4().simple()));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&scratch)
                .map_err(|source| SandboxError::Scratch {
                    path: scratch.clone(),
                    source,
                })?;
        }
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        // Orphans of its commands come to this process, which ends them (see `reaper`).
        let _ = super::reaper::become_subreaper();
        let mut read = super::system_read_paths();
        if let Some(home) = home {
            read.extend(home_read_paths(home));
        }
        read.push(root.clone());
        let mut write = vec![root.clone(), scratch.clone()];
        let mut write_with_network = Vec::new();
        if let Some(home) = home {
            // cargo's lock file; its download cache only for a command allowed network: the
            // sources unpacked there are built (build.rs, proc macros) by the user's later
            // builds of every project, outside any sandbox.
            write.push(home.join(".cargo/.package-cache"));
            for p in [".cargo/registry", ".cargo/git"] {
                write_with_network.push(home.join(p));
            }
        }
        let policy = SandboxPolicy {
            read,
            write,
            write_with_network,
            read_only: protected_paths(&root)
                .into_iter()
                .chain(AGENT_SETTINGS.iter().map(|p| root.join(p)))
                .collect(),
            pinned: vec![root.join(".git")],
            hidden: secret_files(&root),
            devices: super::standard_devices(),
            connect_ports: Some(Vec::new()),
            scope_signals: true,
            scope_abstract_sockets: true,
            tcp_only: true,
            supervise_sockets: None,
            log_denials: false,
        };
        let mut read_only = policy.clone();
        read_only.read.append(&mut read_only.write);
        read_only.write = vec![scratch.clone()];
        read_only.write_with_network.clear();
        read_only.read_only.clear();
        read_only.pinned.clear();
        // `hidden` stays: a read-only command may not read a secret either.
        Ok(CommandSandbox {
            compiled: policy.compile(support),
            read_only: read_only.compile(support),
            scratch,
            absent: absent_steering(&root),
            leftovers: Snapshot::take(
                &root,
                &[policy.write.clone(), policy.write_with_network.clone()].concat(),
            ),
        })
    }

    /// What the kernel enforces.
    pub fn support(&self) -> Support {
        self.compiled.support()
    }

    /// The per-session scratch directory (`TMPDIR` of every command).
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// The policy.
    pub fn policy(&self) -> &SandboxPolicy {
        self.compiled.policy()
    }

    /// The confinement of one command; `network` when the user allowed it network.
    pub fn prepare(&self, network: bool) -> Result<Prepared, SandboxError> {
        self.compiled.prepare(network)
    }

    /// The confinement of a command the policy judged read-only: nothing of the project (nor
    /// anything but the scratch directory) is writable.
    pub fn prepare_read_only(&self, network: bool) -> Result<Prepared, SandboxError> {
        self.read_only.prepare(network)
    }
}

impl CommandSandbox {
    /// Move aside the steering files a command made (see [`absent_steering`] and
    /// [`super::leftovers`]); what was moved, one line each, for the command's result.
    pub fn sweep(&self) -> Vec<String> {
        let mut lines = sweep(&self.absent);
        lines.extend(self.leftovers.sweep());
        lines
    }
}

impl Drop for CommandSandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
        // A process that left a command's group may have made one since: it ends first.
        super::reaper::kill_orphans();
        let _ = self.sweep();
    }
}

/// The files of a project that would steer git or another agent outside any sandbox and are
/// absent now: a bind mount keeps only an existing file read-only, so one of these made by a
/// confined process is moved aside after it (issue 28: a new `.git/commondir` pointing at a
/// repository with a `core.fsmonitor` of the model's made the user's next `git status` run
/// it). `.git/commondir` and `config.worktree` only where `.git` is a directory with hooks (a
/// `.git` without is read-only whole; no `.git` yet: a `git init` of the command's own).
pub fn absent_steering(root: &Path) -> Vec<PathBuf> {
    let git = root.join(".git");
    let mut candidates: Vec<PathBuf> = AGENT_SETTINGS.iter().map(|p| root.join(p)).collect();
    if git.is_dir() && git.join("hooks").exists() {
        candidates.push(git.join("commondir"));
        candidates.push(git.join("config.worktree"));
    }
    candidates
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_err())
        .collect()
}

/// Move those of `absent` that exist now aside (never following a link): renamed to
/// `NAME.refused-by-sandbox` (`.1`, `.2`… when taken), so nothing of anyone's is lost and
/// git and the agents no longer read them; what was moved, one line each.
pub fn sweep(absent: &[PathBuf]) -> Vec<String> {
    let mut moved = Vec::new();
    for p in absent {
        if std::fs::symlink_metadata(p).is_err() {
            continue;
        }
        moved.push(match move_aside(p) {
            Ok(target) => format!(
                "{} was made here and moved aside to {}: it would steer git or another agent outside the sandbox",
                p.display(),
                target.display()
            ),
            Err(e) => format!(
                "{} was made here and could not be moved aside ({e}): it would steer git or another agent outside the sandbox",
                p.display()
            ),
        });
    }
    moved
}

/// Most entries looked at for [`secret_files`] (a larger project keeps the rest to the
/// policy, which refuses `.env` operands and recursive reads of trees holding one).
const SECRET_SCAN_ENTRIES: usize = 50_000;

/// The credentials files of a project (`.env`, `.env.*`, at any depth; not under `.git`,
/// `target` or `node_modules`): hidden from every command (issue 28: `grep -q GUESS .env`
/// answered yes/no about a secret). Found when the session starts.
pub fn secret_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > SECRET_SCAN_ENTRIES {
                return found;
            }
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if !matches!(&*name, ".git" | "target" | "node_modules") {
                    stack.push(e.path());
                }
            } else if name == ".env" || name.starts_with(".env.") {
                found.push(e.path());
            }
        }
    }
    found
}

/// The project's settings of other coding agents, which their later sessions obey outside
/// any sandbox (Claude Code's hooks, Codex's `notify` and MCP servers): read-only where they
/// exist, for agentshell's commands and for jobs.
pub const AGENT_SETTINGS: &[&str] = &[
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".codex/config.toml",
];

/// The subpaths of a project that steer the agent, git or the user's later sessions: kept
/// read-only inside the writable project.
pub fn protected_paths(root: &Path) -> Vec<PathBuf> {
    let git = root.join(".git");
    let mut paths = vec![root.join(".agentshell")];
    if git.is_file() || (git.is_dir() && !git.join("hooks").exists()) {
        // A worktree's `.git` file names the git directory: rewriting it redirects git. A
        // git directory without `hooks/` would let a command create them: all of it stays
        // read-only (git can read, not write; nothing is made in the user's repository).
        paths.push(git);
    } else {
        for p in ["hooks", "config", "commondir", "info", "config.worktree"] {
            paths.push(git.join(p));
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_an_allow_list() {
        let inherited = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("DATABASE_URL", "postgres://u:pw@db/x"),
            ("SSH_AUTH_SOCK", "/run/ssh"),
            ("LC_ALL", "C"),
            ("LD_PRELOAD", "/tmp/x.so"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let mut extra = BTreeMap::new();
        extra.insert("GITHUB_TOKEN".to_string(), "ghp_x".to_string());
        let env = command_env(inherited, Path::new("/tmp/s"), &extra);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "GITHUB_TOKEN",
                "HOME",
                "LC_ALL",
                "PATH",
                "TEMP",
                "TMP",
                "TMPDIR",
                "XDG_CACHE_HOME"
            ]
        );
        assert_eq!(env["TMPDIR"], "/tmp/s");
    }
}
