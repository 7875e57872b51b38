//! Running the REAL Claude Code CLI headless, offline, against `fake_anthropic`.
//!
//! What works (Claude Code 2.1.x, npm `@anthropic-ai/claude-code`, installed by
//! `.ci/install-claude.sh`, which `.ci/run` calls):
//!
//! ```text
//! cd WORKDIR && printf '/greet World' | env -i PATH=... HOME=TMPHOME SHELL=/bin/bash \
//!     ANTHROPIC_BASE_URL=http://127.0.0.1:PORT ANTHROPIC_API_KEY=fake \
//!     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 ... \
//!     claude -p --output-format json --allowedTools Bash          # as root
//!     claude -p --output-format json --dangerously-skip-permissions  # unprivileged only
//! ```
//!
//! Gotchas:
//! - As root, `--dangerously-skip-permissions` (and `--permission-mode bypassPermissions`)
//!   print "--dangerously-skip-permissions cannot be used with root/sudo privileges for
//!   security reasons" and exit 1, UNLESS `IS_SANDBOX` is set, which this machine's own
//!   environment does (`IS_SANDBOX=yes`): always start `claude` with a cleared environment.
//!   As root, allow tools explicitly instead (`--allowedTools Bash`); without any of these
//!   flags a `-p` run is not an error, but tool calls land in `permission_denials`.
//! - An unknown `/command` is NOT an error: exit 0, `is_error: false`, `num_turns: 0`,
//!   `result: "Unknown command: /x"`. The worker must check the command file itself.
//! - An API failure gives `is_error: true` (with `subtype: "success"`) and exit 1.
//! - HOME must be writable by the user running `claude` (it writes `~/.claude.json`,
//!   `~/.claude/projects/...`); the working directory must be accessible to that user.
//! - The key order of the JSON result differs between versions: parse by key.
//! - Endpoints called: `HEAD /` (connection warm-up) and `POST /v1/messages?beta=true`
//!   (always `stream: true`). Without `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` it also
//!   sends a tool-less title request to `/v1/messages`; `fake_anthropic` answers those
//!   without consuming the script.
// Test support: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Printed when `claude` is missing: the real-CLI tests fail, they do not skip.
pub const INSTALL_HINT: &str = "the real Claude Code CLI (`claude`) is not on PATH. \
     `.ci/run` installs it with `.ci/install-claude.sh` (npm install -g @anthropic-ai/claude-code); \
     run `bash .ci/install-claude.sh` and retry. Set AGENTSTORE_TEST_CLAUDE=/path/to/claude to use another binary.";

/// Unix user the real CLI runs as when the tests run as root.
pub const TEST_USER: &str = "agentstore-job";

/// Upper bound for one `claude` run in tests: a guard against a hang, not an assertion.
pub const RUN_LIMIT: Duration = Duration::from_secs(180);

/// `claude` from `AGENTSTORE_TEST_CLAUDE` or PATH.
pub fn find_claude() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AGENTSTORE_TEST_CLAUDE") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("claude"))
        .find(|p| p.is_file())
}

/// `claude`, or a test failure that says how to install it.
pub fn require_claude() -> PathBuf {
    match find_claude() {
        Some(p) => p,
        None => panic!("{INSTALL_HINT}"),
    }
}

/// `-p --output-format json`: the headless invocation (prompt on stdin).
pub fn headless_args() -> Vec<String> {
    ["-p", "--output-format", "json"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

/// Permission flags that let tools run unattended for a process running as `uid`.
/// Root cannot use `--dangerously-skip-permissions`; it gets an explicit allow list.
pub fn permission_args(uid: u32) -> Vec<String> {
    if uid == 0 {
        vec![
            "--allowedTools".to_owned(),
            "Bash,Read,Write,Edit".to_owned(),
        ]
    } else {
        vec!["--dangerously-skip-permissions".to_owned()]
    }
}

/// The whole environment for a headless `claude` (use with `env_clear()`).
pub fn claude_env(home: &Path, base_url: &str) -> Vec<(String, String)> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), home.display().to_string()),
        ("SHELL".into(), "/bin/bash".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("ANTHROPIC_BASE_URL".into(), base_url.to_owned()),
        ("ANTHROPIC_API_KEY".into(), "sk-ant-fake-test-key".into()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
        ("DISABLE_TELEMETRY".into(), "1".into()),
        ("DISABLE_ERROR_REPORTING".into(), "1".into()),
        // A scripted API error fails at once instead of backing off ten times.
        ("CLAUDE_CODE_MAX_RETRIES".into(), "0".into()),
    ];
    env.sort();
    env
}

/// A temporary HOME with `~/.claude/commands/`.
pub struct ClaudeHome {
    dir: tempfile::TempDir,
}

impl ClaudeHome {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("agentstore-claude-home-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join(".claude/commands")).unwrap();
        ClaudeHome { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn commands_dir(&self) -> PathBuf {
        self.dir.path().join(".claude/commands")
    }

    /// Write `~/.claude/commands/<name>.md`. `$ARGUMENTS` in `body` becomes the task text.
    pub fn add_command(&self, name: &str, body: &str) -> PathBuf {
        let p = self.commands_dir().join(format!("{name}.md"));
        std::fs::write(&p, body).unwrap();
        p
    }
}

impl Default for ClaudeHome {
    fn default() -> Self {
        Self::new()
    }
}

/// An unprivileged Unix user.
#[derive(Clone, Debug)]
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// When running as root: the `agentstore-job` ordinary user, created with `useradd` if
/// missing. When not root: `None` (the current user is already unprivileged).
pub fn unprivileged_user() -> Option<TestUser> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let lookup = || nix::unistd::User::from_name(TEST_USER).ok().flatten();
    if lookup().is_none() {
        // Parallel test processes may race here; `useradd` exits 9 if the user appeared.
        let status = Command::new("useradd")
            // An ordinary account (uid in UID_MIN..UID_MAX, a login shell): a root daemon
            // runs jobs only as such accounts (issue 27).
            .args(["--no-create-home", "--shell", "/bin/sh"])
            .arg(TEST_USER)
            .status();
        let created = lookup();
        assert!(
            created.is_some(),
            "cannot create test user {TEST_USER} with useradd: {status:?}"
        );
    }
    let user = lookup().unwrap();
    Some(TestUser {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

/// `chown -R uid:gid path` (no symlink following).
pub fn chown_recursive(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_recursive(&entry.unwrap().path(), uid, gid);
        }
    }
}

/// A ready `claude` command: cleared environment plus [`claude_env`], cwd, and
/// `args` after the binary. With `user`, it runs as that user (groups dropped).
pub fn claude_command(
    claude: &Path,
    home: &Path,
    base_url: &str,
    cwd: &Path,
    args: &[String],
    user: Option<&TestUser>,
) -> Command {
    let mut cmd = Command::new(claude);
    cmd.env_clear()
        .envs(claude_env(home, base_url))
        .current_dir(cwd)
        .args(args);
    if let Some(u) = user {
        cmd.env("USER", &u.name).env("LOGNAME", &u.name);
        cmd.uid(u.uid).gid(u.gid);
    }
    cmd
}

/// Run `cmd` with `stdin` as its standard input; kill it and fail if it outlives `limit`.
pub fn run_with_stdin(mut cmd: Command, stdin: &str, limit: Duration) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let _ = writer.join();
            out.unwrap()
        }
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}

/// Parse `claude -p --output-format json` stdout (one JSON object).
pub fn parse_result(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "claude output is not one JSON object ({e}); exit {:?}\nstdout: {stdout}\nstderr: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
