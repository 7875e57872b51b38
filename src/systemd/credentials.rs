//! systemd credentials (`LoadCredential=`, `LoadCredentialEncrypted=`, `SetCredential=`,
//! `SetCredentialEncrypted=`; `systemd-creds encrypt` makes the encrypted ones): the one
//! reader of `$CREDENTIALS_DIRECTORY` for the daemons (the notifier's and the Slack app's
//! tokens, the jobs' keys), on the crate's one credential-file reader in `agent/credentials.rs`
//! (which agentshell's Telegram token uses directly: `agent/` uses nothing else of the crate).
//!
//! A job's secrets (issue 35): every credential of the queue manager's unit named
//! `job-env.<NAME>` becomes the variable `NAME` in the environment of the agent each job
//! runs (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, …), read by the worker before it drops to
//! the job's account. The key is in no unit file (the unit names the credential; systemd
//! keeps it, encrypted at rest when `LoadCredentialEncrypted=`/`SetCredentialEncrypted=`
//! is used), in no `Environment=` that `systemctl show` lists, in no store document and in
//! no journal line: nothing here logs a value, and errors name the credential only.

use std::path::{Path, PathBuf};

/// The longest credential read (bytes).
pub const MAX_CREDENTIAL: u64 = crate::agent::credentials::MAX_BYTES;

/// Prefix of the credentials given to jobs as environment variables.
pub const JOB_ENV_PREFIX: &str = "job-env.";

/// The most job variables taken from credentials.
const MAX_JOB_VARS: usize = 64;

/// `$CREDENTIALS_DIRECTORY`, when the unit has credentials.
pub fn directory() -> Option<PathBuf> {
    std::env::var_os(crate::agent::credentials::CREDENTIALS_DIRECTORY)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The credential `name` of `dir`, without the trailing newline `systemd-creds` and editors
/// leave; a missing one is an error. Read by the crate's one credential reader
/// ([`crate::agent::credentials::read`]); the error names the credential, never its contents.
pub fn read_from(dir: &Path, name: &str) -> Result<String, String> {
    crate::agent::credentials::read(dir, name)?.ok_or_else(|| {
        format!(
            "credential {name} ({}): no such credential (LoadCredential= in the unit)",
            dir.join(name).display()
        )
    })
}

/// Whether `name` may be a job variable (also what `orchestrator set-job-key` accepts): a
/// shell name in capitals, and none that changes how programs are loaded or found (`LD_*`,
/// `PATH`, the account's identity).
pub fn job_var_allowed(name: &str) -> bool {
    let shape = name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    shape
        && !name.starts_with("LD_")
        && !matches!(
            name,
            "PATH" | "HOME" | "USER" | "LOGNAME" | "SHELL" | "CREDENTIALS_DIRECTORY"
        )
}

/// The job variables of the credentials in `dir` (see the module's doc), sorted by name.
/// A credential named `job-env.` with a name that may not be a variable, or that cannot be
/// read, is an error naming it: a job started without the key it was meant to have would
/// only fail later, less clearly.
pub fn job_environment_from(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("credentials {}: {e}", dir.display()))?;
    let mut vars = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("credentials {}: {e}", dir.display()))?;
        let file = e.file_name();
        let Some(name) = file.to_str().and_then(|f| f.strip_prefix(JOB_ENV_PREFIX)) else {
            continue;
        };
        if !job_var_allowed(name) {
            return Err(format!(
                "credential {JOB_ENV_PREFIX}{name}: {name:?} cannot be a job's variable (capitals, digits and _; not LD_*, PATH, HOME, USER, LOGNAME, SHELL)"
            ));
        }
        let value = read_from(dir, &format!("{JOB_ENV_PREFIX}{name}"))?;
        vars.push((name.to_string(), value));
        if vars.len() > MAX_JOB_VARS {
            return Err(format!(
                "credentials {}: more than {MAX_JOB_VARS} named {JOB_ENV_PREFIX}*",
                dir.display()
            ));
        }
    }
    vars.sort();
    Ok(vars)
}

