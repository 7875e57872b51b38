//! Processing the inbox: claiming each file, validating, routing, writing the answer and
//! moving the file, with the settle and retry rules for files that do not parse yet.

use super::*;

/// A file that does not parse is left alone this long after its last change, in case its
/// writer is still writing.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) fn recently_modified(path: &Path) -> bool {
    safe::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age < SETTLE)
}

/// Processes one inbox file: claim it ([`claims`]), validate, route, write the answer, move
/// the file. A message deferred or failed goes back into the inbox under its own name.
pub fn process_inbox_file(store: &Store, path: &Path) -> Result<FileOutcome, StoreError> {
    let claimed = match claims::claim(path) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(FileOutcome::Gone),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileOutcome::Gone),
        Err(source) => {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let result = process_claimed(
        store,
        &Inboxed {
            file: &claimed,
            orig: path,
        },
    );
    match &result {
        Ok(FileOutcome::Deferred(_)) | Err(_) => claims::unclaim(&claimed, path),
        _ => {}
    }
    match result {
        Ok(FileOutcome::Deferred(_)) => Ok(FileOutcome::Deferred(path.to_path_buf())),
        other => other,
    }
}

/// An inbox message being processed: the file (its claim) and its name in the inbox.
#[derive(Debug, Clone, Copy)]
pub(super) struct Inboxed<'a> {
    /// Where the bytes are now.
    file: &'a Path,
    /// `inbox/<name>`: what the message is called (fallback id, `processed_inbox/` name).
    orig: &'a Path,
}

pub(super) fn process_claimed(store: &Store, m: &Inboxed) -> Result<FileOutcome, StoreError> {
    let path = m.file;
    let bytes = match read_limited(path) {
        Ok(b) => b,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileOutcome::Gone);
        }
        Err(e) => {
            // Unreadable (permissions): answer with the reason, keep the file.
            let id = fallback_id(m.orig);
            let err = RouteError::Failed(e.to_string());
            let response = unparsed_error(id, err.clone(), None, path);
            return finish(
                store,
                m,
                Outcome {
                    response,
                    job: None,
                    error: Some(err),
                },
            );
        }
    };
    let raw: Option<Value> = serde_json::from_slice(&bytes).ok();
    if raw.is_none() && recently_modified(path) {
        return Ok(FileOutcome::Deferred(path.to_path_buf()));
    }
    let parsed: Result<Message, StoreError> = store.parse_doc(DocKind::Message, m.orig, &bytes);
    let outcome = match parsed {
        Ok(msg) => {
            tracing::Span::current().record("correlation_id", msg.correlation_id.as_str());
            match earlier_answer(
                store,
                &msg.correlation_id,
                &msg.command,
                &msg.queue_time,
                msg.user.as_deref(),
            ) {
                Earlier::None => {}
                Earlier::Same(answer) => {
                    audit::complete_record(store, &answer)?;
                    move_to_processed(store, m)?;
                    return Ok(FileOutcome::AlreadyAnswered(msg.correlation_id));
                }
                Earlier::Other => {
                    let err = RouteError::Invalid(format!(
                        "correlation_id {} is already in use; send this message with a new correlation_id",
                        msg.correlation_id
                    ));
                    let mut response =
                        unparsed_error(msg.correlation_id.clone(), err.clone(), None, path);
                    response.command = msg.command.clone();
                    response.queue_time = msg.queue_time;
                    response.project = msg.project.clone();
                    let o = Outcome {
                        response,
                        job: None,
                        error: Some(err),
                    };
                    return finish_as(store, m, o, &duplicate_name(store, &msg.correlation_id));
                }
            }
            match caller_for_file(store, &msg) {
                Ok(who) => handle(store, &msg, &who),
                Err(e) => {
                    let mut o = handle(store, &msg, &Caller::Trusted);
                    o.response.status = MessageStatus::Error;
                    o.response.content = Map::new();
                    o.response.error = Some(e.to_string());
                    o.job = None;
                    o.error = Some(e);
                    o
                }
            }
        }
        Err(e) => {
            let id = raw
                .as_ref()
                .and_then(|v| v.get("correlation_id"))
                .and_then(Value::as_str)
                .filter(|c| is_safe_id(c))
                .map(str::to_string)
                .unwrap_or_else(|| fallback_id(m.orig));
            tracing::Span::current().record("correlation_id", id.as_str());
            let message = match &e {
                StoreError::Invalid { rejection, .. } => {
                    format!("Invalid message format: {rejection}")
                }
                other => format!("Invalid message format: {other}"),
            };
            let err = RouteError::Invalid(message);
            let response = unparsed_error(id.clone(), err.clone(), raw.as_ref(), path);
            let qt = response.queue_time;
            match earlier_answer(store, &id, &response.command, &qt, response.user.as_deref()) {
                Earlier::None => {}
                Earlier::Same(answer) => {
                    audit::complete_record(store, &answer)?;
                    move_to_processed(store, m)?;
                    return Ok(FileOutcome::AlreadyAnswered(id));
                }
                Earlier::Other => {
                    let o = Outcome {
                        response,
                        job: None,
                        error: Some(err),
                    };
                    return finish_as(store, m, o, &duplicate_name(store, &id));
                }
            }
            Outcome {
                response,
                job: None,
                error: Some(err),
            }
        }
    };
    finish(store, m, outcome)
}

