//! The store-wide singleton lock (PRD §6.6, DESIGN §5): `<root>/.orchestrator.lock` holds the
//! host, pid and a heartbeat.
//!
//! Acquisition is atomic on one host: an `flock` on `.orchestrator.lock.flock` beside it is
//! taken first and held for the lock's lifetime, so two orchestrators starting at once on this
//! machine cannot both get past it. The synced lock file is then created whole (temp file +
//! hard link, which fails if it exists) or taken over by compare-and-rename: the stale file is
//! renamed to a unique name (only one renamer wins), checked to be the very file judged
//! stale, and only then replaced.
//!
//! Staleness: on this host a lock is stale when the boot id differs (a reboot), the PID is
//! gone, or the PID's start time differs from the one recorded (PID reuse); on another host,
//! when its heartbeat is older than the stale time ([`LockTiming`], config.yaml
//! `orchestrator.lock_stale_after_seconds`: a laptop that went to sleep with the Dropbox
//! folder). A lock file that is empty or unreadable is held by an unknown owner until its
//! modification time is that old. "This host" is [`hostname`] (`AGENTSTORE_HOSTNAME`), so the
//! flock is per host name: two "machines" on one computer do not exclude each other by it.
//!
//! Failover (issue 13): every lock carries an epoch, one more than the lock it replaced.
//! A sync engine can let two machines both take a stale lock over; each holder therefore
//! re-reads the lock ([`StoreLock::check`]) and yields to a holder that outranks it (a
//! higher epoch, or the same epoch and a smaller host name), and rewrites its own lock over
//! one that ranks lower (an old holder's late write carried in by the sync engine).
//!
//! Beside the shared file every holder keeps a claim only its machine writes
//! (`<lock>@<machine>`, [`claims`]): a sync engine can leave each machine its own copy of the
//! shared file, never of a claim, so the decisions above read the claims too.

pub mod claims;

use crate::model::Timestamp;
use crate::store::{hostname, read_limited, safe, write_json_atomic};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the holder rewrites its heartbeat, by default.
pub const HEARTBEAT_SECS: u64 = 30;
/// A heartbeat older than this marks the lock stale, by default.
pub const STALE_AFTER_SECS: u64 = 120;

/// The lock's heartbeat interval and stale time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockTiming {
    /// How often the holder rewrites its heartbeat.
    pub heartbeat: Duration,
    /// A heartbeat older than this (on another host) marks the lock stale.
    pub stale_after: Duration,
}

impl Default for LockTiming {
    fn default() -> Self {
        LockTiming {
            heartbeat: Duration::from_secs(HEARTBEAT_SECS),
            stale_after: Duration::from_secs(STALE_AFTER_SECS),
        }
    }
}

impl LockTiming {
    /// The timing config.yaml's `orchestrator:` section asks for.
    pub fn from_config(cfg: &crate::store::OrchestratorConfig) -> LockTiming {
        LockTiming {
            heartbeat: cfg.lock_heartbeat(),
            stale_after: cfg.lock_stale_after(),
        }
    }
}

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
    /// The holder's boot id (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The holder's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// One more than the epoch of the lock this one replaced (1 for a fresh lock; absent in
    /// locks of older versions: 0).
    #[serde(default)]
    pub epoch: u64,
}

impl LockInfo {
    /// True when this lock wins over `other`: a higher epoch, or the same epoch and a
    /// smaller host name (then the smaller PID), so two holders always agree on one.
    pub fn outranks(&self, other: &LockInfo) -> bool {
        use std::cmp::Reverse;
        (self.epoch, Reverse(&self.host), Reverse(self.pid))
            > (other.epoch, Reverse(&other.host), Reverse(other.pid))
    }

    /// True when `other` names the same holder (host and PID).
    pub fn same_holder(&self, other: &LockInfo) -> bool {
        self.host == other.host && self.pid == other.pid
    }
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
    /// The lock file exists but cannot be read or is empty, and it changed recently: an
    /// unknown owner holds it until it is [`STALE_AFTER_SECS`] old.
    #[error(
        "Orchestrator lock {path} is held by an unknown owner (the file is empty or unreadable and was changed {age_secs} s ago; it counts as stale after {stale_secs} s)"
    )]
    Unknown {
        /// The lock file.
        path: PathBuf,
        /// Seconds since its last change.
        age_secs: u64,
        /// When it counts as stale.
        stale_secs: u64,
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
    timing: LockTiming,
    /// The lock this one replaced when it was taken over (a stale holder's).
    replaced: Option<LockInfo>,
    /// A live holder of lower rank whose lock [`StoreLock::check`] found and wrote over
    /// since [`StoreLock::take_contested`] was last asked.
    contested: Option<LockInfo>,
    /// Other machines' live claims of lower rank as last seen (a change means that holder
    /// is still writing).
    claims_seen: Vec<LockInfo>,
    /// The same-host `flock`, held until drop.
    _local: nix::fcntl::Flock<std::fs::File>,
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // Signal 0 checks existence; EPERM means it exists but belongs to someone else.
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Ok(()) | Err(nix::errno::Errno::EPERM)
    )
}

