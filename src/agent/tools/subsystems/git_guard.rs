//! Git never runs the repository's code through a command agentshell runs.
//!
//! A repository is untrusted input, and git reads programs to run from it: hooks
//! (`.git/hooks/post-index-change` runs on `git status`), `core.fsmonitor`, `diff.external`,
//! textconv and filter drivers, pagers, credential helpers, and — through `commondir`, a
//! `gitdir:` file or a bare repository at the project root — from config files that are not
//! `.git/config` at all.
//!
//! Two parts, one rule:
//! - [`hardening_env`] goes into the environment of every command agentshell runs, so every
//!   `git` process in it (however it is spelled in the command line) gets command-line config
//!   that wins over every config file: hooks from `/dev/null`, no fsmonitor, `cat` as pager,
//!   default signature programs, no `ext::` transport, no credential helpers,
//!   `safe.bareRepository=explicit`, no system config, and `GIT_DIR`/`GIT_WORK_TREE` pinned
//!   to the repository [`repository`] finds (so no discovery can pick a bare repository or
//!   another `.git` than the one the policy read).
//! - What command-line config cannot turn off — `diff.external`, textconv, filter and merge
//!   drivers named in the repository's own config, `include` — the policy reads in exactly the
//!   config files git will read ([`config_files`]); a mention makes git commands ASK.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Config given on the command line (`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`) to every git
/// process agentshell starts. Command-line config wins over the repository's.
pub const HARDENING_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("gpg.program", "gpg"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.x509.program", "gpgsm"),
    ("protocol.ext.allow", "never"),
    ("safe.bareRepository", "explicit"),
    ("core.untrackedCache", "false"),
    ("submodule.recurse", "false"),
];

/// The repository git will use for a command run in `root`: the first `.git` (directory, file
/// or link) found walking up from `root`, and the folder holding it. With none, `root/.git`
/// (which does not exist: git then finds no repository, and `git init` creates that one).
pub fn repository(root: &Path) -> (PathBuf, PathBuf) {
    let mut dir = Some(root);
    while let Some(d) = dir {
        let dot_git = d.join(".git");
        if std::fs::symlink_metadata(&dot_git).is_ok() {
            return (dot_git, d.to_path_buf());
        }
        dir = d.parent();
    }
    (root.join(".git"), root.to_path_buf())
}

/// The environment every command agentshell runs in `root` gets (see the module notes).
pub fn hardening_env(root: &Path) -> BTreeMap<String, String> {
    let (git_dir, work_tree) = repository(root);
    let mut env = BTreeMap::new();
    env.insert("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string());
    env.insert(
        "GIT_DIR".to_string(),
        git_dir.to_string_lossy().into_owned(),
    );
    env.insert(
        "GIT_WORK_TREE".to_string(),
        work_tree.to_string_lossy().into_owned(),
    );
    env.insert("GIT_TERMINAL_PROMPT".to_string(), "0".to_string());
    env.insert("GIT_PAGER".to_string(), "cat".to_string());
    env.insert(
        "GIT_CONFIG_COUNT".to_string(),
        HARDENING_CONFIG.len().to_string(),
    );
    for (i, (key, value)) in HARDENING_CONFIG.iter().enumerate() {
        env.insert(format!("GIT_CONFIG_KEY_{i}"), (*key).to_string());
        env.insert(format!("GIT_CONFIG_VALUE_{i}"), (*value).to_string());
    }
    env
}

/// The variables the model may not set or override in a command's environment: git's own
/// (`GIT_*`), which [`hardening_env`] owns.
pub fn owns(name: &str) -> bool {
    name.starts_with("GIT_")
}

/// Why the repository's config files cannot be judged (git commands then ASK).
pub type Unjudgeable = String;

/// The repository config files git reads for a command in `root` (with [`hardening_env`]):
/// `$GIT_DIR/config` and `$GIT_DIR/config.worktree`. `Err` when git would read config from
/// elsewhere — a `.git` that is a file or a link (`gitdir:` can point anywhere), a
/// `commondir` — or the folder is not one the policy can read.
pub fn config_files(root: &Path) -> Result<Vec<PathBuf>, Unjudgeable> {
    let (git_dir, _) = repository(root);
    match std::fs::symlink_metadata(&git_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "{} is not a plain directory (a gitdir file or link can point anywhere)",
                git_dir.display()
            ));
        }
        // No repository: git finds none (GIT_DIR is pinned) and runs nothing of it.
        Err(_) => return Ok(Vec::new()),
    }
    if std::fs::symlink_metadata(git_dir.join("commondir")).is_ok() {
        return Err(format!(
            "{} has a commondir file (its config lives elsewhere)",
            git_dir.display()
        ));
    }
    let mut files = Vec::new();
    for name in ["config", "config.worktree"] {
        let path = git_dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => files.push(path),
            Ok(_) => {
                return Err(format!("{} is not a plain file", path.display()));
            }
            Err(_) => {}
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_pins_the_repository_and_overrides_its_programs() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("proj");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        // no repository: pinned to a .git that does not exist
        let env = hardening_env(&root.join("sub"));
        assert_eq!(env["GIT_DIR"], root.join("sub/.git").to_string_lossy());
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let env = hardening_env(&root.join("sub"));
        assert_eq!(env["GIT_DIR"], root.join(".git").to_string_lossy());
        assert_eq!(env["GIT_WORK_TREE"], root.to_string_lossy());
        assert_eq!(env["GIT_CONFIG_NOSYSTEM"], "1");
        let n: usize = env["GIT_CONFIG_COUNT"].parse().unwrap();
        let pairs: Vec<(&str, &str)> = (0..n)
            .map(|i| {
                (
                    env[&format!("GIT_CONFIG_KEY_{i}")].as_str(),
                    env[&format!("GIT_CONFIG_VALUE_{i}")].as_str(),
                )
            })
            .collect();
        assert!(pairs.contains(&("core.hooksPath", "/dev/null")));
        assert!(pairs.contains(&("core.fsmonitor", "false")));
        assert!(pairs.contains(&("safe.bareRepository", "explicit")));
    }

    #[test]
    fn config_from_elsewhere_is_unjudgeable() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("proj");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        assert_eq!(config_files(&root).unwrap(), vec![root.join(".git/config")]);
        std::fs::write(root.join(".git/commondir"), "/tmp/elsewhere\n").unwrap();
        assert!(config_files(&root).is_err());
        std::fs::remove_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: /tmp/elsewhere\n").unwrap();
        assert!(config_files(&root).is_err());
    }
}
