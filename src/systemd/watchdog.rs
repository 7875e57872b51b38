//! The service watchdog (`WatchdogSec=` in the units, issue 34). systemd hands a daemon its
//! interval in `WATCHDOG_USEC`; the daemon sends `WATCHDOG=1` more often than that, and when
//! it does not, systemd aborts it (SIGABRT) and `Restart=on-failure` starts it again.
//!
//! The ping comes from the daemon's main loop, once per pass that got to its end
//! ([`Watchdog::progressed`]), never from a timer of its own: a loop wedged in a pass (a
//! store call that never returns, a lock held forever) stops the pings, which is the point.
//! The loop in turn never sleeps longer than [`Watchdog::wake_within`], so an idle daemon
//! wakes in time to ping.

use std::time::{Duration, Instant};

/// The main loop's side of the watchdog. Without `WATCHDOG_USEC` (not under systemd, or no
/// `WatchdogSec=`) it does nothing and never shortens a wait.
#[derive(Debug)]
pub struct Watchdog {
    every: Option<Duration>,
    last: Option<Instant>,
}

impl Watchdog {
    /// Reads the interval systemd set for this process (`WATCHDOG_USEC`, `WATCHDOG_PID`).
    pub fn from_env() -> Watchdog {
        Watchdog {
            every: sd_notify::watchdog_enabled().filter(|d| !d.is_zero()),
            last: None,
        }
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

    /// A pass of the main loop got to its end: tells systemd the daemon is alive (at most
    /// once per sixth of the interval; the loop may spin faster than that under load).
    pub fn progressed(&mut self) {
        let Some(every) = self.every else { return };
        if self.last.is_some_and(|t| t.elapsed() < every / 6) {
            return;
        }
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        self.last = Some(Instant::now());
    }
}
