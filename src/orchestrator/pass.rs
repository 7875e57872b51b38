//! One pass of the orchestrator over the store: the inbox (in batches of
//! `max_messages_per_loop`) and, when asked, finished jobs, answering what it did (a
//! [`CycleReport`]); and the sweep an admin asks for over D-Bus. The daemon runs passes on
//! its events and timers; the service's front ends announce their reports. (Apart from
//! both, so that neither uses the other to reach it.)

use super::caller::caller_for_uid;
use super::service::{CycleReport, Shared};
use super::{FileOutcome, RouteError, process_inbox_held};
use crate::model::Timestamp;
use crate::store::StoreError;
use std::sync::atomic::Ordering;

/// One pass: the inbox (in batches of `max_messages_per_loop`) and, when enabled, finished
/// jobs. Returns how many items were handled.
pub fn cycle(shared: &Shared) -> Result<usize, StoreError> {
    cycle_report(shared).map(|r| r.handled)
}

/// [`cycle`], also counting deferred files.
pub fn cycle_report(shared: &Shared) -> Result<CycleReport, StoreError> {
    pass(shared, true)
}

/// One pass over the inbox only: the daemon handles finished jobs on a task of its own
/// ([`super::backlog::run_background`]), so no backlog ever delays an answer.
pub fn inbox_pass(shared: &Shared) -> Result<CycleReport, StoreError> {
    pass(shared, false)
}

fn pass(shared: &Shared, with_completions: bool) -> Result<CycleReport, StoreError> {
    let mut deferred = 0;
    let mut answered = Vec::new();
    let store = &shared.store;
    let limit = store.config().orchestrator.max_messages_per_loop.max(1);
    let mut handled = 0;
    // Event lines a full disk held back land as soon as there is room.
    store.retry_unwritten_events();
    loop {
        let _guard = shared.routing.lock();
        let lock_path = store.lock_path();
        let stale_after = store.config().orchestrator.lock_stale_after();
        let ours = || match super::lock::holder_elsewhere(&lock_path, stale_after) {
            // A holder whose lease ran out (stopped, suspended, a full disk) answers nothing
            // until its lock thread has written the lock again and settled.
            None if shared.lapsed_reason().is_some() => {
                tracing::warn!("the store lock's lease ran out; not answering until it is renewed");
                false
            }
            None => true,
            Some(h) => {
                tracing::warn!(
                    "the store lock is held by PID {} on {} now; not answering",
                    h.pid,
                    h.host
                );
                false
            }
        };
        if !ours() {
            break;
        }
        let lease = shared.lease.lock().clone();
        let outcomes = process_inbox_held(store, limit, &ours, &|m| lease.holds(m))?;
        drop(_guard);
        let n = outcomes.len();
        for o in &outcomes {
            // A failed message stays in the inbox: like a deferred one, it ends the batch
            // loop (no busy retry), and the next sweep tries it again.
            if matches!(o, FileOutcome::Deferred(_) | FileOutcome::Failed(..)) {
                deferred += 1;
            }
            if let FileOutcome::Answered(o) = o {
                shared.messages_processed.fetch_add(1, Ordering::Relaxed);
                let r = &o.response;
                if o.error.is_some() {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                }
                answered.push((
                    r.correlation_id.clone(),
                    r.command.clone(),
                    if o.error.is_some() { "error" } else { "done" }.to_string(),
                    r.project.clone().unwrap_or_default(),
                    o.job.clone().filter(|j| j.new),
                ));
                if o.job.as_ref().is_some_and(|j| j.new) {
                    shared.jobs_created.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        handled += n - deferred.min(n);
        // A batch answered: a long backlog is progress for systemd's watchdog, not a wedge.
        crate::systemd::watchdog::progress();
        // PRD §6.1: after each batch of at most max_messages_per_loop, finished jobs; a
        // flood of messages never starves completion handling.
        if with_completions && store.config().orchestrator.enable_job_completion_handler {
            handled += super::backlog::run_all(shared)?.len();
        }
        if n < limit || deferred > 0 {
            break;
        }
    }
    *shared.last_loop.lock() = Some(Timestamp::now());
    Ok(CycleReport {
        handled,
        deferred,
        answered,
    })
}

/// A sweep asked for by Unix user `uid` (admins only): the inbox and every finished job now,
/// the completion backstop included. Returns what the pass did.
pub fn sweep(shared: &Shared, uid: u32) -> Result<CycleReport, RouteError> {
    let who = caller_for_uid(&shared.store, uid, shared.own_uid, None)?;
    who.require_admin(crate::permissions::Denied::Sweep)?;
    if let Some(why) = shared.standby_reason() {
        return Err(RouteError::Failed(why));
    }
    if let Some(why) = shared.read_only_reason() {
        return Err(RouteError::Failed(format!(
            "orchestratord is read-only for now: {why}"
        )));
    }
    shared.completions.lock().request_full_sweep();
    cycle_report(shared).map_err(|e| RouteError::Failed(e.to_string()))
}
