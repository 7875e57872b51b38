//! Atomic file operations (DESIGN §4): temp file in the same folder, fsync, rename.
//!
//! Every path beneath a store root goes through [`super::safe`]: no link is followed at any
//! component, logs are opened `O_APPEND | O_NOFOLLOW`, renames are `renameat2` relative to the
//! folders' descriptors.

use super::safe;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Name of a temporary sibling of `path`: dot-prefixed so scanners skip it.
pub(super) fn temp_sibling(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    // Keep the temp name within NAME_MAX (255) whatever the target's length.
    let short: String = name.chars().take(200).collect();
    Ok(path.with_file_name(format!(".{short}.{}.{n}.tmp", std::process::id())))
}

/// Writes `bytes` to `path` atomically: readers see the old file or the new one, never a mix,
/// and after a crash there is no half-written `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_then(path, bytes, safe::rename, false, Durability::Full)
}

/// [`write_atomic`] whose file is synced but not its folder: for a file the caller moves on
/// at once with [`move_no_replace`] (or [`move_no_replace_into`]), whose folder sync makes
/// the name durable. One fsync fewer on the path every job takes.
pub fn write_atomic_moved_on(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_then(path, bytes, safe::rename, false, Durability::FileOnly)
}

/// [`write_atomic`] without any fsync: readers still see the old file or the new one, never
/// a mix, but a power loss may keep the old one. Only for what is rebuilt or merely counted
/// after a power loss (a manager's status snapshot, a poison marker, which guards against
/// a process crash, where the page cache survives), never for a document of the store.
pub fn write_atomic_volatile(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_then(path, bytes, safe::rename, false, Durability::None)
}

/// What [`write_then`] syncs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// The file, then its folder.
    Full,
    /// The file only.
    FileOnly,
    /// Nothing.
    None,
}

/// Writes `bytes` to a temp sibling of `path` (synced unless `Durability::None`) and gives
/// it the name `path` with `place` (a rename, or a link that refuses to replace: `linked`,
/// whose temp name is removed after), then syncs the folder (`Durability::Full`); the temp
/// name never stays.
fn write_then(
    path: &Path,
    bytes: &[u8],
    place: fn(&Path, &Path) -> io::Result<()>,
    linked: bool,
    durability: Durability,
) -> io::Result<()> {
    let tmp = temp_sibling(path)?;
    let result = (|| {
        let mut f = safe::create_new(&tmp, 0o644)?;
        f.write_all(bytes)?;
        if durability != Durability::None {
            f.sync_all()?;
        }
        drop(f);
        place(&tmp, path)?;
        if durability == Durability::Full {
            sync_parent(path)?;
        }
        Ok(())
    })();
    if result.is_err() || linked {
        let _ = safe::remove_file(&tmp);
    }
    result
}

/// Writes `bytes` to `path` atomically only when `path` does not exist yet (temp file, then
/// a hard link, which refuses to replace): fails with `AlreadyExists` otherwise. Two writers
/// of the same name never both succeed.
pub fn write_new_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_then(path, bytes, safe::hard_link, true, Durability::Full)
}

/// Serialises `value` as pretty JSON and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// fsyncs the folder holding `path`, so a rename survives power loss.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => safe::sync_dir(dir),
        _ => Ok(()),
    }
}

/// Syncs the folders of `a` and `b` (once when they are the same): the two syncs in flight
/// at once, on two threads, so a move waits for one disk round trip instead of two in a row.
pub fn sync_parents(a: &Path, b: &Path) -> io::Result<()> {
    if a.parent() == b.parent() {
        return sync_parent(a);
    }
    std::thread::scope(|s| {
        let other = s.spawn(|| sync_parent(b));
        let first = sync_parent(a);
        let second = other
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("folder sync thread panicked")));
        first.and(second)
    })
}

/// Moves `from` to `to` with one rename, refusing to replace an existing `to`
/// (a state change must never overwrite another document).
pub fn move_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    safe::rename_noreplace(from, to)?;
    sync_parents(to, from)
}

