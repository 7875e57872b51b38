//! The orchestrator's seat (issue 13, failover): whether this orchestratord answers (holds
//! the store lock), waits as a standby, or serves read-only because the store cannot be
//! written.
//!
//! A standby is an orchestratord whose host is listed in config.yaml `orchestrator.standby`
//! or that runs with `--standby`. While another machine holds the lock it answers nothing
//! (D-Bus calls that would change the store are refused with the holder's name), watches the
//! lock, and takes it over once the holder's heartbeat is older than
//! `orchestrator.lock_stale_after_seconds`. The new lock's epoch is one more than the old
//! one's. After taking over it waits `orchestrator.takeover_settle_seconds` answering
//! nothing, reads the lock again, and stands down if a holder that outranks it appeared (a
//! sync engine let two machines win). A holder that finds a newer lock (it was paused, its
//! machine slept) stands down: a standby host becomes a standby again; any other exits with
//! status 2 ("already running"), which systemd does not restart.
//!
//! A sync engine carries the lock as late as any other file, so a standby judges another
//! machine's lock stale only once it has watched it unchanged for the stale time itself, and
//! after a take-over a fence holds every message until the old holder is seen standing down
//! (its heartbeat) or the stale time and a heartbeat have passed ([`Fence`]).

mod lease;
#[cfg(test)]
mod tests;

use super::claims::{self, Recover};
use super::error::DaemonError;
use super::{LockError, LockInfo, LockTiming, StoreLock};
use crate::store::Store;
pub use lease::Lease;
use lease::{Fence, Moment};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The standby reason before the first look at the lock.
pub const STARTING: &str = "starting";

/// What this orchestratord is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Holds the store lock and answers.
    Active,
    /// Took the lock over and waits for the settle delay before answering.
    Settling,
    /// Another machine holds the lock; waiting to take over when it goes silent.
    Standby(String),
    /// Cannot write the store (full disk, read-only mount): answers read-only calls only.
    ReadOnly(String),
}

impl Role {
    /// `active`, `standby` (settling included) or `read-only`: the D-Bus `Role` property
    /// and the heartbeat's `role`.
    pub fn name(&self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Settling | Role::Standby(_) => "standby",
            Role::ReadOnly(_) => "read-only",
        }
    }

    /// True when this process may answer messages and change the store.
    pub fn answers(&self) -> bool {
        matches!(self, Role::Active)
    }
}

/// The lock this process holds or waits for.
#[derive(Debug)]
pub struct Seat {
    path: PathBuf,
    timing: LockTiming,
    settle: Duration,
    eligible: bool,
    lock: Option<StoreLock>,
    settle_until: Option<Instant>,
    role: Role,
    last_heartbeat: Instant,
    last_recovery: Instant,
    lease: Lease,
    hold_for: Duration,
    /// The other machines' locks and claims this standby watches, highest rank first, and
    /// since when (this process's clock) none has changed.
    watched: Option<(Vec<LockInfo>, Instant)>,
    /// Set when a fence ended: the loop is woken to answer what waited.
    released: bool,
}

/// Text for a lock someone else holds.
fn holder_text(e: &LockError) -> String {
    match e {
        LockError::Held { host, pid, .. } => {
            format!("the store lock is held by PID {pid} on {host}")
        }
        other => other.to_string(),
    }
}

impl Seat {
    /// A seat for the lock at `path`; `eligible`: this process may wait as a standby.
    pub fn new(path: PathBuf, timing: LockTiming, settle: Duration, eligible: bool) -> Seat {
        Seat {
            path,
            timing,
            settle,
            eligible,
            lock: None,
            settle_until: None,
            role: Role::Standby(STARTING.into()),
            last_heartbeat: Instant::now(),
            last_recovery: Instant::now(),
            lease: Lease {
                valid_for: timing.stale_after / 2,
                ..Lease::default()
            },
            hold_for: Duration::ZERO,
            watched: None,
            released: false,
        }
    }

    /// How long messages another holder may have answered wait after a take-over
    /// (config.yaml `orchestrator.takeover_hold_seconds`).
    pub fn with_hold(mut self, hold_for: Duration) -> Seat {
        self.hold_for = hold_for;
        self
    }

