//! What completion handling has done, without re-reading finished jobs.
//!
//! The durable record is a per-machine append-only log, `logs/handled-jobs/<host>.log`, one
//! `<queue>/<job id>` per line, appended after the job's `runtime.handled` flag is written.
//! Each machine appends only to its own file (a synced folder never merges two writers into
//! one file); readers take the union of every `*.log` there, conflict copies included. A line
//! lost in a crash costs one read of that job file on the next start (its flag says handled,
//! so nothing is done twice); a line without its flag cannot happen, the flag is written
//! first.
//!
//! [`Completions`] drives handling by events: the inotify watcher reports each name moved
//! into a `finished_jobs/`, and a pass looks at those only. The backstop sweep (start-up, the
//! timer, an inotify overflow, `Sweep` over D-Bus) lists a `finished_jobs/` folder only when
//! its modification time changed since the last sweep, and even then reads only the files the
//! log does not name.

use crate::model::{JobStatus, is_safe_id};
use crate::store::{Store, StoreError, file_id, hostname, scan_dir};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The folder of the handled-logs, under `logs/`.
pub const HANDLED_DIR: &str = "handled-jobs";

/// The union of every machine's handled-log, and this machine's file to append to.
#[derive(Debug)]
pub struct HandledLog {
    own: PathBuf,
    set: HashSet<String>,
}

fn key(queue: &str, id: &str) -> String {
    format!("{queue}/{id}")
}

/// This machine's log file name (`<host>.log`): the host name, made safe.
pub fn own_name() -> String {
    let h: String = hostname()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let h = h.trim_start_matches('.');
    format!("{}.log", if h.is_empty() { "localhost" } else { h })
}

impl HandledLog {
    /// The folder the logs live in.
    pub fn dir(store: &Store) -> PathBuf {
        store.logs_dir().join(HANDLED_DIR)
    }

    /// Reads every machine's log. Lines that are not `<queue>/<id>` with safe names are
    /// ignored (a torn last line after a crash, a hand edit, junk), with one warning per file
    /// saying how many; an entry that is not a regular file (a link, a FIFO) is not opened,
    /// with a warning. Each file is read a bounded line at a time: a huge or binary file costs
    /// no more memory than the job names it holds.
    pub fn load(store: &Store) -> HandledLog {
        let dir = Self::dir(store);
        let own = dir.join(own_name());
        let mut set = HashSet::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if name.starts_with('.') || !name.ends_with(".log") {
                    continue;
                }
                match read_log(&e.path(), &mut set) {
                    Ok(0) => {}
                    Ok(ignored) => tracing::warn!(
                        "handled-log {}: {ignored} lines are not <queue>/<job id>; ignored",
                        e.path().display()
                    ),
                    Err(err) => {
                        tracing::warn!("cannot read handled-log {}: {err}", e.path().display())
                    }
                }
            }
        }
        HandledLog { own, set }
    }

    /// Whether the job was handled (by any machine).
    pub fn contains(&self, queue: &str, id: &str) -> bool {
        self.set.contains(&key(queue, id))
    }

    /// How many jobs are recorded.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Records a handled job: appends a line to this machine's log. The job counts as
    /// recorded for this process even when the line cannot be written (the error says why).
    pub fn record(&mut self, queue: &str, id: &str) -> Result<(), StoreError> {
        let k = key(queue, id);
        if self.set.contains(&k) {
            return Ok(());
        }
        let written = self.append(&k);
        self.set.insert(k);
        written
    }

    /// Records many handled jobs with one append of all their lines (a backlog batch). The
    /// jobs count as recorded for this process even when the lines cannot be written.
    pub fn record_many(&mut self, jobs: &[(String, String)]) -> Result<(), StoreError> {
        let mut lines = String::new();
        for (q, id) in jobs {
            let k = key(q, id);
            if self.set.insert(k.clone()) {
                lines.push_str(&k);
                lines.push('\n');
            }
        }
        if lines.is_empty() {
            return Ok(());
        }
        // The lines without their last newline: append writes it.
        self.append(&lines[..lines.len() - 1])
    }

    fn append(&self, k: &str) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            path: self.own.clone(),
            source,
        };
        if let Some(dir) = self.own.parent() {
            crate::store::safe::create_dir_all(dir).map_err(io)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags_nofollow()
            .open(&self.own)
            .map_err(io)?;
        // A FIFO planted under this machine's name is opened without waiting for a reader
        // (O_NONBLOCK: ENXIO, or a reader's pipe) and refused, never written to.
        if !f.metadata().map_err(io)?.is_file() {
            return Err(io(std::io::Error::other(
                "not a regular file; the handled-log is not written",
            )));
        }
        // One write of the whole line: O_APPEND keeps concurrent appends whole.
        f.write_all(format!("{k}\n").as_bytes()).map_err(io)?;
        Ok(())
    }
}

