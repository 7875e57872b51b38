//! The message index (issue 33): per messaging folder (`inbox/`, `processed_inbox/`,
//! `outbox/`, `processed_outbox/`) an index file beside the job index holds each message's
//! queue time, id, user, project and status, newest first, so `list-messages` reads a few
//! dozen bytes a message instead of opening, parsing and checking every file. The folders
//! are brought up to date as the jobs' are (`records`): a settled, unchanged folder is not
//! even listed, a changed one is listed and only its new files are read. Who may see a
//! message is never decided here: the index only carries the fields the rule reads.

use super::*;
use crate::model::{DocKind, Message, MessageStatus};

/// The first word of a message index file.
const MESSAGE_MAGIC: &str = "agentstore-message-index 1";

/// One messaging folder to list: its name (the index file's), whether it holds answers, and
/// where it is.
#[derive(Debug, Clone, Copy)]
pub struct MessageFolder<'a> {
    /// `inbox`, `processed_inbox`, `outbox` or `processed_outbox`.
    pub name: &'a str,
    /// Answers (`outbox/`, `processed_outbox/`) rather than requests.
    pub out: bool,
    /// The folder.
    pub dir: &'a Path,
}

/// What the index knows of one message file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMessage {
    /// Which of the listed folders (its place in the slice given to [`MessageListing::open`]).
    pub folder: usize,
    /// Its file name without `.json`.
    pub id: String,
    /// `queue_time`.
    pub queue_time: Timestamp,
    /// `user`.
    pub user: Option<String>,
    /// `project`.
    pub project: Option<String>,
    /// `status`.
    pub status: MessageStatus,
}

/// Queue time (seconds, nanoseconds), user, project, status.
type MsgHead = (i64, u32, Option<Box<str>>, Option<Box<str>>, MessageStatus);

/// One record of a message index: a message, or why a file was not read as one.
#[derive(Debug, Clone)]
struct MsgRec {
    id: Box<str>,
    head: Result<MsgHead, Box<str>>,
}

fn status_name(s: MessageStatus) -> &'static str {
    match s {
        MessageStatus::Queued => "queued",
        MessageStatus::Processing => "processing",
        MessageStatus::Done => "done",
        MessageStatus::Error => "error",
    }
}

fn status_of(s: &str) -> Option<MessageStatus> {
    [
        MessageStatus::Queued,
        MessageStatus::Processing,
        MessageStatus::Done,
        MessageStatus::Error,
    ]
    .into_iter()
    .find(|x| status_name(*x) == s)
}

/// `+text` for a value, nothing for none (an empty value stays told apart).
fn opt_field(v: Option<&str>) -> String {
    v.map(|v| format!("+{}", escape(v))).unwrap_or_default()
}

fn opt_parse(f: &str) -> Option<Option<Box<str>>> {
    match f {
        "" => Some(None),
        v => Some(Some(unescape(v.strip_prefix('+')?).into())),
    }
}

impl Record for MsgRec {
    const MAGIC: &'static str = MESSAGE_MAGIC;
    const DESCENDING: bool = true;

    fn parse(line: &str) -> Option<MsgRec> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let mut f = line.split('\t');
        let first = f.next()?;
        if first == "!" {
            let id = unescape(f.next()?).into();
            let why = unescape(f.next()?).into();
            return Some(MsgRec { id, head: Err(why) });
        }
        let secs: i64 = first.parse().ok()?;
        let nanos: u32 = f.next()?.parse().ok()?;
        let id = unescape(f.next()?).into();
        let user = opt_parse(f.next()?)?;
        let project = opt_parse(f.next()?)?;
        let status = status_of(f.next()?)?;
        Some(MsgRec {
            id,
            head: Ok((secs, nanos, user, project, status)),
        })
    }

    fn is_bad(&self) -> bool {
        self.head.is_err()
    }
}

impl MsgRec {
    fn line(&self) -> String {
        match &self.head {
            Err(why) => format!("!\t{}\t{}\n", escape(&self.id), escape(why)),
            Ok((s, n, user, project, status)) => format!(
                "{s}\t{n}\t{}\t{}\t{}\t{}\n",
                escape(&self.id),
                opt_field(user.as_deref()),
                opt_field(project.as_deref()),
                status_name(*status)
            ),
        }
    }