    /// The longest a fence stands: the stale time (how late a sync engine may bring a lock)
    /// and one heartbeat to read it, never longer than the hold (0: no fence).
    fn fence_length(&self) -> Duration {
        (self.timing.stale_after + self.timing.heartbeat).min(self.hold_for)
    }

    /// Every message waits (see [`Fence`]) until the holder on `host` is seen standing down
    /// in a heartbeat written after `after` (its clock), or the fence's time is up.
    fn fence(&mut self, host: Option<&str>, after: crate::model::Timestamp) {
        let length = self.fence_length();
        if length.is_zero() {
            return;
        }
        let now = Moment::now();
        tracing::warn!(
            "answering no message until {} (at most {} s), since it may still be answering what it sees",
            host.map_or(
                "our lock has had time to reach every machine".to_string(),
                |h| { format!("{h} is seen standing down") }
            ),
            length.as_secs()
        );
        self.lease.fence = Some(Fence {
            until: Moment {
                at: now.at + length,
                wall: now.wall + length,
            },
            host: host.map(str::to_string),
            after,
        });
    }

    /// Ends the fence when its time is up, or when its old holder's heartbeat says it stood
    /// down; then the messages it may have answered before it did wait a while longer for
    /// its answers (sync is working: its heartbeat just arrived).
    fn check_fence(&mut self, store: &Store) {
        let Some(f) = &self.lease.fence else {
            return;
        };
        if !f.until.age().is_zero() {
            tracing::info!("the fence's time is up: answering every message again");
            self.lease.fence = None;
            self.released = true;
            return;
        }
        let Some(host) = f.host.as_deref() else {
            return;
        };
        let Some(hb) = store.heartbeat_of(host, super::DAEMON) else {
            return;
        };
        let stood_down = hb.last_seen > f.after
            && (hb.stopped || (hb.role.as_deref() == Some("standby") && hb.epoch.is_none()));
        if stood_down {
            tracing::info!(
                "PID {} on {host} stood down (its heartbeat of {}); answering again",
                hb.pid,
                hb.last_seen
            );
            self.lease.fence = None;
            self.released = true;
            let length = self.fence_length();
            self.lease.hold_now(length);
        }
    }

    /// True once after a fence ended: the loop should look at the inbox now.
    pub fn take_released(&mut self) -> bool {
        std::mem::take(&mut self.released)
    }

    /// A standby takes another machine's lock over only after watching it stay the same for
    /// the stale time itself: a sync engine may bring a live holder's lock late, so the
    /// heartbeat written inside says how old this copy is, not how long the holder has been
    /// silent. False while the lock (another host's) changed within the stale time.
    fn watched_long_enough(&mut self) -> bool {
        // The shared file and every other machine's claim: a live holder rewrites at least
        // its claim, which no sync engine leaves behind as a conflict copy.
        let held = super::lock::claims::holders_elsewhere(&self.path, &crate::store::hostname());
        if held.is_empty() {
            self.watched = None;
            return true;
        }
        let since = match &self.watched {
            Some((seen, since)) if *seen == held => *since,
            _ => {
                let now = Instant::now();
                self.watched = Some((held, now));
                now
            }
        };
        since.elapsed() >= self.timing.stale_after
    }

    /// Whether this holder may answer now, and which messages wait.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The role now.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The held lock's contents, if one is held.
    pub fn lock_info(&self) -> Option<&LockInfo> {
        self.lock.as_ref().map(StoreLock::info)
    }

    /// The lock's timing.
    pub fn timing(&self) -> LockTiming {
        self.timing
    }

    /// The longest the daemon loop may sleep before [`Seat::poll`] is due again.
    pub fn wait_at_most(&self) -> Duration {
        match &self.role {
            Role::Active => self
                .timing
                .heartbeat
                .saturating_sub(self.last_heartbeat.elapsed()),
            Role::Settling => self
                .settle_until
                .map(|u| u.saturating_duration_since(Instant::now()))
                .unwrap_or_default(),
            Role::Standby(_) => self.timing.heartbeat.min(Duration::from_secs(2)),
            Role::ReadOnly(_) => Duration::from_secs(5),
        }
        .max(Duration::from_millis(50))
    }

