//! Grouped durability: many documents replaced with the guarantees of [`super::write_atomic`]
//! (readers see the old file or the new one; after a crash or a power loss there is never a
//! half-written file under the name, and a name that was swapped survives with its new
//! content) for the price of a few syncs per group instead of two per file.
//!
//! Each document is written to a temp sibling (dot-prefixed, skipped by scanners, removed as
//! stale at the next start if a crash leaves it), unsynced. [`GroupedWrite::commit`] then
//! makes every temp file durable with one `syncfs(2)` of their file system, renames each
//! over its name, and syncs each folder once: a name never points at content that is not on
//! disk, and every swap is durable when `commit` returns. A caller that records the swaps
//! elsewhere (a log) writes that record after `commit`, so the record never runs ahead of
//! the documents.

use super::safe;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Documents staged for one grouped replacement.
#[derive(Debug, Default)]
pub struct GroupedWrite {
    staged: Vec<Staged>,
}

#[derive(Debug)]
struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    file: File,
}

impl GroupedWrite {
    /// An empty group.
    pub fn new() -> GroupedWrite {
        GroupedWrite::default()
    }

    /// How many documents are staged.
    pub fn len(&self) -> usize {
        self.staged.len()
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    /// Writes `bytes` to a temp sibling of `path` (never through a link), to replace `path`
    /// at [`Self::commit`]. Nothing under `path` changes yet; on an error nothing is staged
    /// and no temp file stays.
    pub fn stage(&mut self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let tmp = super::fsio::temp_sibling(path)?;
        let mut file = safe::create_new(&tmp, 0o644)?;
        if let Err(e) = file.write_all(bytes) {
            let _ = safe::remove_file(&tmp);
            return Err(e);
        }
        self.staged.push(Staged {
            tmp,
            path: path.to_path_buf(),
            file,
        });
        Ok(())
    }

    /// Makes the staged documents durable and puts each under its name. Returns, in staging
    /// order, whether each one replaced its file; a failed one leaves its old file and no
    /// temp file. When the sync itself fails nothing is renamed (every temp file removed)
    /// and each result is that error.
    pub fn commit(mut self) -> Vec<io::Result<()>> {
        let staged = std::mem::take(&mut self.staged);
        let Some(first) = staged.first() else {
            return Vec::new();
        };
        // One sync of the whole file system holding the group (all of it is in one store
        // folder tree): every temp file's data and inode are on disk after it.
        let synced = nix::unistd::syncfs(&first.file).map_err(io::Error::from);
        if let Err(e) = synced {
            for s in &staged {
                let _ = safe::remove_file(&s.tmp);
            }
            return staged
                .iter()
                .map(|s| {
                    Err(io::Error::new(
                        e.kind(),
                        format!("cannot sync {}: {e}", s.tmp.display()),
                    ))
                })
                .collect();
        }
        let mut dirs = BTreeSet::new();
        let mut results: Vec<io::Result<()>> = staged
            .into_iter()
            .map(|s| {
                drop(s.file);
                match safe::rename(&s.tmp, &s.path) {
                    Ok(()) => {
                        if let Some(d) = s.path.parent() {
                            dirs.insert(d.to_path_buf());
                        }
                        Ok(())
                    }
                    Err(e) => {
                        let _ = safe::remove_file(&s.tmp);
                        Err(e)
                    }
                }
            })
            .collect();
        // The renames are durable once their folders are synced: one sync per folder.
        let mut failed_dirs = Vec::new();
        for d in &dirs {
            if let Err(e) = safe::sync_dir(d) {
                failed_dirs.push((d.clone(), e));
            }
        }
        if !failed_dirs.is_empty() {
            // Renamed but maybe not durable: the caller must not record these as done.
            for r in results.iter_mut() {
                if r.is_ok() {
                    let (d, e) = &failed_dirs[0];
                    *r = Err(io::Error::new(
                        e.kind(),
                        format!("cannot sync the folder {}: {e}", d.display()),
                    ));
                }
            }
        }
        results
    }
}

impl Drop for GroupedWrite {
    fn drop(&mut self) {
        // A group dropped without commit leaves no temp file.
        for s in &self.staged {
            let _ = safe::remove_file(&s.tmp);
        }
    }
}
