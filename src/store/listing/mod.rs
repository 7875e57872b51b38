//! A job index for listings that costs O(changes), not O(store), per listing.
//!
//! Per state folder (`Queues/<q>/Jobs/<state>_jobs/`) a small index file in the reader's own
//! cache folder (never in the store, which may be synced or read-only) holds each job's
//! queue time, id, project and user — a few dozen bytes a job, sorted by queue time. A
//! folder whose identity and modification time are what the index recorded (and that time
//! was safely in the past when it was recorded) is not even listed; a changed folder is
//! listed again and only the files not seen before are read. A listing is then a streaming
//! merge of those sorted files, so memory stays at one record per folder however many jobs
//! there are. The index never decides a job's state: the folder it was listed in does, and
//! folders are looked at in the order jobs move through them (queued, running, finished,
//! failed), so a job moved while a listing runs is seen at least once, and the merge drops
//! the second sighting (same queue, id and queue time come out next to each other).

use super::Scanned;
use super::{Store, listing_docs, scan_subdirs};
use crate::model::{JobStatus, Timestamp};
use serde::Deserialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

mod build;
mod index;
mod merge;
mod messages;
mod records;
mod seek;
#[cfg(test)]
mod tests;

use index::*;
pub use merge::*;
pub use messages::*;
pub(super) use records::ends_whole;
use records::{Record, Records, Stamp, sign};
pub use seek::Bound;

/// Which jobs a listing wants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct JobFilter {
    /// Only this state.
    pub status: Option<JobStatus>,
    /// Only this project.
    pub project: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
}

/// What the index knows of one job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobHead {
    /// `config.queue_time` (the listing order, ties by id).
    pub queue_time: Timestamp,
    /// `config.project`.
    pub project: String,
    /// `config.user`.
    pub user: Option<String>,
    /// `config.priority`.
    pub priority: Option<i32>,
    /// `runtime.finish_time` (set once a job is in a final folder, where it no longer
    /// changes).
    pub finish_time: Option<Timestamp>,
}

/// One listed job: where it is and its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Queue.
    pub queue: String,
    /// State folder.
    pub status: JobStatus,
    /// Job id (file stem).
    pub id: String,
    /// What the index read.
    pub head: JobHead,
    /// The archive month folder (`Queues/<q>/Jobs/archive/<month>/`) for an archived job.
    pub month: Option<String>,
    /// The job as a JSON listing prints it, from the documents cache (listings opened
    /// with documents only; `None`: read it from the store).
    pub doc: Option<Vec<u8>>,
}

#[derive(Deserialize)]
struct RawHead {
    config: RawConfig,
    #[serde(default)]
    runtime: Option<RawRuntime>,
}

#[derive(Deserialize)]
struct RawRuntime {
    #[serde(default)]
    finish_time: Option<Timestamp>,
}

#[derive(Deserialize)]
struct RawConfig {
    project: String,
    queue_time: Timestamp,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    priority: Option<i32>,
}

/// Reads the head of a job file; `None` when it is not a readable job.
pub fn read_head(path: &Path) -> Option<JobHead> {
    head_of(&super::read_limited(path).ok()?)
}

/// The head of a job file's bytes; `None` when they are not a job.
fn head_of(bytes: &[u8]) -> Option<JobHead> {
    let h: RawHead = serde_json::from_slice(bytes).ok()?;
    Some(JobHead {
        queue_time: h.config.queue_time,
        project: h.config.project,
        user: h.config.user,
        priority: h.config.priority,
        finish_time: h.runtime.and_then(|r| r.finish_time),
    })
}

/// The first line of an index file.
const MAGIC: &str = "agentstore-job-index 3";
/// The last line of a whole index file (one cut short is never trusted).
pub(super) const TRAILER: &str = "#end\n";
/// A folder time younger than this may still change within its granularity: an index taken
/// then is used for names, never to skip listing the folder.
const SETTLED: Duration = Duration::from_secs(2);
/// How long `ListJobs` keeps a listing open for the caller's next page.
const CURSOR_TTL: Duration = Duration::from_secs(60);

/// Queue time (seconds, nanoseconds), project, user, priority, finish time.
type RecHead = (
    i64,
    u32,
    Box<str>,
    Option<Box<str>>,
    Option<i32>,
    Option<(i64, u32)>,
);

/// One record of an index file: a job, or a file that did not read as one (`head: None`).
#[derive(Debug, Clone)]
struct Rec {
    id: Box<str>,
    head: Option<RecHead>,
}

impl Record for Rec {
    const MAGIC: &'static str = MAGIC;
    const DESCENDING: bool = false;

    fn parse(line: &str) -> Option<Rec> {
        Rec::parse(line)
    }

    fn is_bad(&self) -> bool {
        self.head.is_none()
    }
}

impl Rec {
    fn key(&self) -> (i64, u32, &str) {
        match &self.head {
            Some((s, n, ..)) => (*s, *n, &self.id),
            None => (i64::MIN, 0, &self.id),
        }
    }