    /// Listing order within one folder and across them: newest first, answers before their
    /// requests, then id (descending).
    fn key(&self, out: bool) -> Option<(i64, u32, bool, &str)> {
        let (s, n, ..) = self.head.as_ref().ok()?;
        Some((*s, *n, out, &self.id))
    }
}

/// Reads one message file as `list-messages` and `view-message` do (never logging a
/// rejection); why it cannot be read otherwise.
pub fn read_message(store: &Store, path: &Path) -> Result<Message, String> {
    let bytes = super::super::read_limited(path).map_err(|e| e.to_string())?;
    message_of(store, path, &bytes)
}

/// [`read_message`] of bytes already read from `path`.
fn message_of(store: &Store, path: &Path, bytes: &[u8]) -> Result<Message, String> {
    store
        .validator()
        .parse(DocKind::Message, bytes)
        .map_err(|r| format!("{}: {r}", store.relative(path).display()))
}

/// The line of one entry of a messaging folder: its head, or why it is not read.
fn entry_line(store: &Store, folder: &build::Folder<'_>, entry: Scanned<'_>) -> String {
    let dir = folder.path;
    let not_read = |name: &str, why: &str| {
        let path = dir.join(name);
        Err(format!("{}: {why}", store.relative(&path).display()).into())
    };
    let (name, head) = match entry {
        Scanned::Document(name) => {
            let path = dir.join(name);
            let message = match folder.read(name) {
                Some(bytes) => message_of(store, &path, &bytes),
                None => read_message(store, &path),
            };
            let head = message.map(|m| {
                (
                    m.queue_time.0.timestamp(),
                    m.queue_time.0.timestamp_subsec_nanos(),
                    m.user.map(String::into_boxed_str),
                    m.project.map(String::into_boxed_str),
                    m.status,
                )
            });
            (name, head.map_err(String::into_boxed_str))
        }
        Scanned::Conflict(name) => (
            name,
            not_read(name, "a sync engine's conflict copy; not read"),
        ),
        Scanned::Refused(name) => (
            name,
            not_read(name, "not a regular file; never followed or read"),
        ),
    };
    let id = name.strip_suffix(".json").unwrap_or(name);
    MsgRec {
        id: id.into(),
        head,
    }
    .line()
}

/// One folder's records with the one up next.
#[derive(Debug)]
struct MsgSource {
    out: bool,
    records: Records<MsgRec>,
    current: Option<MsgRec>,
}

/// A place in the listing order: a listed message's queue time, direction, id and folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePlace {
    secs: i64,
    nanos: u32,
    out: bool,
    id: Box<str>,
    folder: usize,
}

impl MessagePlace {
    /// The place of `m` (listed from a folder of direction `out`).
    pub fn of(m: &ListedMessage, out: bool) -> MessagePlace {
        MessagePlace {
            secs: m.queue_time.0.timestamp(),
            nanos: m.queue_time.0.timestamp_subsec_nanos(),
            out,
            id: m.id.as_str().into(),
            folder: m.folder,
        }
    }

    /// True when a record of `folder` with `key` comes before this place in the listing.
    fn after(&self, key: (i64, u32, bool, &str), folder: usize) -> bool {
        let here = (self.secs, self.nanos, self.out, &*self.id);
        key > here || (key == here && folder < self.folder)
    }
}

/// The totals and marks of recent message listings (per process: orchestratord's, or one
/// CLI run's), by store, caller's rights and filter; each kept while the folders it counted
/// are unchanged.
static TOTALS: parking_lot::Mutex<Option<Totals<MessagePlace>>> = parking_lot::Mutex::new(None);

/// The total and marks counted for `key` when the folders were as `signature` says.
pub fn cached_message_total(
    key: &str,
    signature: Option<&str>,
) -> Option<(usize, std::sync::Arc<Vec<MessagePlace>>)> {
    let t = TOTALS.lock();
    let c = t.as_ref()?.get(key, signature)?;
    Some((c.total, c.marks.clone()))
}