/// [`move_no_replace`] that syncs only the folder `to` is in: for a move out of a folder
/// whose stale entry a reader resolves after a power loss (a start's claim in
/// `.claimed/<host>/`: a claim whose job is found in another state is dropped as stale).
pub fn move_no_replace_into(from: &Path, to: &Path) -> io::Result<()> {
    safe::rename_noreplace(from, to)?;
    sync_parent(to)
}

/// Appends one line to `path` (created if missing) with a single `write` on an
/// `O_APPEND | O_NOFOLLOW` descriptor under an exclusive `flock`, so concurrent writers never
/// interleave lines. A write that fails part-way (the disk full: ENOSPC after some bytes) is
/// cut back to where the file ended, so no torn line is left for the next one to be glued
/// to (the soak saw a full disk cost two events: the torn one and the complete one after it).
/// The file is capped and rotated by its store's [`safe::LogLimits`] (`<name>.1` …
/// `<name>.<keep>`).
pub fn append_line_locked(path: &Path, line: &[u8]) -> io::Result<()> {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::unix::fs::MetadataExt;
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line);
    if buf.last() != Some(&b'\n') {
        buf.push(b'\n');
    }
    let limits = safe::log_limits(path);
    // A rotation by another writer between our open and our lock: reopen (a few times).
    for _ in 0..4 {
        let file = safe::open_append(path)?;
        let mut locked =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
        let meta = locked.metadata()?;
        let current = safe::symlink_metadata(path)
            .is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev());
        if !current {
            continue;
        }
        if meta.len() > 0 && meta.len().saturating_add(buf.len() as u64) > limits.max_bytes {
            rotate(path, limits.keep)?;
            drop(locked);
            continue;
        }
        return write_whole_line(&mut locked, meta.len(), &buf);
    }
    // Still racing: write to whatever file is there now rather than lose the line.
    let file = safe::open_append(path)?;
    let mut locked =
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
    let len = locked.metadata()?.len();
    write_whole_line(&mut locked, len, &buf)
}

/// Writes `buf` at the end of `file` (which ends at `len`, under our lock), or nothing: on
/// an error after a partial write the file is truncated back to `len`.
fn write_whole_line(file: &mut std::fs::File, len: u64, buf: &[u8]) -> io::Result<()> {
    let written = file.write_all(buf);
    if written.is_err() {
        let _ = file.set_len(len);
    }
    written
}

/// Shifts `<path>.<n>` to `<path>.<n+1>` (dropping `<path>.<keep>`) and `<path>` to
/// `<path>.1`. With `keep == 0` the current file is simply removed.
fn rotate(path: &Path, keep: usize) -> io::Result<()> {
    let numbered = |n: usize| {
        let mut s = path.as_os_str().to_os_string();
        s.push(format!(".{n}"));
        PathBuf::from(s)
    };
    if keep == 0 {
        return safe::remove_file(path);
    }
    let _ = safe::remove_file(&numbered(keep));
    for n in (1..keep).rev() {
        match safe::rename(&numbered(n), &numbered(n + 1)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    safe::rename(path, &numbered(1))
}

/// The writer's pid in one of OUR temp names (`.<name>.<pid>.<n>.tmp`, see `temp_path`);
/// `None` for any other name — a client's own temp file is never ours to remove.
fn our_temp_writer(name: &str) -> Option<i32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = inner.rsplitn(3, '.');
    let n = parts.next()?;
    let pid = parts.next()?;
    let short = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(n) && digits(pid) && !short.is_empty())
        .then(|| pid.parse().ok())
        .flatten()
}

/// Whether `pid` is a live process here (EPERM: alive, someone else's).
fn pid_alive(pid: i32) -> bool {
    pid > 0
        && !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        )
}

