//! The store's own record of what happened where (DESIGN §5, PRD §13.1):
//! one JSON line per event in `logs/events-YYYY-MM.jsonl`, readable from any synced machine.
//!
//! An action is recorded once, with [`Store::record`]: the one call writes the journal (a
//! tracing event whose fields are the event's `job_id`, `queue`, `correlation_id` and
//! `project`, inside whatever span the daemon is in), the event line, and — when the record
//! names one — the line of the daemon's own log under `logs/`.

use super::perhost::{HostLine, host_path, read_lines};
use super::{Store, append_line_locked};
use crate::model::Timestamp;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One event line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened.
    pub timestamp: Timestamp,
    /// What happened: `message_answered`, `job_created`, `job_started`, `job_finished`,
    /// `job_failed`, `daemon_started`, `daemon_stopped`, …
    pub event: String,
    /// Machine it happened on.
    pub host: String,
    /// Process that wrote it (`orchestratord`, `queue-manager`, `agent-worker`, …).
    pub daemon: String,
    /// Its PID.
    pub pid: u32,
    /// Job concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Queue concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Message concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Project concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Names this machine outright (two "machines" on one computer in tests).
pub const HOSTNAME_ENV: &str = "AGENTSTORE_HOSTNAME";

/// This machine's name in the store, the key of its heartbeats, lock, claims and per-machine
/// files: `$AGENTSTORE_HOSTNAME` when set (to a safe file name), else one made from its
/// machine id ([`super::identity::machine_key`]: not its host name, which clones share and
/// renames change).
pub fn hostname() -> String {
    super::identity::machine_key()
}

impl Event {
    /// A new event of kind `event` written by `daemon` on this host, now.
    pub fn new(daemon: &str, event: &str) -> Event {
        Event {
            timestamp: Timestamp::now(),
            event: event.to_string(),
            host: hostname(),
            daemon: daemon.to_string(),
            pid: std::process::id(),
            job_id: None,
            queue: None,
            correlation_id: None,
            project: None,
            detail: None,
        }
    }

    /// Sets the job.
    pub fn job(mut self, id: &str) -> Event {
        self.job_id = Some(id.to_string());
        self
    }

    /// Sets the queue.
    pub fn queue(mut self, q: &str) -> Event {
        self.queue = Some(q.to_string());
        self
    }

    /// Sets the message.
    pub fn correlation(mut self, id: &str) -> Event {
        self.correlation_id = Some(id.to_string());
        self
    }

    /// Sets the project.
    pub fn project(mut self, p: &str) -> Event {
        self.project = Some(p.to_string());
        self
    }

    /// Sets the detail text.
    pub fn detail(mut self, d: impl Into<String>) -> Event {
        self.detail = Some(d.into());
        self
    }
}

/// How loud a record is in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Normal operation.
    Info,
    /// Something went wrong with one job or message; the daemon goes on.
    Warn,
    /// Something went wrong with the daemon's own work.
    Error,
}

/// One action to record (see [`Store::record`]).
#[derive(Debug, Clone)]
pub struct Record {
    level: Level,
    text: String,
    event: Event,
    line: bool,
    log: Option<String>,
}

impl Record {
    /// `event` at `level`, told as `text` in the journal (and in the daemon log, if one is
    /// named with [`Record::log`]).
    pub fn new(level: Level, event: Event, text: impl Into<String>) -> Record {
        Record {
            level,
            text: text.into(),
            event,
            line: true,
            log: None,
        }
    }

    /// [`Record::new`] at [`Level::Info`].
    pub fn info(event: Event, text: impl Into<String>) -> Record {
        Record::new(Level::Info, event, text)
    }

    /// [`Record::new`] at [`Level::Warn`].
    pub fn warn(event: Event, text: impl Into<String>) -> Record {
        Record::new(Level::Warn, event, text)
    }

    /// Also writes `text` to the daemon log `logs/<file>`.
    pub fn log(mut self, file: &str) -> Record {
        self.log = Some(file.to_string());
        self
    }

    /// Writes no event line (the event's fields still label the journal entry): for what
    /// only the journal and the daemon log show.
    pub fn no_event_line(mut self) -> Record {
        self.line = false;
        self
    }
}