/// The longest line a handled-log holds (`<queue>/<job id>`, each at most 200 bytes).
const MAX_LINE: usize = 512;

/// Adds the `<queue>/<id>` lines of the log at `path` to `set`; returns how many non-empty
/// lines were not such a line. Never follows a link, never waits on a FIFO (opened
/// non-blocking, then refused unless a regular file), never holds more than one line.
fn read_log(path: &Path, set: &mut HashSet<String>) -> std::io::Result<usize> {
    use std::io::BufRead;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file; not read"));
    }
    let mut r = std::io::BufReader::with_capacity(64 * 1024, f);
    let (mut line, mut over, mut ignored) = (Vec::new(), false, 0usize);
    let mut take = |line: &[u8], over: bool| {
        if line.is_empty() && !over {
            return;
        }
        match std::str::from_utf8(line) {
            Ok(l)
                if !over
                    && l.split_once('/')
                        .is_some_and(|(q, id)| is_safe_id(q) && is_safe_id(id)) =>
            {
                set.insert(l.to_string());
            }
            _ => ignored += 1,
        }
    };
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (chunk, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + chunk.len() > MAX_LINE {
            over = true;
            line.clear();
        } else if !over {
            line.extend_from_slice(chunk);
        }
        let used = end.unwrap_or(buf.len());
        if end.is_some() {
            take(&line, over);
            line.clear();
            over = false;
        }
        r.consume(used);
    }
    // A last line without its newline (torn by a crash, or written by hand).
    take(&line, over);
    Ok(ignored)
}

/// `O_NOFOLLOW | O_NONBLOCK` on the log file: a symlink planted there is refused, not followed.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
    }
}

/// Event-driven completion state: the handled-log, names reported by the watcher, and what
/// the backstop sweep saw last.
#[derive(Debug, Default)]
pub struct Completions {
    log: Option<HandledLog>,
    pending: BTreeSet<(String, String)>,
    /// Jobs that could not be read: looked at again at every sweep (a half-synced file
    /// may be completed in place, which leaves the folder's time alone).
    retry: BTreeMap<(String, String), Option<SystemTime>>,
    dir_mtimes: HashMap<String, SystemTime>,
    sweep_due: bool,
    /// Jobs found but not handled yet (a backlog is handled a batch at a time).
    backlog: BTreeSet<(String, String)>,
    /// Jobs of a batch being handled now: never handed out twice.
    in_flight: HashSet<(String, String)>,
}

impl Completions {
    /// A fresh state: the first pass sweeps.
    pub fn new() -> Completions {
        Completions {
            sweep_due: true,
            ..Completions::default()
        }
    }

    /// A name appeared in `queue`'s `finished_jobs/`.
    pub fn notify(&mut self, queue: &str, name: &str) {
        if let Some(id) = file_id(Path::new(name))
            && !crate::store::is_ignored(name)
            && is_safe_id(queue)
            && is_safe_id(id)
        {
            self.pending.insert((queue.to_string(), id.to_string()));
        }
    }

    /// At most `max` jobs to handle now (the reported ones and, when a sweep is due, what it
    /// finds; the rest stay in the backlog for the next batch). They are in flight until
    /// [`Self::finish`]: no other batch gets them meanwhile.
    pub fn next_batch(&mut self, store: &Store, max: usize) -> Vec<(String, String)> {
        if !self.pending.is_empty() || self.sweep_due {
            let fresh = self.take_candidates(store);
            self.backlog.extend(fresh);
        }
        let mut out = Vec::new();
        while out.len() < max.max(1) {
            let Some(k) = self.backlog.pop_first() else {
                break;
            };
            if self.in_flight.contains(&k) || self.log(store).contains(&k.0, &k.1) {
                continue;
            }
            self.in_flight.insert(k.clone());
            out.push(k);
        }
        out
    }