pub(super) fn finish(
    store: &Store,
    m: &Inboxed,
    outcome: Outcome,
) -> Result<FileOutcome, StoreError> {
    // The one id rule, whatever schema the store carries: the answer's name is always safe.
    let name = format!(
        "{}.json",
        crate::model::derive_safe_id(&outcome.response.correlation_id)
    );
    finish_as(store, m, outcome, &name)
}

/// Writes the answer as `outbox/<name>` (never replacing one: an answer there, or already
/// taken to `processed_outbox/`, was written by another orchestrator that processed the
/// same message, and this one does nothing more), then moves the message to
/// `processed_inbox/`.
pub(super) fn finish_as(
    store: &Store,
    m: &Inboxed,
    outcome: Outcome,
    name: &str,
) -> Result<FileOutcome, StoreError> {
    let mut outcome = outcome;
    // An answer quotes a bounded part of what it complains about (issue 9: no amplification).
    if let Some(e) = outcome.response.error.as_mut()
        && e.len() > 4 * crate::schema::MAX_QUOTE_BYTES
    {
        *e = crate::schema::quote_limited(e, 4 * crate::schema::MAX_QUOTE_BYTES);
    }
    let id = outcome.response.correlation_id.clone();
    let out = store.outbox().join(name);
    let answered_elsewhere = |written: bool| -> Result<Option<FileOutcome>, StoreError> {
        if written {
            return Ok(None);
        }
        tracing::info!("{id}: answered by another orchestrator meanwhile; not answering again");
        // That orchestrator may have died before recording it (the message is still here).
        let done = store.processed_outbox().join(name);
        audit::complete_record(store, if safe::exists(&out) { &out } else { &done })?;
        move_to_processed(store, m)?;
        Ok(Some(FileOutcome::AlreadyAnswered(id.clone())))
    };
    if safe::exists(&store.processed_outbox().join(name))
        && let Some(done) = answered_elsewhere(false)?
    {
        return Ok(done);
    }
    match store.write_doc_new(DocKind::Message, &out, &outcome.response) {
        Err(StoreError::Invalid { rejection, .. }) => {
            // The answer itself does not pass the schema (a loosened or odd store copy):
            // answer with the bare error instead, so the message is never left unanswered.
            let r = &mut outcome.response;
            r.status = MessageStatus::Error;
            r.content = Map::new();
            r.project = r.project.take().filter(|p| is_safe_id(p));
            r.command = "unknown".into();
            r.error = Some(crate::schema::quote_limited(
                &format!(
                    "{} (the full answer failed its schema: {rejection})",
                    r.error.as_deref().unwrap_or("cannot answer")
                ),
                4 * crate::schema::MAX_QUOTE_BYTES,
            ));
            if let Some(done) = answered_elsewhere(store.write_doc_new(
                DocKind::Message,
                &out,
                &outcome.response,
            )?)? {
                return Ok(done);
            }
        }
        Ok(written) => {
            if let Some(done) = answered_elsewhere(written)? {
                return Ok(done);
            }
        }
        Err(e) => return Err(e),
    }
    // Recorded as soon as the answer is durable, before the message leaves the inbox: a
    // crash after the move would lose the record for good (the message, processed, is never
    // looked at again), while a crash before it brings the message back to an answer that
    // exists, which is not answered or recorded twice. The same holds when the record
    // cannot be written (a full disk): the message stays in the inbox, and a later pass
    // completes the record (audit::complete_record) before it moves the message.
    record_answer(store, &id, &outcome, None).map_err(|e| audit::unwritten(store, e))?;
    move_to_processed(store, m)?;
    Ok(FileOutcome::Answered(Box::new(outcome)))
}

