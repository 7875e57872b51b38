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

use super::{Store, listing_docs, scan_subdirs};
use crate::model::{JobStatus, Timestamp};
use serde::Deserialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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
    let bytes = super::read_limited(path).ok()?;
    let h: RawHead = serde_json::from_slice(&bytes).ok()?;
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

/// What identifies a folder's contents: device, inode, modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    secs: i64,
    nanos: i64,
}

impl Stamp {
    fn of(dir: &Path) -> std::io::Result<Option<Stamp>> {
        use std::os::unix::fs::MetadataExt;
        let fd = match super::safe::open_dir(dir) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let m = File::from(fd).metadata()?;
        Ok(Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            secs: m.mtime(),
            nanos: m.mtime_nsec(),
        }))
    }

    fn settled(&self) -> bool {
        let t = SystemTime::UNIX_EPOCH
            + Duration::new(
                u64::try_from(self.secs).unwrap_or(0),
                u32::try_from(self.nanos).unwrap_or(0),
            );
        t.elapsed().is_ok_and(|age| age > SETTLED)
    }

    /// Device and inode (which folder), then its time: the fields of a header.
    fn fields(&self) -> (String, String) {
        let folder = format!("{}\t{}\t", self.dev, self.ino);
        let all = format!("{folder}{}\t{}", self.secs, self.nanos);
        (folder, all)
    }

    fn header(&self, settled: bool) -> String {
        format!(
            "{MAGIC}\t{}\t{}\t{}\t{}\t{}\n",
            self.dev, self.ino, self.secs, self.nanos, settled as u8
        )
    }

    /// The stamp in a header line and whether it was settled when written.
    fn parse_header(line: &str) -> Option<(Stamp, bool)> {
        let rest = line.strip_prefix(MAGIC)?.strip_prefix('\t')?;
        let f: Vec<&str> = rest.trim_end().split('\t').collect();
        let [dev, ino, secs, nanos, settled] = f.as_slice() else {
            return None;
        };
        Some((
            Stamp {
                dev: dev.parse().ok()?,
                ino: ino.parse().ok()?,
                secs: secs.parse().ok()?,
                nanos: nanos.parse().ok()?,
            },
            *settled == "1",
        ))
    }
}

/// Where one reader keeps its index files for one store, and the open `ListJobs` cursor.
#[derive(Debug, Default)]
pub struct JobIndex {
    /// `None` until first used; then the folder (or `Some(None)`: no writable cache, so the
    /// index lives in memory for one listing at a time).
    dir: Option<Option<PathBuf>>,
    /// The listing a paging caller is walking through.
    cursor: Option<Cursor>,
    /// Totals of recent listings, by caller and filter (see [`JobIndex::cached_total`]).
    totals: HashMap<String, CachedTotal>,
}

/// A listing's total, kept while the folders it counted are unchanged.
#[derive(Debug, Clone)]
pub struct CachedTotal {
    /// [`Listing::signature`] when it was counted.
    pub folders: String,
    /// What the caller's rights were then (who decides: the caller of [`JobIndex::keep_total`]).
    pub rights: Vec<(String, bool)>,
    /// Jobs in the listing.
    pub total: usize,
}

/// Totals kept at most (one per caller and filter; the oldest are dropped all at once).
const MAX_TOTALS: usize = 256;

/// The cache folder for this process: systemd's `CACHE_DIRECTORY`, `XDG_CACHE_HOME`,
/// `~/.cache`, in that order.
fn cache_base() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(c) = env("CACHE_DIRECTORY") {
        // systemd lists several folders with ':' when the unit names several.
        let first = c.to_string_lossy().split(':').next().map(PathBuf::from);
        return first;
    }
    if let Some(x) = env("XDG_CACHE_HOME").map(PathBuf::from)
        && x.is_absolute()
    {
        return Some(x.join("agentstore"));
    }
    super::home_dir().map(|h| h.join(".cache/agentstore"))
}

impl JobIndex {
    /// An index kept under `dir` (tests, and callers with their own cache folder).
    pub fn in_dir(dir: PathBuf) -> JobIndex {
        JobIndex {
            dir: Some(Some(dir)),
            cursor: None,
            totals: HashMap::new(),
        }
    }