impl Store {
    /// Records one action everywhere it is read: the journal (tracing), the events file
    /// and, when named, the daemon log. Failures to write are logged, never fatal; an event
    /// line that does not fit on a full disk is kept in memory and written first by the next
    /// event, or by [`Store::retry_unwritten_events`] (so a full disk delays the audit trail
    /// of a running daemon instead of cutting holes in it). Says whether the event line is
    /// on disk now, for a caller that holds back what the record vouches for until it is.
    pub fn record(&self, r: Record) -> bool {
        self.journal(&r);
        let written = !r.line || self.record_event(&r.event);
        if let Some(file) = &r.log {
            self.append_daemon_log(file, &r.text);
        }
        written
    }

    /// [`Store::record`] for a record that something else waits on: the event line is
    /// written now or the error is returned (and nothing kept for later), so the caller can
    /// hold back what the record vouches for — an inbox message is not moved on before its
    /// `message_answered` is on disk, whatever comes between (a full disk, a crash).
    pub fn try_record(&self, r: Record) -> std::io::Result<()> {
        self.journal(&r);
        if r.line {
            self.try_record_event(&r.event)?;
        }
        if let Some(file) = &r.log {
            self.append_daemon_log(file, &r.text);
        }
        Ok(())
    }

    fn journal(&self, r: &Record) {
        let e = &r.event;
        let (job_id, queue, correlation_id, project) = (
            e.job_id.as_deref(),
            e.queue.as_deref(),
            e.correlation_id.as_deref(),
            e.project.as_deref(),
        );
        let event = e.event.as_str();
        match r.level {
            Level::Info => {
                tracing::info!(event, job_id, queue, correlation_id, project, "{}", r.text)
            }
            Level::Warn => {
                tracing::warn!(event, job_id, queue, correlation_id, project, "{}", r.text)
            }
            Level::Error => {
                tracing::error!(event, job_id, queue, correlation_id, project, "{}", r.text)
            }
        }
    }

    /// The event log of the month of `at` as the PRD names it (`logs/events-YYYY-MM.jsonl`);
    /// each machine appends to its own `events-YYYY-MM@<host>.jsonl` beside it
    /// ([`super::perhost`]), and [`Store::read_events`] merges them.
    pub fn events_path(&self, at: &Timestamp) -> PathBuf {
        let month = at.0.format("%Y-%m").to_string();
        self.root
            .join(self.config.logging.events_file.replace("{YYYY-MM}", &month))
    }

    /// Appends an event; failures are logged, never fatal (the journal has it too). A line
    /// refused for want of space is kept (in order, bounded) and written before the next one.
    /// Whether the line is on disk now.
    pub fn record_event(&self, event: &Event) -> bool {
        let (path, line) = self.event_target(event);
        // Behind lines that still do not fit, this one waits its turn (the file keeps the
        // order the events happened in, even if this shorter line would fit now).
        if !unwritten::write_kept() {
            unwritten::keep(path, line);
            return false;
        }
        match append_line_locked(&path, &line) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("cannot append to {}: {e}", path.display());
                if unwritten::is_out_of_space(&e) {
                    unwritten::keep(path, line);
                }
                false
            }
        }
    }

    /// Appends an event now, after any kept earlier, or says why it could not.
    pub fn try_record_event(&self, event: &Event) -> std::io::Result<()> {
        if !unwritten::write_kept() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let (path, line) = self.event_target(event);
        append_line_locked(&path, &line)
    }

    /// This machine's events file for `event`, and the event as its line.
    fn event_target(&self, event: &Event) -> (PathBuf, Vec<u8>) {
        let path = host_path(&self.events_path(&event.timestamp), &hostname());
        (path, event_line(event))
    }

    /// Writes the event lines a full disk held back (see [`Store::record`]); daemons call it
    /// on each pass, so the lines land as soon as there is room again.
    pub fn retry_unwritten_events(&self) {
        let _ = unwritten::write_kept();
    }

    /// Appends a human-readable line to a per-daemon log under `logs/` (e.g.
    /// `orchestrator.log`, `queue-poplar.log`, as the PRD's layout names them), in this
    /// machine's file of it (`queue-poplar@<host>.log`, see [`super::perhost`]).
    pub fn append_daemon_log(&self, file: &str, text: &str) {
        let path = host_path(&self.logs_dir().join(file), &hostname());
        // One line per entry, whatever the text holds (a job file name may hold newlines).
        let text = crate::schema::quote_limited(text, 4 * crate::schema::MAX_QUOTE_BYTES)
            .replace(['\n', '\r'], "\\n");
        let line = format!("{} {} {}", Timestamp::now(), hostname(), text);
        if let Err(e) = append_line_locked(&path, line.as_bytes()) {
            tracing::warn!("cannot append to {}: {e}", path.display());
        }
    }
}

