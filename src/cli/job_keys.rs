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
    /// Only write the files; do not run `systemctl` (no reload, no restart).
    #[arg(long)]
    pub no_restart: bool,
    /// For the system-wide queue managers (`queue-manager@.service` of the package; run as
    /// root): the key encrypted with `systemd-creds` into /etc/credstore.encrypted/ (a
    /// root-only file in /etc/credstore/ where it cannot encrypt), named in a drop-in of
    /// queue-manager@.service (agentstore-keys.conf, in /etc/systemd/system/).
    #[arg(long)]
    pub system: bool,
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
    systemctl_of(true, args)
}

/// `systemctl [--user] ARGS`, its standard output; an error saying what failed.
fn systemctl_of(user: bool, args: &[&str]) -> Result<String, CliError> {
    let mut c = Command::new("systemctl");
    if user {
        c.arg("--user");
    }
    let o = c
        .args(args)
        .output()
        .map_err(|e| CliError::new(format!("cannot run systemctl: {e}")))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(CliError::new(format!(
            "systemctl{} {} failed: {}",
            if user { " --user" } else { "" },
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )))
    }
}

/// Reloads the unit files and restarts the queue managers that run now or are starting (one
/// still starting began with the units as they were before the reload); the units restarted.
fn reload_and_restart(user: bool) -> Result<Vec<String>, CliError> {
    systemctl_of(user, &["daemon-reload"])?;
    let listed = systemctl_of(
        user,
        &[
            "list-units",
            "--state=active,activating,reloading",
            "--no-legend",
            "--plain",
            "queue-manager@*.service",
        ],
    )?;
    let units: Vec<String> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|u| u.starts_with("queue-manager@") && u.ends_with(".service"))
        .map(str::to_string)
        .collect();
    if !units.is_empty() {
        let mut args = vec!["try-restart"];
        args.extend(units.iter().map(String::as_str));
        systemctl_of(user, &args)?;
    }
    Ok(units)
}

/// What `set-job-key` did, for the report.
struct Done<'a> {
    name: &'a str,
    credential: String,
    removed: bool,
    key_file: PathBuf,
    drop_in: PathBuf,
    restarted: Vec<String>,
    /// Commands to run by hand (when this command did not): printed whole, one a line.
    by_hand: Vec<&'static str>,
    steps: Vec<(&'static str, String)>,
}

impl<'a> Done<'a> {
    fn new(
        name: &'a str,
        credential: String,
        removed: bool,
        key_file: PathBuf,
        drop_in: PathBuf,
        steps: Vec<(&'static str, String)>,
    ) -> Done<'a> {
        Done {
            name,
            credential,
            removed,
            key_file,
            drop_in,
            restarted: Vec::new(),
            by_hand: Vec::new(),
            steps,
        }
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
    let done = if a.system {
        run_system(&a)?
    } else if crate::model::system_mode() || (nix::unistd::geteuid().is_root() && !user_manager()) {
        return Err(CliError::new(format!(
            "set-job-key without --system sets a key for your own (per-user) queue managers; for the system-wide ones (queue-manager@.service): `sudo orchestrator set-job-key --system {name}`"
        )));
    } else {
        run_user(&a)?
    };
    report(g, out, &done)
}

/// The key for your own queue managers (see the module's doc).
fn run_user(a: &SetJobKeyArgs) -> Result<Done<'_>, CliError> {
    let name = a.name.as_str();
    let credential = credential_name(name);
    let (keys, drop_in) = paths()?;
    let key_file = keys.join(&credential);
    let mut steps: Vec<(&str, String)> = Vec::new();
    if a.remove {
        steps.push(("key", remove_file(&key_file)?));
    } else {
        let key = read_key(name)?;
        crate::agent::private_file::private_dir(&keys)
            .map_err(|e| CliError::new(format!("{}: {e}", keys.display())))?;
        crate::agent::private_file::write_private(&key_file, &key)
            .map_err(|e| CliError::new(e.to_string()))?;
        steps.push(("key", format!("{} (mode 0600)", shown(&key_file))));
    }
    steps.push(("drop-in", write_drop_in(&keys, &drop_in)?));
    let done = Done::new(name, credential, a.remove, key_file, drop_in, steps);
    let manual = [
        "systemctl --user daemon-reload",
        "systemctl --user try-restart 'queue-manager@*.service'",
    ];
    let absent = (!user_manager()).then_some((
        "no systemd user manager here; the queue managers it starts take the change (if one runs now, then:)",
        true,
    ));
    reload_or_tell(done, a.no_restart, manual, absent, true)
}