/// Records an answered message once (journal and events): `message_answered`, then
/// `job_created` when it made a job. `via` says how a message that did not come through the
/// inbox arrived (`D-Bus uid 1000`). An error says a line could not be written now; nothing
/// is kept for later, so the caller decides (the inbox leaves the message where it is).
pub(crate) fn record_answer(
    store: &Store,
    cid: &str,
    outcome: &Outcome,
    via: Option<&str>,
) -> std::io::Result<()> {
    answer_records(store, cid, outcome, via)
        .into_iter()
        .try_for_each(|r| store.try_record(r))
}

/// [`record_answer`] for an answer given over D-Bus: a line a full disk refuses is kept and
/// written when there is room ([`Store::record`]). Says whether every line is on disk now;
/// only then may anything that vouches for the answer (its outbox copy) be written.
pub(crate) fn record_given_answer(store: &Store, cid: &str, outcome: &Outcome, via: &str) -> bool {
    let mut all = true;
    for r in answer_records(store, cid, outcome, Some(via)) {
        all &= store.record(r);
    }
    all
}

fn answer_records(store: &Store, cid: &str, outcome: &Outcome, via: Option<&str>) -> Vec<Record> {
    let r = &outcome.response;
    let result = r.error.as_deref().unwrap_or("done");
    let mut ev = Event::new(DAEMON, "message_answered").correlation(cid);
    if let Some(p) = &r.project {
        ev = ev.project(p);
    }
    let (detail, text) = match via {
        None => (
            format!("{} → {result}", r.command),
            format!("answered {} from inbox: {result}", r.command),
        ),
        Some(v) => (
            format!("{} ({v}) → {result}", r.command),
            format!("answered {} over {v}: {result}", r.command),
        ),
    };
    let mut records = vec![Record::info(ev.detail(detail), text)];
    // A job that existed already was made before a crash that came before its answer: its
    // record may be missing too.
    if let Some(job) = outcome
        .job
        .as_ref()
        .filter(|j| audit::job_needs_record(store, cid, &j.id, j.new))
    {
        records.push(Record::info(
            Event::new(DAEMON, "job_created")
                .job(&job.id)
                .queue(&job.queue)
                .correlation(cid),
            "job created",
        ));
    }
    records
}

/// Whether a message's correlation id was answered before.
pub(super) enum Earlier {
    /// Never.
    None,
    /// Answered, and the answer (at this path) is for this very message (same command and
    /// queue_time): a crash came between answering and moving it.
    Same(PathBuf),
    /// Answered for a different message that used the same id.
    Other,
}

pub(super) fn earlier_answer(
    store: &Store,
    id: &str,
    command: &str,
    queue_time: &Timestamp,
    user: Option<&str>,
) -> Earlier {
    let name = format!("{id}.json");
    for dir in [store.outbox(), store.processed_outbox()] {
        let p = dir.join(&name);
        if !safe::exists(&p) {
            continue;
        }
        #[derive(serde::Deserialize)]
        struct Head {
            command: String,
            queue_time: String,
            #[serde(default)]
            user: Option<String>,
        }
        let head = read_limited(&p)
            .ok()
            .and_then(|b| crate::model::strict::parse_value(&b).ok())
            .and_then(|v| serde_json::from_value::<Head>(v).ok());
        return match head {
            Some(h)
                if h.command == command
                    && h.queue_time == queue_time.to_string()
                    && h.user.as_deref() == user =>
            {
                Earlier::Same(p)
            }
            _ => Earlier::Other,
        };
    }
    Earlier::None
}

