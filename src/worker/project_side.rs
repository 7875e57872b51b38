//! Effects on the project's own folder, made by the job where the project is — on the
//! compute host, as the job's Unix user, inside the job's scope (issue 11) — and never by the
//! orchestrator: `create-environment` runs `venvman create`, and a finished `research-code`
//! job writes the project's `code_research_document`. The orchestrator only records them.

use super::process::{AgentCommand, AgentOutput, run_agent};
use super::runas::RunAs;
use crate::model::{Job, RESEARCH_DOCUMENT_KEY, VENVMAN_KEY};
use crate::store::Store;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The venvman program: `AGENTSTORE_VENVMAN` (tests, odd installs), else `venvman`.
pub fn venvman_program() -> String {
    std::env::var("AGENTSTORE_VENVMAN")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "venvman".to_string())
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where `program` is: itself when it names a path, else the first executable of that name
/// on `path` (the job's `PATH`), then in `~/.local/bin` of the job's user (where `pipx` and
/// `pip --user` put it; user services do not have it on their `PATH`).
pub fn find_program(program: &str, path: Option<&str>, home: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path.unwrap_or(""))
        .filter(|d| d.is_absolute())
        .chain(std::iter::once(home.join(".local/bin")))
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

fn host() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "this host".into())
}

/// The `venvman create` command of a `create-environment` job:
/// `venvman create --project NAME --dir PATH [--python V] [--force] [--install-deps]`.
/// Errors name what is wrong (venvman missing on this host, a bad option in the job file).
pub fn venvman_command(
    job: &Job,
    env: Vec<(String, String)>,
    home: &Path,
    switch_to: Option<RunAs>,
) -> Result<AgentCommand, String> {
    let program = venvman_program();
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    let Some(found) = find_program(&program, path_var.as_deref(), home) else {
        return Err(format!(
            "venvman not installed on {}: `{program}` was not found on PATH ({}) nor in {} (install venvman there, then retry)",
            host(),
            path_var.unwrap_or_default(),
            home.join(".local/bin").display()
        ));
    };
    // Run as the job's account: trusted only when nobody else can change it (issue 27).
    let uid = switch_to
        .as_ref()
        .map_or_else(|| nix::unistd::geteuid().as_raw(), |u| u.uid);
    let found = crate::trust::programs::trusted_path(&found, uid).map_err(|e| {
        format!(
            "venvman at {} is not a trusted program: {e}",
            found.display()
        )
    })?;
    let dir = &job.config.working_directory;
    if !dir.starts_with('/') {
        return Err(format!(
            "working_directory {dir:?} is not an absolute path; venvman needs the project's full path"
        ));
    }
    let opts = job
        .config
        .supporting_data
        .get(VENVMAN_KEY)
        .cloned()
        .unwrap_or(Value::Null);
    let mut args = vec![
        "create".to_string(),
        "--project".to_string(),
        job.config.project.clone(),
        "--dir".to_string(),
        dir.clone(),
    ];
    match opts.get("python") {
        None | Some(Value::Null) => {}
        // A version, never an option: the job file is read from a synced store.
        Some(Value::String(v)) if !v.is_empty() && !v.starts_with('-') => {
            args.push("--python".into());
            args.push(v.clone());
        }
        Some(other) => {
            return Err(format!(
                "supporting_data.{VENVMAN_KEY}.python {other} is not a Python version"
            ));
        }
    }
    let flag = |key: &str| match opts.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!(
            "supporting_data.{VENVMAN_KEY}.{key} must be true or false, not {other}"
        )),
    };
    if flag("force")? {
        args.push("--force".into());
    }
    if flag("install_deps")? {
        args.push("--install-deps".into());
    }
    Ok(AgentCommand {
        program: found.display().to_string(),
        args,
        prompt: String::new(),
        cwd: PathBuf::from(dir),
        env,
        switch_to,
        sandbox: None,
    })
}

