//! Which model a Codex run uses, for its price (issue 35). Codex's JSONL names no model, so the
//! worker resolves it the way the Codex CLI that `.ci/install-codex.sh` pins (0.169) does;
//! `tests/codex_model.rs` runs that real CLI on every case below and checks the two agree.
//! Highest first:
//!
//! 1. `--model`/`-m` on the command line;
//! 2. the machine's managed config, `/etc/codex/managed_config.toml` (above `-c`);
//! 3. `-c key=value` settings (the value TOML, else the text itself);
//! 4. the project's `.codex/config.toml` files, from the project root (the nearest folder
//!    above the working directory holding one of `project_root_markers`, default `.git`;
//!    none: the working directory) down to the working directory, the closest winning — each
//!    only when its folder is trusted: `[projects."<folder>"] trust_level = "trusted"` for the
//!    folder itself, else for the project root, else for the main checkout of its git
//!    repository (a linked worktree's), in the layers below. A `.codex` that is `CODEX_HOME`
//!    is no project's;
//! 5. the profile `--profile`/`-p NAME` chooses: `$CODEX_HOME/NAME.config.toml`;
//! 6. the account's `$CODEX_HOME/config.toml` (`CODEX_HOME` unset: `~/.codex`);
//! 7. the machine's `/etc/codex/config.toml`;
//! 8. Codex's own default, [`DEFAULT_MODEL`].
//!
//! Every file is read with the job account's rights (as Codex reads them). Codex refuses to
//! start with a top-level `profile` (gone since 0.134) or with `--profile NAME` while the
//! account's config.toml still has `[profiles.NAME]`; so does this, and an unreadable or
//! invalid file (Codex's error too): the cost is then unknown, never guessed.

use super::read_as::read_to_string_as;
use super::runas::RunAs;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// The model Codex runs on when nothing names one: the default of the Codex CLI that
/// `.ci/install-codex.sh` pins (0.169.0). tests/codex_real.rs checks that the real CLI still
/// asks the model endpoint for it: change both together.
pub const DEFAULT_MODEL: &str = "gpt-6.1-sol";

/// The largest config file read (Codex's own are a few kilobytes).
const MAX_CONFIG: u64 = 1 << 20;

/// The machine's Codex files (Codex's constants on Unix; tests put them elsewhere).
#[derive(Debug, Clone)]
pub struct MachineFiles {
    /// `/etc/codex/config.toml`, below the account's.
    pub config: PathBuf,
    /// `/etc/codex/managed_config.toml`, above everything but `--model`.
    pub managed: PathBuf,
}

impl Default for MachineFiles {
    fn default() -> Self {
        MachineFiles {
            config: PathBuf::from("/etc/codex/config.toml"),
            managed: PathBuf::from("/etc/codex/managed_config.toml"),
        }
    }
}

/// What a Codex command line says that bears on its model (the last of each option wins).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CommandLine {
    /// `--model X`, `--model=X`, `-m X`, `-mX`.
    pub model: Option<String>,
    /// `--profile X`, `-p X`.
    pub profile: Option<String>,
    /// `--cd X`, `-C X`: Codex's working directory.
    pub cd: Option<PathBuf>,
    /// `-c key=value`, `--config key=value`, in order.
    pub config: Vec<(String, String)>,
}