/// A free outbox name for the error answer to a message that reused a correlation id.
pub(super) fn duplicate_name(store: &Store, id: &str) -> String {
    (1..)
        .map(|n| format!("{id}.duplicate-{n}.json"))
        .find(|n| {
            !safe::exists(&store.outbox().join(n))
                && !safe::exists(&store.processed_outbox().join(n))
        })
        .unwrap_or_else(|| format!("{id}.duplicate.json"))
}

/// Moves an inbox file to `processed_inbox/` (never overwriting: a name taken by an older
/// message gets a numbered suffix).
pub(super) fn move_to_processed(store: &Store, m: &Inboxed) -> Result<(), StoreError> {
    let path = m.file;
    let dir = store.processed_inbox();
    safe::create_dir_all(&dir).map_err(|source| StoreError::Io {
        path: dir.clone(),
        source,
    })?;
    let name = m
        .orig
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut target = dir.join(&name);
    let mut n = 1;
    loop {
        match move_no_replace(path, &target) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let stem = name.strip_suffix(".json").unwrap_or(&name);
                target = dir.join(format!("{stem}.{n}.json"));
                n += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(StoreError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
}

/// Moves a sync engine's conflict copy to `conflicts/messaging-inbox/`, reporting it by the
/// engine's name.
pub(super) fn set_aside(store: &Store, path: &Path) -> Result<PathBuf, StoreError> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    set_aside_because(store, path, &crate::store::conflicts::conflict_label(&name))
}

/// Moves an inbox entry that cannot be a message (a conflict copy; a link, FIFO or other
/// non-regular file, which is never followed or read) to `conflicts/messaging-inbox/`,
/// reporting it by name.
pub(super) fn set_aside_because(
    store: &Store,
    path: &Path,
    what: &str,
) -> Result<PathBuf, StoreError> {
    let dir = store.conflicts_dir().join("messaging-inbox");
    safe::create_dir_all(&dir).map_err(|source| StoreError::Io {
        path: dir.clone(),
        source,
    })?;
    let target = dir.join(path.file_name().unwrap_or_default());
    move_no_replace(path, &target)
        .or_else(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                safe::remove_file(path)
            } else {
                Err(e)
            }
        })
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    store.record(Record::warn(
        Event::new(DAEMON, "conflict_set_aside").detail(format!("{what}: {}", path.display())),
        format!(
            "{what} {} set aside in {}; resolve it by hand",
            path.display(),
            dir.display()
        ),
    ));
    Ok(target)
}

/// Processes up to `limit` inbox messages, oldest `queue_time` first (file name breaks ties;
/// unparsable files sort by modification time). Conflict copies are set aside.
pub fn process_inbox(store: &Store, limit: usize) -> Result<Vec<FileOutcome>, StoreError> {
    process_inbox_while(store, limit, &|| true)
}

/// [`process_inbox`], asking `keep_going` before each message: the daemon stops a batch as
/// soon as another orchestrator holds the store lock (it was paused and a standby took over).
pub fn process_inbox_while(
    store: &Store,
    limit: usize,
    keep_going: &dyn Fn() -> bool,
) -> Result<Vec<FileOutcome>, StoreError> {
    process_inbox_held(store, limit, keep_going, &|_| false)
}

