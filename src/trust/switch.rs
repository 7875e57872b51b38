//! Starting a program as another account (issue 27): the one home of the switch a root
//! process makes in a child before `exec` — the account's own groups (as `initgroups` sets
//! them, nothing of the parent's), then its group, then its user. Used by the worker for the
//! agent and by a root queue manager for what it runs as the job's account (`sbatch`, and
//! reading the Slurm relay file).
#![allow(unsafe_code)] // pre_exec has no safe form; the block has its SAFETY note

use super::account::Account;
use std::os::unix::process::CommandExt;

/// Makes `cmd` switch to `a` in the child before `exec` (after any `pre_exec` hook added
/// earlier). A no-op when this process already runs as `a`.
pub fn run_as(cmd: &mut std::process::Command, a: &Account) {
    if nix::unistd::geteuid().as_raw() == a.uid {
        return;
    }
    let uid = nix::unistd::Uid::from_raw(a.uid);
    let gid = nix::unistd::Gid::from_raw(a.gid);
    // Looked up before the fork (getgrouplist is not async-signal-safe).
    let groups: Vec<nix::unistd::Gid> = if a.groups.is_empty() {
        vec![gid]
    } else {
        a.groups
            .iter()
            .map(|g| nix::unistd::Gid::from_raw(*g))
            .collect()
    };
    // SAFETY: the closure runs in the forked child before exec and only makes the
    // async-signal-safe system calls setgroups, setgid and setuid on data prepared before the
    // fork; it allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setgroups(&groups)?;
            nix::unistd::setgid(gid)?;
            nix::unistd::setuid(uid)?;
            Ok(())
        });
    }
}
