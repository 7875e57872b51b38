//! Completion handling off the inbox's path (issue 33): finished jobs are handled a batch
//! at a time ([`super::completion::process_batch`]), with the completion state locked only
//! to take a batch and to record it, never while a job is read or written. The daemon runs
//! the batches on a task of their own ([`run_background`]), so an inbox message is answered
//! while a backlog of any size is handled; the inotify watcher, which reports finished
//! jobs into the same state, never waits on a batch either.

use super::completion::{BATCH, Handled, finish_batch, process_batch};
use super::service::Shared;
use crate::store::StoreError;
use std::sync::atomic::{AtomicBool, Ordering};

/// One batch. `Ok(None)` when there was nothing to handle; a write error is returned after
/// the rest of the batch is handled and recorded.
pub fn run_batch(shared: &Shared) -> Result<Option<Vec<Handled>>, StoreError> {
    let store = &shared.store;
    let batch = shared.completions.lock().next_batch(store, BATCH);
    if batch.is_empty() {
        return Ok(None);
    }
    let mut out = process_batch(store, &batch);
    finish_batch(store, &mut shared.completions.lock(), &batch, &out);
    match out.error.take() {
        Some(e) => Err(e),
        None => Ok(Some(out.handled)),
    }
}

/// Every batch until none is left (a `Sweep`, a pass run outside the daemon). Fails with
/// the first write error after handling everything else.
pub fn run_all(shared: &Shared) -> Result<Vec<Handled>, StoreError> {
    let mut done = Vec::new();
    let mut error = None;
    loop {
        match run_batch(shared) {
            Ok(None) => break,
            Ok(Some(mut h)) => done.append(&mut h),
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

/// The daemon's completion task: batches until none is left, `stop` is set, this process
/// no longer answers (a standby, a newer lock holder elsewhere). Each batch counts as
/// activity (the idle timer waits for a backlog). Returns how many jobs it handled.
pub fn run_background(shared: &Shared, stop: &AtomicBool) -> usize {
    let lock_path = shared.store.lock_path();
    let stale_after = shared.store.config().orchestrator.lock_stale_after();
    let mut handled = 0;
    while !stop.load(Ordering::Relaxed) {
        let answers = shared.role.lock().answers();
        if !answers || super::lock::holder_elsewhere(&lock_path, stale_after).is_some() {
            break;
        }
        match run_batch(shared) {
            Ok(None) => break,
            Ok(Some(h)) => {
                handled += h.len();
                shared.activity.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // The job is looked at again at the next sweep; the others go on.
                tracing::error!("completion handling: {e}");
                shared.activity.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    handled
}

/// The daemon's completion thread: it runs [`run_background`] whenever a pass asks
/// ([`Worker::want`]), so the loop only answers the inbox. A request made while a run is
/// under way is never lost: the thread looks at the request flag under its lock before it
/// sleeps.
pub struct Worker {
    state: std::sync::Arc<(parking_lot::Mutex<WorkerState>, parking_lot::Condvar)>,
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct WorkerState {
    wanted: bool,
    stop: bool,
}

impl Worker {
    /// Starts the thread; after a run that handled something it sends on `wake` (the loop
    /// notes the work and asks again, for what came meanwhile).
    pub fn start(
        shared: std::sync::Arc<Shared>,
        wake: tokio::sync::mpsc::Sender<()>,
    ) -> std::io::Result<Worker> {
        let state = std::sync::Arc::new((
            parking_lot::Mutex::new(WorkerState::default()),
            parking_lot::Condvar::new(),
        ));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("completions".into())
            .spawn(move || {
                loop {
                    {
                        let (lock, cv) = &*st;
                        let mut s = lock.lock();
                        while !s.wanted && !s.stop {
                            cv.wait(&mut s);
                        }
                        if s.stop {
                            break;
                        }
                        s.wanted = false;
                    }
                    if run_background(&shared, &sp) > 0 {
                        let _ = wake.try_send(());
                    }
                }
            })?;
        Ok(Worker {
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// Asks for a run (now, or right after the one under way).
    pub fn want(&self) {
        let (lock, cv) = &*self.state;
        lock.lock().wanted = true;
        cv.notify_one();
    }

    /// Stops the thread after the batch under way (a batch is bounded) and waits for it
    /// (also when dropped).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let (lock, cv) = &*self.state;
        lock.lock().stop = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