/// Removes our own temp files (`.<name>.<pid>.<n>.tmp`) in `dir` that a crash left behind:
/// those whose writer is no longer running and older than `min_age`. A client's temp file
/// (any other name, e.g. a message being written into the inbox) is never touched: its
/// writer renames it when done, and removing it would lose the message. Returns how many
/// were removed.
pub fn remove_stale_temp_files(dir: &Path, min_age: std::time::Duration) -> usize {
    let Ok(entries) = safe::list_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries {
        let name = e.name.to_string_lossy();
        if our_temp_writer(&name).is_none_or(pid_alive) {
            continue;
        }
        let p = dir.join(&e.name);
        let old = safe::symlink_metadata(&p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if old && safe::remove_file(&p).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_dead_writers_temp_files_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        // A dead pid: a child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let dead = child.id();
        let mine = std::process::id();
        let names = [
            format!(".msg-1.json.{dead}.0.tmp"), // ours, writer gone: removed
            format!(".msg-2.json.{mine}.3.tmp"), // ours, writer alive: kept
            ".soak-000352.tmp".to_string(),      // a client's: kept
            ".client.json.tmp".to_string(),      // a client's: kept
            format!(".x.{dead}.y.tmp"),          // not our shape: kept
        ];
        for n in &names {
            std::fs::write(dir.join(n), "{}").unwrap();
        }
        let removed = remove_stale_temp_files(dir, std::time::Duration::ZERO);
        assert_eq!(removed, 1);
        assert!(!dir.join(&names[0]).exists());
        for n in &names[1..] {
            assert!(dir.join(n).exists(), "{n} was removed");
        }
        assert_eq!(our_temp_writer(".a.b.12.3.tmp"), Some(12));
        assert_eq!(our_temp_writer(".soak-000352.tmp"), None);
    }

    /// Run by `a_failed_append_leaves_no_torn_line` in a child process (RLIMIT_FSIZE is the
    /// whole process's): appends a 100-byte line under a file-size limit that cuts it short.
    #[test]
    #[ignore = "a child of a_failed_append_leaves_no_torn_line"]
    fn append_cut_short_by_a_file_size_limit() {
        let (Some(path), Some(limit)) = (
            std::env::var_os("AGENTSTORE_TEST_TORN_PATH"),
            std::env::var("AGENTSTORE_TEST_TORN_LIMIT").ok(),
        ) else {
            return;
        };
        let limit: u64 = limit.parse().unwrap();
        // SIGXFSZ blocked: the write past the limit fails with EFBIG instead of killing us.
        let mut xfsz = nix::sys::signal::SigSet::empty();
        xfsz.add(nix::sys::signal::Signal::SIGXFSZ);
        xfsz.thread_block().unwrap();
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE, limit, limit)
            .unwrap();
        let r = append_line_locked(Path::new(&path), &[b'x'; 100]);
        assert!(r.is_err(), "the append went through under the limit");
    }

    #[test]
    fn a_failed_append_leaves_no_torn_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("events.jsonl");
        append_line_locked(&p, b"first").unwrap();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "store::fsio::tests::append_cut_short_by_a_file_size_limit",
            ])
            .env("AGENTSTORE_TEST_TORN_PATH", &p)
            .env("AGENTSTORE_TEST_TORN_LIMIT", "50")
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        // The child's write got 44 bytes in before EFBIG; they were cut back off.
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "first\n");
        append_line_locked(&p, b"second").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "first\nsecond\n");
    }

    #[test]
    fn rotation_keeps_n_files() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        std::fs::create_dir_all(&root).unwrap();
        safe::register_root(
            &root,
            safe::LogLimits {
                max_bytes: 1000,
                keep: 3,
            },
        );
        let p = root.join("logs/x.log");
        for i in 0..200 {
            append_line_locked(&p, format!("{i:099}").as_bytes()).unwrap();
        }
        let mut names: Vec<_> = std::fs::read_dir(root.join("logs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["x.log", "x.log.1", "x.log.2", "x.log.3"]);
        for n in &names {
            assert!(std::fs::metadata(root.join("logs").join(n)).unwrap().len() <= 1000);
        }
        let last = std::fs::read_to_string(&p).unwrap();
        assert!(last.ends_with(&format!("{:099}\n", 199)), "{last}");
    }
}