pub use crate::store::machines::boot_id;

/// Start time of `pid` in clock ticks since boot.
pub fn pid_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // Fields after the command: state is field 3, starttime field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Reads the lock file, if any.
pub fn read_lock(path: &Path) -> Option<LockInfo> {
    parse_lock(&read_limited(path).ok()?)
}

fn parse_lock(bytes: &[u8]) -> Option<LockInfo> {
    crate::model::strict::parse_value(bytes)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// The holder the lock file at `path` names when it is not this process (host and PID), if
/// it names one; else another machine's live claim (by `stale_after`) that outranks this
/// process's own claim, when this process holds one.
pub fn holder_elsewhere(path: &Path, stale_after: Duration) -> Option<LockInfo> {
    let me = hostname();
    if let Some(other) = read_lock(path).filter(|l| l.host != me || l.pid != std::process::id()) {
        return Some(other);
    }
    let own = read_limited(&claims::claim_path(path, &me))
        .ok()
        .and_then(|b| parse_lock(&b))
        .filter(|c| c.pid == std::process::id())?;
    claims::live_claims_elsewhere(path, &me, stale_after)
        .into_iter()
        .find(|c| c.outranks(&own))
}

/// True when `info` no longer stands for a live orchestrator: on another host, silent for
/// longer than `stale_after`.
pub fn is_stale_after(info: &LockInfo, now: &Timestamp, stale_after: Duration) -> bool {
    if info.heartbeat.is_beyond_skew(now) {
        tracing::warn!(
            "the store lock of PID {} on {} claims a heartbeat at {}, more than {} s ahead of this clock: judged invalid (stale)",
            info.pid,
            info.host,
            info.heartbeat,
            crate::model::MAX_CLOCK_SKEW_SECS
        );
    }
    let silent = info.heartbeat.claimed_age(now) > stale_after.as_secs_f64();
    if info.host != hostname() {
        return silent;
    }
    if let (Some(theirs), Some(ours)) = (&info.boot_id, boot_id())
        && *theirs != ours
    {
        return true; // written before a reboot
    }
    if !pid_alive(info.pid) {
        return true;
    }
    match info.pid_start {
        Some(t) => pid_start_time(info.pid) != Some(t),
        // An old-format lock naming a live PID: that PID may be anyone's after a reboot; trust
        // it only while its heartbeat is fresh.
        None => silent,
    }
}

/// Opens (creating it empty, mode 0644, when missing) the local flock file: a regular file
/// reached with no link followed ([`safe::open_read`]).
fn open_flock_file(path: &Path) -> std::io::Result<std::fs::File> {
    for _ in 0..3 {
        match safe::open_read(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => return other,
        }
        match safe::create_new(path, 0o644) {
            Ok(f) => {
                // Readable by any account that may run the daemon later, whatever the umask.
                use std::os::unix::fs::PermissionsExt;
                let _ = f.set_permissions(std::fs::Permissions::from_mode(0o644));
                drop(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    safe::open_read(path)
}

fn file_age(meta: &std::fs::Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .unwrap_or(Duration::ZERO)
}

fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}.{}.{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl StoreLock {
    /// Takes the lock at `path` with the default timing, replacing a stale one.
    pub fn acquire(path: &Path) -> Result<StoreLock, LockError> {
        Self::acquire_with(path, LockTiming::default())
    }

    /// Takes the lock at `path`, replacing one stale by `timing`.
    pub fn acquire_with(path: &Path, timing: LockTiming) -> Result<StoreLock, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // 1. Same-host exclusion: the flock is taken by one process (or thread) at a time.
        let local_path = path.with_file_name(format!("{name}.{}.flock", hostname()));
        // Read access is enough for flock, so a file another account created (a system
        // service before a user service) still works; never through a link, never a FIFO.
        let local = open_flock_file(&local_path).map_err(io)?;
        let local =
            match nix::fcntl::Flock::lock(local, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(l) => l,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Err(held_by(read_lock(path), path, timing));
                }
                Err((_, e)) => return Err(io(std::io::Error::from(e))),
            };
        let now = Timestamp::now();
        // Another machine's live claim: it holds the lock, whatever our copy of the shared
        // file says (a sync engine may have left us our own copy of it).
        if let Some(other) = claims::live_claims_elsewhere(path, &hostname(), timing.stale_after)
            .into_iter()
            .next()
        {
            return Err(LockError::Held {
                host: other.host,
                pid: other.pid,
                path: path.to_path_buf(),
            });
        }
        let mut replaced = None;
        let mut info = LockInfo {
            host: hostname(),
            pid: std::process::id(),
            started: now,
            heartbeat: now,
            boot_id: boot_id(),
            pid_start: pid_start_time(std::process::id()),
            // One more than any epoch a claim names (a holder whose shared file we never saw).
            epoch: claims::highest_epoch(path).saturating_add(1),
        };
        // 2. The synced file: create whole, or take a stale one over by compare-and-rename.
        for _ in 0..5 {
            let tmp = path.with_file_name(format!(".{name}.{}.tmp", unique_suffix()));
            write_json_atomic(&tmp, &info).map_err(io)?;
            let linked = safe::hard_link(&tmp, path);
            let _ = safe::remove_file(&tmp);
            match linked {
                Ok(()) => {
                    let lock = StoreLock {
                        path: path.to_path_buf(),
                        info,
                        timing,
                        replaced,
                        contested: None,
                        claims_seen: Vec::new(),
                        _local: local,
                    };
                    lock.write_claim().map_err(io)?;
                    return Ok(lock);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(e)),
            }
            let meta = match safe::symlink_metadata(path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(e)),
            };
            // Never through a link (a link is an unreadable lock: unknown owner).
            let seen = read_limited(path).ok();
            let parsed = seen.as_deref().and_then(parse_lock);
            match &parsed {
                Some(held) if !is_stale_after(held, &now, timing.stale_after) => {
                    return Err(LockError::Held {
                        host: held.host.clone(),
                        pid: held.pid,
                        path: path.to_path_buf(),
                    });
                }
                Some(old) => tracing::warn!(
                    "taking over stale lock of PID {} on {} (epoch {}, last heartbeat {})",
                    old.pid,
                    old.host,
                    old.epoch,
                    old.heartbeat
                ),
                None => {
                    let age = file_age(&meta);
                    if age < timing.stale_after {
                        return Err(LockError::Unknown {
                            path: path.to_path_buf(),
                            age_secs: age.as_secs(),
                            stale_secs: timing.stale_after.as_secs(),
                        });
                    }
                    tracing::warn!(
                        "taking over lock {} that has been empty or unreadable for {} s",
                        path.display(),
                        age.as_secs()
                    );
                }
            }
            // Compare-and-rename: only one process moves this file away; the mover checks it
            // moved the file it judged, else puts it back and yields.
            let aside = path.with_file_name(format!(".{name}.stale.{}", unique_suffix()));
            match safe::rename(path, &aside) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(e)),
            }
            let moved = read_limited(&aside).ok();
            if moved != seen {
                // Someone replaced it between our read and our rename: that is their lock.
                let _ = safe::hard_link(&aside, path);
                let _ = safe::remove_file(&aside);
                return Err(held_by(moved.as_deref().and_then(parse_lock), path, timing));
            }
            let _ = safe::remove_file(&aside);
            // The next lock counts on from the one it replaced.
            info.epoch = info
                .epoch
                .max(parsed.as_ref().map_or(0, |p| p.epoch).saturating_add(1));
            replaced = parsed;
        }
        Err(io(std::io::Error::other(
            "the lock file kept changing while it was being taken over",
        )))
    }

    /// Rewrites the heartbeat after [`StoreLock::check`]. Fails with `Held` when another
    /// holder outranks us (our heartbeat went stale, e.g. after a suspend, and another
    /// machine took the lock over): the caller must stop answering.
    pub fn heartbeat(&mut self) -> Result<(), LockError> {
        self.check()?;
        self.write()
    }

    fn write(&mut self) -> Result<(), LockError> {
        self.info.heartbeat = Timestamp::now();
        let io = |source| LockError::Io {
            path: self.path.clone(),
            source,
        };
        self.write_claim().map_err(io)?;
        write_json_atomic(&self.path, &self.info).map_err(io)
    }

    /// Writes this machine's claim ([`claims`]) as the lock says now.
    fn write_claim(&self) -> std::io::Result<()> {
        write_json_atomic(&claims::claim_path(&self.path, &self.info.host), &self.info)
    }

    /// Other machines' live claims: one that outranks ours is the holder (`Held`); one of
    /// lower rank that changed since last seen is a holder still writing (contested).
    fn check_claims(&mut self) -> Result<(), LockError> {
        let live =
            claims::live_claims_elsewhere(&self.path, &self.info.host, self.timing.stale_after);
        if let Some(top) = live.iter().find(|c| c.outranks(&self.info)) {
            return Err(LockError::Held {
                host: top.host.clone(),
                pid: top.pid,
                path: self.path.clone(),
            });
        }
        if let Some(writing) = live.iter().find(|c| !self.claims_seen.contains(c)) {
            tracing::warn!(
                "PID {} on {} (epoch {}) still claims the store lock, below ours (epoch {})",
                writing.pid,
                writing.host,
                writing.epoch,
                self.info.epoch
            );
            self.contested = Some(writing.clone());
        }
        self.claims_seen = live;
        Ok(())
    }

    /// Whether the lock is still ours, by what the file says now: ours → `Ok`; a holder
    /// that outranks us (a higher epoch, or the same epoch and a smaller host name) →
    /// `Held`; a holder that ranks lower (a late write of an older holder, carried in by a
    /// sync engine) or no file at all → our lock is written again and `Ok`.
    pub fn check(&mut self) -> Result<(), LockError> {
        self.check_claims()?;
        match read_lock(&self.path) {
            Some(current) if current.same_holder(&self.info) => Ok(()),
            Some(current) if current.outranks(&self.info) => Err(LockError::Held {
                host: current.host,
                pid: current.pid,
                path: self.path.clone(),
            }),
            Some(current) => {
                tracing::warn!(
                    "the store lock names PID {} on {} (epoch {}), which ranks below ours (epoch {}); writing ours again",
                    current.pid,
                    current.host,
                    current.epoch,
                    self.info.epoch
                );
                self.contested = Some(current);
                self.write()
            }
            None if safe::exists(&self.path) => {
                // Unreadable right now (a sync engine replacing it): look again next time.
                Ok(())
            }
            None => {
                tracing::warn!(
                    "the store lock {} vanished; writing it again",
                    self.path.display()
                );
                self.write()
            }
        }
    }

    /// The stale lock this one replaced, when it was taken over.
    pub fn replaced(&self) -> Option<&LockInfo> {
        self.replaced.as_ref()
    }

    /// A holder of lower rank that was still writing its lock (found by [`StoreLock::check`]
    /// since the last call): it may have answered messages meanwhile.
    pub fn take_contested(&mut self) -> Option<LockInfo> {
        self.contested.take()
    }

    /// What the lock says.
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// The timing it was taken with.
    pub fn timing(&self) -> LockTiming {
        self.timing
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        claims::remove_own(&self.path, &self.info);
        if read_lock(&self.path).is_some_and(|c| c.host == self.info.host && c.pid == self.info.pid)
        {
            let _ = safe::remove_file(&self.path);
        }
    }
}