    /// Brings the seat up to date: takes the lock when free or stale, finishes a settle,
    /// writes the heartbeat when due, stands down when another holder outranks this one.
    /// Returns the new role when it changed. A holder that is no standby and finds the lock
    /// held fails with [`DaemonError::AlreadyRunning`].
    pub fn poll(&mut self, store: &Store) -> Result<Option<Role>, DaemonError> {
        let before = self.role.clone();
        self.step(store)?;
        self.check_fence(store);
        Ok((self.role != before).then(|| self.role.clone()))
    }

    fn step(&mut self, store: &Store) -> Result<(), DaemonError> {
        let Some(lock) = self.lock.as_mut() else {
            return self.try_take(store);
        };
        if let Some(until) = self.settle_until {
            if Instant::now() < until {
                return Ok(());
            }
            self.settle_until = None;
            // Read the lock again and write it (the lease starts over from this write).
            let beat = lock.heartbeat();
            if let Some(other) = lock.take_contested() {
                self.contested(&other);
            }
            self.last_heartbeat = Instant::now();
            return match beat {
                Ok(()) => {
                    self.lease.renew();
                    self.become_active(store);
                    Ok(())
                }
                Err(e @ LockError::Io { .. }) => {
                    // The next look writes the heartbeat again and settles once more.
                    self.role = Role::ReadOnly(format!(
                        "cannot renew the store lock ({e}); answering nothing until it is written again, since another machine may take over"
                    ));
                    Ok(())
                }
                Err(e) => self.stand_down(e),
            };
        }
        // The heartbeat is due every heartbeat interval, and at half the lease at the latest
        // (a stale time of two heartbeats leaves a lease of one).
        if self.last_heartbeat.elapsed() >= self.timing.heartbeat || self.lease.half_gone() {
            self.last_heartbeat = Instant::now();
            let lapsed = self.lease.lapsed_for();
            let beat = lock.heartbeat();
            if let Some(other) = lock.take_contested() {
                self.contested(&other);
            }
            return match beat {
                Ok(()) if lapsed.is_some() || self.role != Role::Active => {
                    // Stopped, suspended or unable to write for longer than the lease:
                    // another machine may have taken over meanwhile, and its lock may still
                    // be on its way. Settle as after a take-over, then look again.
                    self.lease.renew();
                    tracing::warn!(
                        "the store lock was last written {} s ago (longer than the lease of {} s); settling before answering again",
                        lapsed.unwrap_or_default(),
                        self.lease.valid_for.as_secs()
                    );
                    self.lease.hold_now(self.hold_for);
                    // Another machine may have taken over meanwhile, its lock still on its way.
                    self.fence(None, crate::model::Timestamp::now());
                    self.settle_until = Some(Instant::now() + self.settle);
                    self.role = Role::Settling;
                    Ok(())
                }
                Ok(()) => {
                    self.lease.renew();
                    if self.last_recovery.elapsed() >= self.timing.heartbeat {
                        self.last_recovery = Instant::now();
                        let grace = self.timing.heartbeat.max(Duration::from_secs(10));
                        claims::recover(store, Recover::OthersOlderThan(grace));
                    }
                    Ok(())
                }
                // A full disk: keep the lock (the file is still ours) and try again; past
                // the lease, answer nothing (another machine may take over).
                Err(e @ LockError::Io { .. }) => {
                    tracing::warn!("heartbeat: {e}");
                    if !self.lease.valid() && self.role == Role::Active {
                        self.role = Role::ReadOnly(format!(
                            "cannot renew the store lock ({e}); answering nothing until it is written again, since another machine may take over"
                        ));
                    }
                    Ok(())
                }
                Err(e) => self.stand_down(e),
            };
        }
        // Between heartbeats, a cheap look: a newer holder is obeyed at once.
        let looked = lock.check();
        if let Some(other) = lock.take_contested() {
            self.contested(&other);
        }
        match looked {
            Ok(()) | Err(LockError::Io { .. }) => Ok(()),
            Err(e) => self.stand_down(e),
        }
    }

