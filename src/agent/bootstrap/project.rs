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
/// directory (its `.agentshell` is the global config, not a project marker). The walk stops at
/// the first folder (or marker) not owned by the user or writable by everyone: a
/// `/tmp/.agentshell` left by anyone must not become the root of every run under `/tmp`.
pub fn find_root(start: &Path, home: &AgentHome) -> Option<PathBuf> {
    find_root_as(start, home, nix::unistd::getuid().as_raw())
}

/// [`find_root`] for the user `uid`.
pub fn find_root_as(start: &Path, home: &AgentHome, uid: u32) -> Option<PathBuf> {
    let mut dir = Some(start);
    while let Some(d) = dir {
        if !owned_and_private(d, uid) {
            return None;
        }
        let marker = d.join(AGENT_DIR);
        if !home.is_home(d) && marker.is_dir() {
            return owned_and_private(&marker, uid).then(|| d.to_path_buf());
        }
        dir = d.parent();
    }
    None
}

/// Owned by `uid` (or root, for the folders above home) and not writable by everyone.
fn owned_and_private(path: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| (m.uid() == uid || m.uid() == 0) && m.mode() & 0o002 == 0)
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
    fn the_walk_stops_at_foreign_or_world_writable_folders() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let home = home_in(t.path());
        let shared = t.path().join("shared");
        std::fs::create_dir_all(shared.join(".agentshell")).unwrap();
        std::fs::create_dir_all(shared.join("mine/deep")).unwrap();
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(
            find_root_as(&shared.join("mine/deep"), &home, me),
            Some(shared.clone())
        );
        // world-writable like /tmp: its marker is not taken
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(find_root_as(&shared.join("mine/deep"), &home, me), None);
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        // a world-writable marker is not taken either
        std::fs::set_permissions(
            shared.join(".agentshell"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        assert_eq!(find_root_as(&shared.join("mine/deep"), &home, me), None);
        std::fs::set_permissions(
            shared.join(".agentshell"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        // owned by somebody else (the files belong to `me`, so ask as another uid; root-owned
        // folders are accepted only for the user root itself)
        if me != 0 {
            assert_eq!(find_root_as(&shared.join("mine/deep"), &home, me + 1), None);
        } else {
            let other = 4242;
            nix::unistd::chown(&shared, Some(nix::unistd::Uid::from_raw(other)), None).unwrap();
            assert_eq!(find_root_as(&shared.join("mine/deep"), &home, me), None);
        }
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