/// The refusal for a lock someone else holds: who, when the file says so, else an unknown
/// owner (an empty or unreadable lock, just taken).
fn held_by(holder: Option<LockInfo>, path: &Path, timing: LockTiming) -> LockError {
    match holder {
        Some(h) => LockError::Held {
            host: h.host,
            pid: h.pid,
            path: path.to_path_buf(),
        },
        None => LockError::Unknown {
            path: path.to_path_buf(),
            age_secs: 0,
            stale_secs: timing.stale_after.as_secs(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_stale(info: &LockInfo, now: &Timestamp) -> bool {
        is_stale_after(info, now, Duration::from_secs(STALE_AFTER_SECS))
    }

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
            boot_id: boot_id(),
            pid_start: None,
            epoch: 0,
        };
        assert!(is_stale(&dead, &now));
        let old: Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
        let remote = LockInfo {
            host: "elsewhere".into(),
            pid: 1,
            started: old,
            heartbeat: old,
            boot_id: None,
            pid_start: None,
            epoch: 0,
        };
        assert!(is_stale(&remote, &now));
        let live = LockInfo {
            host: "elsewhere".into(),
            pid: 1,
            started: now,
            heartbeat: now,
            boot_id: None,
            pid_start: None,
            epoch: 0,
        };
        assert!(!is_stale(&live, &now));
        // PID reuse after a reboot: PID 1 lives, but the lock is from 2020 and another boot.
        let reused = LockInfo {
            host: hostname(),
            pid: 1,
            started: old,
            heartbeat: old,
            boot_id: Some("another-boot".into()),
            pid_start: Some(1),
            epoch: 0,
        };
        assert!(is_stale(&reused, &now));
        let old_format = LockInfo {
            boot_id: None,
            pid_start: None,
            ..reused.clone()
        };
        assert!(is_stale(&old_format, &now));
        let restarted = LockInfo {
            boot_id: boot_id(),
            pid_start: pid_start_time(1).map(|t| t + 1),
            ..reused
        };
        assert!(is_stale(&restarted, &now));
    }
}
