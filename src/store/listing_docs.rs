//! The rendered documents of a JSON listing, cached next to the job index.
//!
//! `list-jobs --format json` prints whole job documents. Reading, validating and rendering
//! each of 100,000 files costs seconds, while the documents of a folder that has not changed
//! are what they were. So beside each folder's index (`<state>.idx`) a JSON listing keeps
//! `<state>.docs`: for each record of the index, in the index's order, the job as it is
//! printed (pretty JSON with its `id`), with the identity of the file it was read from
//! (inode, modification time with nanoseconds, size). A cached document is printed only
//! while its file still has that identity (one `fstatat` per job, no open or parse), so a
//! file replaced by rename or rewritten in place is read again from the store. When the
//! folder changed since the file was written, the file is rewritten first, reusing the
//! documents whose files kept their identity.
//!
//! What is never cached (it is read from the store while listing, as without the cache):
//! a file that does not validate (so its rejection is reported as before), a job whose
//! project or user differs from the index's head (the document decides who may see it),
//! and a document printing larger than [`MAX_CACHED`] (the cache never grows to a copy of
//! large outputs).

use super::Store;
use crate::model::{DocKind, Job};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The first word of a documents file.
const MAGIC: &str = "agentstore-job-docs 1";
/// The last line of a whole documents file: the index's own (checked by `ends_whole`).
use super::listing::TRAILER;
/// A document printing larger than this is not cached.
pub const MAX_CACHED: usize = 16 * 1024;

/// Which file a document was read from: inode, modification time, size.
type Ident = (u64, i64, i64, u64);

/// One entry of a documents file: id, its file's identity, the document if cached.
type Entry = (String, Ident, Option<Vec<u8>>);

/// The identity of `name` in the folder `dir`, if it is a regular file (never followed).
fn ident_at(dir: &std::os::fd::OwnedFd, name: &str) -> Option<Ident> {
    let st = nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    ((st.st_mode & libc::S_IFMT) == libc::S_IFREG).then(|| {
        (
            st.st_ino,
            st.st_mtime,
            st.st_mtime_nsec,
            u64::try_from(st.st_size).unwrap_or(u64::MAX),
        )
    })
}

fn ident_of(m: &std::fs::Metadata) -> Ident {
    use std::os::unix::fs::MetadataExt;
    (m.ino(), m.mtime(), m.mtime_nsec(), m.size())
}

/// A documents file read in step with its index's records.
#[derive(Debug)]
pub(super) struct Docs {
    r: BufReader<File>,
    /// The job folder, where each cached document's file is checked.
    dir: std::os::fd::OwnedFd,
    /// Where the first entry starts.
    body: u64,
    /// Out of step with the records (a damaged file): no more documents from it.
    broken: bool,
}

impl Docs {
    /// The document of the record `id`, which must be the next entry; `None` when it is
    /// not cached (the caller reads the store).
    pub(super) fn next_for(&mut self, id: &str) -> Option<Vec<u8>> {
        if self.broken {
            return None;
        }
        let got = read_entry(&mut self.r);
        match got {
            Ok(Some((eid, ident, doc))) if eid == id => {
                doc.filter(|_| ident_at(&self.dir, &format!("{id}.json")) == Some(ident))
            }
            _ => {
                self.broken = true;
                None
            }
        }
    }

    /// Back to the first entry.
    pub(super) fn rewind(&mut self) -> std::io::Result<()> {
        self.r.seek(SeekFrom::Start(self.body))?;
        self.broken = false;
        Ok(())
    }
}

/// One entry: the header line `id \t ino \t secs \t nanos \t size \t len|-`, then `len`
/// bytes and a newline. `Ok(None)` at the trailer or the end.
fn read_entry(r: &mut BufReader<File>) -> std::io::Result<Option<Entry>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 || line == TRAILER {
        return Ok(None);
    }
    let bad = || std::io::Error::other("damaged documents cache entry");
    let f: Vec<&str> = line.trim_end_matches('\n').split('\t').collect();
    let [id, ino, secs, nanos, size, len] = f.as_slice() else {
        return Err(bad());
    };
    let ident = (
        ino.parse().map_err(|_| bad())?,
        secs.parse().map_err(|_| bad())?,
        nanos.parse().map_err(|_| bad())?,
        size.parse().map_err(|_| bad())?,
    );
    let doc = match *len {
        "-" => None,
        n => {
            let n: usize = n.parse().map_err(|_| bad())?;
            if n > MAX_CACHED {
                return Err(bad());
            }
            let mut buf = vec![0; n + 1];
            r.read_exact(&mut buf)?;
            if buf.pop() != Some(b'\n') {
                return Err(bad());
            }
            Some(buf)
        }
    };
    Ok(Some((super::listing::unescape(id), ident, doc)))
}

fn write_entry(
    w: &mut impl Write,
    id: &str,
    ident: Ident,
    doc: Option<&[u8]>,
) -> std::io::Result<()> {
    let (ino, secs, nanos, size) = ident;
    let id = super::listing::escape(id);
    match doc {
        Some(d) => {
            writeln!(w, "{id}\t{ino}\t{secs}\t{nanos}\t{size}\t{}", d.len())?;
            w.write_all(d)?;
            w.write_all(b"\n")
        }
        None => writeln!(w, "{id}\t{ino}\t{secs}\t{nanos}\t{size}\t-"),
    }
}