    fn from_head(id: &str, head: Option<JobHead>) -> Rec {
        Rec {
            id: id.into(),
            head: head.map(|h| {
                (
                    h.queue_time.0.timestamp(),
                    h.queue_time.0.timestamp_subsec_nanos(),
                    h.project.into_boxed_str(),
                    h.user.map(String::into_boxed_str),
                    h.priority,
                    h.finish_time
                        .map(|t| (t.0.timestamp(), t.0.timestamp_subsec_nanos())),
                )
            }),
        }
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        match &self.head {
            None => writeln!(w, "!\t{}", escape(&self.id)),
            Some((s, n, p, u, prio, fin)) => writeln!(
                w,
                "{s}\t{n}\t{}\t{}\t{}\t{}\t{}",
                escape(&self.id),
                escape(p),
                u.as_deref().map(escape).unwrap_or_default(),
                prio.map(|v| v.to_string()).unwrap_or_default(),
                fin.map(|(s, n)| format!("{s}.{n}")).unwrap_or_default()
            ),
        }
    }

    fn parse(line: &str) -> Option<Rec> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let mut f = line.split('\t');
        let first = f.next()?;
        if first == "!" {
            return Some(Rec {
                id: unescape(f.next()?).into(),
                head: None,
            });
        }
        let secs: i64 = first.parse().ok()?;
        let nanos: u32 = f.next()?.parse().ok()?;
        let id = unescape(f.next()?);
        let project = unescape(f.next()?);
        let user = f.next()?;
        let user = (!user.is_empty()).then(|| unescape(user).into());
        let priority = match f.next()? {
            "" => None,
            v => Some(v.parse().ok()?),
        };
        let finish = match f.next()? {
            "" => None,
            v => {
                let (s, n) = v.split_once('.')?;
                Some((s.parse().ok()?, n.parse().ok()?))
            }
        };
        Some(Rec {
            id: id.into(),
            head: Some((secs, nanos, project.into(), user, priority, finish)),
        })
    }

    fn listed(self, queue: &str, status: JobStatus, month: Option<&str>) -> Option<Listed> {
        let (secs, nanos, project, user, priority, finish) = self.head?;
        let t = chrono::DateTime::from_timestamp(secs, nanos)?;
        let finish_time = match finish {
            Some((s, n)) => Some(Timestamp(chrono::DateTime::from_timestamp(s, n)?)),
            None => None,
        };
        Some(Listed {
            queue: queue.to_string(),
            status,
            id: self.id.into(),
            head: JobHead {
                queue_time: Timestamp(t),
                project: project.into(),
                user: user.map(Into::into),
                priority,
                finish_time,
            },
            month: month.map(str::to_string),
            doc: None,
        })
    }
}

/// Tabs, newlines and backslashes in a field (a hostile project name) cannot break a record.
pub(super) fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\t', '\n', '\r', '\\']) {
        return s.into();
    }
    let mut o = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        match c {
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\\' => o.push_str("\\\\"),
            c => o.push(c),
        }
    }
    o.into()
}

pub(super) fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let mut o = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            o.push(c);
            continue;
        }
        match it.next() {
            Some('t') => o.push('\t'),
            Some('n') => o.push('\n'),
            Some('r') => o.push('\r'),
            Some(c) => o.push(c),
            None => {}
        }
    }
    o
}

/// One folder's records in listing order.
#[derive(Debug)]
struct Source {
    queue: String,
    status: JobStatus,
    /// The archive month, for an archive folder.
    month: Option<String>,
    records: Records<Rec>,
    current: Option<Rec>,
    /// The documents cache read in step with the records (JSON listings).
    docs: Option<listing_docs::Docs>,
    /// `current`'s document from it.
    current_doc: Option<Vec<u8>>,
}

impl Source {
    fn new(queue: &str, status: JobStatus, month: Option<&str>, records: Records<Rec>) -> Source {
        Source {
            queue: queue.to_string(),
            status,
            month: month.map(str::to_string),
            records,
            current: None,
            docs: None,
            current_doc: None,
        }
    }

    fn mem(queue: &str, status: JobStatus, month: Option<&str>, recs: Vec<Rec>) -> Source {
        Source::new(queue, status, month, Records::mem(recs))
    }

    /// Positions the source at its first record and returns the unreadable ids (they sort
    /// first).
    fn start(&mut self) -> std::io::Result<Vec<String>> {
        let bad = self.records.start()?;
        self.current = None;
        self.current_doc = None;
        if let Some(d) = &mut self.docs {
            d.rewind()?;
        }
        Ok(bad.into_iter().map(|r| r.id.into()).collect())
    }

    /// Moves to the next readable record.
    fn advance(&mut self) {
        self.current = self.records.next_good();
        self.current_doc = match (&self.current, &mut self.docs) {
            (Some(r), Some(d)) => d.next_for(&r.id),
            _ => None,
        };
    }
}
