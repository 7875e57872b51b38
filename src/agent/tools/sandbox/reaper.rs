//! Nothing a confined command or job starts outlives it (issue 28, sandbox4): a process that
//! left the command's process group (`setsid`, a double fork) kept running after agentshell's
//! session and its last sweep ended, and planted a nested repository the user's next
//! `git status` ran. The process that confines (agentshell, the worker) becomes a child
//! subreaper, so such orphans are re-parented to it rather than to init; when a command or job
//! is over, [`kill_orphans`] kills (and reaps) every child it does not know as a running
//! command ([`spawn_tracked`]), then their children, until none is left.

use parking_lot::Mutex;
use std::collections::BTreeSet;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// The commands running now: children that are not orphans.
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// How long [`kill_orphans`] goes on (each round kills the orphans the last one's left to
/// this process: a chain of processes takes one round per link).
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Make orphaned descendants of this process its children (not init's).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) changes only this process's attribute.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Spawn a command (`spawn` returns it and its pid) as one [`kill_orphans`] leaves alone
/// until [`forget`] (no orphan sweep runs between the spawn and its registration).
pub fn spawn_tracked<T>(
    spawn: impl FnOnce() -> std::io::Result<(T, Option<u32>)>,
) -> std::io::Result<T> {
    let mut live = LIVE.lock();
    let (t, pid) = spawn()?;
    live.extend(pid);
    Ok(t)
}

/// The command `pid` is over (reaped by its owner).
pub fn forget(pid: u32) {
    LIVE.lock().remove(&pid);
}

/// This process's children (of all its threads).
fn children() -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Whether a process runs with `no_new_privs` (every confined one does).
fn no_new_privs(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1'))
    })
}

/// Whether child `pid` is confined: `no_new_privs` where this process has not (a process
/// already under it, agentshell in a job, has only confined children), or in another mount
/// namespace. A child this process started unconfined (a test's server) is left alone.
fn confined(pid: u32, self_nnp: bool) -> bool {
    let p = pid.to_string();
    let ns = |who: &str| std::fs::read_link(format!("/proc/{who}/ns/mnt")).ok();
    self_nnp || no_new_privs(&p) || ns(&p).is_some_and(|n| Some(n) != ns("self"))
}

/// Kill and reap every confined child that is not a running command (an orphan the subreaper
/// was given); how many were killed.
pub fn kill_orphans() -> usize {
    let live = LIVE.lock();
    let self_nnp = no_new_privs("self");
    let mut killed = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < DEADLINE {
        let orphans: Vec<u32> = children()
            .into_iter()
            .filter(|p| !live.contains(p) && confined(*p, self_nnp))
            .collect();
        if orphans.is_empty() {
            break;
        }
        for p in orphans {
            let Ok(raw) = i32::try_from(p) else { continue };
            let pid = Pid::from_raw(raw);
            let _ = kill(pid, Signal::SIGKILL);
            // Our child: its exit is ours to collect (its own children come to us next).
            if waitpid(pid, Some(WaitPidFlag::__WALL)).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}
