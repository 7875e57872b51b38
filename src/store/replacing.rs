//! A document that a sync engine is replacing at this instant.
//!
//! Syncthing writes an incoming version to `.syncthing.<name>.tmp` beside the document, then
//! REMOVES the document and renames the temporary file over its name (`performFinish`:
//! `deleteItemOnDisk`, then `RenameOrCopy`): between the two calls the document does not
//! exist. On a copy of the store that another machine keeps changing (the orchestrator records
//! a project's `update_time` after each research job, a user edits `config.yaml`), a reader
//! that opens the document in that window gets `ENOENT` for a file that exists before and
//! after — and "project not found" then failed a job (t_sync, issue 13).
//!
//! [`crate::store::safe::open_read`], through which every document of the store is read, asks
//! [`being_replaced`] when an open finds nothing, and opens again while the answer is yes (at
//! most [`REPLACE_WAIT`]). A file that is really gone (moved into another state folder, never
//! synced, deleted) has no fresh partial beside it and is "not found" at once.

use super::safe;
use sha2::Digest;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest time a reader waits for a document a sync engine is replacing.
pub const REPLACE_WAIT: Duration = Duration::from_secs(2);

/// Pause between two opens while waiting.
pub const REPLACE_POLL: Duration = Duration::from_millis(2);

/// A partial file changed longer ago than this is a leftover of an interrupted transfer
/// (Syncthing keeps those for reuse for a day), not a replacement in progress.
const FRESH: Duration = Duration::from_secs(10);

/// Syncthing hashes a name longer than this into its partial's name (`lib/fs/tempname.go`:
/// 160 − `.syncthing.` − `.tmp`).
const SYNCTHING_MAX_NAME: usize = 160 - ".syncthing.".len() - ".tmp".len();

/// Names of a sync engine's partial file for `name` in the same folder: Syncthing's
/// (`.syncthing.<name>.tmp`, and `~syncthing~<name>.tmp` as it names them on Windows shares;
/// for a name longer than [`SYNCTHING_MAX_NAME`] bytes the SHA-256 of the name in hex stands
/// for it, as Syncthing names it).
fn partial_names(name: &str) -> [String; 2] {
    let base = if name.len() > SYNCTHING_MAX_NAME {
        data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(name.as_bytes()))
    } else {
        name.to_string()
    };
    [
        format!(".syncthing.{base}.tmp"),
        format!("~syncthing~{base}.tmp"),
    ]
}

/// Whether `path`, which an open has just not found, is being replaced by a sync engine: a
/// fresh partial file of it lies beside it, or it is back already (replaced between the failed
/// open and now).
pub fn being_replaced(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return false;
    };
    let fresh_partial = partial_names(name).iter().any(|p| {
        safe::symlink_metadata(&dir.join(p))
            .is_ok_and(|m| m.file_type().is_file() && changed_within(&m, FRESH))
    });
    // Checked after the partial: its rename makes the document appear in the same step.
    fresh_partial || safe::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// The file's status (data or metadata: Syncthing sets the partial's mode just before the
/// rename) changed less than `within` ago, or in the future (another clock).
fn changed_within(m: &std::fs::Metadata, within: Duration) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let changed = m.ctime() as f64 + m.ctime_nsec() as f64 / 1e9;
    now - changed < within.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_known_by_its_hashed_partial() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("{}.json", "j".repeat(150));
        let doc = dir.path().join(&name);
        assert!(!being_replaced(&doc), "nothing there");
        // The name Syncthing 1.x/2.x gives it: sha256(base name) in hex (checked with
        // `printf %s NAME | sha256sum`).
        let hex = String::from_utf8(
            std::process::Command::new("sh")
                .args([
                    "-c",
                    "printf %s \"$1\" | sha256sum | cut -c1-64",
                    "sh",
                    &name,
                ])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let partial = dir.path().join(format!(".syncthing.{}.tmp", hex.trim()));
        std::fs::write(&partial, b"{}").unwrap();
        assert!(being_replaced(&doc), "a fresh hashed partial");
        // A short name is never hashed.
        let short = dir.path().join("p.json");
        assert!(!being_replaced(&short));
    }

    #[test]
    fn a_fresh_partial_or_the_file_back_means_being_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let doc = dir.path().join("project.json");
        assert!(!being_replaced(&doc), "nothing there");
        let partial = dir.path().join(".syncthing.project.json.tmp");
        std::fs::write(&partial, b"{}").unwrap();
        assert!(being_replaced(&doc), "a fresh partial");
        std::fs::rename(&partial, &doc).unwrap();
        assert!(being_replaced(&doc), "back already");
        std::fs::remove_file(&doc).unwrap();
        std::fs::write(dir.path().join(".syncthing.other.json.tmp"), b"{}").unwrap();
        assert!(!being_replaced(&doc), "another document's partial");
    }
}
