//! Keeping the store lock while the daemon runs: renewing it, and taking the role (active or
//! standby) it gives.

use super::*;

/// The thread that keeps the store lock ([`Seat::poll`] every moment): it publishes role
/// changes to [`Shared`] and wakes the loop; a fatal stand-down is kept for the loop.
pub(super) struct LockKeeper {
    seat: Arc<parking_lot::Mutex<Option<Seat>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    fatal: Arc<parking_lot::Mutex<Option<DaemonError>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LockKeeper {
    pub(super) fn start(
        seat: Seat,
        shared: Arc<Shared>,
        wake: tokio::sync::mpsc::Sender<()>,
    ) -> std::io::Result<LockKeeper> {
        let seat = Arc::new(parking_lot::Mutex::new(Some(seat)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fatal = Arc::new(parking_lot::Mutex::new(None));
        let (st, sp, fa) = (seat.clone(), stop.clone(), fatal.clone());
        let thread = std::thread::Builder::new()
            .name("store-lock".into())
            .spawn(move || {
                while !sp.load(Ordering::SeqCst) {
                    let mut guard = st.lock();
                    let Some(seat) = guard.as_mut() else { return };
                    let polled = seat.poll(&shared.store);
                    publish_lease(&shared, seat);
                    if seat.take_released() {
                        let _ = wake.try_send(());
                    }
                    let wait = match polled {
                        Ok(Some(role)) => {
                            take_role(&shared, seat, &role);
                            let _ = wake.try_send(());
                            Duration::ZERO
                        }
                        // A holder looks at the lock often (a newer holder is obeyed within
                        // a moment); a standby every heartbeat or 2 s.
                        Ok(None) if seat.role().answers() => {
                            seat.wait_at_most().min(Duration::from_millis(250))
                        }
                        Ok(None) => seat.wait_at_most(),
                        Err(e) => {
                            *fa.lock() = Some(e);
                            let _ = wake.try_send(());
                            return;
                        }
                    };
                    drop(guard);
                    std::thread::sleep(wait);
                }
            })?;
        Ok(LockKeeper {
            seat,
            stop,
            fatal,
            thread: Some(thread),
        })
    }

    /// Looks at the lock now, on this thread: `Ok(true)` when the role changed, the error
    /// when this holder stood down and is no standby (the lock thread then ends too).
    pub(super) fn poll_now(&self, shared: &Shared) -> Result<bool, DaemonError> {
        if let Some(e) = self.failed() {
            return Err(e);
        }
        let mut guard = self.seat.lock();
        let Some(seat) = guard.as_mut() else {
            return Ok(false);
        };
        let polled = seat.poll(&shared.store);
        publish_lease(shared, seat);
        match polled {
            Ok(Some(role)) => {
                take_role(shared, seat, &role);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }

    /// The error that ended the lock thread (this holder stood down and is no standby).
    pub(super) fn failed(&self) -> Option<DaemonError> {
        self.fatal.lock().take()
    }

    /// Stops the thread and hands the seat back (dropping it lets the lock go).
    pub(super) fn stop(mut self) -> Option<Seat> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seat.lock().take()
    }
}

/// Copies the seat's lease (may it answer now, which messages wait) where the loop reads it.
fn publish_lease(shared: &Shared, seat: &Seat) {
    *shared.lease.lock() = seat.lease().clone();
}

/// A role the lock seat moved to: published ([`apply_role`]) and told to the machines
/// heartbeat with the lock's epoch.
pub(super) fn take_role(shared: &Shared, seat: &Seat, role: &Role) {
    apply_role(shared, role);
    shared
        .machines
        .lock()
        .set_role(role.name(), seat.lock_info().map(|l| l.epoch));
}

/// Publishes the role to the D-Bus side and the read-only state.
pub(super) fn apply_role(shared: &Shared, role: &Role) {
    match role {
        Role::ReadOnly(why) => set_read_only(shared, Some(why.clone())),
        _ => set_read_only(shared, None),
    }
    *shared.role.lock() = role.clone();
}
