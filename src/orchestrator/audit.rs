//! The audit trail after a crash (issue 34). An inbox message is answered in three steps:
//! the answer is written to `outbox/`, `message_answered` (and `job_created`) is appended to
//! the events file, the message is moved to `processed_inbox/`. A kill -9 (or a power loss,
//! or a watchdog abort) between the first and the second step left an answer with no
//! record: the next orchestrator found the answer ([`super::Earlier::Same`], or a write that
//! found it already there), only moved the message, and recorded nothing.
//!
//! Whoever finds such an answer now makes its record complete before the move:
//! [`complete_record`] looks for the answer's events in every machine's events file of the
//! answer's month (and this month), and appends what is missing. A crash after the record
//! and before the move finds the record there and appends nothing, so no event is written
//! twice by the same store view. (Across machines joined by a sync engine, an events file
//! that has not arrived yet looks missing: the record is then written a second time, by the
//! machine that finished the move. A doubled record is preferred to a lost one; readers
//! count answers by correlation id.)

use super::DAEMON;
use crate::model::{Message, Timestamp};
use crate::store::{Event, Record, Store, StoreError, read_limited};
use std::path::Path;

/// Makes sure the answer at `answer` has its `message_answered` event (and `job_created`
/// when it made a job), appending what is missing. An answer that cannot be read is logged
/// and let go (there is nothing to record from); a record that cannot be written (a full
/// disk) is an error, and the caller leaves the message in the inbox for a later pass.
pub(super) fn complete_record(store: &Store, answer: &Path) -> Result<(), StoreError> {
    let Some(msg) = read_limited(answer)
        .ok()
        .and_then(|b| crate::model::strict::parse_value(&b).ok())
        .and_then(|v| serde_json::from_value::<Message>(v).ok())
    else {
        tracing::warn!(
            "cannot read the answer {} to check its record",
            answer.display()
        );
        return Ok(());
    };
    let cid = msg.correlation_id.as_str();
    let job = msg
        .content
        .get("job_id")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let queue = msg
        .content
        .get("queue")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let (answered, created) = recorded(store, cid, job.as_deref(), msg.processed_time);
    let result = msg.error.as_deref().unwrap_or("done");
    if !answered {
        let mut ev = Event::new(DAEMON, "message_answered")
            .correlation(cid)
            .detail(format!(
                "{} → {result} (recorded after a crash: the answer was written, its record was not)",
                msg.command
            ));
        if let Some(p) = &msg.project {
            ev = ev.project(p);
        }
        store
            .try_record(Record::info(
                ev,
                format!(
                    "answered {} from inbox: {result} (record completed after a crash)",
                    msg.command
                ),
            ))
            .map_err(|e| unwritten(store, e))?;
    }
    if let (Some(job), false) = (job, created) {
        let mut ev = Event::new(DAEMON, "job_created").job(&job).correlation(cid);
        if let Some(q) = &queue {
            ev = ev.queue(q);
        }
        store
            .try_record(Record::info(
                ev,
                "job created (record completed after a crash)",
            ))
            .map_err(|e| unwritten(store, e))?;
    }
    Ok(())
}

/// A record that could not be written, as the error that keeps its message in the inbox.
pub(super) fn unwritten(store: &Store, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: store.events_path(&Timestamp::now()),
        source,
    }
}

/// Whether the events of this month (and of `also`'s month) hold `message_answered` for
/// `cid` and `job_created` for `job`.
pub(super) fn recorded(
    store: &Store,
    cid: &str,
    job: Option<&str>,
    also: Option<Timestamp>,
) -> (bool, bool) {
    let (mut answered, mut created) = (false, false);
    let mut months = vec![Timestamp::now()];
    months.extend(also);
    let mut seen = std::collections::BTreeSet::new();
    for at in months {
        if !seen.insert(at.0.format("%Y-%m").to_string()) {
            continue;
        }
        let Ok(events) = store.read_events(&at) else {
            continue;
        };
        for e in events.entries.iter().map(|e| &e.entry) {
            match e.event.as_str() {
                "message_answered" if e.correlation_id.as_deref() == Some(cid) => answered = true,
                "job_created" if job.is_some() && e.job_id.as_deref() == job => created = true,
                _ => {}
            }
        }
    }
    (answered, created)
}

/// Whether `job_created` must be recorded for a job an answer names: always for a job made
/// now; for one that existed already (made before a crash that came before its answer) only
/// when no record of it is found.
pub(super) fn job_needs_record(store: &Store, cid: &str, job: &str, new: bool) -> bool {
    new || !recorded(store, cid, Some(job), None).1
}