    fn dir_for(&mut self, store: &Store) -> Option<PathBuf> {
        let base = self.dir.get_or_insert_with(|| {
            let base = cache_base()?;
            let root = std::fs::canonicalize(store.root()).unwrap_or(store.root().to_path_buf());
            // Never inside the store (a service user whose home is the store): it may be
            // synced to other machines.
            if base.starts_with(&root) || base.starts_with(store.root()) {
                return None;
            }
            let key = uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_URL,
                root.as_os_str().as_encoded_bytes(),
            );
            Some(base.join("job-index").join(key.to_string()))
        });
        base.clone()
    }

    /// Brings the folders `filter` can match up to date and opens a listing of them:
    /// matching jobs, oldest `queue_time` first (ties by id, then queue), each once.
    pub fn listing(&mut self, store: &Store, filter: &JobFilter) -> Listing {
        self.open_listing(store, filter, false)
    }

    /// [`listing`](Self::listing), with each job's document as a JSON listing prints it
    /// ([`Listed::doc`]) from a cache beside the index (see `listing_docs`).
    pub fn listing_with_documents(&mut self, store: &Store, filter: &JobFilter) -> Listing {
        self.open_listing(store, filter, true)
    }

    fn open_listing(&mut self, store: &Store, filter: &JobFilter, docs: bool) -> Listing {
        let dir = self.dir_for(store);
        let queues = match &filter.queue {
            Some(q) => vec![q.clone()],
            None => store.queue_ids().unwrap_or_default(),
        };
        let states: Vec<JobStatus> = match filter.status {
            Some(s) => vec![s],
            None => JobStatus::ALL.to_vec(),
        };
        let mut listing = Listing {
            sources: Vec::new(),
            project: filter.project.clone(),
            unreadable: Vec::new(),
            unreadable_dirs: Vec::new(),
            last: None,
            pending: None,
            signature: Some(String::new()),
        };
        for q in &queues {
            // In the order jobs move, so a job moving meanwhile is seen at least once.
            for &s in &states {
                // Taken before the folder is read: a change after it changes the stamp.
                listing.signature =
                    match (listing.signature.take(), Stamp::of(&store.jobs_dir(q, s))) {
                        (Some(mut sig), Ok(Some(st))) if st.settled() => {
                            sig.push_str(&st.header(true));
                            Some(sig)
                        }
                        (Some(mut sig), Ok(None)) => {
                            sig.push_str("-\n");
                            Some(sig)
                        }
                        _ => None,
                    };
                let cache = dir
                    .as_ref()
                    .map(|d| d.join(q).join(format!("{}.idx", s.dir())));
                let folder = store.jobs_dir(q, s);
                let with = docs.then_some(store);
                match open_folder(&folder, q, s, None, cache.as_deref(), with) {
                    Ok((src, bad)) => {
                        listing
                            .unreadable
                            .extend(bad.into_iter().map(|id| (q.clone(), s, id)));
                        listing.sources.push(src);
                    }
                    Err(e) => {
                        tracing::warn!("cannot list {}: {e}", store.jobs_dir(q, s).display())
                    }
                }
                if s == JobStatus::Queued {
                    // Between queued_jobs/ and running_jobs/ a job being started is, for a
                    // few milliseconds, only a start claim: read after queued_jobs/ and
                    // before running_jobs/, a job moving meanwhile is seen at least once
                    // (listed as queued; a copy also in a later state is listed there).
                    let claims = claims_source(store, q);
                    if !claims.is_empty() {
                        // Claims come and go without a settled stamp: no cached total.
                        listing.signature = None;
                        listing.sources.push(Source::mem(q, s, None, claims));
                    }
                }
            }
        }
        for s in &mut listing.sources {
            s.advance();
        }
        listing
    }

    /// Brings the archive folders (`Queues/<q>/Jobs/archive/<month>/<state>_jobs/`) of
    /// `queue` (every queue when `None`) up to date in the index, the same way as the live
    /// folders, and opens a listing of them: oldest `queue_time` first, each job once.
    pub fn archived_listing(
        &mut self,
        store: &Store,
        queue: Option<&str>,
        project: Option<&str>,
        docs: bool,
    ) -> Listing {
        let dir = self.dir_for(store);
        let queues = match queue {
            Some(q) => vec![q.to_string()],
            None => store.queue_ids().unwrap_or_default(),
        };
        let mut listing = Listing {
            sources: Vec::new(),
            project: project.map(str::to_string),
            unreadable: Vec::new(),
            unreadable_dirs: Vec::new(),
            last: None,
            pending: None,
            signature: None,
        };
        for q in &queues {
            let root = super::archive::archive_root(store, q);
            let months = match scan_subdirs(&root) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("cannot list {}: {e}", root.display());
                    continue;
                }
            };
            for month in &months {
                for s in super::archive::ARCHIVED_STATES {
                    let folder = root.join(month).join(s.dir());
                    let cache = dir.as_ref().map(|d| {
                        d.join(q)
                            .join("archive")
                            .join(month)
                            .join(format!("{}.idx", s.dir()))
                    });
                    let with = docs.then_some(store);
                    match open_folder(&folder, q, s, Some(month), cache.as_deref(), with) {
                        Ok((src, bad)) => {
                            listing
                                .unreadable_dirs
                                .extend(bad.iter().map(|_| folder.clone()));
                            listing
                                .unreadable
                                .extend(bad.into_iter().map(|id| (q.clone(), s, id)));
                            listing.sources.push(src);
                        }
                        Err(e) => tracing::warn!("cannot list {}: {e}", folder.display()),
                    }
                }
            }
        }
        for s in &mut listing.sources {
            s.advance();
        }
        listing
    }

    /// Takes the open cursor if it was left for `key` at `offset` not long ago.
    pub fn take_cursor(&mut self, key: &str, offset: usize) -> Option<Cursor> {
        let c = self.cursor.take()?;
        (c.key == key && c.next == offset && c.at.elapsed() < CURSOR_TTL).then_some(c)
    }

    /// Keeps `cursor` for the next page.
    pub fn keep_cursor(&mut self, cursor: Cursor) {
        self.cursor = Some(cursor);
    }

    /// Drops the open cursor.
    pub fn drop_cursor(&mut self) {
        self.cursor = None;
    }

    /// The total counted for `key` when `listing`'s folders were exactly as they are now
    /// (same identity and modification time, each settled, so a change since would show).
    pub fn cached_total(&self, key: &str, listing: &Listing) -> Option<&CachedTotal> {
        let now = listing.signature.as_deref()?;
        self.totals.get(key).filter(|c| c.folders == now)
    }

    /// Keeps `total` for `key` while `listing`'s folders stay unchanged and `rights` stay
    /// what they are (nothing is kept when a folder changed too recently to tell).
    pub fn keep_total(
        &mut self,
        key: &str,
        listing: &Listing,
        rights: Vec<(String, bool)>,
        total: usize,
    ) {
        let Some(folders) = listing.signature.clone() else {
            self.totals.remove(key);
            return;
        };
        if self.totals.len() >= MAX_TOTALS {
            self.totals.clear();
        }
        self.totals.insert(
            key.to_string(),
            CachedTotal {
                folders,
                rights,
                total,
            },
        );
    }
}