/// A shared log read back from every machine's file, in time order.
#[derive(Debug, Clone)]
pub struct Merged<T> {
    /// The entries, ordered by timestamp (stable: one machine's lines keep their order).
    pub entries: Vec<FromHost<T>>,
    /// Lines that could not be read as entries, each as `file: line` (reported, not lost).
    pub unreadable: Vec<String>,
}

/// One entry of a shared log and the machine whose file held it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FromHost<T> {
    /// The machine (`None`: the PRD-named file, written before files were per machine).
    pub host: Option<String>,
    /// The entry.
    #[serde(flatten)]
    pub entry: T,
}

/// Parses each line as a `T`, orders the entries by `time` (stable) and keeps what does not
/// parse in [`Merged::unreadable`].
fn merge_lines<T: serde::de::DeserializeOwned>(
    store: &Store,
    lines: Vec<HostLine>,
    time: impl Fn(&T) -> Timestamp,
) -> Merged<T> {
    let mut m = Merged {
        entries: Vec::with_capacity(lines.len()),
        unreadable: Vec::new(),
    };
    for l in lines {
        match serde_json::from_str::<T>(&l.text) {
            Ok(entry) => m.entries.push(FromHost {
                host: l.host,
                entry,
            }),
            Err(_) => m.unreadable.push(format!(
                "{}: {}",
                store.relative(&l.path).display(),
                crate::schema::quote_limited(&l.text, crate::schema::MAX_QUOTE_BYTES)
            )),
        }
    }
    m.entries.sort_by_key(|e| time(&e.entry));
    m
}

impl Store {
    /// The events of the month of `at` from every machine (and the PRD-named file of an
    /// older store), in time order.
    pub fn read_events(&self, at: &Timestamp) -> std::io::Result<Merged<Event>> {
        let lines = read_lines(&self.events_path(at))?;
        Ok(merge_lines(self, lines, |e: &Event| e.timestamp))
    }

    /// Every month's events (every `logs/events-*` file of every machine), in time order.
    pub fn read_all_events(&self) -> std::io::Result<Merged<Event>> {
        let template = self.root.join(&self.config.logging.events_file);
        let mut months =
            std::collections::BTreeSet::from([Timestamp::now().0.format("%Y-%m").to_string()]);
        // The month is in the file name (`events-{YYYY-MM}.jsonl`): list its folder.
        let name = template
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let (Some((prefix, _)), Some(dir)) = (name.split_once("{YYYY-MM}"), template.parent()) {
            for e in super::safe::list_dir(dir).unwrap_or_default() {
                let n = e.name.to_string_lossy();
                if let Some(rest) = n.strip_prefix(prefix) {
                    months.insert(rest.chars().take(7).collect());
                }
            }
        }
        let mut all = Merged {
            entries: Vec::new(),
            unreadable: Vec::new(),
        };
        for m in months {
            let Ok(at) = format!("{m}-01T00:00:00Z").parse::<Timestamp>() else {
                continue;
            };
            let one = self.read_events(&at)?;
            all.entries.extend(one.entries);
            all.unreadable.extend(one.unreadable);
        }
        all.entries.sort_by_key(|e| e.entry.timestamp);
        Ok(all)
    }

    /// `JSONValidation/errors.out` from every machine (`errors@<host>.out`, and the file of
    /// an older store), in time order.
    pub fn read_errors(&self) -> std::io::Result<Merged<super::ErrorLogEntry>> {
        let lines = read_lines(&self.root.join(super::error_log::ERRORS_OUT))?;
        Ok(merge_lines(self, lines, |e: &super::ErrorLogEntry| {
            e.timestamp
        }))
    }

    /// The daemon log `logs/<file>` (`orchestrator.log`, `queue-<q>.log`) from every
    /// machine, ordered by the time each line starts with (stable).
    pub fn read_daemon_log(&self, file: &str) -> std::io::Result<Vec<HostLine>> {
        let mut lines = read_lines(&self.logs_dir().join(file))?;
        lines.sort_by_key(|l| {
            l.text
                .split_once(' ')
                .and_then(|(t, _)| t.parse::<Timestamp>().ok())
        });
        Ok(lines)
    }
}

