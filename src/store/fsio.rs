//! Atomic file operations (DESIGN §4): temp file in the same folder, fsync, rename.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Name of a temporary sibling of `path`: dot-prefixed so scanners skip it.
fn temp_sibling(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id())))
}

/// Writes `bytes` to `path` atomically: readers see the old file or the new one, never a mix,
/// and after a crash there is no half-written `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temp_sibling(path)?;
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        sync_parent(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
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
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// Moves `from` to `to` with one rename, refusing to replace an existing `to`
/// (a state change must never overwrite another document).
pub fn move_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => {}
        Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOSYS) => {
            // Filesystems without RENAME_NOREPLACE: check, then rename.
            if to.exists() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists", to.display()),
                ));
            }
            fs::rename(from, to)?;
        }
        Err(e) => return Err(io::Error::from(e)),
    }
    sync_parent(to)?;
    sync_parent(from)
}

/// Appends one line to `path` (created if missing) with a single `write` on an `O_APPEND`
/// descriptor under an exclusive `flock`, so concurrent writers never interleave lines.
pub fn append_line_locked(path: &Path, line: &[u8]) -> io::Result<()> {
    use nix::fcntl::{Flock, FlockArg};
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line);
    if buf.last() != Some(&b'\n') {
        buf.push(b'\n');
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut locked =
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
    locked.write_all(&buf)
}

/// Removes our own temp files (`.<name>.<pid>.<n>.tmp`) in `dir` that a crash left behind:
/// those older than `min_age` (a live writer renames its temp file within moments). Returns
/// how many were removed.
pub fn remove_stale_temp_files(dir: &Path, min_age: std::time::Duration) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with('.') && name.ends_with(".tmp")) {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if old && fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}