    /// A holder of lower rank was still writing its lock (a partition healed, a holder
    /// resumed): it may have answered what is in the inbox now.
    fn contested(&mut self, other: &LockInfo) {
        tracing::warn!(
            "PID {} on {} (epoch {}) was still writing the store lock; the inbox messages there now wait up to {} s for its answers",
            other.pid,
            other.host,
            other.epoch,
            self.hold_for.as_secs()
        );
        self.lease.hold_now(self.hold_for);
        self.fence(Some(&other.host), other.heartbeat);
    }

    fn try_take(&mut self, store: &Store) -> Result<(), DaemonError> {
        if self.eligible && !self.watched_long_enough() {
            if let Some(held) = self.watched.as_ref().and_then(|(all, _)| all.first()) {
                self.role = Role::Standby(format!(
                    "the store lock is held by PID {} on {}",
                    held.pid, held.host
                ));
            }
            return Ok(());
        }
        match StoreLock::acquire_with(&self.path, self.timing) {
            Ok(l) => {
                // Only where standbys are configured can two machines take a lock over at
                // once; elsewhere (a restart after a crash) the daemon answers at once.
                let took_over = self.eligible
                    && (l.info().epoch > 1 || matches!(self.role, Role::Standby(_)))
                    && !self.first_start_fresh(l.info());
                tracing::info!(
                    "holding the store lock (epoch {}){}",
                    l.info().epoch,
                    if took_over {
                        "; settling before answering"
                    } else {
                        ""
                    }
                );
                // The old holder was another machine's, silent for the stale time: it may be
                // alive beyond a partition and have answered what is in the inbox now.
                if let Some(old) = l.replaced().filter(|o| o.host != crate::store::hostname()) {
                    tracing::warn!(
                        "took the store lock over from PID {} on {}; the inbox messages there now wait up to {} s for its answers",
                        old.pid,
                        old.host,
                        self.hold_for.as_secs()
                    );
                    self.lease.hold_now(self.hold_for);
                    let (host, after) = (old.host.clone(), old.heartbeat);
                    self.fence(Some(&host), after);
                }
                self.lock = Some(l);
                self.lease.renew();
                self.last_heartbeat = Instant::now();
                if took_over && !self.settle.is_zero() {
                    self.settle_until = Some(Instant::now() + self.settle);
                    self.role = Role::Settling;
                } else {
                    self.become_active(store);
                }
                Ok(())
            }
            Err(e @ LockError::Io { .. }) => {
                self.role = Role::ReadOnly(e.to_string());
                Ok(())
            }
            Err(e) if self.eligible => {
                self.role = Role::Standby(holder_text(&e));
                Ok(())
            }
            Err(e) => Err(DaemonError::AlreadyRunning(e.to_string())),
        }
    }

    /// True for a lock created fresh (epoch 1) by the first attempt of this process.
    fn first_start_fresh(&self, info: &LockInfo) -> bool {
        info.epoch == 1 && matches!(&self.role, Role::Standby(w) if w == STARTING)
    }

    fn become_active(&mut self, store: &Store) {
        self.role = Role::Active;
        self.last_recovery = Instant::now();
        let n = claims::recover(store, Recover::All);
        if n > 0 {
            tracing::warn!("{n} claimed messages were never answered; answering them now");
        }
    }

    /// Another holder outranks us: let the lock go (the file is theirs and stays).
    fn stand_down(&mut self, e: LockError) -> Result<(), DaemonError> {
        let epoch = self.lock.as_ref().map_or(0, |l| l.info().epoch);
        self.lock = None;
        self.settle_until = None;
        let text = holder_text(&e);
        tracing::warn!("standing down (our epoch {epoch}): {text}");
        if self.eligible {
            self.role = Role::Standby(text);
            Ok(())
        } else {
            Err(DaemonError::AlreadyRunning(format!(
                "stood down: {text}, which took the store lock over (this host is no standby: config.yaml orchestrator.standby, --standby)"
            )))
        }
    }
}
