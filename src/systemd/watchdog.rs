//! The service watchdog (`WatchdogSec=` in the units, issue 34). systemd hands a daemon its
//! interval in `WATCHDOG_USEC`; the daemon sends `WATCHDOG=1` more often than that, and when
//! it does not, systemd aborts it (SIGABRT) and `Restart=on-failure` starts it again.
//!
//! The ping comes from the daemon's main loop, once per pass that got to its end
//! ([`Watchdog::progressed`]) and per batch of a long pass ([`progress`]), never from a timer
//! of its own: a loop wedged in a pass (a store call that never returns, a lock held
//! forever) stops the pings, which is the point.
//! The loop in turn never sleeps longer than [`Watchdog::wake_within`], so an idle daemon
//! wakes in time to ping.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The interval systemd set (`WATCHDOG_USEC`, for this pid), read once.
fn interval() -> Option<Duration> {
    static EVERY: OnceLock<Option<Duration>> = OnceLock::new();
    *EVERY.get_or_init(|| sd_notify::watchdog_enabled().filter(|d| !d.is_zero()))
}

/// Milliseconds since the first call, and when the last ping went out (same scale).
fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}
static LAST_PING_MS: AtomicU64 = AtomicU64::new(0);

/// Work of the main loop got further (a pass ended, or a batch inside a long pass: a backlog
/// of messages after a take-over is work, not a wedge): tells systemd the daemon is alive, at
/// most once per sixth of the interval. A no-op without a watchdog.
pub fn progress() {
    let Some(every) = interval() else { return };
    let now = now_ms();
    let last = LAST_PING_MS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < (every / 6).as_millis() as u64 {
        return;
    }
    LAST_PING_MS.store(now, Ordering::Relaxed);
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
}

/// The main loop's side of the watchdog. Without `WATCHDOG_USEC` (not under systemd, or no
/// `WatchdogSec=`) it does nothing and never shortens a wait.
#[derive(Debug)]
pub struct Watchdog {
    every: Option<Duration>,
}

impl Watchdog {
    /// Reads the interval systemd set for this process (`WATCHDOG_USEC`, `WATCHDOG_PID`).
    pub fn from_env() -> Watchdog {
        Watchdog { every: interval() }
    }

    /// Whether systemd watches this process.
    pub fn enabled(&self) -> bool {
        self.every.is_some()
    }

    /// The longest the loop may wait before its next pass: a third of the interval (so a
    /// slow pass still pings in time), or forever without a watchdog.
    pub fn wake_within(&self) -> Duration {
        self.every.map_or(Duration::MAX, |d| d / 3)
    }

    /// A pass of the main loop got to its end: [`progress`].
    pub fn progressed(&mut self) {
        progress();
    }
}
