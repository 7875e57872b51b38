//! Reading the files an index has not seen yet. A folder never indexed (a new cache, a
//! store synced in) can hold 100,000 of them, so each is read by name beneath the folder,
//! opened once (an `openat`, `fstat`, `read`, `close` a file, not a walk of the whole path),
//! and many at a time: a few threads share the work when there is much of it, which uses
//! both cores for the parsing and keeps the disk's queue full when the files are not in
//! the page cache.

use super::*;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Below this many new entries a folder is read by the calling thread alone.
const PARALLEL_FROM: usize = 256;
/// Threads reading index entries at most, across the whole process (besides the callers'
/// own), however many listings bring folders up to date at once.
const MAX_HELPERS: usize = 7;
/// Helper threads running now.
static HELPERS: AtomicUsize = AtomicUsize::new(0);
/// Entries a thread takes at a time.
const CHUNK: usize = 64;

/// A folder being brought up to date: its path, and the folder opened once for reading
/// its entries by name.
pub(super) struct Folder<'a> {
    /// The folder.
    pub(super) path: &'a Path,
    fd: Option<OwnedFd>,
}

impl<'a> Folder<'a> {
    pub(super) fn open(path: &'a Path) -> Folder<'a> {
        Folder {
            path,
            fd: super::super::safe::open_dir(path).ok(),
        }
    }

    /// The bytes of the regular file `name` of the folder (never through a link, never a
    /// FIFO or a device), at most the document limit and one byte more. `None` when that
    /// read fails: the caller then reads it by its path, the way every other reader does,
    /// which waits for a file a sync engine is replacing and says why it failed.
    pub(super) fn read(&self, name: &str) -> Option<Vec<u8>> {
        use nix::fcntl::OFlag;
        use std::io::Read;
        let dir = self.fd.as_ref()?;
        if name.contains('/') {
            return None;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(dir, name, flags, nix::sys::stat::Mode::empty()).ok()?;
        let f = File::from(fd);
        let m = f.metadata().ok()?;
        if !m.file_type().is_file() {
            return None;
        }
        let limit = crate::schema::MAX_DOCUMENT_BYTES;
        let mut buf = Vec::with_capacity(usize::try_from(m.len().min(limit)).ok()? + 1);
        f.take(limit + 1).read_to_end(&mut buf).ok()?;
        Some(buf)
    }
}

/// How one entry of a folder was listed (an owned [`Scanned`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Document,
    Conflict,
    Refused,
}

impl Kind {
    pub(super) fn of(entry: Scanned<'_>) -> (Kind, &str) {
        match entry {
            Scanned::Document(n) => (Kind::Document, n),
            Scanned::Conflict(n) => (Kind::Conflict, n),
            Scanned::Refused(n) => (Kind::Refused, n),
        }
    }

    fn scanned(self, name: &str) -> Scanned<'_> {
        match self {
            Kind::Document => Scanned::Document(name),
            Kind::Conflict => Scanned::Conflict(name),
            Kind::Refused => Scanned::Refused(name),
        }
    }
}

/// Makes the index line of a new entry of a folder (`None`: leave it out).
pub(super) type NewLine<'f> = dyn Fn(&Folder<'_>, Scanned<'_>) -> Option<String> + Sync + 'f;

/// The lines of `entries` of `folder`, in their order: read by this thread and, when there
/// are many, by helper threads besides (at most [`MAX_HELPERS`] in the whole process).
pub(super) fn lines_of(
    folder: &Folder<'_>,
    entries: &[(Kind, Box<str>)],
    new_line: &NewLine<'_>,
) -> Vec<Option<String>> {
    let line = |i: usize| {
        let (kind, name) = &entries[i];
        new_line(folder, kind.scanned(name))
    };
    let helpers = if entries.len() < PARALLEL_FROM {
        0
    } else {
        let wanted = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(2, 4)
            * 2
            - 1;
        take_helpers(wanted.min(entries.len() / PARALLEL_FROM))
    };
    if helpers == 0 {
        return (0..entries.len()).map(line).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let from = next.fetch_add(CHUNK, Ordering::Relaxed);
            if from >= entries.len() {
                return done;
            }
            let to = (from + CHUNK).min(entries.len());
            done.push((from, (from..to).map(line).collect::<Vec<_>>()));
        }
    };
    let mut chunks = std::thread::scope(|s| {
        let spawned: Vec<_> = (0..helpers)
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, work).ok())
            .collect();
        let mut all = work();
        for h in spawned {
            // A helper that panicked left its chunks undone: they are read below.
            if let Ok(mut d) = h.join() {
                all.append(&mut d);
            }
        }
        all
    });
    HELPERS.fetch_sub(helpers, Ordering::Relaxed);
    chunks.sort_unstable_by_key(|c| c.0);
    let mut out = Vec::with_capacity(entries.len());
    for (from, lines) in chunks {
        // Chunks a panicked helper never returned are read here, in order.
        out.extend((out.len()..from).map(line));
        out.extend(lines);
    }
    out.extend((out.len()..entries.len()).map(line));
    out
}

/// Reserves up to `wanted` helper threads of the process's [`MAX_HELPERS`].
fn take_helpers(wanted: usize) -> usize {
    let mut got = 0;
    let _ = HELPERS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        got = wanted.min(MAX_HELPERS.saturating_sub(now));
        Some(now + got)
    });
    got
}