/// The last step of both modes: reload the units and restart the queue managers, or say
/// what to run by hand. `absent`: why no service manager can be asked here, and whether the
/// commands are still worth running by hand.
fn reload_or_tell<'a>(
    mut done: Done<'a>,
    no_restart: bool,
    manual: [&'static str; 2],
    absent: Option<(&str, bool)>,
    user: bool,
) -> Result<Done<'a>, CliError> {
    if no_restart {
        done.steps.push((
            "units",
            "not reloaded (--no-restart); for the queue managers running now:".to_string(),
        ));
        done.by_hand.extend(manual);
    } else if let Some((why, by_hand)) = absent {
        done.steps.push(("units", why.to_string()));
        if by_hand {
            done.by_hand.extend(manual);
        }
    } else {
        done.restarted = reload_and_restart(user)?;
        restarted_step(&mut done);
    }
    Ok(done)
}

/// Whether this process's user has a systemd user manager (`$XDG_RUNTIME_DIR/systemd/private`).
fn user_manager() -> bool {
    std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| Path::new(&d).join("systemd/private").exists())
}

/// The step saying which managers were restarted and what the next job has.
fn restarted_step(done: &mut Done) {
    let effect = if done.removed {
        format!("the next job has no {}", done.name)
    } else {
        format!("the next job has {}", done.name)
    };
    if done.restarted.is_empty() {
        done.steps.push((
            "units",
            format!("reloaded; no queue manager runs now: {effect}"),
        ));
    } else {
        done.steps.push((
            "restarted",
            format!(
                "{} (running jobs go on): {effect}",
                done.restarted.join(", ")
            ),
        ));
    }
}

/// Removes a key file; what happened.
fn remove_file(path: &Path) -> Result<String, CliError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(format!("{} removed", shown(path))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(format!("{} was not there", shown(path)))
        }
        Err(e) => Err(CliError::new(format!("{}: {e}", path.display()))),
    }
}

/// Encrypted credentials of the system-wide managers (`LoadCredentialEncrypted=`).
const SYSTEM_ENCRYPTED: &str = "/etc/credstore.encrypted";
/// Root-only plain credentials, where `systemd-creds` cannot encrypt (`LoadCredential=`).
const SYSTEM_PLAIN: &str = "/etc/credstore";
/// The system queue managers' drop-ins; the one `set-job-key --system` writes is [`DROP_IN`].
const SYSTEM_DROP_INS: &str = "/etc/systemd/system/queue-manager@.service.d";

/// The drop-in of the system-wide managers naming each key of the two credential stores,
/// an encrypted one before a plain one of the same name.
fn system_drop_in_text(encrypted: &[String], plain: &[String]) -> String {
    let mut text = String::from(
        "# Written by `orchestrator set-job-key --system` from the job-env.* files of\n\
         # /etc/credstore.encrypted/ and /etc/credstore/: each job of the system-wide queue\n\
         # managers gets each key as a variable (job-env.NAME -> NAME).\n[Service]\n",
    );
    for c in encrypted {
        text.push_str(&format!(
            "LoadCredentialEncrypted={c}:{SYSTEM_ENCRYPTED}/{c}\n"
        ));
    }
    for c in plain.iter().filter(|c| !encrypted.contains(c)) {
        text.push_str(&format!("LoadCredential={c}:{SYSTEM_PLAIN}/{c}\n"));
    }
    text
}