    /// Jobs found and not handled yet (not counting a batch in flight).
    pub fn backlog_len(&self) -> usize {
        self.backlog.len() + self.pending.len()
    }

    /// The end of a batch from [`Self::next_batch`]: `done` are recorded in the handled-log
    /// with one append, `retry` are looked at again at the next sweep, `unreadable` at a
    /// sweep once their file changed, and every job of `batch` is out of flight.
    pub fn finish(
        &mut self,
        store: &Store,
        batch: &[(String, String)],
        done: &[(String, String)],
        retry: &[(String, String)],
        unreadable: &[(String, String, PathBuf)],
    ) -> Result<(), StoreError> {
        for (q, id, path) in unreadable {
            self.retry_later(q, id, path);
        }
        for k in batch {
            self.in_flight.remove(k);
        }
        for (q, id) in retry {
            // No time seen: the next sweep looks at it whatever its time says.
            self.retry.insert((q.clone(), id.clone()), None);
        }
        self.log(store).record_many(done)
    }

    /// A reported job could not be read now (`path`): tried again at a sweep once the
    /// file has changed.
    pub fn retry_later(&mut self, queue: &str, id: &str, path: &Path) {
        let mtime = std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .ok();
        self.retry
            .insert((queue.to_string(), id.to_string()), mtime);
    }

    /// The next pass also runs the backstop sweep.
    pub fn request_sweep(&mut self) {
        self.sweep_due = true;
    }

    /// Forces the next sweep to list every folder, changed or not.
    pub fn request_full_sweep(&mut self) {
        self.dir_mtimes.clear();
        self.sweep_due = true;
    }

    /// The handled-log, loaded on first use.
    pub fn log(&mut self, store: &Store) -> &mut HandledLog {
        self.log.get_or_insert_with(|| HandledLog::load(store))
    }

    /// The jobs to look at now: the reported ones, plus (when a sweep is due) every finished
    /// job the log does not name, in folders that changed since the last sweep.
    pub fn take_candidates(&mut self, store: &Store) -> Vec<(String, String)> {
        let mut out: BTreeSet<(String, String)> = std::mem::take(&mut self.pending);
        if std::mem::take(&mut self.sweep_due) {
            let changed: Vec<(String, String)> = self
                .retry
                .iter()
                .filter(|((q, id), seen)| {
                    let now = std::fs::symlink_metadata(store.job_path(q, JobStatus::Finished, id))
                        .and_then(|m| m.modified())
                        .ok();
                    now.is_none() || now != **seen
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in changed {
                self.retry.remove(&k);
                out.insert(k);
            }
            let queues = store.queue_ids().unwrap_or_default();
            let mut fresh = HashMap::new();
            for q in queues {
                let dir = store.jobs_dir(&q, JobStatus::Finished);
                let mtime = std::fs::symlink_metadata(&dir)
                    .and_then(|m| m.modified())
                    .ok();
                if let Some(m) = mtime {
                    if self.dir_mtimes.get(&q) == Some(&m) {
                        fresh.insert(q.clone(), m);
                        continue;
                    }
                    // A change within the file system's timestamp granularity of this listing
                    // could leave the time unchanged: remember only times safely in the past.
                    let settled = m
                        .elapsed()
                        .is_ok_and(|age| age > std::time::Duration::from_secs(2));
                    if settled {
                        fresh.insert(q.clone(), m);
                    }
                }
                let docs = match scan_dir(&dir) {
                    Ok(s) => s.documents,
                    Err(e) => {
                        tracing::warn!("cannot list {}: {e}", dir.display());
                        fresh.remove(&q);
                        continue;
                    }
                };
                let log = self.log(store);
                for p in docs {
                    if let Some(id) = file_id(&p)
                        && !log.contains(&q, id)
                    {
                        out.insert((q.clone(), id.to_string()));
                    }
                }
            }
            self.dir_mtimes = fresh;
        }
        let log = self.log(store);
        out.into_iter()
            .filter(|(q, id)| !log.contains(q, id))
            .collect()
    }
}
