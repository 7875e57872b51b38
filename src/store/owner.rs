//! Least privilege for a root daemon's store I/O (issue 9): the system queue-manager runs as
//! root (it starts jobs as other users and kills their process groups), but everything it
//! reads and writes in the store is done with the rights of the store's owner (the account
//! owning the store root, `agentstore` for the packaged store), so a link or hard-link trick
//! planted in the store can at most reach what that account could.
//!
//! How: the *filesystem* uid/gid (`setfsuid`/`setfsgid`) become the owner's and the
//! supplementary groups the owner's group, while the effective uid stays 0. The kernel then
//! checks every path access as the owner and drops the filesystem capabilities
//! (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_CHOWN`, …) from the
//! effective set; signals (`CAP_KILL`), the D-Bus connection (credentials are the effective
//! ones) and starting workers are unchanged. A worker the manager starts is `exec`'d, which
//! resets its filesystem ids to its effective ones (root), so the worker harness keeps what it
//! had. The filesystem ids are per thread: [`act_as_store_owner`] must run before any thread
//! is started (threads made later inherit them).

use nix::unistd::{Gid, Uid};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Whom the store I/O now runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOwner {
    /// The store owner's uid.
    pub uid: u32,
    /// The store root's group.
    pub gid: u32,
}

/// When this process is root and the store root belongs to another account, makes this
/// thread's (and every thread started later's) file access that account's: `Some(owner)`.
/// `None` when there is nothing to drop (not root, or a store owned by root). Call it before
/// the async runtime starts any thread.
pub fn act_as_store_owner(root: &Path) -> io::Result<Option<StoreOwner>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    // The root itself may be a link (DESIGN §4): its target's owner is the store's owner.
    let m = std::fs::metadata(root).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot read the store root {}: {e}", root.display()),
        )
    })?;
    let owner = StoreOwner {
        uid: m.uid(),
        gid: m.gid(),
    };
    if owner.uid == 0 {
        return Ok(None);
    }
    let (uid, gid) = (Uid::from_raw(owner.uid), Gid::from_raw(owner.gid));
    // root's own supplementary groups would open group-root files: only the store's group.
    nix::unistd::setgroups(&[gid]).map_err(io::Error::from)?;
    nix::unistd::setfsgid(gid);
    nix::unistd::setfsuid(uid);
    // setfs[ug]id report the previous value; a second call tells whether the change held.
    if nix::unistd::setfsuid(uid) != uid || nix::unistd::setfsgid(gid) != gid {
        return Err(io::Error::other(format!(
            "cannot take the store owner's file rights (uid {}, gid {})",
            owner.uid, owner.gid
        )));
    }
    Ok(Some(owner))
}