/// The research document a finished job writes, if it is a `research-code` job and one is
/// set: `supporting_data.code_research_document` (the orchestrator copies the project's
/// setting there), else the project's own setting (jobs written by hand or by an older
/// orchestrator). A relative path is taken from the job's working directory. `None` for a
/// document inside the store: that one the orchestrator writes.
pub fn research_document(store: &Store, job: &Job) -> Option<PathBuf> {
    use crate::model::Command;
    let command = match job.config.command.as_deref() {
        Some(c) => Command::parse(c),
        None => Command::for_claude_command(&job.config.claude_command),
    };
    let research = command == Some(Command::ResearchCode);
    if !research {
        return None;
    }
    let doc = match job
        .config
        .supporting_data
        .get(RESEARCH_DOCUMENT_KEY)
        .and_then(Value::as_str)
    {
        Some(d) => d.to_string(),
        None => {
            store
                .project(&job.config.project)
                .ok()?
                .code_research_document?
        }
    };
    if doc.is_empty() {
        return None;
    }
    let p = PathBuf::from(&doc);
    let p = if p.is_absolute() {
        p
    } else {
        Path::new(&job.config.working_directory).join(p)
    };
    // A document inside the store is a store record: the orchestrator writes it when it
    // handles the job (the job's user may not be able to write the store).
    (!store.holds(&p)).then_some(p)
}

/// Writes `text` to `path` as the job's user (`switch_to`, else this process's account):
/// the folder is made if missing, the text goes to a temporary file beside it which is then
/// renamed over the document, so a reader sees the old or the new document, never half.
/// Run as a child (`sh`) so that a worker running as root writes nothing itself.
pub fn write_as_job_user(
    path: &Path,
    text: &str,
    env: Vec<(String, String)>,
    cwd: &Path,
    switch_to: Option<RunAs>,
) -> Result<(), String> {
    let what = || format!("cannot write the code research document {}", path.display());
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!("{}: not a file path", what()));
    };
    const SCRIPT: &str = r#"set -e
t="$2/.$3.agentstore-$$.tmp"
mkdir -p -- "$2"
trap 'rm -f -- "$t"' EXIT
cat > "$t"
mv -f -- "$t" "$1"
trap - EXIT"#;
    let cmd = AgentCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            SCRIPT.into(),
            "agentstore-write".into(),
            path.display().to_string(),
            dir.display().to_string(),
            name.to_string_lossy().into_owned(),
        ],
        prompt: text.to_string(),
        cwd: cwd.to_path_buf(),
        env,
        switch_to,
        sandbox: None,
    };
    let out: AgentOutput =
        run_agent(&cmd, |_| {}, |_, _| {}).map_err(|e| format!("{}: {e}", what()))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(super::capture::last_line(out.stderr.end())).into_owned();
    Err(format!("{}: {}", what(), err.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_program_looks_on_path_then_in_local_bin() {
        let t = tempfile::tempdir().unwrap();
        let (a, home) = (t.path().join("a"), t.path().join("home"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        let put = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        assert_eq!(find_program("vm", Some(a.to_str().unwrap()), &home), None);
        put(&home.join(".local/bin/vm"), 0o755);
        assert_eq!(
            find_program("vm", Some(a.to_str().unwrap()), &home),
            Some(home.join(".local/bin/vm"))
        );
        put(&a.join("vm"), 0o644); // not executable: skipped
        assert_eq!(
            find_program("vm", Some(a.to_str().unwrap()), &home),
            Some(home.join(".local/bin/vm"))
        );
        put(&a.join("vm"), 0o755);
        assert_eq!(
            find_program("vm", Some(a.to_str().unwrap()), &home),
            Some(a.join("vm"))
        );
        // Relative PATH entries are not searched (they would depend on the cwd).
        assert_eq!(
            find_program("vm", Some("a"), Path::new("/nonexistent")),
            None
        );
    }

    #[test]
    fn the_document_is_written_whole_and_a_failure_names_it() {
        let t = tempfile::tempdir().unwrap();
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let doc = t.path().join("docs/deep/R.md");
        write_as_job_user(&doc, "# R\n", env.clone(), Path::new("/"), None).unwrap();
        assert_eq!(std::fs::read_to_string(&doc).unwrap(), "# R\n");
        write_as_job_user(&doc, "new", env.clone(), Path::new("/"), None).unwrap();
        assert_eq!(std::fs::read_to_string(&doc).unwrap(), "new");
        // Nothing but the document is left in its folder.
        assert_eq!(std::fs::read_dir(doc.parent().unwrap()).unwrap().count(), 1);
        // Its folder cannot be made (a file is in the way): the error names the document.
        std::fs::write(t.path().join("file"), "x").unwrap();
        let bad = t.path().join("file/R.md");
        let e = write_as_job_user(&bad, "x", env, Path::new("/"), None).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot write the code research document {}:",
                bad.display()
            )),
            "{e}"
        );
    }
}