/// `key` encrypted by `systemd-creds` (the host's key, and the TPM's when there is one) as
/// credential `credential` into `dir`, mode 0600; the key goes through a pipe, never an
/// argument. An error says why it could not.
fn encrypt_into(dir: &Path, credential: &str, key: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let target = dir.join(credential);
    let partial = dir.join(format!(".{credential}.partial"));
    let _ = std::fs::remove_file(&partial);
    let mut child = Command::new("systemd-creds")
        .args(["encrypt", &format!("--name={credential}"), "-"])
        .arg(&partial)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run systemd-creds: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(key.as_bytes())
            .map_err(|e| format!("systemd-creds: {e}"))?;
    }
    let o = child
        .wait_with_output()
        .map_err(|e| format!("systemd-creds: {e}"))?;
    let finish = || -> std::io::Result<()> {
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&partial, &target)
    };
    if !o.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "systemd-creds encrypt failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    finish().map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        format!("{}: {e}", target.display())
    })?;
    Ok(target)
}

/// The key for the system-wide queue managers (root): encrypted into /etc/credstore.encrypted/
/// (a root-only plain file in /etc/credstore/ where `systemd-creds` cannot encrypt), the
/// drop-in naming every key there, the unit files reloaded and the managers running or
/// starting restarted.
fn run_system(a: &SetJobKeyArgs) -> Result<Done<'_>, CliError> {
    let name = a.name.as_str();
    if !nix::unistd::geteuid().is_root() {
        return Err(CliError::new(format!(
            "set-job-key --system writes root's credential store and the system units: `sudo orchestrator set-job-key --system {name}`"
        )));
    }
    let credential = credential_name(name);
    let encrypted = Path::new(SYSTEM_ENCRYPTED);
    let plain = Path::new(SYSTEM_PLAIN);
    let drop_in = Path::new(SYSTEM_DROP_INS).join(DROP_IN);
    let mut steps: Vec<(&str, String)> = Vec::new();
    let key_file = if a.remove {
        for dir in [encrypted, plain] {
            let f = dir.join(&credential);
            if f.exists() {
                steps.push(("key", remove_file(&f)?));
            }
        }
        if steps.is_empty() {
            steps.push((
                "key",
                format!("{credential} was in neither {SYSTEM_ENCRYPTED}/ nor {SYSTEM_PLAIN}/"),
            ));
        }
        encrypted.join(&credential)
    } else {
        let key = read_key(name)?;
        // The folders systemd's own tmpfiles make 0000; made 0700 when missing.
        crate::agent::private_file::private_dir(encrypted)
            .map_err(|e| CliError::new(format!("{SYSTEM_ENCRYPTED}: {e}")))?;
        match encrypt_into(encrypted, &credential, &key) {
            Ok(f) => {
                steps.push((
                    "key",
                    format!("{} (encrypted by systemd-creds, mode 0600)", f.display()),
                ));
                let stale = plain.join(&credential);
                if stale.exists() {
                    steps.push(("key", remove_file(&stale)?));
                }
                f
            }
            Err(why) => {
                crate::agent::private_file::private_dir(plain)
                    .map_err(|e| CliError::new(format!("{SYSTEM_PLAIN}: {e}")))?;
                let f = plain.join(&credential);
                crate::agent::private_file::write_private(&f, &key)
                    .map_err(|e| CliError::new(e.to_string()))?;
                steps.push((
                    "key",
                    format!(
                        "{} (root only, mode 0600; not encrypted: {why})",
                        f.display()
                    ),
                ));
                let stale = encrypted.join(&credential);
                if stale.exists() {
                    steps.push(("key", remove_file(&stale)?));
                }
                f
            }
        }
    };
    // The drop-in names every job key of both stores.
    let enc = credentials_in(encrypted);
    let pla = credentials_in(plain);
    if enc.is_empty() && pla.is_empty() {
        steps.push((
            "drop-in",
            match std::fs::remove_file(&drop_in) {
                Ok(()) => format!("{} removed (no key left)", drop_in.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    format!("{} not there (no key)", drop_in.display())
                }
                Err(e) => return Err(CliError::new(format!("{}: {e}", drop_in.display()))),
            },
        ));
    } else {
        std::fs::create_dir_all(SYSTEM_DROP_INS)
            .map_err(|e| CliError::new(format!("{SYSTEM_DROP_INS}: {e}")))?;
        crate::store::write_atomic(&drop_in, system_drop_in_text(&enc, &pla).as_bytes())
            .map_err(|e| CliError::new(format!("{}: {e}", drop_in.display())))?;
        let mut names: Vec<&str> = enc
            .iter()
            .chain(pla.iter())
            .filter_map(|c| c.strip_prefix(crate::systemd::credentials::JOB_ENV_PREFIX))
            .collect();
        names.sort();
        names.dedup();
        steps.push((
            "drop-in",
            format!("{} (credentials: {})", drop_in.display(), names.join(", ")),
        ));
    }
    let done = Done::new(name, credential, a.remove, key_file, drop_in, steps);
    let manual = [
        "systemctl daemon-reload",
        "systemctl try-restart 'queue-manager@*.service'",
    ];
    let absent = (!Path::new("/run/systemd/system").is_dir()).then_some((
        "systemd is not running here; the queue managers it starts take the change",
        false,
    ));
    reload_or_tell(done, a.no_restart, manual, absent, false)
}

