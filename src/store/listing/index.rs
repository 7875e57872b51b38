//! The index files: opening a folder's index, refreshing it from the folder, writing it.

use super::*;

/// Reads a folder's index, bringing it up to date first when the folder changed. Returns the
/// folder's records as a sorted source and the ids of files that are not readable jobs.
pub(super) fn open_folder(
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
pub(super) fn open_index(
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
                    body_at: 0,
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
                    body_at: 0,
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
pub(super) fn claims_source(store: &Store, queue: &str) -> Vec<Rec> {
    let root = super::super::jobfile::claims_root(store, queue);
    let mut recs = Vec::new();
    for host in scan_subdirs(&root).unwrap_or_default() {
        for (id, p) in super::super::jobfile::claims_of(store, queue, &host) {
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
pub(super) struct Refreshed<'a> {
    old: &'a str,
    fresh: String,
    /// (queue time seconds, nanoseconds, line): the line is `old[at..at+len]` or
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

    /// The escaped ids of the files that are not readable jobs (`!` lines).
    pub(super) fn bad(&self) -> impl Iterator<Item = &str> {
        self.lines()
            .filter_map(|l| l.strip_prefix("!\t"))
            .map(|id| id.strip_suffix('\n').unwrap_or(id))
    }
}

/// The id field of an index line, unescaped only when it has an escape.
pub(super) fn line_id(line: &str) -> std::borrow::Cow<'_, str> {
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
pub(super) fn refresh<'a>(dir: &Path, old: &'a str) -> std::io::Result<Refreshed<'a>> {
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
    super::super::scan_each(dir, |entry| {
        let super::super::Scanned::Document(name) = entry else {
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
