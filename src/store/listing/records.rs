//! Index files of any kind of record (a job's head, a message's head): one file per store
//! folder in the reader's cache, its records sorted, brought up to date from the folder by
//! reading only the files it has not seen, and read back as a stream or by a binary search
//! over its bytes. The kinds differ only in what a record holds ([`Record`]).

use super::build::{self, Folder, Kind, NewLine};
use super::*;
use std::os::unix::fs::FileExt;

/// What an index file holds a line of: `<seconds>\t<nanoseconds>\t<id>\t…` for a file that
/// read as one, `!\t<id>…` for one that did not.
pub(super) trait Record: Clone + Sized {
    /// The first word of this kind's index files (a new layout gets a new one).
    const MAGIC: &'static str;
    /// Records newest first (messages) rather than oldest first (jobs).
    const DESCENDING: bool;
    /// One line of an index file (with or without its newline); `None`: damaged.
    fn parse(line: &str) -> Option<Self>;
    /// True for a file that did not read as one of this kind (a `!` line).
    fn is_bad(&self) -> bool;
}

/// What identifies a folder's contents: device, inode, modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) dev: u64,
    pub(super) ino: u64,
    secs: i64,
    nanos: i64,
}

impl Stamp {
    pub(super) fn of(dir: &Path) -> std::io::Result<Option<Stamp>> {
        use std::os::unix::fs::MetadataExt;
        let fd = match super::super::safe::open_dir(dir) {
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

    pub(super) fn settled(&self) -> bool {
        let t = SystemTime::UNIX_EPOCH
            + Duration::new(
                u64::try_from(self.secs).unwrap_or(0),
                u32::try_from(self.nanos).unwrap_or(0),
            );
        t.elapsed().is_ok_and(|age| age > SETTLED)
    }

    /// Device and inode (which folder), then its time: the fields of a header.
    pub(super) fn fields(&self) -> (String, String) {
        let folder = format!("{}\t{}\t", self.dev, self.ino);
        let all = format!("{folder}{}\t{}", self.secs, self.nanos);
        (folder, all)
    }

    pub(super) fn header(&self, magic: &str, settled: bool) -> String {
        format!(
            "{magic}\t{}\t{}\t{}\t{}\t{}\n",
            self.dev, self.ino, self.secs, self.nanos, settled as u8
        )
    }

    /// The stamp in a header line and whether it was settled when written.
    fn parse_header(line: &str, magic: &str) -> Option<(Stamp, bool)> {
        let rest = line.strip_prefix(magic)?.strip_prefix('\t')?;
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

/// Adds `dir`'s stamp to a listing's signature (taken before the folder is read, so a
/// change after it changes the stamp); `None` once a folder changed too recently (or could
/// not be read) to tell a later change by its stamp.
pub(super) fn sign(signature: Option<String>, dir: &Path) -> Option<String> {
    match (signature, Stamp::of(dir)) {
        (Some(mut sig), Ok(Some(st))) if st.settled() => {
            sig.push_str(&st.header("", true));
            Some(sig)
        }
        (Some(mut sig), Ok(None)) => {
            sig.push_str("-\n");
            Some(sig)
        }
        _ => None,
    }
}

#[derive(Debug)]
enum Body<R> {
    File(BufReader<File>),
    Mem(Vec<R>, usize),
}

/// One folder's records in index order, from its index file (or from memory when there is
/// no cache folder to keep one in).
#[derive(Debug)]
pub(super) struct Records<R> {
    body: Body<R>,
    /// Where the first readable record starts in a file body (after the unreadable ones).
    body_at: u64,
}

impl<R: Record> Records<R> {
    pub(super) fn mem(recs: Vec<R>) -> Records<R> {
        Records {
            body: Body::Mem(recs, 0),
            body_at: 0,
        }
    }

    fn file(f: File) -> Records<R> {
        Records {
            body: Body::File(BufReader::with_capacity(64 * 1024, f)),
            body_at: 0,
        }
    }

    /// Positions the records at the first one and returns the files that did not read as
    /// records (they sort first).
    pub(super) fn start(&mut self) -> std::io::Result<Vec<R>> {
        let mut bad = Vec::new();
        match &mut self.body {
            Body::Mem(v, i) => {
                *i = 0;
                bad.extend(v.iter().filter(|r| r.is_bad()).cloned());
            }
            Body::File(r) => {
                r.seek(SeekFrom::Start(0))?;
                let mut line = String::new();
                r.read_line(&mut line)?;
                loop {
                    let at = r.stream_position()?;
                    line.clear();
                    if r.read_line(&mut line)? == 0 {
                        self.body_at = at;
                        break;
                    }
                    match R::parse(&line) {
                        Some(rec) if rec.is_bad() => bad.push(rec),
                        _ => {
                            r.seek(SeekFrom::Start(at))?;
                            self.body_at = at;
                            break;
                        }
                    }
                }
            }
        }
        Ok(bad)
    }

    /// The next record of a file that read as one (`None` at the end).
    pub(super) fn next_good(&mut self) -> Option<R> {
        loop {
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
                        Ok(n) if n > 0 => match R::parse(&line) {
                            Some(rec) => Some(rec),
                            // A damaged index line: the folder is listed again next time.
                            None => continue,
                        },
                        _ => None,
                    }
                }
            };
            match rec {
                Some(r) if r.is_bad() => continue,
                other => return other,
            }
        }
    }

    /// Moves to the first record `wanted` admits (the records are sorted so that it admits
    /// none before that one and every one after): a binary search over the file's bytes.
    pub(super) fn seek(&mut self, wanted: &dyn Fn(&R) -> bool) -> std::io::Result<()> {
        match &mut self.body {
            Body::Mem(v, i) => *i = v.partition_point(|r| r.is_bad() || !wanted(r)),
            Body::File(r) => {
                let at = first_line(r.get_ref(), self.body_at, wanted)?;
                r.seek(SeekFrom::Start(at))?;
            }
        }
        Ok(())
    }
}

/// Reads a folder's index at `cache`, bringing it up to date first when the folder changed
/// (`new_line` makes the line of an entry the index has not seen: `None` leaves it out).
/// Returns the records, the files that did not read as records, and the folder's stamp
/// (`None`: no folder).
pub(super) fn open_records<R: Record>(
    dir: &Path,
    cache: Option<&Path>,
    new_line: &NewLine<'_>,
) -> std::io::Result<(Records<R>, Vec<R>, Option<Stamp>)> {
    let Some(stamp) = Stamp::of(dir)? else {
        return Ok((Records::mem(Vec::new()), Vec::new(), None));
    };
    // The old index's records, kept as its text: what a name read before still says.
    let mut old_text = String::new();
    if let Some(path) = cache
        && let Ok(f) = File::open(path)
    {
        let mut r = BufReader::with_capacity(64 * 1024, f);
        let mut line = String::new();
        if r.read_line(&mut line).is_ok()
            && let Some((had, settled)) = Stamp::parse_header(&line, R::MAGIC)
            && had.dev == stamp.dev
            && had.ino == stamp.ino
        {
            if had == stamp && settled && ends_whole(r.get_mut()) {
                let mut recs = Records {
                    body: Body::File(r),
                    body_at: 0,
                };
                let bad = recs.start()?;
                return Ok((recs, bad, Some(stamp)));
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
    let fresh = refresh(dir, &old_text, R::DESCENDING, new_line)?;
    if let Some(path) = cache {
        match write_index_lines(path, &stamp, R::MAGIC, fresh.lines()) {
            Ok(()) => {
                drop(fresh);
                let mut recs = Records::file(File::open(path)?);
                let bad = recs.start()?;
                return Ok((recs, bad, Some(stamp)));
            }
            Err(e) => tracing::debug!("index {}: {e}", path.display()),
        }
    }
    let all: Vec<R> = fresh.lines().filter_map(R::parse).collect();
    let bad = all.iter().filter(|r| r.is_bad()).cloned().collect();
    Ok((Records::mem(all), bad, Some(stamp)))
}

/// A folder's records in index order, as index lines: those of the old index's text for the
/// names it already had, new lines for the rest. About 30 bytes a record besides the lines'
/// text (no allocation per record), so bringing a folder of 100,000 files up to date after
/// one change costs a few megabytes, not one record object per file.
pub(super) struct Refreshed<'a> {
    old: &'a str,
    fresh: String,
    /// (time seconds, nanoseconds, line): the line is `old[at..at+len]` or
    /// `fresh[at..at+len]`.
    order: Vec<(i64, u32, LineRef)>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct LineRef {
    fresh: bool,
    at: u32,
    len: u32,
}

impl Refreshed<'_> {
    pub(super) fn line(&self, r: LineRef) -> &str {
        let text = if r.fresh { &self.fresh } else { self.old };
        let at = r.at as usize;
        text.get(at..at + r.len as usize).unwrap_or_default()
    }

    /// The lines, sorted, each with its newline.
    pub(super) fn lines(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|&(_, _, r)| self.line(r))
    }
}

/// The id field of an index line, unescaped only when it has an escape.
pub(super) fn line_id(line: &str) -> std::borrow::Cow<'_, str> {
    let mut f = line.strip_suffix('\n').unwrap_or(line).split('\t');
    let id = if is_bad_line(line) {
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

fn is_bad_line(line: &str) -> bool {
    line.starts_with("!\t")
}

/// Lists `dir` and gives its records in index order (bad ones first, then oldest first, or
/// newest first when `descending`; ties by id), reusing `old` (an index's lines after its
/// header) for the names it holds and asking `new_line` for the other entries.
pub(super) fn refresh<'a>(
    dir: &Path,
    old: &'a str,
    descending: bool,
    new_line: &NewLine<'_>,
) -> std::io::Result<Refreshed<'a>> {
    // The old lines that hold a record, by (escaped) id.
    let mut known: Vec<(&str, u32, u32)> = Vec::new();
    let mut at = 0usize;
    for line in old.split_inclusive('\n') {
        let start = at;
        at += line.len();
        if line == TRAILER || !line.ends_with('\n') || is_bad_line(line) {
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
    // The entries the old index does not hold, read after the listing (many at a time).
    let mut unseen: Vec<(Kind, Box<str>)> = Vec::new();
    super::super::scan_each(dir, |entry| {
        // A file is replaced by rename, which changes the folder's time too; a head once read
        // stays right for as long as the name stays.
        if let Scanned::Document(name) = entry
            && let Some(id) = name.strip_suffix(".json")
            && let Ok(i) = known.binary_search_by(|k| k.0.cmp(&escape(id)))
        {
            let (_, s, l) = known[i];
            let (secs, nanos) = line_time(&old[s as usize..(s + l) as usize]);
            let line = LineRef {
                fresh: false,
                at: s,
                len: l,
            };
            out.order.push((secs, nanos, line));
            return;
        }
        let (kind, name) = Kind::of(entry);
        unseen.push((kind, name.into()));
    })?;
    if !unseen.is_empty() {
        let folder = Folder::open(dir);
        for line in build::lines_of(&folder, &unseen, new_line)
            .into_iter()
            .flatten()
        {
            let start = out.fresh.len();
            out.fresh.push_str(&line);
            let (Ok(s), Ok(l)) = (u32::try_from(start), u32::try_from(line.len())) else {
                return Err(std::io::Error::other("index larger than 4 GiB"));
            };
            let (secs, nanos) = line_time(&line);
            let line = LineRef {
                fresh: true,
                at: s,
                len: l,
            };
            out.order.push((secs, nanos, line));
        }
    }
    drop(known);
    let mut order = std::mem::take(&mut out.order);
    // Each name once, so no two lines compare equal: an unstable sort (no buffer) will do.
    order.sort_unstable_by(|a, b| {
        let (la, lb) = (out.line(a.2), out.line(b.2));
        is_bad_line(lb).cmp(&is_bad_line(la)).then_with(|| {
            let o = (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| line_id(la).cmp(&line_id(lb)));
            if descending && !is_bad_line(la) {
                o.reverse()
            } else {
                o
            }
        })
    });
    out.order = order;
    Ok(out)
}

/// The time of an index line (`!` lines first).
pub(super) fn line_time(line: &str) -> (i64, u32) {
    let mut f = line.split('\t');
    match (f.next(), f.next()) {
        (Some(s), Some(n)) if s != "!" => (s.parse().unwrap_or(i64::MIN), n.parse().unwrap_or(0)),
        _ => (i64::MIN, 0),
    }
}

/// True when the file ends with the trailer (it was written whole).
pub(in crate::store) fn ends_whole(f: &mut File) -> bool {
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
pub(super) fn write_index_lines<'a>(
    path: &Path,
    stamp: &Stamp,
    magic: &str,
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
        w.write_all(stamp.header(magic, stamp.settled()).as_bytes())?;
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

/// The start of the first record line from `lo` on that `wanted` admits (the records are
/// sorted, so it admits none before that one and every one after), or the trailer's start.
fn first_line<R: Record>(f: &File, lo: u64, wanted: &dyn Fn(&R) -> bool) -> std::io::Result<u64> {
    let len = f.metadata()?.len();
    let mut hi = len.saturating_sub(TRAILER.len() as u64).max(lo);
    let mut lo = lo;
    // Invariant: no line starting before `lo` is wanted; `hi` is a line start (or the end)
    // that is wanted.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let p = if mid == lo {
            lo
        } else {
            next_line_start(f, mid - 1, hi)?
        };
        let p = if p >= hi { lo } else { p };
        let (line, next) = line_at(f, p, hi)?;
        if R::parse(&line).is_some_and(|r| !r.is_bad() && wanted(&r)) {
            hi = p;
        } else {
            lo = next;
        }
    }
    Ok(hi)
}

/// The position after the first newline at or after `from` (`hi` when there is none before).
fn next_line_start(f: &File, from: u64, hi: u64) -> std::io::Result<u64> {
    let mut buf = [0u8; 512];
    let mut at = from;
    while at < hi {
        let n = f.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        if let Some(i) = buf[..n].iter().position(|b| *b == b'\n') {
            return Ok((at + i as u64 + 1).min(hi));
        }
        at += n as u64;
    }
    Ok(hi)
}

/// The line starting at `at` (with its newline) and where the next one starts.
fn line_at(f: &File, at: u64, hi: u64) -> std::io::Result<(String, u64)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    let mut pos = at;
    while pos < hi {
        let n = f.read_at(&mut buf, pos)?;
        if n == 0 {
            break;
        }
        if let Some(i) = buf[..n].iter().position(|b| *b == b'\n') {
            out.extend_from_slice(&buf[..=i]);
            pos += i as u64 + 1;
            return Ok((String::from_utf8_lossy(&out).into_owned(), pos));
        }
        out.extend_from_slice(&buf[..n]);
        pos += n as u64;
    }
    Ok((
        String::from_utf8_lossy(&out).into_owned(),
        pos.min(hi).max(at + 1),
    ))
}