/// Whether a drop-in of the system-wide queue managers names credential `job-env.NAME`
/// (written by `set-job-key --system` or by hand, `systemctl edit queue-manager@.service`).
pub(super) fn is_set_system(name: &str) -> bool {
    let wanted = format!("{}:", credential_name(name));
    std::fs::read_dir(SYSTEM_DROP_INS).is_ok_and(|d| {
        d.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".conf"))
            .any(|e| {
                std::fs::read_to_string(e.path()).is_ok_and(|t| {
                    t.lines().any(|l| {
                        let l = l.trim();
                        l.starts_with("LoadCredential") && l.contains(&wanted)
                    })
                })
            })
    })
}

/// Prints what `set-job-key` did.
fn report(g: &GlobalArgs, out: &mut dyn Write, d: &Done) -> CliResult {
    match g.format {
        Format::Json => write_json(
            out,
            &json!({
                "name": d.name,
                "credential": d.credential,
                "removed": d.removed,
                "key_file": d.key_file,
                "drop_in": d.drop_in,
                "restarted": d.restarted,
                "to_run": d.by_hand,
                "steps": d.steps.iter().map(|(k, v)| json!({"step": k, "result": v})).collect::<Vec<_>>(),
            }),
        )?,
        Format::Text => {
            let width = terminal_width().saturating_sub(11).max(20);
            for (what, how) in &d.steps {
                for (i, l) in wrap(how, width).iter().enumerate() {
                    let what = if i == 0 { *what } else { "" };
                    writeln!(out, "{what:<10} {l}")?;
                }
            }
            for c in &d.by_hand {
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

    #[test]
    fn the_system_drop_in_prefers_the_encrypted_key() {
        let enc = ["job-env.ANTHROPIC_API_KEY".to_string()];
        let plain = [
            "job-env.ANTHROPIC_API_KEY".to_string(),
            "job-env.OPENAI_API_KEY".to_string(),
        ];
        let t = system_drop_in_text(&enc, &plain);
        assert!(
            t.ends_with(
                "[Service]\nLoadCredentialEncrypted=job-env.ANTHROPIC_API_KEY:/etc/credstore.encrypted/job-env.ANTHROPIC_API_KEY\nLoadCredential=job-env.OPENAI_API_KEY:/etc/credstore/job-env.OPENAI_API_KEY\n"
            ),
            "{t}"
        );
    }
}
