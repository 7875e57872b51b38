//! Where the machine's own rules are read from: `/etc/agentstore/config.yaml` for the system
//! services (`AGENTSTORE_MODE=system`), else the daemon user's own
//! `~/.config/agentstore/config.yaml` (`$XDG_CONFIG_HOME` honoured). Never a store's
//! `config.yaml`. A root process uses the file only when it and every folder above it are
//! root's and writable by nobody else ([`super::secure`]); otherwise it keeps the built-in
//! defaults (the strictest rules) and says why in every refusal.

use crate::model::system_mode;
use crate::store::{Config, ProgramsPolicy, RunAsPolicy, SYSTEM_CONFIG, user_config_path};
use std::path::{Path, PathBuf};

/// The rules in force and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// `run_as:`.
    pub run_as: RunAsPolicy,
    /// `programs:`.
    pub programs: ProgramsPolicy,
    /// Where they come from, for messages ("/etc/agentstore/config.yaml", or why the file
    /// was not used).
    pub source: String,
    /// True for the system services (`AGENTSTORE_MODE=system`).
    pub system: bool,
}

/// The file the rules come from in this mode.
pub fn config_path(system: bool) -> Option<PathBuf> {
    if system {
        Some(PathBuf::from(SYSTEM_CONFIG))
    } else {
        user_config_path()
    }
}

impl Policy {
    /// The rules of this process: its mode, its configuration file, its uid.
    pub fn load() -> Policy {
        let system = system_mode();
        let euid = nix::unistd::geteuid().as_raw();
        match config_path(system) {
            Some(p) => Policy::load_from(&p, system, euid),
            None => Policy {
                source: "built-in defaults (no configuration file: HOME is not set)".into(),
                system,
                ..Policy::default()
            },
        }
    }

    /// The rules in `path` for a process of uid `euid`: a root process trusts only a file
    /// root owns and nobody else can change.
    pub fn load_from(path: &Path, system: bool, euid: u32) -> Policy {
        let defaults = |why: String| Policy {
            source: why,
            system,
            ..Policy::default()
        };
        if !path.exists() {
            return defaults(format!(
                "built-in defaults ({} does not exist)",
                path.display()
            ));
        }
        if euid == 0
            && let Err(e) = super::secure::check(path, &[0])
        {
            tracing::warn!(
                "{} is not trusted ({e}): its run_as and programs rules are not used",
                path.display()
            );
            return defaults(format!(
                "built-in defaults ({} is not trusted: {e})",
                path.display()
            ));
        }
        match Config::load(path) {
            Ok(c) => Policy {
                run_as: c.run_as,
                programs: c.programs,
                source: path.display().to_string(),
                system,
            },
            Err(e) => {
                tracing::warn!("{e}: its run_as and programs rules are not used");
                defaults(format!("built-in defaults ({e})"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_others_can_change_is_not_used_by_root() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = d.path().join("config.yaml");
        std::fs::write(&f, "run_as:\n  allowed_users: [daemon]\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let p = Policy::load_from(&f, true, me);
        if me == 0 {
            assert_eq!(p.run_as.allowed_users, vec!["daemon".to_string()]);
        }
        // A non-root process reads its own file as it is.
        let p = Policy::load_from(&f, false, 1234);
        assert_eq!(p.run_as.allowed_users, vec!["daemon".to_string()]);
        // World-writable: a root process keeps the defaults and says why.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let p = Policy::load_from(&f, true, 0);
        assert!(p.run_as.allowed_users.is_empty());
        assert!(p.source.contains("not trusted"), "{}", p.source);
        // Missing: the defaults.
        let p = Policy::load_from(&d.path().join("none.yaml"), true, 0);
        assert_eq!(p.run_as, RunAsPolicy::default());
        assert!(p.source.contains("does not exist"), "{}", p.source);
    }
}