/// The header line: the folder's device, inode and time, and whether that time was settled
/// when the file was written.
fn header(stamp_fields: &str, settled: bool) -> String {
    format!("{MAGIC}\t{stamp_fields}\t{}\n", settled as u8)
}

/// A record of the index: id, and the project and user its head names.
pub(super) type Head = (String, Option<(String, Option<String>)>);

/// Opens the documents of `dir`'s records (`ids`, in the index's order), kept at `path`:
/// as they are when the file was written for this same folder stamp (`folder`: device and
/// inode; `stamp_fields`: device, inode and time) settled, else rebuilt, reusing the
/// documents whose files did not change. `None` when the cache cannot be written (the
/// listing then reads each document).
pub(super) fn open(
    store: &Store,
    dir: &Path,
    (folder, stamp_fields, settled): (&str, &str, bool),
    ids: &mut dyn Iterator<Item = Head>,
    path: &Path,
) -> Option<Docs> {
    let valid = header(stamp_fields, true);
    let mut old: Option<BufReader<File>> = None;
    if let Ok(f) = File::open(path) {
        let mut r = BufReader::with_capacity(64 * 1024, f);
        let mut line = String::new();
        if r.read_line(&mut line).is_ok() {
            if line == valid && super::listing::ends_whole(r.get_mut()) {
                let body = line.len() as u64;
                let dir = super::safe::open_dir(dir).ok()?;
                return r.seek(SeekFrom::Start(body)).ok().map(|_| Docs {
                    r,
                    dir,
                    body,
                    broken: false,
                });
            }
            if line
                .strip_prefix(MAGIC)
                .and_then(|l| l.strip_prefix('\t'))
                .is_some_and(|l| l.starts_with(folder))
            {
                old = Some(r);
            }
        }
    }
    match rebuild(store, dir, &header(stamp_fields, settled), ids, old, path) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::debug!("job documents cache {}: {e}", path.display());
            None
        }
    }
}

fn rebuild(
    store: &Store,
    dir: &Path,
    header: &str,
    ids: &mut dyn Iterator<Item = Head>,
    old: Option<BufReader<File>>,
    path: &Path,
) -> std::io::Result<Docs> {
    // What the old file holds: id → (identity, offset and length of its document).
    let mut known: HashMap<Box<str>, (Ident, u64, usize)> = HashMap::new();
    let mut old = old;
    if let Some(r) = &mut old {
        loop {
            match read_entry(r) {
                Ok(Some((id, ident, Some(doc)))) => {
                    let end = r.stream_position()?;
                    known.insert(id.into(), (ident, end - doc.len() as u64 - 1, doc.len()));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("docs"),
        std::process::id()
    ));
    let dirfd = super::safe::open_dir(dir)?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(64 * 1024, File::create(&tmp)?);
        w.write_all(header.as_bytes())?;
        let mut copy = Vec::new();
        for (id, head) in ids {
            let name = format!("{id}.json");
            let Some(ident) = ident_at(&dirfd, &name) else {
                write_entry(&mut w, &id, (0, 0, 0, 0), None)?;
                continue;
            };
            if let (Some((had, at, len)), Some(r)) = (known.get(id.as_str()), &mut old)
                && *had == ident
            {
                copy.resize(*len, 0);
                r.seek(SeekFrom::Start(*at))?;
                r.read_exact(&mut copy)?;
                write_entry(&mut w, &id, ident, Some(&copy))?;
                continue;
            }
            let (ident, doc) = render(store, &dirfd, &name, &id, head.as_ref());
            write_entry(&mut w, &id, ident, doc.as_deref())?;
        }
        w.write_all(TRAILER.as_bytes())?;
        w.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    let mut r = BufReader::with_capacity(64 * 1024, File::open(path)?);
    let body = header.len() as u64;
    r.seek(SeekFrom::Start(body))?;
    Ok(Docs {
        r,
        dir: dirfd,
        body,
        broken: false,
    })
}

/// Reads, checks and prints one job as a JSON listing prints it. The identity is taken from
/// the open file, so the document is never newer than the identity recorded with it.
fn render(
    store: &Store,
    dir: &std::os::fd::OwnedFd,
    name: &str,
    id: &str,
    head: Option<&(String, Option<String>)>,
) -> (Ident, Option<Vec<u8>>) {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let Ok(fd) = nix::fcntl::openat(dir, name, flags, nix::sys::stat::Mode::empty()) else {
        return ((0, 0, 0, 0), None);
    };
    let f = File::from(fd);
    let Ok(m) = f.metadata() else {
        return ((0, 0, 0, 0), None);
    };
    let ident = ident_of(&m);
    let mut bytes = Vec::with_capacity(usize::try_from(m.len()).unwrap_or(0).min(MAX_CACHED));
    let limit = crate::schema::MAX_DOCUMENT_BYTES;
    if f.take(limit + 1).read_to_end(&mut bytes).is_err() {
        return (ident, None);
    }
    let Ok(mut job) = store.validator().parse::<Job>(DocKind::Job, &bytes) else {
        return (ident, None);
    };
    let same = head.is_some_and(|(p, u)| job.config.project == *p && job.config.user == *u);
    if !same {
        return (ident, None);
    }
    if job.id.is_none() {
        job.id = Some(id.to_string());
    }
    let doc = serde_json::to_vec_pretty(&job)
        .ok()
        .filter(|d| d.len() <= MAX_CACHED);
    (ident, doc)
}
