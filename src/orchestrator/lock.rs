//! The store-wide singleton lock (PRD §6.6, DESIGN §5): `<root>/.orchestrator.lock` holds the
//! host, pid and a heartbeat. A lock whose process is gone (same host) or whose heartbeat is
//! older than [`STALE_AFTER_SECS`] (another host, e.g. a laptop that went to sleep with the
//! Dropbox folder) is stale and taken over.

use crate::model::Timestamp;
use crate::store::{hostname, write_json_atomic};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How often the holder rewrites its heartbeat.
pub const HEARTBEAT_SECS: u64 = 30;
/// A heartbeat older than this marks the lock stale.
pub const STALE_AFTER_SECS: u64 = 120;

/// Contents of the lock file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockInfo {
    /// Host holding the lock.
    pub host: String,
    /// PID of the holder on that host.
    pub pid: u32,
    /// When the holder started.
    pub started: Timestamp,
    /// Last sign of life.
    pub heartbeat: Timestamp,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another orchestrator holds it.
    #[error("Orchestrator already running (PID {pid} on {host}, lock {path})")]
    Held {
        /// Holder's host.
        host: String,
        /// Holder's pid.
        pid: u32,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be written.
    #[error("cannot write lock {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// A held lock; removed on drop.
#[derive(Debug)]
pub struct StoreLock {
    path: PathBuf,
    info: LockInfo,
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0 checks existence; EPERM means it exists but belongs to someone else.
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Ok(()) | Err(nix::errno::Errno::EPERM)
    )
}

/// Reads the lock file, if any.
pub fn read_lock(path: &Path) -> Option<LockInfo> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// True when `info` no longer stands for a live orchestrator.
pub fn is_stale(info: &LockInfo, now: &Timestamp) -> bool {
    if info.host == hostname() {
        return !pid_alive(info.pid) || info.pid == std::process::id();
    }
    info.heartbeat.seconds_until(now) > STALE_AFTER_SECS as f64
}

impl StoreLock {
    /// Takes the lock at `path`, replacing a stale one.
    pub fn acquire(path: &Path) -> Result<StoreLock, LockError> {
        let now = Timestamp::now();
        let info = LockInfo {
            host: hostname(),
            pid: std::process::id(),
            started: now,
            heartbeat: now,
        };
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Create-if-absent with the whole content at once: write a temp file, then hard-link
        // it into place (link fails if the lock exists), so no reader ever sees it empty.
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        write_json_atomic(&tmp, &info).map_err(io)?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // ...else decide whether the holder is alive.
                match read_lock(path) {
                    Some(held) if !is_stale(&held, &now) => {
                        return Err(LockError::Held {
                            host: held.host,
                            pid: held.pid,
                            path: path.to_path_buf(),
                        });
                    }
                    other => {
                        if let Some(old) = other {
                            tracing::warn!(
                                "taking over stale lock of PID {} on {} (last heartbeat {})",
                                old.pid,
                                old.host,
                                old.heartbeat
                            );
                        }
                        write_json_atomic(path, &info).map_err(io)?;
                    }
                }
            }
            Err(e) => return Err(io(e)),
        }
        Ok(StoreLock {
            path: path.to_path_buf(),
            info,
        })
    }

    /// Rewrites the heartbeat. Fails with `Held` when another host took the lock over (our
    /// heartbeat went stale, e.g. after a suspend): the caller must stop.
    pub fn heartbeat(&mut self) -> Result<(), LockError> {
        if let Some(current) = read_lock(&self.path)
            && (current.host != self.info.host || current.pid != self.info.pid)
        {
            return Err(LockError::Held {
                host: current.host,
                pid: current.pid,
                path: self.path.clone(),
            });
        }
        self.info.heartbeat = Timestamp::now();
        write_json_atomic(&self.path, &self.info).map_err(|source| LockError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// What the lock says.
    pub fn info(&self) -> &LockInfo {
        &self.info
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if read_lock(&self.path).is_some_and(|c| c.host == self.info.host && c.pid == self.info.pid)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_and_lock_removed_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".orchestrator.lock");
        let lock = StoreLock::acquire(&p).unwrap();
        assert!(p.exists());
        // Our own pid counts as stale (same process re-acquiring after a restart), so
        // pretend the holder is PID 1 on this host, which is alive.
        let mut held = lock.info().clone();
        held.pid = 1;
        write_json_atomic(&p, &held).unwrap();
        let err = StoreLock::acquire(&p).unwrap_err().to_string();
        assert!(err.contains("already running"), "{err}");
        write_json_atomic(&p, lock.info()).unwrap();
        drop(lock);
        assert!(!p.exists());
    }

    #[test]
    fn dead_or_silent_holders_are_stale() {
        let now = Timestamp::now();
        let dead = LockInfo {
            host: hostname(),
            pid: u32::MAX - 1,
            started: now,
            heartbeat: now,
        };
        assert!(is_stale(&dead, &now));
        let old: Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
        let remote = LockInfo {
            host: "elsewhere".into(),
            pid: 1,
            started: old,
            heartbeat: old,
        };
        assert!(is_stale(&remote, &now));
        let live = LockInfo {
            host: "elsewhere".into(),
            pid: 1,
            started: now,
            heartbeat: now,
        };
        assert!(!is_stale(&live, &now));
    }
}