/// An event as its line: the detail quoted to a bounded length.
fn event_line(event: &Event) -> Vec<u8> {
    let mut event = event.clone();
    if let Some(d) = event.detail.as_mut() {
        *d = crate::schema::quote_limited(d, crate::schema::MAX_QUOTE_BYTES);
    }
    // An Event is plain strings and timestamps: serializing it cannot fail.
    serde_json::to_vec(&event).unwrap_or_default()
}

/// Event lines a full disk refused, kept for the life of the process (DESIGN §9: the audit
/// trail is delayed, not cut). Only a full disk (ENOSPC, EDQUOT) keeps a line: any other
/// failure (a store folder gone, a refused link) is logged and dropped as before.
mod unwritten {
    use super::append_line_locked;
    use parking_lot::Mutex;
    use std::collections::VecDeque;
    use std::path::PathBuf;

    /// At most this many lines are kept; past it the oldest is dropped, and said so.
    const MAX: usize = 50_000;

    static KEPT: Mutex<VecDeque<(PathBuf, Vec<u8>)>> = Mutex::new(VecDeque::new());

    pub(super) fn is_out_of_space(e: &std::io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
    }

    pub(super) fn keep(path: PathBuf, line: Vec<u8>) {
        let mut kept = KEPT.lock();
        if kept.len() >= MAX
            && let Some((p, _)) = kept.pop_front()
        {
            tracing::error!(
                "{MAX} event lines wait for room on a full disk; dropping the oldest for {}",
                p.display()
            );
        }
        kept.push_back((path, line));
    }

    /// Writes the kept lines in order; stops at the first that still does not fit. True
    /// when none is left waiting.
    pub(super) fn write_kept() -> bool {
        let mut kept = KEPT.lock();
        while let Some((path, line)) = kept.front() {
            match append_line_locked(path, line) {
                Ok(()) => {
                    kept.pop_front();
                }
                Err(e) if is_out_of_space(&e) => return false,
                Err(e) => {
                    tracing::warn!("dropping a kept event line for {}: {e}", path.display());
                    kept.pop_front();
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines a full disk refused are written, in order, before the next line, and only a
    /// full disk keeps one (ENOSPC/EDQUOT, not a missing folder).
    #[test]
    fn kept_lines_land_first_when_there_is_room() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("events-kept.jsonl");
        unwritten::keep(p.clone(), b"{\"n\":1}".to_vec());
        unwritten::keep(p.clone(), b"{\"n\":2}".to_vec());
        unwritten::write_kept();
        append_line_locked(&p, b"{\"n\":3}").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n");
        assert!(unwritten::is_out_of_space(
            &std::io::Error::from_raw_os_error(libc::ENOSPC)
        ));
        assert!(!unwritten::is_out_of_space(
            &std::io::Error::from_raw_os_error(libc::ENOENT)
        ));
    }

    fn lines_of(dir: &std::path::Path, starts: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.map(|e| e.path()).unwrap_or_default();
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            if name.starts_with(starts) {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                out.extend(text.lines().map(str::to_string));
            }
        }
        out
    }

    /// One `record()` writes the event line and the daemon log's line; a record without an
    /// event line writes the log alone.
    #[test]
    fn one_record_reaches_the_events_file_and_the_daemon_log() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (store, _) =
            Store::init(&dir.path().join("store")).unwrap_or_else(|e| panic!("init: {e}"));
        store.record(
            Record::warn(
                Event::new("queue-manager", "job_failed")
                    .job("j1")
                    .queue("q")
                    .detail("boom"),
                "job j1 failed: boom",
            )
            .log("queue-q.log"),
        );
        store.record(
            Record::info(
                Event::new("queue-manager", "sweep").queue("q"),
                "sweep: idle",
            )
            .log("queue-q.log")
            .no_event_line(),
        );
        let logs = store.logs_dir();
        let events: Vec<Event> = lines_of(&logs, "events-")
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].event, "job_failed");
        assert_eq!(events[0].job_id.as_deref(), Some("j1"));
        assert_eq!(events[0].queue.as_deref(), Some("q"));
        assert_eq!(events[0].detail.as_deref(), Some("boom"));
        let log = lines_of(&logs, "queue-q@");
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(log[0].ends_with(" job j1 failed: boom"), "{log:?}");
        assert!(log[1].ends_with(" sweep: idle"), "{log:?}");
    }
}
