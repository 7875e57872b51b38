//! Who a job's agent runs as (DESIGN §6, issue 4): when the queue manager runs as root, the
//! project owner's Unix account (`unix_user` in the owner's user document, else the user id);
//! otherwise the manager's own account.

use std::path::PathBuf;

/// A resolved Unix account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home folder from the password database.
    pub home: PathBuf,
    /// Login shell.
    pub shell: PathBuf,
}

/// Why no account could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum RunAsError {
    /// The account does not exist on this machine.
    #[error("Unix user {0:?} does not exist on this machine")]
    NoSuchUser(String),
    /// The password database could not be read.
    #[error("cannot look up Unix user {name:?}: {reason}")]
    Lookup {
        /// Login name.
        name: String,
        /// Cause.
        reason: String,
    },
}

impl RunAs {
    /// Looks `name` up in the password database.
    pub fn lookup(name: &str) -> Result<RunAs, RunAsError> {
        match nix::unistd::User::from_name(name) {
            Ok(Some(u)) => Ok(RunAs::from_nix(u)),
            Ok(None) => Err(RunAsError::NoSuchUser(name.to_string())),
            Err(e) => Err(RunAsError::Lookup {
                name: name.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// The account of this process.
    pub fn current() -> Result<RunAs, RunAsError> {
        let uid = nix::unistd::geteuid();
        match nix::unistd::User::from_uid(uid) {
            Ok(Some(u)) => Ok(RunAs::from_nix(u)),
            Ok(None) => Err(RunAsError::NoSuchUser(uid.to_string())),
            Err(e) => Err(RunAsError::Lookup {
                name: uid.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    fn from_nix(u: nix::unistd::User) -> RunAs {
        RunAs {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: u.dir,
            shell: u.shell,
        }
    }
}