/// A listing left open between pages: who asked for what, how far it got, and how many
/// jobs it has in all.
#[derive(Debug)]
pub struct Cursor {
    /// The caller and filter it was opened for.
    pub key: String,
    /// The listing, positioned at `next`.
    pub listing: Listing,
    /// Jobs consumed so far (what the caller passes as the next offset).
    pub next: usize,
    /// Jobs in the whole listing.
    pub total: usize,
    /// When it was last used.
    pub at: Instant,
}

/// Reads a folder's index, bringing it up to date first when the folder changed. Returns the
/// folder's records as a sorted source and the ids of files that are not readable jobs.
fn open_folder(
    dir: &Path,
    queue: &str,
    status: JobStatus,
    month: Option<&str>,
    cache: Option<&Path>,
    docs: Option<&Store>,
) -> std::io::Result<(Source, Vec<String>)> {
    let (mut src, bad, stamp) = open_index(dir, queue, status, month, cache)?;
    if let (Some(store), Some(stamp), Some(cache)) = (docs, stamp, cache) {
        let path = cache.with_extension("docs");
        let (folder, fields) = stamp.fields();
        let mut ids = std::iter::from_fn(|| {
            src.advance();
            let r = src.current.take()?;
            let head = r.head.map(|(_, _, p, u, ..)| (p.into(), u.map(Into::into)));
            Some((r.id.into(), head))
        });
        let opened = listing_docs::open(
            store,
            dir,
            (&folder, &fields, stamp.settled()),
            &mut ids,
            &path,
        );
        src.start()?;
        src.docs = opened;
    }
    Ok((src, bad))
}

