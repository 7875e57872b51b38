//! Private files of the user's `~/.agentshell` (keys, trust, sessions, input history): written
//! mode 0600 and atomically, so a crash leaves the old file or the new one, never half of one.
//! Used by L0 and L1 alike, so it stands outside the layers and imports none of them.

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

/// Writes `text` to `path` mode 0600, atomically: a `.partial` file created new (never
/// through an existing file or link), synced, then renamed over `path`.
pub fn write_private(path: &Path, text: &str) -> Result<(), WriteError> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let _ = std::fs::remove_file(&partial);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(failed("creating", &partial))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(failed("writing", &partial))?;
    std::fs::rename(&partial, path).map_err(failed("renaming", path))
}

/// Creates `dir` (and its parents) if missing; a directory created here is mode 0700.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