/// [`job_environment_from`] this process's `$CREDENTIALS_DIRECTORY`; none without one.
pub fn job_environment() -> Result<Vec<(String, String)>, String> {
    match directory() {
        Some(dir) => job_environment_from(&dir),
        None => Ok(Vec::new()),
    }
}

/// The names of the job keys in `dir` (`job-env.NAME` gives NAME), sorted; no value is read.
pub fn job_key_names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let f = e.file_name();
            f.to_str()?.strip_prefix(JOB_ENV_PREFIX).map(str::to_string)
        })
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names
}

/// [`job_key_names_in`] this process's `$CREDENTIALS_DIRECTORY`; none without one.
pub fn job_key_names() -> Vec<String> {
    directory().map_or_else(Vec::new, |d| job_key_names_in(&d))
}

/// What a Slurm job is told when its batch step runs as `account` without the queue
/// manager's job keys `names` (a root manager's relay cannot hand them on without writing
/// them where Slurm keeps its jobs: docs/codex-and-credentials.md); `None` when the manager
/// holds none. Names only, never a value.
pub fn slurm_keys_warning(names: &[String], account: &str) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let (these, them) = if names.len() == 1 {
        ("key", "it")
    } else {
        ("keys", "them")
    };
    Some(format!(
        "Not delivered: the queue manager's job {these} {} (job-env credentials). A Slurm job \
         does not get {them}: every way to hand {them} to its batch step writes {them} where \
         Slurm keeps its jobs. This job runs with {account}'s own logins and keys on the home \
         the compute nodes share (`codex login`, Claude Code's /login, or the variable in \
         {account}'s environment); or run the job in a queue without Slurm. See \
         docs/codex-and-credentials.md, \"Slurm jobs get no job-env keys\".",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slurm_job_is_told_which_keys_it_lacks_never_their_values() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("job-env.OPENAI_API_KEY"), "sk-SECRET-1").unwrap();
        std::fs::write(d.path().join("job-env.ANTHROPIC_API_KEY"), "sk-SECRET-2").unwrap();
        std::fs::write(d.path().join("slack-token"), "xoxb").unwrap();
        let names = job_key_names_in(d.path());
        assert_eq!(names, ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
        let w = slurm_keys_warning(&names, "alice").unwrap();
        assert!(
            w.starts_with(
                "Not delivered: the queue manager's job keys ANTHROPIC_API_KEY, OPENAI_API_KEY"
            ),
            "{w}"
        );
        assert!(w.contains("alice's own") && !w.contains("SECRET"), "{w}");
        assert_eq!(slurm_keys_warning(&[], "alice"), None);
        assert!(job_key_names_in(&d.path().join("none")).is_empty());
    }

    #[test]
    fn job_variables_come_from_job_env_credentials_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("job-env.OPENAI_API_KEY"), "sk-one\n").unwrap();
        std::fs::write(d.path().join("job-env.ANTHROPIC_API_KEY"), "sk-two").unwrap();
        std::fs::write(d.path().join("slack-token"), "xoxb").unwrap();
        assert_eq!(
            job_environment_from(d.path()).unwrap(),
            [
                ("ANTHROPIC_API_KEY".to_string(), "sk-two".to_string()),
                ("OPENAI_API_KEY".to_string(), "sk-one".to_string()),
            ]
        );
        for bad in [
            "job-env.LD_PRELOAD",
            "job-env.PATH",
            "job-env.lower",
            "job-env.",
        ] {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join(bad), "x").unwrap();
            let e = job_environment_from(d.path()).unwrap_err();
            assert!(e.contains(bad) && !e.contains("\"x\""), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_the_credential_never_the_value() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("big"),
            vec![b'k'; MAX_CREDENTIAL as usize + 1],
        )
        .unwrap();
        let e = read_from(d.path(), "big").unwrap_err();
        assert!(e.contains("big") && !e.contains("kkk"), "{e}");
        assert!(read_from(d.path(), "../x").is_err());
        assert!(
            read_from(d.path(), "missing")
                .unwrap_err()
                .contains("missing")
        );
    }
}