/// [`open_folder`] without documents; also the folder's stamp (`None`: no folder).
fn open_index(
    dir: &Path,
    queue: &str,
    status: JobStatus,
    month: Option<&str>,
    cache: Option<&Path>,
) -> std::io::Result<(Source, Vec<String>, Option<Stamp>)> {
    let Some(stamp) = Stamp::of(dir)? else {
        return Ok((
            Source::mem(queue, status, month, Vec::new()),
            Vec::new(),
            None,
        ));
    };
    // The old index's records, kept as its text: what a name read before still says.
    let mut old_text = String::new();
    if let Some(path) = cache
        && let Ok(f) = File::open(path)
    {
        let mut r = BufReader::with_capacity(64 * 1024, f);
        let mut line = String::new();
        if r.read_line(&mut line).is_ok()
            && let Some((had, settled)) = Stamp::parse_header(&line)
            && had.dev == stamp.dev
            && had.ino == stamp.ino
        {
            if had == stamp && settled && ends_whole(r.get_mut()) {
                let mut src = Source {
                    queue: queue.to_string(),
                    status,
                    month: month.map(str::to_string),
                    body: Body::File(r),
                    current: None,
                    docs: None,
                    current_doc: None,
                };
                let bad = src.start()?;
                return Ok((src, bad, Some(stamp)));
            }
            // Changed: keep what was read, by name.
            use std::io::Read;
            let len = r.get_ref().metadata().map(|m| m.len()).unwrap_or(0);
            old_text.reserve(usize::try_from(len).unwrap_or(0));
            if r.read_to_string(&mut old_text).is_err() {
                old_text.clear();
            }
        }
    }
    let recs = refresh(dir, &old_text)?;
    let bad: Vec<String> = recs.bad().map(unescape).collect();
    if let Some(path) = cache {
        match write_index_lines(path, &stamp, recs.lines()) {
            Ok(()) => {
                drop(recs);
                let f = File::open(path)?;
                let mut src = Source {
                    queue: queue.to_string(),
                    status,
                    month: month.map(str::to_string),
                    body: Body::File(BufReader::with_capacity(64 * 1024, f)),
                    current: None,
                    docs: None,
                    current_doc: None,
                };
                src.start()?;
                return Ok((src, bad, Some(stamp)));
            }
            Err(e) => tracing::debug!("job index {}: {e}", path.display()),
        }
    }
    let recs: Vec<Rec> = recs.lines().filter_map(Rec::parse).collect();
    Ok((Source::mem(queue, status, month, recs), bad, Some(stamp)))
}

/// The start claims of `queue` (`Queues/<q>/.claimed/<host>/<id>.json`, every machine's),
/// sorted as a folder's records. Few and short-lived: read each time, never indexed.
fn claims_source(store: &Store, queue: &str) -> Vec<Rec> {
    let root = super::jobfile::claims_root(store, queue);
    let mut recs = Vec::new();
    for host in scan_subdirs(&root).unwrap_or_default() {
        for (id, p) in super::jobfile::claims_of(store, queue, &host) {
            if !crate::model::is_safe_id(&id) {
                continue;
            }
            // An unreadable claim (mid-write) is left out, not reported: it is never a
            // document of its own.
            if let Some(head) = read_head(&p) {
                recs.push(Rec::from_head(&id, Some(head)));
            }
        }
    }
    recs.sort_by(|a, b| a.key().cmp(&b.key()));
    recs
}

/// A folder's records in index order, as index lines: those of the old index's text for the
/// names it already had, new lines for the rest. About 30 bytes a job besides the lines'
/// text (no allocation per job), so bringing a folder of 100,000 jobs up to date after one
/// change costs a few megabytes, not one record object per job.
struct Refreshed<'a> {
    old: &'a str,
    fresh: String,
    /// (queue time seconds, nanoseconds, line): the line is `old[at..at+len]` or
    /// `fresh[at..at+len]`.
    order: Vec<(i64, u32, LineRef)>,
}

