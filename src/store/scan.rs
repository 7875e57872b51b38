//! Folder scans that see only real documents.

use super::safe::{self, EntryKind};
use std::io;
use std::path::{Path, PathBuf};

/// What a folder holds, split into documents and Dropbox conflict copies.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    /// `*.json` files that are not dot-files, temp files or conflict copies, sorted by name.
    pub documents: Vec<PathBuf>,
    /// Dropbox conflict copies (`… (conflicted copy …).json`), to be reported and set aside.
    pub conflicts: Vec<PathBuf>,
    /// `*.json` entries that are symbolic links, FIFOs, sockets, devices or folders: never
    /// followed or read; to be reported and set aside.
    pub refused: Vec<PathBuf>,
}

/// True for the conflict copies of the sync engines a store lives in:
/// Dropbox and Nextcloud/ownCloud `name (Host's conflicted copy 2025-10-23).json`,
/// Syncthing `name.sync-conflict-20251023-101010-DEVICEID.json`, ownCloud's older
/// `name_conflict-20251023-101010.json`, and `name (conflict 2025-10-23 101010).json`.
pub fn is_conflict_copy(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("conflicted copy")
        || lower.contains(".sync-conflict-")
        || lower.contains("_conflict-")
        || lower.contains(" (conflict ")
        || lower.contains("(conflict)")
}

/// True for names a scanner must never treat as documents: dot-files (our temp files,
/// Syncthing's `.syncthing.*.tmp`, Dropbox's `.dropbox.cache`), editor and partial files
/// (`~*.tmp`, `*.part`, Nextcloud's `*.json.~ABC`), anything not ending in `.json`.
pub fn is_ignored(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('~') || !name.ends_with(".json")
}

/// Lists the documents in `dir`. A missing folder is empty; a folder that is a link (or has
/// one in its path below the store root) is an error.
pub fn scan_dir(dir: &Path) -> io::Result<Scan> {
    let mut scan = Scan::default();
    let entries = match safe::list_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(scan),
        Err(e) => return Err(e),
    };
    for entry in entries {
        // A name that is not UTF-8 is judged by what can be read of it (a document when it
        // ends in `.json`), never silently left: the inbox answers it like any message, and
        // a reader that needs an id gets none from it (`file_id`).
        let name = entry.name.to_string_lossy();
        if is_ignored(&name) {
            continue;
        }
        let path = dir.join(&entry.name);
        match entry.kind {
            EntryKind::File => {}
            EntryKind::Symlink | EntryKind::Other => {
                scan.refused.push(path);
                continue;
            }
            EntryKind::Dir => continue,
        }
        if is_conflict_copy(&name) {
            scan.conflicts.push(path);
        } else {
            scan.documents.push(path);
        }
    }
    scan.documents.sort();
    scan.conflicts.sort();
    scan.refused.sort();
    Ok(scan)
}

/// One entry of [`scan_each`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scanned<'a> {
    /// A document (what [`Scan::documents`] holds): its file name.
    Document(&'a str),
    /// A conflict copy (what [`Scan::conflicts`] holds).
    Conflict(&'a str),
    /// Not a regular file (what [`Scan::refused`] holds).
    Refused(&'a str),
}

/// [`scan_dir`] one entry at a time, in the folder's own order: memory stays at one name
/// whatever the folder holds. A missing folder is empty.
pub fn scan_each(dir: &Path, mut f: impl FnMut(Scanned<'_>)) -> io::Result<()> {
    let r = safe::for_each_entry(dir, |name, kind| {
        let Some(name) = name.to_str() else { return };
        if is_ignored(name) {
            return;
        }
        match kind {
            EntryKind::File if is_conflict_copy(name) => f(Scanned::Conflict(name)),
            EntryKind::File => f(Scanned::Document(name)),
            EntryKind::Symlink | EntryKind::Other => f(Scanned::Refused(name)),
            EntryKind::Dir => {}
        }
    });
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Lists sub-folders of `dir` whose names are safe ids, sorted (links to folders are not
/// folders). A missing folder is empty.
pub fn scan_subdirs(dir: &Path) -> io::Result<Vec<String>> {
    let entries = match safe::list_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        if entry.kind != EntryKind::Dir {
            continue;
        }
        if let Some(name) = entry.name.to_str()
            && crate::model::is_safe_id(name)
        {
            out.push(name.to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// The id a document file stands for (its stem).
pub fn file_id(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(".json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "a.json",
            ".a.json.1.0.tmp",
            "b.txt",
            "c (laptop's conflicted copy 2025-10-23).json",
            "~lock.json",
        ] {
            std::fs::write(d.path().join(n), "{}").unwrap();
        }
        std::fs::create_dir(d.path().join("dir.json")).unwrap();
        let s = scan_dir(d.path()).unwrap();
        assert_eq!(s.documents, vec![d.path().join("a.json")]);
        assert_eq!(s.conflicts.len(), 1);
        assert!(
            scan_dir(&d.path().join("missing"))
                .unwrap()
                .documents
                .is_empty()
        );
    }

    #[test]
    fn conflict_copies_and_partial_files_of_each_engine_are_recognised() {
        for c in [
            "m1 (chenry's conflicted copy 2025-10-23).json",
            "m1 (Conflicted copy 2025-10-23 101010).json",
            "m1.sync-conflict-20251023-101010-ABCDEFG.json",
            "m1_conflict-20251023-101010.json",
            "m1 (conflict 2025-10-23 101010).json",
        ] {
            assert!(is_conflict_copy(c), "{c}");
            assert!(!is_ignored(c), "{c} must be seen to be set aside");
        }
        for p in [
            ".syncthing.m1.json.tmp",
            "~m1.json.tmp",
            ".dropbox.cache",
            "m1.json.part",
            "m1.json.~2f3a",
        ] {
            assert!(is_ignored(p), "{p}");
        }
        for d in ["m1.json", "job-conflict.json", "conflicts.json"] {
            assert!(!is_conflict_copy(d) && !is_ignored(d), "{d}");
        }
    }
}
