//! `orchestrator set-job-key NAME`: give your own (per-user) queue managers a key for their
//! jobs' agents, as a systemd credential, in one command that takes effect for the next job
//! (issue 32). The key is read from standard input (never the command line: no `ps`, no shell
//! history), kept in a file only you can read (`~/.config/agentstore/keys/job-env.NAME`, mode
//! 0600) and named in the drop-in `queue-manager@.service.d/agentstore-keys.conf` (one
//! `LoadCredential=job-env.NAME:<file>` line per key of that folder); every `job-env.NAME`
//! credential becomes `NAME` in each job's environment (`src/systemd/credentials.rs`).
//!
//! systemd loads a unit's credentials when the unit starts and keeps them unchanged while it
//! runs (systemd.exec(5), "Credentials"): a running manager cannot see a new key, and a
//! reload does not refresh them. So this command reloads the unit files and restarts the
//! queue managers that are running (`try-restart`: one that is not running takes the key when
//! its `.path`/`.timer` starts it). A restart does not touch running jobs: each lives in its
//! own transient scope and the new manager adopts it.

use super::render::{Format, terminal_width, wrap, write_json};
use super::{CliError, CliResult, GlobalArgs};
use clap::Args;
use serde_json::json;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `set-job-key` options.
#[derive(Debug, Args, Clone)]
pub struct SetJobKeyArgs {
    /// The variable each job's agent gets, e.g. ANTHROPIC_API_KEY or OPENAI_API_KEY (capitals,
    /// digits and _; not LD_*, PATH, HOME, USER, LOGNAME, SHELL). The key itself is read
    /// from standard input.
    pub name: String,
    /// Remove the key (its file and drop-in) instead of setting it.
    #[arg(long)]
    pub remove: bool,
    /// Only write the files; do not run `systemctl --user` (no reload, no restart).
    #[arg(long)]
    pub no_restart: bool,
}

/// The user units' configuration folder (`$XDG_CONFIG_HOME`, else `~/.config`).
fn config_home() -> Result<PathBuf, CliError> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| crate::store::home_dir().map(|h| h.join(".config")))
        .ok_or_else(|| CliError::new("HOME is not set"))
}