#[derive(Debug, Clone, Copy)]
struct LineRef {
    fresh: bool,
    at: u32,
    len: u32,
}

impl Refreshed<'_> {
    fn line(&self, r: LineRef) -> &str {
        let text = if r.fresh { &self.fresh } else { self.old };
        let at = r.at as usize;
        text.get(at..at + r.len as usize).unwrap_or_default()
    }

    /// The lines, sorted, each with its newline.
    fn lines(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|&(_, _, r)| self.line(r))
    }

    /// The escaped ids of the files that are not readable jobs (`!` lines).
    fn bad(&self) -> impl Iterator<Item = &str> {
        self.lines()
            .filter_map(|l| l.strip_prefix("!\t"))
            .map(|id| id.strip_suffix('\n').unwrap_or(id))
    }
}

/// The id field of an index line, unescaped only when it has an escape.
fn line_id(line: &str) -> std::borrow::Cow<'_, str> {
    let mut f = line.strip_suffix('\n').unwrap_or(line).split('\t');
    let id = if line.starts_with("!\t") {
        f.nth(1)
    } else {
        f.nth(2)
    }
    .unwrap_or_default();
    if id.contains('\\') {
        unescape(id).into()
    } else {
        id.into()
    }
}

/// Lists `dir` and gives its records in index order, reusing `old` (an index's lines after
/// its header) for the names it holds and reading the heads of the other files.
fn refresh<'a>(dir: &Path, old: &'a str) -> std::io::Result<Refreshed<'a>> {
    // The old lines that hold a job, by (escaped) id.
    let mut known: Vec<(&str, u32, u32)> = Vec::new();
    let mut at = 0usize;
    for line in old.split_inclusive('\n') {
        let start = at;
        at += line.len();
        if line == TRAILER || !line.ends_with('\n') {
            continue;
        }
        let Some(rec) = Rec::parse(line) else {
            continue;
        };
        if rec.head.is_none() {
            continue;
        }
        let Some(id) = line.split('\t').nth(2) else {
            continue;
        };
        let (Ok(s), Ok(l)) = (u32::try_from(start), u32::try_from(line.len())) else {
            continue;
        };
        known.push((id, s, l));
    }
    known.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = Refreshed {
        old,
        fresh: String::new(),
        order: Vec::new(),
    };
    let mut failed = None;
    super::scan_each(dir, |entry| {
        let super::Scanned::Document(name) = entry else {
            return;
        };
        let Some(id) = name.strip_suffix(".json") else {
            return;
        };
        // A file is replaced by rename, which changes the folder's time too; a head once read
        // stays right for as long as the name stays.
        let escaped = escape(id);
        if let Ok(i) = known.binary_search_by(|k| k.0.cmp(&escaped)) {
            let (_, s, l) = known[i];
            let line = &old[s as usize..(s + l) as usize];
            let (secs, nanos) = line_time(line);
            out.order.push((
                secs,
                nanos,
                LineRef {
                    fresh: false,
                    at: s,
                    len: l,
                },
            ));
            return;
        }
        let rec = Rec::from_head(id, read_head(&dir.join(name)));
        let start = out.fresh.len();
        let mut bytes = Vec::new();
        if let Err(e) = rec.write(&mut bytes) {
            failed = Some(e);
            return;
        }
        out.fresh.push_str(&String::from_utf8_lossy(&bytes));
        let (Ok(s), Ok(l)) = (u32::try_from(start), u32::try_from(bytes.len())) else {
            failed = Some(std::io::Error::other("job index larger than 4 GiB"));
            return;
        };
        let (secs, nanos, _) = rec.key();
        out.order.push((
            secs,
            nanos,
            LineRef {
                fresh: true,
                at: s,
                len: l,
            },
        ));
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    drop(known);
    let mut order = std::mem::take(&mut out.order);
    // Each name once, so no two lines compare equal: an unstable sort (no buffer) will do.
    order.sort_unstable_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| line_id(out.line(a.2)).cmp(&line_id(out.line(b.2))))
    });
    out.order = order;
    Ok(out)
}

