//! Starting the agent process (`claude -p`, `agentshell exec`): cleared environment plus an
//! allow-list, the run-as account, the prompt on stdin, both output streams captured with a
//! bound.
// `pre_exec` (dropping to the run-as account before exec) has no safe form.
#![allow(unsafe_code)]

use super::capture::{Captured, OUTPUT_LIMIT, capture};
use super::runas::RunAs;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

/// Variables passed to the agent unchanged, by exact name.
const PASS_EXACT: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "NO_COLOR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
];

/// Variables passed to the agent unchanged, by prefix: the model endpoints' settings.
const PASS_PREFIX: &[&str] = &[
    "LC_",
    "ANTHROPIC_",
    "CLAUDE_CODE_",
    "DISABLE_",
    "AGENTSHELL_",
    "OPENAI_",
    "CODEX_",
    "DEEPSEEK_",
    "XAI_",
    "GEMINI_",
    "OLLAMA_",
];

/// Extra names to pass, comma- or space-separated (like sudo's `env_keep`).
pub const PASS_ENV_VAR: &str = "AGENTSTORE_PASS_ENV";

/// The agent's environment, built from `from` (the worker's own): the allow-list, then the
/// account's identity. Everything else (`IS_SANDBOX`, `SUDO_*`, the daemon's D-Bus address…)
/// is dropped: `claude` changes behaviour on some of them.
pub fn agent_env(
    from: impl Iterator<Item = (String, String)>,
    run_as: &RunAs,
    keep_home: bool,
) -> Vec<(String, String)> {
    let from: Vec<(String, String)> = from.collect();
    let extra: Vec<String> = from
        .iter()
        .find(|(k, _)| k == PASS_ENV_VAR)
        .map(|(_, v)| {
            v.split([',', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut env: Vec<(String, String)> = from
        .iter()
        .filter(|(k, _)| k != crate::model::approval::APPROVAL_KEY_ENV)
        .filter(|(k, _)| {
            PASS_EXACT.contains(&k.as_str())
                || PASS_PREFIX.iter().any(|p| k.starts_with(p))
                || extra.iter().any(|e| e == k)
        })
        .cloned()
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    let inherited_home = from
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| v.clone());
    let home = match inherited_home {
        Some(h) if keep_home => h,
        _ => run_as.home.display().to_string(),
    };
    env.push(("HOME".into(), home));
    env.push(("USER".into(), run_as.name.clone()));
    env.push(("LOGNAME".into(), run_as.name.clone()));
    env.push(("SHELL".into(), run_as.shell.display().to_string()));
    env.sort();
    env.dedup_by(|a, b| a.0 == b.0);
    env
}

/// One agent invocation.
#[derive(Debug, Clone)]
pub struct AgentCommand {
    /// Program (a path or a name looked up in the agent's PATH).
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Written to stdin, then stdin is closed.
    pub prompt: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Switch to this account (when the worker runs as root and it is another account).
    pub switch_to: Option<RunAs>,
    /// Confine it (the queue sandboxes its jobs): applied in the child, last before exec.
    pub sandbox: Option<super::confine::JobSandbox>,
}

/// How the agent ended.
#[derive(Debug)]
pub struct AgentOutput {
    /// Its PID.
    pub pid: u32,
    /// Exit status.
    pub status: ExitStatus,
    /// stdout, bounded at [`OUTPUT_LIMIT`].
    pub stdout: Captured,
    /// stderr, bounded at 1 MiB.
    pub stderr: Captured,
}

impl AgentOutput {
    /// Exit code, or `128 + signal` for a signal (the shell's convention).
    pub fn exit_code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

/// Errors starting the agent.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// exec failed (not found, not executable, bad cwd…).
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// Program.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Runs `cmd` to its end. `on_start` gets the PID as soon as the process exists (the worker
/// records it as `llm_process_id`); `on_line` gets each output line (for the journal).
pub fn run_agent(
    cmd: &AgentCommand,
    on_start: impl FnOnce(u32),
    on_line: impl Fn(&str, &[u8]) + Sync,
) -> Result<AgentOutput, SpawnError> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args)
        .env_clear()
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if cmd.switch_to.is_none() {
        c.current_dir(&cmd.cwd);
    }
    // Built before the fork; the child only applies it with plain system calls.
    let mut confinement = match &cmd.sandbox {
        Some(s) => Some(s.compiled.prepare(false).map_err(|e| SpawnError::Spawn {
            program: cmd.program.clone(),
            source: std::io::Error::other(e),
        })?),
        None => None,
    };
    // The socket supervisor's side, taken before the child is made (issue 28).
    let channel = confinement.as_mut().and_then(|c| c.take_channel());
    if let Some(confinement) = confinement {
        // SAFETY: confine_child only makes system calls (unshare, mount, prctl,
        // landlock_restrict_self) on data prepared before the fork. It runs before the
        // account switch below: the mount namespace is made with this process's rights (root
        // when it switches), and the switch itself (setgroups, setgid, setuid) is not
        // something Landlock or an emptied capability bounding set prevents.
        unsafe {
            c.pre_exec(move || confinement.confine_child());
        }
    }
    if let Some(user) = &cmd.switch_to {
        // The working directory is entered after the switch, so the account's own
        // permissions decide whether it may work there.
        let cwd = std::ffi::CString::new(cmd.cwd.as_os_str().as_encoded_bytes().to_vec()).map_err(
            |e| SpawnError::Spawn {
                program: cmd.program.clone(),
                source: std::io::Error::other(e),
            },
        )?;
        // The account's own groups only (as initgroups sets them), nothing of the daemon's:
        // the one switch of trust::switch, then the working directory.
        crate::trust::switch::run_as(&mut c, user);
        // SAFETY: the closure runs in the forked child before exec and only makes the
        // async-signal-safe system call chdir on data prepared before the fork.
        unsafe {
            c.pre_exec(move || {
                nix::unistd::chdir(cwd.as_c_str())?;
                Ok(())
            });
        }
    }
    let mut child = c.spawn().map_err(|source| SpawnError::Spawn {
        program: cmd.program.clone(),
        source,
    })?;
    let pid = child.id();
    let supervisor = channel.and_then(|ch| match ch.supervise() {
        Ok(s) => Some(s),
        Err(e) => {
            // Its socket calls then fail (ENOSYS): nothing is let through unwatched.
            tracing::warn!("the job's socket supervisor did not start: {e}");
            None
        }
    });
    on_start(pid);
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let prompt = cmd.prompt.as_bytes();
    let on_line = &on_line;
    let (out, err) = std::thread::scope(|s| {
        s.spawn(move || {
            if let Some(mut w) = stdin {
                // A child that exits without reading its prompt closes the pipe: not our error.
                let _ = w.write_all(prompt);
            }
        });
        let err = s.spawn(move || match stderr {
            Some(r) => capture(r, 1024 * 1024, |l| on_line("stderr", l)),
            None => Captured::default(),
        });
        let out = match stdout {
            Some(r) => capture(r, OUTPUT_LIMIT, |l| on_line("stdout", l)),
            None => Captured::default(),
        };
        (out, err.join().unwrap_or_default())
    });
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break ExitStatus::from_raw(255 << 8),
        }
    };
    if let Some(s) = supervisor {
        s.stop();
    }
    Ok(AgentOutput {
        pid,
        status,
        stdout: out,
        stderr: err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> RunAs {
        RunAs {
            name: "alice".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/alice".into(),
            shell: "/bin/bash".into(),
            groups: vec![1000],
        }
    }

    #[test]
    fn env_is_an_allow_list() {
        let from = [
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("IS_SANDBOX", "yes"),
            ("ANTHROPIC_BASE_URL", "http://x"),
            ("CLAUDE_CODE_X", "1"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:x"),
            ("FAKE_KNOB", "1"),
            ("AGENTSTORE_PASS_ENV", "FAKE_KNOB"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let env = agent_env(from.clone().into_iter(), &me(), false);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HOME"), Some("/home/alice"));
        assert_eq!(get("USER"), Some("alice"));
        assert_eq!(get("IS_SANDBOX"), None);
        assert_eq!(get("DBUS_SESSION_BUS_ADDRESS"), None);
        assert_eq!(get("ANTHROPIC_BASE_URL"), Some("http://x"));
        assert_eq!(get("FAKE_KNOB"), Some("1"));
        let kept = agent_env(from.into_iter(), &me(), true);
        assert!(kept.contains(&("HOME".into(), "/root".into())));
    }
}
