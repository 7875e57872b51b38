//! The lease an answering holder keeps, the hold and the fence on inbox messages after a
//! take-over (see the module above).

use std::time::{Duration, Instant, SystemTime};

/// A moment on both clocks: the monotonic one runs while the process is stopped, the wall
/// clock while the machine is suspended.
#[derive(Debug, Clone, Copy)]
pub(super) struct Moment {
    pub(super) at: Instant,
    pub(super) wall: SystemTime,
}

impl Moment {
    pub(super) fn now() -> Moment {
        Moment {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// Time since, by whichever clock says more.
    pub(super) fn age(&self) -> Duration {
        self.at
            .elapsed()
            .max(self.wall.elapsed().unwrap_or_default())
    }
}

/// Messages held back after a take-over: those last changed at or before `before`, until
/// `until`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hold {
    pub(super) before: SystemTime,
    pub(super) until: Moment,
    pub(super) length: Duration,
}

/// Every inbox message waits, new ones too, until `until` or until the holder on `host`
/// (none: nobody can say) is seen standing down in a heartbeat written after `after`.
///
/// A sync engine carries a lock as late as it carries anything else: an old holder that is
/// alive but whose lock arrived late (or not at all, for a moment) answers every message it
/// sees until our lock reaches it. Whatever we answered meanwhile, it may answer too.
#[derive(Debug, Clone)]
pub(super) struct Fence {
    pub(super) until: Moment,
    pub(super) host: Option<String>,
    pub(super) after: crate::model::Timestamp,
}

/// Whether this holder may answer now, and which inbox messages it must leave for now (see
/// the module documentation). The seat keeps it; the daemon reads a copy.
#[derive(Debug, Clone, Default)]
pub struct Lease {
    pub(super) renewed: Option<Moment>,
    pub(super) valid_for: Duration,
    pub(super) hold: Option<Hold>,
    pub(super) fence: Option<Fence>,
}

impl Lease {
    /// True while the last lock write is younger than the lease (half the stale time).
    pub fn valid(&self) -> bool {
        self.renewed.is_some_and(|r| r.age() < self.valid_for)
    }

    /// True when half the lease has gone by since the lock was last written (or it never
    /// was): time to write it again.
    pub(super) fn half_gone(&self) -> bool {
        self.renewed.is_none_or(|r| r.age() >= self.valid_for / 2)
    }

    /// Seconds since the lock was last written, when the lease ran out.
    pub fn lapsed_for(&self) -> Option<u64> {
        self.renewed
            .filter(|_| !self.valid())
            .map(|r| r.age().as_secs())
    }

    /// True when an inbox message last changed at `modified` must wait: it was there when
    /// another holder may still have been answering, and the hold has not ended.
    /// While a fence stands (after a take-over, until the old holder is seen standing
    /// down), every message waits.
    pub fn holds(&self, modified: SystemTime) -> bool {
        self.fenced()
            || self.hold.is_some_and(|h| {
                modified <= h.before && h.until.age().is_zero() && !h.length.is_zero()
            })
    }

    /// True while every message waits (see [`Fence`]).
    pub fn fenced(&self) -> bool {
        self.fence.as_ref().is_some_and(|f| f.until.age().is_zero())
    }

    pub(super) fn renew(&mut self) {
        self.renewed = Some(Moment::now());
    }

    /// Holds the messages there now for `length` (from now; an earlier hold is extended).
    pub(super) fn hold_now(&mut self, length: Duration) {
        if length.is_zero() {
            return;
        }
        let now = Moment::now();
        let until = Moment {
            at: now.at + length,
            wall: now.wall + length,
        };
        self.hold = Some(match self.hold {
            Some(h) if h.until.at > until.at => Hold {
                before: now.wall,
                ..h
            },
            _ => Hold {
                before: now.wall,
                until,
                length,
            },
        });
    }
}