/// Keeps a message listing's total and marks for `key` (see [`cached_message_total`]).
pub fn keep_message_total(
    key: &str,
    signature: Option<String>,
    total: usize,
    marks: std::sync::Arc<Vec<MessagePlace>>,
) {
    TOTALS.lock().get_or_insert_with(Totals::default).keep(
        key,
        signature,
        Vec::new(),
        total,
        marks,
    );
}

/// The messages of some messaging folders, newest first (by `queue_time`, then answers
/// before their requests, then id descending, then folder in the order given): a streaming
/// merge of the folders' index files, so memory stays at one record per folder.
#[derive(Debug)]
pub struct MessageListing {
    sources: Vec<MsgSource>,
    problems: Vec<String>,
    /// The listed folders' stamps (see `records::sign`).
    signature: Option<String>,
}

impl MessageListing {
    /// Brings the index of each of `folders` up to date and opens the listing.
    pub fn open(store: &Store, folders: &[MessageFolder<'_>]) -> std::io::Result<MessageListing> {
        let dir = JobIndex::default()
            .dir_for(store)
            .map(|d| d.join(".messaging"));
        let mut listing = MessageListing {
            sources: Vec::new(),
            problems: Vec::new(),
            signature: Some(String::new()),
        };
        for f in folders {
            listing.signature = sign(listing.signature.take(), f.dir);
            let cache = dir.as_ref().map(|d| d.join(format!("{}.idx", f.name)));
            let new_line = |folder: &build::Folder<'_>, entry: Scanned<'_>| {
                Some(entry_line(store, folder, entry))
            };
            let (mut records, bad, _) =
                records::open_records::<MsgRec>(f.dir, cache.as_deref(), &new_line)?;
            listing
                .problems
                .extend(bad.into_iter().filter_map(|r| r.head.err().map(Into::into)));
            let current = records.next_good();
            listing.sources.push(MsgSource {
                out: f.out,
                records,
                current,
            });
        }
        Ok(listing)
    }

    /// Why each file of the listed folders that is not a message was not read, folder by
    /// folder, by name.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The listed folders' identities and times, each settled (`None`: one changed too
    /// recently to tell a later change by it): what a kept total is checked against.
    pub fn signature(&self) -> Option<&str> {
        self.signature.as_deref()
    }

    /// Moves to `place`: the next message is the first one at or after it. Each folder's
    /// records are found by a binary search.
    pub fn seek(&mut self, place: &MessagePlace) -> std::io::Result<()> {
        for (folder, s) in self.sources.iter_mut().enumerate() {
            let out = s.out;
            let wanted = |r: &MsgRec| r.key(out).is_some_and(|k| !place.after(k, folder));
            s.records.seek(&wanted)?;
            s.current = s.records.next_good();
        }
        Ok(())
    }
}

impl Iterator for MessageListing {
    type Item = ListedMessage;

    fn next(&mut self) -> Option<ListedMessage> {
        loop {
            let mut best: Option<usize> = None;
            for (i, s) in self.sources.iter().enumerate() {
                let Some(k) = s.current.as_ref().and_then(|r| r.key(s.out)) else {
                    continue;
                };
                let bk = best.and_then(|b| {
                    let bs = &self.sources[b];
                    bs.current.as_ref().and_then(|r| r.key(bs.out))
                });
                // Ties (one id in two folders of one direction): the earlier folder.
                if bk.is_none_or(|bk| k > bk) {
                    best = Some(i);
                }
            }
            let folder = best?;
            let s = &mut self.sources[folder];
            let rec = s.current.take()?;
            s.current = s.records.next_good();
            let Ok((secs, nanos, user, project, status)) = rec.head else {
                continue;
            };
            let Some(t) = chrono::DateTime::from_timestamp(secs, nanos) else {
                continue;
            };
            return Some(ListedMessage {
                folder,
                id: rec.id.into(),
                queue_time: Timestamp(t),
                user: user.map(Into::into),
                project: project.map(Into::into),
                status,
            });
        }
    }
}