/// `path` as a person reads it: `~/…` under the home folder.
fn shown(path: &Path) -> String {
    match crate::store::home_dir().and_then(|h| path.strip_prefix(h).ok().map(Path::to_path_buf)) {
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// The drop-in's file name: one drop-in names every key of the keys folder.
const DROP_IN: &str = "agentstore-keys.conf";

/// The keys folder and the drop-in.
fn paths() -> Result<(PathBuf, PathBuf), CliError> {
    let config = config_home()?;
    Ok((
        config.join("agentstore/keys"),
        config
            .join("systemd/user/queue-manager@.service.d")
            .join(DROP_IN),
    ))
}

/// Whether `set-job-key NAME` gave the queue managers a key (its file is there and the
/// drop-in names it).
pub(super) fn is_set(name: &str) -> bool {
    let credential = credential_name(name);
    paths().is_ok_and(|(keys, drop_in)| {
        keys.join(&credential).is_file()
            && std::fs::read_to_string(drop_in)
                .is_ok_and(|t| t.contains(&format!("LoadCredential={credential}:")))
    })
}

/// The credential's name for variable `name`.
fn credential_name(name: &str) -> String {
    format!("{}{name}", crate::systemd::credentials::JOB_ENV_PREFIX)
}

/// The credentials of the keys folder: `job-env.NAME` files whose NAME may be a job's
/// variable, sorted.
fn credentials_in(keys: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(keys)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| {
                    n.strip_prefix(crate::systemd::credentials::JOB_ENV_PREFIX)
                        .is_some_and(crate::systemd::credentials::job_var_allowed)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The drop-in naming each key file of `keys` as its credential (`%` escaped for systemd's
/// specifiers).
fn drop_in_text(keys: &Path, credentials: &[String]) -> Result<String, CliError> {
    let path = keys.to_str().filter(|p| !p.chars().any(char::is_control));
    let Some(path) = path else {
        return Err(CliError::new(format!(
            "{}: a folder path with control characters or not UTF-8 cannot go into a unit file",
            keys.display()
        )));
    };
    let mut text = String::from(
        "# Written by `orchestrator set-job-key` from the files of its keys folder: each job of\n\
         # your queue managers gets each key as a variable (job-env.NAME -> NAME).\n[Service]\n",
    );
    for c in credentials {
        text.push_str(&format!(
            "LoadCredential={c}:{}/{c}\n",
            path.replace('%', "%%")
        ));
    }
    Ok(text)
}

/// Writes the drop-in for the keys now in `keys` (removes it when there is none); what
/// happened, for the report.
fn write_drop_in(keys: &Path, drop_in: &Path) -> Result<String, CliError> {
    let credentials = credentials_in(keys);
    if credentials.is_empty() {
        return match std::fs::remove_file(drop_in) {
            Ok(()) => Ok(format!("{} removed (no key left)", shown(drop_in))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(format!("{} not there (no key)", shown(drop_in)))
            }
            Err(e) => Err(CliError::new(format!("{}: {e}", drop_in.display()))),
        };
    }
    let text = drop_in_text(keys, &credentials)?;
    if let Some(d) = drop_in.parent() {
        std::fs::create_dir_all(d).map_err(|e| CliError::new(format!("{}: {e}", d.display())))?;
    }
    crate::store::write_atomic(drop_in, text.as_bytes())
        .map_err(|e| CliError::new(format!("{}: {e}", drop_in.display())))?;
    let names: Vec<&str> = credentials
        .iter()
        .filter_map(|c| c.strip_prefix(crate::systemd::credentials::JOB_ENV_PREFIX))
        .collect();
    Ok(format!(
        "{} (LoadCredential= for {})",
        shown(drop_in),
        names.join(", ")
    ))
}

/// The key from standard input: one line, asked for without echo on a terminal.
fn read_key(name: &str) -> Result<String, CliError> {
    let stdin = std::io::stdin();
    let mut text = String::new();
    if stdin.is_terminal() {
        eprint!("{name} (input hidden, then Enter): ");
        let _ = std::io::stderr().flush();
        let saved = nix::sys::termios::tcgetattr(&stdin).ok();
        if let Some(saved) = &saved {
            let mut quiet = saved.clone();
            quiet
                .local_flags
                .remove(nix::sys::termios::LocalFlags::ECHO);
            let _ =
                nix::sys::termios::tcsetattr(&stdin, nix::sys::termios::SetArg::TCSANOW, &quiet);
        }
        let read = stdin.read_line(&mut text);
        if let Some(saved) = &saved {
            let _ = nix::sys::termios::tcsetattr(&stdin, nix::sys::termios::SetArg::TCSANOW, saved);
        }
        eprintln!();
        read.map_err(|e| CliError::new(format!("reading the key: {e}")))?;
    } else {
        stdin
            .lock()
            .take(crate::systemd::credentials::MAX_CREDENTIAL + 2)
            .read_to_string(&mut text)
            .map_err(|e| CliError::new(format!("reading the key from standard input: {e}")))?;
    }
    let key = text.trim_end_matches(['\n', '\r']);
    if key.is_empty() {
        return Err(CliError::new(format!(
            "no key on standard input for {name}: pipe it in, e.g. `printf %s \"$KEY\" | orchestrator set-job-key {name}`"
        )));
    }
    if key.len() as u64 > crate::systemd::credentials::MAX_CREDENTIAL {
        return Err(CliError::new(format!(
            "the key for {name} is longer than {} bytes",
            crate::systemd::credentials::MAX_CREDENTIAL
        )));
    }
    if key.contains(['\n', '\r']) {
        return Err(CliError::new(format!(
            "the key for {name} is more than one line"
        )));
    }
    Ok(key.to_string())
}

/// `systemctl --user ARGS`, its standard output; an error saying what failed.
pub(super) fn systemctl_user(args: &[&str]) -> Result<String, CliError> {
    let o = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .output()
        .map_err(|e| CliError::new(format!("cannot run systemctl: {e}")))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(CliError::new(format!(
            "systemctl --user {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )))
    }
}

/// `orchestrator set-job-key`.
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, a: SetJobKeyArgs) -> CliResult {
    let name = a.name.as_str();
    if !crate::systemd::credentials::job_var_allowed(name) {
        return Err(CliError::new(format!(
            "{name:?} cannot be a job's variable: capitals, digits and _ (e.g. ANTHROPIC_API_KEY), not LD_*, PATH, HOME, USER, LOGNAME, SHELL"
        )));
    }
    if crate::model::system_mode() {
        return Err(CliError::new(
            "set-job-key sets a key for your own (per-user) queue managers; for the system-wide ones give queue-manager@.service a job-env.NAME credential (README, \"Claude's credentials for system-wide queues\")",
        ));
    }
    let credential = credential_name(name);
    let (keys, drop_in) = paths()?;
    let key_file = keys.join(&credential);
    let mut steps: Vec<(&str, String)> = Vec::new();
    if a.remove {
        match std::fs::remove_file(&key_file) {
            Ok(()) => steps.push(("key", format!("{} removed", shown(&key_file)))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                steps.push(("key", format!("{} was not there", shown(&key_file))))
            }
            Err(e) => return Err(CliError::new(format!("{}: {e}", key_file.display()))),
        }
    } else {
        let key = read_key(name)?;
        crate::agent::private_file::private_dir(&keys)
            .map_err(|e| CliError::new(format!("{}: {e}", keys.display())))?;
        crate::agent::private_file::write_private(&key_file, &key)
            .map_err(|e| CliError::new(e.to_string()))?;
        steps.push(("key", format!("{} (mode 0600)", shown(&key_file))));
    }
    steps.push(("drop-in", write_drop_in(&keys, &drop_in)?));
    // To run by hand when this command did not: printed whole, one a line (never wrapped).
    let manual = [
        "systemctl --user daemon-reload",
        "systemctl --user try-restart 'queue-manager@*.service'",
    ];
    let mut by_hand: Vec<&str> = Vec::new();
    let systemd_user = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| Path::new(&d).join("systemd/private").exists());
    let mut restarted: Vec<String> = Vec::new();
    let effect = if a.remove {
        format!("the next job has no {name}")
    } else {
        format!("the next job has {name}")
    };
    if a.no_restart {
        steps.push((
            "units",
            "not reloaded (--no-restart); for the queue managers running now:".to_string(),
        ));
        by_hand.extend(manual);
    } else if !systemd_user {
        steps.push((
            "units",
            "no systemd user manager here; the queue managers it starts take the change (if one runs now, then:)".to_string(),
        ));
        by_hand.extend(manual);
    } else {
        systemctl_user(&["daemon-reload"])?;
        // A manager still starting (its timer or path fired a moment ago) began with the
        // units as they were before the reload: it is restarted as a running one is.
        let listed = systemctl_user(&[
            "list-units",
            "--state=active,activating,reloading",
            "--no-legend",
            "--plain",
            "queue-manager@*.service",
        ])?;
        restarted = listed
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|u| u.starts_with("queue-manager@") && u.ends_with(".service"))
            .map(str::to_string)
            .collect();
        if restarted.is_empty() {
            steps.push((
                "units",
                format!("reloaded; no queue manager runs now: {effect}"),
            ));
        } else {
            let mut args = vec!["try-restart"];
            args.extend(restarted.iter().map(String::as_str));
            systemctl_user(&args)?;
            steps.push((
                "restarted",
                format!("{} (running jobs go on): {effect}", restarted.join(", ")),
            ));
        }
    }
    match g.format {
        Format::Json => write_json(
            out,
            &json!({
                "name": name,
                "credential": credential,
                "removed": a.remove,
                "key_file": key_file,
                "drop_in": drop_in,
                "restarted": restarted,
                "to_run": by_hand,
                "steps": steps.iter().map(|(k, v)| json!({"step": k, "result": v})).collect::<Vec<_>>(),
            }),
        )?,
        Format::Text => {
            let width = terminal_width().saturating_sub(11).max(20);
            for (what, how) in &steps {
                for (i, l) in wrap(how, width).iter().enumerate() {
                    let what = if i == 0 { *what } else { "" };
                    writeln!(out, "{what:<10} {l}")?;
                }
            }
            for c in &by_hand {
                writeln!(out, "{:<10} {c}", "")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_names_each_key_file_with_specifiers_escaped() {
        let d = tempfile::tempdir().unwrap();
        let keys = d.path().join("r%n/keys");
        std::fs::create_dir_all(&keys).unwrap();
        for f in [
            "job-env.OPENAI_API_KEY",
            "job-env.ANTHROPIC_API_KEY",
            "job-env.PATH",
            "notes.txt",
            "job-env.ANTHROPIC_API_KEY.partial",
        ] {
            std::fs::write(keys.join(f), "k").unwrap();
        }
        let found = credentials_in(&keys);
        assert_eq!(
            found,
            ["job-env.ANTHROPIC_API_KEY", "job-env.OPENAI_API_KEY"]
        );
        let t = drop_in_text(&keys, &found).unwrap();
        let k = keys.display().to_string().replace('%', "%%");
        assert!(
            t.contains(&format!(
                "\n[Service]\nLoadCredential=job-env.ANTHROPIC_API_KEY:{k}/job-env.ANTHROPIC_API_KEY\nLoadCredential=job-env.OPENAI_API_KEY:{k}/job-env.OPENAI_API_KEY\n"
            )),
            "{t}"
        );
        assert!(drop_in_text(Path::new("/a\nb"), &found).is_err());
    }
}
