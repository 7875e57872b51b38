//! Finding the project root and creating its skeleton.

use std::path::{Path, PathBuf};

use crate::agent::bootstrap::BootstrapError;

/// The marker directory of a project (and the name of the global config directory in home).
pub const AGENT_DIR: &str = ".agentshell";

/// The project `config.json` the skeleton starts with: empty, so nothing in it shadows the
/// user's global `~/.agentshell/config.json` until the project sets a key on purpose.
pub const DEFAULT_PROJECT_CONFIG: &str = "{}\n";

const DEFAULT_CLAUDE_MD: &str =
    "# Project rules\n\nWrite the rules the agent must follow in this project here.\n";

/// Where the user's global files live: `$AGENTSHELL_HOME`, else `~/.agentshell`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHome {
    /// The global directory (`~/.agentshell`).
    pub dir: PathBuf,
    /// The user's home directory, which is never a project root.
    pub home: Option<PathBuf>,
}

impl AgentHome {
    /// Resolve from the given environment values (`AGENTSHELL_HOME`, `HOME`).
    pub fn resolve(
        agentshell_home: Option<PathBuf>,
        home: Option<PathBuf>,
    ) -> Result<Self, BootstrapError> {
        let dir = match (agentshell_home, &home) {
            (Some(dir), _) => dir,
            (None, Some(home)) => home.join(AGENT_DIR),
            (None, None) => return Err(BootstrapError::NoHome),
        };
        Ok(Self { dir, home })
    }

    /// `config.json` in the global directory.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }

    /// The user's trusted `.env` with credentials.
    pub fn env_path(&self) -> PathBuf {
        self.dir.join(".env")
    }

    fn is_home(&self, dir: &Path) -> bool {
        let same = |a: &Path, b: &Path| {
            a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
        };
        self.home.as_deref().is_some_and(|h| same(h, dir))
            || self
                .dir
                .parent()
                .is_some_and(|p| same(p, dir) && self.dir.ends_with(AGENT_DIR))
    }
}

/// Walk up from `start` to the first directory holding `.agentshell/`, never taking the home
/// directory (its `.agentshell` is the global config, not a project marker).
pub fn find_root(start: &Path, home: &AgentHome) -> Option<PathBuf> {
    let mut dir = Some(start);
    while let Some(d) = dir {
        if !home.is_home(d) && d.join(AGENT_DIR).is_dir() {
            return Some(d.to_path_buf());
        }
        dir = d.parent();
    }
    None
}

/// Decide the project root before anything is written: `--project` wins, then the nearest
/// marked ancestor of `cwd`, then (for `run`/`exec`, leniently) `cwd` itself. Home is refused.
pub fn decide_root(
    cwd: &Path,
    explicit: Option<&Path>,
    home: &AgentHome,
) -> Result<PathBuf, BootstrapError> {
    let root = match explicit {
        Some(p) if p.is_absolute() => p.to_path_buf(),
        Some(p) => cwd.join(p),
        None => find_root(cwd, home).unwrap_or_else(|| cwd.to_path_buf()),
    };
    if home.is_home(&root) {
        return Err(BootstrapError::HomeIsNotAProject(root));
    }
    if !root.is_dir() {
        return Err(BootstrapError::NotADirectory(root));
    }
    Ok(root)
}

/// What [`create_skeleton`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkeletonReport {
    /// Paths created (existing ones are never touched).
    pub created: Vec<PathBuf>,
}

/// Create the missing parts of `<root>/.agentshell/`: config.json, CLAUDE.md, MEMORY.md,
/// memory/, logs/. Existing files are left alone, so this is safe on every `run`.
pub fn create_skeleton(root: &Path) -> Result<SkeletonReport, BootstrapError> {
    let dir = root.join(AGENT_DIR);
    let mut report = SkeletonReport::default();
    for sub in [dir.clone(), dir.join("memory"), dir.join("logs")] {
        if !sub.is_dir() {
            std::fs::create_dir_all(&sub).map_err(|e| BootstrapError::io("creating", &sub, e))?;
            report.created.push(sub);
        }
    }
    for (name, text) in [
        ("config.json", DEFAULT_PROJECT_CONFIG),
        ("CLAUDE.md", DEFAULT_CLAUDE_MD),
        ("MEMORY.md", ""),
    ] {
        let path = dir.join(name);
        if !path.exists() {
            std::fs::write(&path, text).map_err(|e| BootstrapError::io("writing", &path, e))?;
            report.created.push(path);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home_in(dir: &Path) -> AgentHome {
        AgentHome::resolve(None, Some(dir.join("home"))).unwrap()
    }

    #[test]
    fn walks_up_to_the_marker_but_never_takes_home() {
        let t = tempfile::tempdir().unwrap();
        let home = home_in(t.path());
        let project = t.path().join("home/work/proj");
        std::fs::create_dir_all(project.join(".agentshell")).unwrap();
        std::fs::create_dir_all(project.join("src/deep")).unwrap();
        std::fs::create_dir_all(t.path().join("home/.agentshell")).unwrap();
        std::fs::create_dir_all(t.path().join("home/other")).unwrap();

        assert_eq!(
            find_root(&project.join("src/deep"), &home),
            Some(project.clone())
        );
        // ~/.agentshell exists but home is not a project: nothing is found from ~/other
        assert_eq!(find_root(&t.path().join("home/other"), &home), None);
        assert!(matches!(
            decide_root(&t.path().join("home"), None, &home),
            Err(BootstrapError::HomeIsNotAProject(_))
        ));
        // lenient: an unmarked directory becomes the root
        let other = t.path().join("home/other");
        assert_eq!(decide_root(&other, None, &home).unwrap(), other);
        // --project wins
        assert_eq!(decide_root(&other, Some(&project), &home).unwrap(), project);
    }

    #[test]
    fn skeleton_is_created_once_and_never_overwrites() {
        let t = tempfile::tempdir().unwrap();
        let first = create_skeleton(t.path()).unwrap();
        assert_eq!(first.created.len(), 6);
        std::fs::write(t.path().join(".agentshell/CLAUDE.md"), "mine").unwrap();
        let second = create_skeleton(t.path()).unwrap();
        assert!(second.created.is_empty());
        assert_eq!(
            std::fs::read_to_string(t.path().join(".agentshell/CLAUDE.md")).unwrap(),
            "mine"
        );
    }
}