impl CommandLine {
    /// Reads `args` (Codex's options; `--` ends them).
    pub fn parse(args: &[String]) -> Self {
        let mut cl = CommandLine::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--" {
                break;
            }
            for (short, long) in [("-m", "--model"), ("-p", "--profile"), ("-C", "--cd")]
                .into_iter()
                .chain([("-c", "--config")])
            {
                let value = if a == short || a == long {
                    it.next().cloned()
                } else if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                    Some(v.to_string())
                } else if !a.starts_with("--") && a.len() > 2 && a.starts_with(short) {
                    Some(a[2..].to_string())
                } else {
                    continue;
                };
                let Some(v) = value else { break };
                match short {
                    "-m" => cl.model = Some(v),
                    "-p" => cl.profile = Some(v),
                    "-C" => cl.cd = Some(PathBuf::from(v)),
                    _ => {
                        if let Some((k, val)) = v.split_once('=') {
                            cl.config
                                .push((k.trim().to_string(), val.trim().to_string()));
                        }
                    }
                }
                break;
            }
        }
        cl
    }

    /// The model the command line names, by `--model` or by `-c model=…`.
    pub fn names_model(&self) -> Option<String> {
        self.model.clone().or_else(|| {
            let layer = self.settings();
            layer
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
    }

    /// The `-c` settings as one TOML table (dotted keys nested), as Codex builds it.
    fn settings(&self) -> Table {
        let mut t = Table::new();
        for (key, text) in &self.config {
            let value = format!("v = {text}")
                .parse::<Table>()
                .ok()
                .and_then(|mut p| p.remove("v"))
                .unwrap_or_else(|| Value::String(text.clone()));
            // `a.b = v` is `{a: {b: v}}`, merged over the settings before it.
            let mut nested = value;
            for part in key.split('.').rev() {
                nested = Value::Table(Table::from_iter([(part.to_string(), nested)]));
            }
            if let Value::Table(one) = nested {
                merge(&mut t, &one);
            }
        }
        t
    }
}

/// `overlay` over `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut Table, overlay: &Table) {
    for (k, v) in overlay {
        match (base.get_mut(k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// A config file's `text` as TOML; the error names a line, never quotes one (the file may
/// hold a token).
pub fn parse(text: &str) -> Result<Table, String> {
    text.parse().map_err(|e: toml::de::Error| {
        let at = e.span().map_or(0, |s| s.start).min(text.len());
        let line = text.as_bytes()[..at]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        format!("not valid TOML (line {line})")
    })
}

/// Codex's home for the job: `$CODEX_HOME` when the job's environment sets it, else
/// `~/.codex` (`home`: the job's HOME).
pub fn codex_home(env: &[(String, String)], home: &Path) -> PathBuf {
    match env.iter().find(|(k, _)| k == "CODEX_HOME") {
        Some((_, dir)) if !dir.is_empty() => PathBuf::from(dir),
        _ => home.join(".codex"),
    }
}

/// The file at `path` as TOML, read as `account`; `None` when there is none.
fn read(path: &Path, account: Option<&RunAs>) -> Result<Option<Table>, String> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let text = read_to_string_as(path, account, MAX_CONFIG)?;
    parse(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The keys Codex looks `dir` up by in `[projects]`: its canonical path, then as written.
fn trust_keys(dir: &Path) -> Vec<String> {
    let mut keys = vec![canonical(dir).display().to_string()];
    let raw = dir.display().to_string();
    if keys[0] != raw {
        keys.push(raw);
    }
    keys
}

/// `[projects."<dir>"] trust_level` of the layers below the project's, by folder: true for
/// "trusted", false for "untrusted".
fn trust_levels(below: &Table) -> Result<HashMap<String, bool>, String> {
    let Some(projects) = below.get("projects") else {
        return Ok(HashMap::new());
    };
    let projects = projects.as_table().ok_or("`projects` is not a table")?;
    let mut levels = HashMap::new();
    for (dir, p) in projects {
        let level = p
            .as_table()
            .ok_or_else(|| format!("`projects.\"{dir}\"` is not a table"))?
            .get("trust_level");
        match level.map(|l| l.as_str()) {
            None => {}
            Some(Some("trusted")) => {
                levels.insert(dir.clone(), true);
            }
            Some(Some("untrusted")) => {
                levels.insert(dir.clone(), false);
            }
            Some(_) => {
                return Err(format!(
                    "`projects.\"{dir}\".trust_level` is neither \"trusted\" nor \"untrusted\""
                ));
            }
        }
    }
    Ok(levels)
}

/// The nearest folder from `cwd` up holding one of `markers`; `cwd` when none does.
fn project_root(cwd: &Path, markers: &[String]) -> PathBuf {
    cwd.ancestors()
        .find(|d| markers.iter().any(|m| d.join(m).symlink_metadata().is_ok()))
        .unwrap_or(cwd)
        .to_path_buf()
}

/// The root of the git checkout `cwd` is in; for a linked worktree (`.git` a file saying
/// `gitdir: <main>/.git/worktrees/<name>`) the main checkout's root.
fn repo_root(cwd: &Path) -> Option<PathBuf> {
    let (root, dot_git) = cwd
        .ancestors()
        .map(|d| (d, d.join(".git")))
        .find(|(_, g)| g.symlink_metadata().is_ok())?;
    if dot_git.is_dir() {
        return Some(canonical(root));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let gitdir = text.trim().strip_prefix("gitdir:")?.trim();
    if gitdir.is_empty() {
        return None;
    }
    let gitdir = canonical(&root.join(gitdir));
    let worktrees = gitdir.parent()?;
    if worktrees.file_name()? != "worktrees" {
        return None;
    }
    Some(canonical(worktrees.parent()?.parent()?))
}

/// The project's `.codex/config.toml` layers Codex applies, lowest first (see the module's
/// doc): only trusted folders' ones.
fn project_layers(
    below: &Table,
    cwd: &Path,
    codex_home: &Path,
    account: Option<&RunAs>,
) -> Result<Vec<Table>, String> {
    let trust = trust_levels(below)?;
    let markers = match below.get("project_root_markers") {
        None => vec![".git".to_string()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|m| m.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("`project_root_markers` is not a list of names")?,
        Some(_) => return Err("`project_root_markers` is not a list of names".into()),
    };
    let root = project_root(cwd, &markers);
    let repo = repo_root(cwd);
    let lookup = |d: &Path| trust_keys(d).iter().find_map(|k| trust.get(k).copied());
    let (root_level, repo_level) = (lookup(&root), repo.as_deref().and_then(lookup));
    let home = canonical(codex_home);
    let mut dirs: Vec<&Path> = Vec::new();
    for d in cwd.ancestors() {
        dirs.push(d);
        if d == root {
            break;
        }
    }
    let mut layers = Vec::new();
    for dir in dirs.into_iter().rev() {
        let dot = dir.join(".codex");
        if !dot.is_dir() || dot == codex_home || canonical(&dot) == home {
            continue;
        }
        let trusted = lookup(dir).or(root_level).or(repo_level) == Some(true);
        if trusted && let Some(t) = read(&dot.join("config.toml"), account)? {
            layers.push(t);
        }
    }
    Ok(layers)
}

/// The model a Codex run with `args` in `cwd` uses (see the module's doc): `env` is the job's
/// environment (`CODEX_HOME`), `home` its HOME, `account` the account the files are read as
/// (`None`: the worker already runs as it).
pub fn run_model(
    args: &[String],
    env: &[(String, String)],
    home: &Path,
    cwd: &Path,
    account: Option<&RunAs>,
) -> Result<String, String> {
    run_model_with(args, env, home, cwd, account, &MachineFiles::default())
}

/// [`run_model`] with the machine's files at `machine`.
pub fn run_model_with(
    args: &[String],
    env: &[(String, String)],
    home: &Path,
    cwd: &Path,
    account: Option<&RunAs>,
    machine: &MachineFiles,
) -> Result<String, String> {
    let cl = CommandLine::parse(args);
    if let Some(m) = cl.model {
        return Ok(m);
    }
    let codex_home = codex_home(env, home);
    let session = cl.settings();
    let system = read(&machine.config, account)?;
    let user_file = codex_home.join("config.toml");
    let user = read(&user_file, account)?;
    let profile = match &cl.profile {
        None => None,
        Some(name) => {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!(
                    "the Codex profile name `{name}` is not a plain name"
                ));
            }
            let legacy = user.as_ref().is_some_and(|u| {
                u.get("profile").and_then(Value::as_str) == Some(name)
                    || u.get("profiles")
                        .and_then(Value::as_table)
                        .is_some_and(|p| p.contains_key(name))
            });
            if legacy {
                return Err(format!(
                    "{} has a legacy `[profiles.{name}]` or `profile = \"{name}\"`: Codex refuses --profile {name} then",
                    user_file.display()
                ));
            }
            read(&codex_home.join(format!("{name}.config.toml")), account)?
        }
    };
    let mut below = Table::new();
    for layer in [&system, &user, &profile].into_iter().flatten() {
        merge(&mut below, layer);
    }
    merge(&mut below, &session);
    if below.contains_key("profile") {
        return Err("a top-level `profile` setting: Codex no longer supports it and refuses to start (use --profile NAME and NAME.config.toml)".into());
    }
    let cwd = canonical(&cl.cd.as_deref().map_or(cwd.to_path_buf(), |d| cwd.join(d)));
    let project = project_layers(&below, &cwd, &codex_home, account)?;
    let managed = read(&machine.managed, account)?;
    let layers = [system, user, profile]
        .into_iter()
        .flatten()
        .chain(project)
        .chain([session])
        .chain(managed);
    let mut model = None;
    for l in layers {
        if let Some(m) = l.get("model") {
            model = Some(m.clone());
        }
    }
    match model {
        None => Ok(DEFAULT_MODEL.to_string()),
        Some(Value::String(m)) => Ok(m),
        Some(_) => Err("`model` is not a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_reader_of_the_command_line() {
        let cl = CommandLine::parse(&strings(&[
            "exec",
            "-m",
            "a",
            "--model=b",
            "-p",
            "fast",
            "--profile=deep",
            "-C",
            "sub",
            "-c",
            "model=\"o4\"",
            "--config",
            "x.y=1",
            "-mo3",
            "--",
            "-m",
            "nope",
        ]));
        assert_eq!(cl.model.as_deref(), Some("o3"));
        assert_eq!(cl.profile.as_deref(), Some("deep"));
        assert_eq!(cl.cd.as_deref(), Some(Path::new("sub")));
        assert_eq!(cl.config.len(), 2);
        let s = cl.settings();
        assert_eq!(s["model"].as_str(), Some("o4"));
        assert_eq!(s["x"]["y"].as_integer(), Some(1));
        // Not TOML: the text itself, as Codex takes it.
        let cl = CommandLine::parse(&strings(&["-c", "model=gpt-5"]));
        assert_eq!(cl.names_model().as_deref(), Some("gpt-5"));
        assert_eq!(
            CommandLine::parse(&strings(&["--color", "never"])).names_model(),
            None
        );
    }

    #[test]
    fn config_errors_name_a_line_never_its_text() {
        let e = parse("model = \"x\"\nexperimental_bearer_token = sk-SECRET\n").unwrap_err();
        assert_eq!(e, "not valid TOML (line 2)");
    }

    /// A scratch machine: CODEX_HOME, a git project with a subfolder, the machine's files.
    struct Scratch {
        _dir: tempfile::TempDir,
        home: PathBuf,
        proj: PathBuf,
        machine: MachineFiles,
    }

    impl Scratch {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let home = dir.path().join("codex-home");
            let proj = dir.path().join("proj");
            std::fs::create_dir_all(&home).unwrap();
            std::fs::create_dir_all(proj.join(".git")).unwrap();
            std::fs::create_dir_all(proj.join("sub")).unwrap();
            let machine = MachineFiles {
                config: dir.path().join("etc-config.toml"),
                managed: dir.path().join("etc-managed.toml"),
            };
            Scratch {
                _dir: dir,
                home,
                proj,
                machine,
            }
        }
        fn write(&self, path: &Path, text: &str) {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        fn model(&self, args: &[&str], cwd: &Path) -> Result<String, String> {
            let env = vec![("CODEX_HOME".to_string(), self.home.display().to_string())];
            run_model_with(
                &strings(args),
                &env,
                Path::new("/nonexistent"),
                cwd,
                None,
                &self.machine,
            )
        }
    }

    #[test]
    fn the_layers_in_codex_order() {
        let s = Scratch::new();
        let (proj, sub) = (s.proj.clone(), s.proj.join("sub"));
        assert_eq!(s.model(&[], &proj).unwrap(), DEFAULT_MODEL);
        s.write(&s.machine.config, "model = \"system\"\n");
        assert_eq!(s.model(&[], &proj).unwrap(), "system");
        let user = s.home.join("config.toml");
        s.write(&user, "model = \"user\"\n");
        assert_eq!(s.model(&[], &proj).unwrap(), "user");
        s.write(&s.home.join("fast.config.toml"), "model = \"profile\"\n");
        assert_eq!(s.model(&["--profile", "fast"], &proj).unwrap(), "profile");
        assert_eq!(s.model(&["-p", "none-such"], &proj).unwrap(), "user");
        // The project's: only in a trusted folder.
        s.write(&proj.join(".codex/config.toml"), "model = \"project\"\n");
        assert_eq!(s.model(&[], &proj).unwrap(), "user");
        let trusted = format!(
            "model = \"user\"\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            proj.display()
        );
        s.write(&user, &trusted);
        assert_eq!(s.model(&[], &proj).unwrap(), "project");
        assert_eq!(s.model(&["-p", "fast"], &sub).unwrap(), "project");
        s.write(&sub.join(".codex/config.toml"), "model = \"closer\"\n");
        assert_eq!(s.model(&[], &sub).unwrap(), "closer");
        assert_eq!(s.model(&["-C", "sub"], &proj).unwrap(), "closer");
        // A folder marked untrusted stays so under a trusted root.
        s.write(
            &user,
            &format!(
                "{trusted}[projects.\"{}\"]\ntrust_level = \"untrusted\"\n",
                sub.display()
            ),
        );
        assert_eq!(s.model(&[], &sub).unwrap(), "project");
        // -c over the project, the managed config over -c, --model over all.
        assert_eq!(s.model(&["-c", "model=\"cli\""], &sub).unwrap(), "cli");
        s.write(&s.machine.managed, "model = \"managed\"\n");
        assert_eq!(s.model(&["-c", "model=\"cli\""], &sub).unwrap(), "managed");
        assert_eq!(s.model(&["-m", "flag"], &sub).unwrap(), "flag");
    }

    #[test]
    fn codex_home_as_a_project_folder_is_not_a_project() {
        // CODEX_HOME = <folder>/.codex: its config.toml is the account's, below the profile;
        // as a project layer it would be over it.
        let s = Scratch::new();
        let folder = s.home.parent().unwrap().join("folder");
        let dot = folder.join(".codex");
        s.write(
            &dot.join("config.toml"),
            &format!(
                "model = \"user\"\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
                folder.display()
            ),
        );
        s.write(&dot.join("fast.config.toml"), "model = \"profile\"\n");
        let env = vec![("CODEX_HOME".to_string(), dot.display().to_string())];
        let args = strings(&["-p", "fast"]);
        let m = run_model_with(
            &args,
            &env,
            Path::new("/nonexistent"),
            &folder,
            None,
            &s.machine,
        );
        assert_eq!(m.unwrap(), "profile");
    }

    #[test]
    fn what_codex_refuses_is_an_error() {
        let s = Scratch::new();
        let user = s.home.join("config.toml");
        s.write(&user, "model = \"u\"\n[profiles.fast]\nmodel = \"old\"\n");
        // A legacy table nobody selects is ignored; selected, Codex refuses to start.
        assert_eq!(s.model(&[], &s.proj).unwrap(), "u");
        assert!(s.model(&["-p", "fast"], &s.proj).is_err());
        s.write(&user, "profile = \"fast\"\n");
        assert!(s.model(&[], &s.proj).is_err());
        assert!(s.model(&["-c", "profile=\"fast\""], &s.proj).is_err());
        assert!(s.model(&["-p", "../x"], &s.proj).is_err());
        s.write(&user, "model = 5\n");
        assert!(s.model(&[], &s.proj).is_err());
        s.write(&user, "model = [\n");
        let e = s.model(&[], &s.proj).unwrap_err();
        assert!(e.contains("config.toml: not valid TOML"), "{e}");
        // An untrusted project's file is not read at all; a trusted one's must be TOML.
        s.write(&user, "");
        s.write(&s.proj.join(".codex/config.toml"), "model = [\n");
        assert_eq!(s.model(&[], &s.proj).unwrap(), DEFAULT_MODEL);
        s.write(
            &user,
            &format!(
                "[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
                s.proj.display()
            ),
        );
        assert!(s.model(&[], &s.proj).is_err());
    }
}