/// The queue time of an index line (`!` lines first).
fn line_time(line: &str) -> (i64, u32) {
    let mut f = line.split('\t');
    match (f.next(), f.next()) {
        (Some(s), Some(n)) if s != "!" => (s.parse().unwrap_or(i64::MIN), n.parse().unwrap_or(0)),
        _ => (i64::MIN, 0),
    }
}

/// True when the file ends with the trailer (it was written whole).
pub(super) fn ends_whole(f: &mut File) -> bool {
    use std::io::Read;
    let n = TRAILER.len() as u64;
    let Ok(len) = f.metadata().map(|m| m.len()) else {
        return false;
    };
    let mut tail = vec![0; TRAILER.len()];
    len >= n
        && f.seek(SeekFrom::Start(len - n)).is_ok()
        && f.read_exact(&mut tail).is_ok()
        && tail == TRAILER.as_bytes()
}

/// Writes an index file of `lines` (each a record with its newline, in index order).
fn write_index_lines<'a>(
    path: &Path,
    stamp: &Stamp,
    lines: impl Iterator<Item = &'a str>,
) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = parent.join(format!(
        ".{}.{}.{n}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("idx"),
        std::process::id()
    ));
    let result = (|| {
        let mut w = BufWriter::with_capacity(64 * 1024, File::create(&tmp)?);
        w.write_all(stamp.header(stamp.settled()).as_bytes())?;
        for l in lines {
            w.write_all(l.as_bytes())?;
        }
        w.write_all(TRAILER.as_bytes())?;
        w.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[derive(Debug)]
enum Body {
    File(BufReader<File>),
    Mem(Vec<Rec>, usize),
}

/// One folder's records in listing order.
#[derive(Debug)]
struct Source {
    queue: String,
    status: JobStatus,
    /// The archive month, for an archive folder.
    month: Option<String>,
    body: Body,
    current: Option<Rec>,
    /// The documents cache read in step with the records (JSON listings).
    docs: Option<listing_docs::Docs>,
    /// `current`'s document from it.
    current_doc: Option<Vec<u8>>,
}

impl Source {
    fn mem(queue: &str, status: JobStatus, month: Option<&str>, recs: Vec<Rec>) -> Source {
        Source {
            queue: queue.to_string(),
            status,
            month: month.map(str::to_string),
            body: Body::Mem(recs, 0),
            current: None,
            docs: None,
            current_doc: None,
        }
    }

    /// Positions a file source after its header and returns the unreadable ids (they sort
    /// first).
    fn start(&mut self) -> std::io::Result<Vec<String>> {
        let mut bad = Vec::new();
        match &mut self.body {
            Body::Mem(_, i) => *i = 0,
            Body::File(r) => {
                r.seek(SeekFrom::Start(0))?;
                let mut line = String::new();
                r.read_line(&mut line)?;
                loop {
                    let at = r.stream_position()?;
                    line.clear();
                    if r.read_line(&mut line)? == 0 {
                        break;
                    }
                    match Rec::parse(&line) {
                        Some(Rec { id, head: None }) => bad.push(id.into()),
                        _ => {
                            r.seek(SeekFrom::Start(at))?;
                            break;
                        }
                    }
                }
            }
        }
        self.current = None;
        self.current_doc = None;
        if let Some(d) = &mut self.docs {
            d.rewind()?;
        }
        Ok(bad)
    }

    /// Moves to the next readable record.
    fn advance(&mut self) {
        self.current = loop {
            let rec = match &mut self.body {
                Body::Mem(v, i) => {
                    let r = v.get(*i).cloned();
                    *i += 1;
                    r
                }
                Body::File(r) => {
                    let mut line = String::new();
                    match r.read_line(&mut line) {
                        Ok(n) if n > 0 && line == TRAILER => None,
                        Ok(n) if n > 0 => match Rec::parse(&line) {
                            Some(rec) => Some(rec),
                            // A damaged index line: the folder is listed again next time.
                            None => continue,
                        },
                        _ => None,
                    }
                }
            };
            match rec {
                Some(r) if r.head.is_none() => continue,
                other => break other,
            }
        };
        self.current_doc = match (&self.current, &mut self.docs) {
            (Some(r), Some(d)) => d.next_for(&r.id),
            _ => None,
        };
    }
}

/// A streaming listing: the merge of the folders' sorted records.
#[derive(Debug)]
pub struct Listing {
    sources: Vec<Source>,
    project: Option<String>,
    unreadable: Vec<(String, JobStatus, String)>,
    /// The folders of archive listings' unreadable files, next to `unreadable`.
    unreadable_dirs: Vec<PathBuf>,
    last: Option<(String, String)>,
    pending: Option<Listed>,
    /// The listed folders' stamps, each taken before the folder was read; `None` when one
    /// changed too recently (or could not be read) to tell a later change by its stamp.
    signature: Option<String>,
}

impl Listing {
    /// Files in the listed folders that did not read as jobs: (queue, state, id).
    pub fn unreadable(&self) -> &[(String, JobStatus, String)] {
        &self.unreadable
    }

    /// The unreadable files of an archive listing: (folder, id).
    pub fn unreadable_paths(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.unreadable_dirs
            .iter()
            .zip(&self.unreadable)
            .map(|(d, (_, _, id))| (d.as_path(), id.as_str()))
    }

    /// Starts again from the first job, over the same folder contents.
    pub fn rewind(&mut self) -> std::io::Result<()> {
        for s in &mut self.sources {
            s.start()?;
            s.advance();
        }
        self.last = None;
        self.pending = None;
        Ok(())
    }

    /// Puts back the job `next` returned last, so the next call returns it again.
    pub fn put_back(&mut self, l: Listed) {
        self.pending = Some(l);
    }
}

impl Iterator for Listing {
    type Item = Listed;

    fn next(&mut self) -> Option<Listed> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        loop {
            // A few folders: a linear pick is cheaper than a heap. Ties: the later state
            // first (a job seen in two folders is where it went).
            let mut best: Option<usize> = None;
            for (i, s) in self.sources.iter().enumerate() {
                let Some(r) = &s.current else { continue };
                best = match best {
                    None => Some(i),
                    Some(b) => {
                        let (bs, br) = (&self.sources[b], self.sources[b].current.as_ref()?);
                        let ord = r
                            .key()
                            .cmp(&br.key())
                            .then_with(|| s.queue.cmp(&bs.queue))
                            .then_with(|| rank(bs.status).cmp(&rank(s.status)));
                        if ord.is_lt() { Some(i) } else { Some(b) }
                    }
                };
            }
            let b = best?;
            let src = &mut self.sources[b];
            let rec = src.current.take()?;
            let doc = src.current_doc.take();
            let (queue, status, month) = (src.queue.clone(), src.status, src.month.clone());
            src.advance();
            if self
                .last
                .as_ref()
                .is_some_and(|(q, id)| *q == queue && **id == *rec.id)
            {
                continue;
            }
            self.last = Some((queue.clone(), rec.id.to_string()));
            let Some(mut l) = rec.listed(&queue, status, month.as_deref()) else {
                continue;
            };
            l.doc = doc;
            if self.project.as_deref().is_some_and(|p| p != l.head.project) {
                continue;
            }
            return Some(l);
        }
    }
}

/// Reads a listed job's document. When the job has moved on since its folder was listed, it
/// is read from the folder it moved to: the merge hands out only a job's latest sighting, so
/// this never lists it twice. `Ok(None)`: gone from the queue (deleted).
pub fn read_listed(
    store: &Store,
    l: &Listed,
) -> super::Result<Option<(super::JobLocation, crate::model::Job)>> {
    for &s in &JobStatus::ALL[rank(l.status)..] {
        let mut paths = vec![store.job_path(&l.queue, s, &l.id)];
        if s == JobStatus::Queued && l.month.is_none() {
            // A job being started: its claim, before running_jobs/ (the way it moves).
            paths.extend(store.claim_of(std::slice::from_ref(&l.queue), &l.id));
        }
        for path in paths {
            let loc = super::JobLocation {
                queue: l.queue.clone(),
                status: s,
                id: l.id.clone(),
                path,
            };
            match store.job(&loc) {
                Ok(job) => return Ok(Some((loc, job))),
                Err(super::StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(None)
}

fn rank(s: JobStatus) -> usize {
    JobStatus::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

/// Gives freed heap back to the system after a large listing (glibc keeps it otherwise).
pub fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    fn trim() {
        // SAFETY: malloc_trim only returns free heap pages to the kernel; no pointer is
        // touched.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    fn trim() {}
    trim();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_whatever_the_text() {
        for (id, project, user, prio) in [
            ("a", "P", None, None),
            ("b-1.x", "we\tird\nname\\", Some("u\\t"), Some(-10)),
        ] {
            let r = Rec {
                id: id.into(),
                head: Some((
                    -5,
                    7,
                    project.into(),
                    user.map(Into::into),
                    prio,
                    Some((9, 1)),
                )),
            };
            let mut buf = Vec::new();
            r.write(&mut buf).unwrap();
            assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 1);
            let back = Rec::parse(std::str::from_utf8(&buf).unwrap()).unwrap();
            assert_eq!(&*back.id, id);
            let (s, n, p, u, pr, f) = back.head.unwrap();
            assert_eq!((s, n, &*p, u.as_deref(), pr), (-5, 7, project, user, prio));
            assert_eq!(f, Some((9, 1)));
        }
        let bad = Rec {
            id: "z".into(),
            head: None,
        };
        let mut buf = Vec::new();
        bad.write(&mut buf).unwrap();
        assert!(
            Rec::parse(std::str::from_utf8(&buf).unwrap())
                .unwrap()
                .head
                .is_none()
        );
        assert!(Rec::parse("garbage\n").is_none());
    }

    fn ids(src: &mut Source) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        src.advance();
        while let Some(r) = src.current.take() {
            out.push((r.id.to_string(), r.key().0));
            src.advance();
        }
        out
    }

    /// A folder that changed is brought up to date from the old index's text: the heads of
    /// names it had are kept (not read again), new files are read, and the order is the
    /// queue time, then the id as it is (not as escaped: a tab sorts before a backslash).
    #[test]
    fn a_changed_folder_keeps_known_heads_in_order() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("finished_jobs");
        std::fs::create_dir(&dir).unwrap();
        let cache = d.path().join("cache/finished_jobs.idx");
        let job = |t: &str| {
            format!(
                "{{\"config\": {{\"project\": \"P\", \"queue_time\": \"2025-01-01T00:00:{t}Z\"}}}}"
            )
        };
        for (name, t) in [
            ("c", "10"),
            ("a", "10"),
            ("b\\x", "10"),
            ("b\tc", "10"),
            ("z", "05"),
        ] {
            std::fs::write(dir.join(format!("{name}.json")), job(t)).unwrap();
        }
        std::fs::write(dir.join("bad.json"), "{").unwrap();
        let (mut src, bad, _) =
            open_index(&dir, "q", JobStatus::Finished, None, Some(&cache)).unwrap();
        assert_eq!(bad, vec!["bad".to_string()]);
        let t0 = 1735689600;
        let want = |a_time: i64| {
            vec![
                ("z".to_string(), t0 + 5),
                ("new".to_string(), t0 + 7),
                ("a".to_string(), a_time),
                ("b\tc".to_string(), t0 + 10),
                ("b\\x".to_string(), t0 + 10),
                ("c".to_string(), t0 + 10),
            ]
        };
        let mut first = want(t0 + 10);
        first.remove(1);
        assert_eq!(ids(&mut src), first);
        // Rewritten in place (a name keeps its head), and a new file: the folder changed.
        std::fs::write(dir.join("a.json"), job("59")).unwrap();
        std::fs::write(dir.join("new.json"), job("07")).unwrap();
        let (mut src, bad, _) =
            open_index(&dir, "q", JobStatus::Finished, None, Some(&cache)).unwrap();
        assert_eq!(bad, vec!["bad".to_string()]);
        assert_eq!(ids(&mut src), want(t0 + 10));
        // Without a cache the records are read afresh and kept in memory: same order.
        let (mut src, bad, _) = open_index(&dir, "q", JobStatus::Finished, None, None).unwrap();
        assert_eq!(bad, vec!["bad".to_string()]);
        assert_eq!(
            ids(&mut src),
            want(t0 + 59)
                .into_iter()
                .filter(|x| x.0 != "a")
                .chain([("a".to_string(), t0 + 59)])
                .collect::<Vec<_>>()
        );
    }
}
