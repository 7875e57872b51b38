//! Watching a process that is not our child (a worker re-adopted after a manager restart):
//! a pidfd becomes readable when the process exits, so the manager learns of it at once
//! instead of at the next sweep.
// `pidfd_open(2)` has no safe wrapper in nix or std yet (each block has its SAFETY note).
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;

/// Opens a pidfd for `pid`; `None` when the process is gone or the kernel has no pidfd.
pub fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new file descriptor or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until the process behind `fd` has exited.
pub async fn wait_exit(fd: OwnedFd) {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, which keeps the same descriptor
    // open until the AsyncFd is dropped.
    match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
        Ok(a) => {
            let _ = a.readable().await;
        }
        Err(e) => tracing::warn!("cannot watch pidfd: {e}"),
    }
}

/// True when `pid` runs (not a zombie) and its command line has `job_id` as an argument: a
/// worker of that job, not a recycled PID.
pub fn is_worker_of(pid: u32, job_id: &str) -> bool {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(_) => return false,
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z') | Some('X') | None) {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|&b| b == 0).any(|a| a == job_id.as_bytes()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pidfd_reports_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .unwrap();
        let fd = pidfd_open(child.id()).unwrap();
        // spawn() returns once the child is in execve, which may not yet have set up the new
        // command line (/proc/PID/cmdline is empty for a moment): wait for it to appear.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read(format!("/proc/{}/cmdline", child.id()))
            .unwrap_or_default()
            .is_empty()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(is_worker_of(child.id(), "300"));
        assert!(!is_worker_of(child.id(), "other"));
        child.kill().unwrap();
        wait_exit(fd).await;
        assert!(!is_worker_of(child.id(), "300"), "a zombie is not a worker");
        child.wait().unwrap();
        assert!(!is_worker_of(child.id(), "300"));
    }
}
