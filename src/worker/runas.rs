//! Who a job's agent runs as (DESIGN §6, issue 4): when the queue manager runs as root, the
//! project owner's Unix account (`unix_user` in the owner's user document, else the user id);
//! otherwise the manager's own account.

use crate::model::Job;
use crate::store::Store;
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
    /// The job's project document cannot be read.
    #[error("cannot choose the Unix user for project {project}: {reason}")]
    Project {
        /// Project id.
        project: String,
        /// Cause.
        reason: String,
    },
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

/// The Unix login name a job of `job`'s project runs as when the manager is root: the
/// owner's `unix_user`, else the owner's id.
pub fn project_owner_login(store: &Store, job: &Job) -> Result<String, RunAsError> {
    let project = store
        .project(&job.config.project)
        .map_err(|e| RunAsError::Project {
            project: job.config.project.clone(),
            reason: e.to_string(),
        })?;
    match store.user(&project.owner) {
        Ok(user) => Ok(user.unix_name().to_string()),
        // No user document: the owner id is the login name (PRD ids are user names).
        Err(crate::store::StoreError::NotFound { .. }) => Ok(project.owner),
        Err(e) => Err(RunAsError::Project {
            project: job.config.project.clone(),
            reason: e.to_string(),
        }),
    }
}
