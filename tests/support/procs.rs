//! Real daemon processes in a test: killed on drop, and a polling wait.
#![allow(dead_code)]

use std::process::Child;
use std::time::{Duration, Instant};

/// Kills the child on drop (and continues it first, in case the test stopped it).
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Sends `s` to the child.
    pub fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), s).unwrap();
    }
}

/// Polls `cond` every 100 ms; fails the test naming `what` after `limit`.
pub fn wait(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