/// [`process_inbox_while`], leaving the messages `held` names by their modification time
/// (after a take-over: those the previous holder may have answered, see
/// [`crate::orchestrator::standby::Lease`]) in the inbox, reported as deferred.
pub fn process_inbox_held(
    store: &Store,
    limit: usize,
    keep_going: &dyn Fn() -> bool,
    held: &dyn Fn(std::time::SystemTime) -> bool,
) -> Result<Vec<FileOutcome>, StoreError> {
    let inbox = store.inbox();
    let scan = scan_dir(&inbox).map_err(|source| StoreError::Io {
        path: inbox.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for c in scan.conflicts {
        match set_aside(store, &c) {
            Ok(to) => out.push(FileOutcome::SetAside(to)),
            Err(e) => {
                // Never fatal: the messages still get answered.
                tracing::error!("{e}");
                out.push(FileOutcome::Failed(c, e.to_string()));
            }
        }
    }
    for r in scan.refused {
        let what = "not a regular file (a symbolic link, FIFO or device; never followed or read):";
        match set_aside_because(store, &r, what) {
            Ok(to) => out.push(FileOutcome::SetAside(to)),
            Err(e) => {
                tracing::error!("{e}");
                out.push(FileOutcome::Failed(r, e.to_string()));
            }
        }
    }
    let mut keyed: Vec<(String, PathBuf)> = scan
        .documents
        .into_iter()
        .map(|p| (sort_key(&p), p))
        .collect();
    keyed.sort();
    // Messages that failed moments ago wait their turn (RETRY_FAILED_AFTER), so they never
    // fill every batch and starve the messages behind them.
    let now = std::time::Instant::now();
    let mut failed = FAILED_AT.lock();
    failed.retain(|p, at| now.duration_since(*at) < RETRY_FAILED_AFTER && safe::exists(p));
    let mut waiting = Vec::new();
    let ready: Vec<PathBuf> = keyed
        .into_iter()
        .map(|(_, p)| p)
        .filter(|p| !failed.contains_key(p))
        .filter(|p| {
            let modified = safe::symlink_metadata(p).and_then(|m| m.modified());
            let wait = modified.is_ok_and(held);
            if wait {
                waiting.push(p.clone());
            }
            !wait
        })
        .take(limit)
        .collect();
    if !waiting.is_empty() {
        tracing::debug!(
            "{} inbox messages wait for the previous holder's answers",
            waiting.len()
        );
        out.extend(waiting.into_iter().map(FileOutcome::Deferred));
    }
    for p in ready {
        if !keep_going() {
            break;
        }
        // Everything said about this message carries its file and, once read, its
        // correlation id (journal fields FILE=, CORRELATION_ID=).
        let span = tracing::info_span!(
            "message",
            file = %p.file_name().unwrap_or_default().to_string_lossy(),
            correlation_id = tracing::field::Empty
        );
        let _span = span.enter();
        // Each message fails alone: one that cannot be answered never stops the others.
        match process_inbox_file(store, &p) {
            Ok(o) => out.push(o),
            Err(e) => {
                failed.insert(p.clone(), std::time::Instant::now());
                store.record(Record::new(
                    Level::Error,
                    Event::new(DAEMON, "message_failed").detail(crate::schema::quote_limited(
                        &format!("{}: {e}", p.display()),
                        crate::schema::MAX_QUOTE_BYTES,
                    )),
                    format!("cannot answer {}: {e}", p.display()),
                ));
                out.push(FileOutcome::Failed(p, e.to_string()));
            }
        }
    }
    Ok(out)
}

/// How long an inbox message whose handling failed (an I/O error, a linked folder) is left
/// out of the sweeps before it is tried again.
pub const RETRY_FAILED_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Inbox messages that failed, and when (this process only; a restart tries them again).
pub(super) static FAILED_AT: parking_lot::Mutex<
    std::collections::BTreeMap<PathBuf, std::time::Instant>,
> = parking_lot::Mutex::new(std::collections::BTreeMap::new());

/// `queue_time` when the file has one (cheap: it is read again when processed), else the
/// modification time in the same format, so both sort together.
pub(super) fn sort_key(p: &Path) -> String {
    #[derive(serde::Deserialize)]
    struct Qt {
        queue_time: String,
    }
    // Only small files are read here; big ones sort by modification time.
    let small = safe::symlink_metadata(p)
        .map(|m| m.len() <= 1 << 20)
        .unwrap_or(false);
    let from_doc = small
        .then(|| read_limited(p).ok())
        .flatten()
        .and_then(|b| serde_json::from_slice::<Qt>(&b).ok())
        .and_then(|q| q.queue_time.parse::<Timestamp>().ok());
    let t = from_doc.or_else(|| {
        let m = safe::symlink_metadata(p).ok()?.modified().ok()?;
        Some(Timestamp(chrono::DateTime::<chrono::Utc>::from(m)))
    });
    format!(
        "{}|{}",
        t.map(|t| t.0.format("%Y%m%d%H%M%S%.9f").to_string())
            .unwrap_or_default(),
        p.display()
    )
}
