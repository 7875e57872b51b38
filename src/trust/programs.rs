//! The programs a job executes (issue 27): a queue's `claude_cli_path` / `agentshell_path`
//! may only choose among the programs this machine allows — `claude` and `agentshell` on the
//! daemon's PATH, the `agentshell` installed beside the daemons, and what the machine's own
//! configuration lists under `programs:` — never name a new one (`/bin/sh` with the queue's
//! default arguments would run anything). The program found must also pass the
//! secure-path check for the account that runs it: owned by root or that account, with no
//! folder above it (or above what a link leads to) that anyone else can change. The path
//! returned is the one executed.

use super::Policy;
use std::path::{Path, PathBuf};

/// Which program a queue names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `claude_cli_path`.
    Claude,
    /// `agentshell_path`.
    Agentshell,
    /// `codex_cli_path` (issue 35).
    Codex,
}

impl Program {
    fn field(self) -> &'static str {
        match self {
            Program::Claude => "claude_cli_path",
            Program::Agentshell => "agentshell_path",
            Program::Codex => "codex_cli_path",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Program::Claude => "claude",
            Program::Agentshell => "agentshell",
            Program::Codex => "codex",
        }
    }

    /// What is allowed without any configuration.
    fn defaults(self) -> Vec<String> {
        match self {
            Program::Claude => vec!["claude".into()],
            Program::Codex => vec!["codex".into()],
            Program::Agentshell => {
                let mut v = vec!["agentshell".to_string()];
                // The agentshell of this installation (beside agent-worker).
                if let Some(d) = std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(|d| d.join("agentshell")))
                {
                    v.push(d.display().to_string());
                }
                v
            }
        }
    }
}

/// A program refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("queue.json config.{field} {requested:?}: {reason}")]
pub struct ProgramRefused {
    /// The queue field.
    pub field: &'static str,
    /// What it names.
    pub requested: String,
    /// Why it is not run.
    pub reason: String,
}

/// Where `program` is: itself when it is a path, else the first file of that name in an
/// absolute folder of `path_var` (the agent's PATH). Not checked here.
pub fn locate(program: &str, path_var: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    if program.is_empty() {
        return None;
    }
    std::env::split_paths(path_var.unwrap_or(""))
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn canonical(program: &str, path_var: Option<&str>) -> Option<PathBuf> {
    locate(program, path_var).and_then(|p| std::fs::canonicalize(p).ok())
}

/// The program to execute for `requested` (a queue's `field`), run by the account `uid`:
/// one this machine allows (by the same text, or the same file once links are followed),
/// passing the secure-path check for `uid`.
pub fn resolve_program(
    policy: &Policy,
    which: Program,
    requested: &str,
    path_var: Option<&str>,
    uid: u32,
) -> Result<PathBuf, ProgramRefused> {
    let refused = |reason: String| ProgramRefused {
        field: which.field(),
        requested: requested.to_string(),
        reason,
    };
    let listed = match which {
        Program::Claude => &policy.programs.claude,
        Program::Agentshell => &policy.programs.agentshell,
        Program::Codex => &policy.programs.codex,
    };
    let allowed: Vec<String> = which
        .defaults()
        .into_iter()
        .chain(listed.iter().cloned())
        .collect();
    if requested.contains('/') && !requested.starts_with('/') {
        return Err(refused(
            "is a relative path; name an absolute path or a program on PATH".into(),
        ));
    }
    let found = canonical(requested, path_var);
    let chosen = allowed.iter().any(|a| a == requested)
        || found.as_ref().is_some_and(|f| {
            allowed
                .iter()
                .any(|a| canonical(a, path_var).as_ref() == Some(f))
        });
    if !chosen {
        return Err(refused(format!(
            "is not a program this machine allows (allowed: {}; an administrator adds more under programs.{} in {})",
            allowed.join(", "),
            which.key(),
            policy.source
        )));
    }
    let Some(at) = locate(requested, path_var) else {
        return Err(refused(format!(
            "was not found on PATH ({}); install it for the job's account on this machine, \
             or name its full path (orchestrator set-queue QUEUE --claude-cli-path / \
             --agentshell-path PATH; a path outside the defaults is listed under programs.{} in {})",
            path_var.unwrap_or(""),
            which.key(),
            policy.source
        )));
    };
    let owners = if uid == 0 { vec![0] } else { vec![0, uid] };
    let real = super::secure::check(&at, &owners)
        .map_err(|e| refused(format!("is not a trusted program: {e}")))?;
    Ok(real)
}

/// The secure-path check alone, for a program this machine's own settings chose (venvman):
/// the path to execute.
pub fn trusted_path(at: &Path, uid: u32) -> Result<PathBuf, super::secure::Insecure> {
    let owners = if uid == 0 { vec![0] } else { vec![0, uid] };
    super::secure::check(at, &owners)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn exe(p: &Path) {
        std::fs::write(p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn only_allowed_programs_run() {
        let me = nix::unistd::geteuid().as_raw();
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe(&bin.join("claude"));
        exe(&bin.join("wrapper"));
        let path_var = bin.display().to_string();
        let mut policy = Policy {
            source: "test.yaml".into(),
            ..Policy::default()
        };
        // `claude` on PATH, by name or by its path.
        let by_name = resolve_program(&policy, Program::Claude, "claude", Some(&path_var), me);
        assert_eq!(by_name.unwrap(), bin.join("claude"));
        let by_path = bin.join("claude").display().to_string();
        assert!(resolve_program(&policy, Program::Claude, &by_path, Some(&path_var), me).is_ok());
        // Any other program, even a system one, is refused by name.
        for p in ["/bin/sh", "sh", "wrapper", "/nonexistent/claude"] {
            let e = resolve_program(&policy, Program::Claude, p, Some(&path_var), me)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a program this machine allows"), "{p}: {e}");
            assert!(e.contains("programs.claude in test.yaml"), "{e}");
        }
        let wrapper = bin.join("wrapper").display().to_string();
        assert!(resolve_program(&policy, Program::Claude, &wrapper, None, me).is_err());
        // Listed by the machine's configuration: allowed.
        policy.programs.claude = vec![wrapper.clone()];
        assert_eq!(
            resolve_program(&policy, Program::Claude, &wrapper, None, me).unwrap(),
            bin.join("wrapper")
        );
        // Listed but changeable by others: refused by the secure-path check.
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = resolve_program(&policy, Program::Claude, &wrapper, None, me)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a trusted program"), "{e}");
        // Relative paths never.
        assert!(resolve_program(&policy, Program::Claude, "bin/claude", None, me).is_err());
        // agentshell: the one beside this program is allowed by default.
        let beside = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .join("agentshell");
        assert!(
            Program::Agentshell
                .defaults()
                .contains(&beside.display().to_string())
        );
    }
}
