//! Files of `agent/` written atomically, so a crash leaves the old file or the new one, never
//! half of one: the private files of the user's `~/.agentshell` (keys, trust, sessions, input
//! history; mode 0600) and the project's memory notes. Used by L0 and L1 alike, so it stands
//! outside the layers and imports none of them. (The store's own files have theirs,
//! `store::fsio`, which goes through the store's no-link rules; `agent/` may use nothing else
//! of the crate, so this is the one for everything else.)

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A write failed: what was being done, to which path, and why.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
pub struct WriteError {
    /// What was being done.
    pub action: &'static str,
    /// Which path.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

fn failed(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError {
        action,
        path,
        source,
    }
}

/// Writes `text` to `path` mode 0600, atomically ([`write_atomic`]).
pub fn write_private(path: &Path, text: &str) -> Result<(), WriteError> {
    write_atomic(path, text.as_bytes(), 0o600)
}

/// Writes `bytes` to `path` with `mode`, atomically: a `.partial` file created new (never
/// through an existing file or link), synced, renamed over `path`, then the folder synced so
/// the new name survives a power loss.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let _ = std::fs::remove_file(&partial);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&partial)
        .map_err(failed("creating", &partial))?;
    if let Err(e) = f.write_all(bytes).and_then(|()| f.sync_all()) {
        let _ = std::fs::remove_file(&partial);
        return Err(failed("writing", &partial)(e));
    }
    std::fs::rename(&partial, path).map_err(failed("renaming", path))?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(folder)
        .and_then(|d| d.sync_all())
        .map_err(failed("syncing", folder))
}

/// Creates `dir` (and its parents) if missing; a directory created here is mode 0700.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_write_replaces_whole_with_its_mode_and_leaves_no_partial() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("note.md");
        write_atomic(&p, b"old", 0o600).unwrap();
        // A partial left by a crash is not written through.
        std::fs::write(d.path().join("note.md.partial"), "torn").unwrap();
        write_atomic(&p, b"new", 0o640).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "mode {mode:o}");
        assert!(!d.path().join("note.md.partial").exists());
        // A folder that is not there is an error naming what failed.
        let e = write_private(&d.path().join("nope/key"), "k").unwrap_err();
        assert_eq!(e.action, "creating", "{e}");
    }
}
