//! Files several machines append to, one file per machine (DESIGN §8, issue 13).
//!
//! A sync engine (Dropbox, Syncthing, Nextcloud) copies whole files; `flock` does not reach
//! across it, so two machines appending to one file make a conflict copy of it. Every log the
//! store keeps — `JSONValidation/errors.out`, `logs/events-YYYY-MM.jsonl`, the daemon logs
//! (`logs/orchestrator.log`, `logs/queue-<q>.log`) — is therefore written by each machine to
//! its own file, named `<stem>@<host>.<ext>` beside the PRD's name:
//! `JSONValidation/errors@alpha.out`, `logs/events-2025-10@alpha.jsonl`,
//! `logs/queue-poplar@alpha.log`. `@` cannot occur in a store id or a host name (both are
//! `[A-Za-z0-9][A-Za-z0-9._-]*`), so a name splits one way only. Each file is capped and
//! rotated on its own (`<file>.1` … `.<keep>`), as every store log is.
//!
//! Readers merge: [`host_files`] finds the PRD-named file of an older store (and its
//! rotations) and every machine's file, [`read_lines`] reads them all, oldest rotation first;
//! the typed readers ([`crate::store::Store::read_events`],
//! [`crate::store::Store::read_errors`], [`crate::store::Store::read_daemon_log`]) order the
//! lines by their timestamps across machines.

use super::safe::{self, EntryKind};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Highest rotation number looked for (`<file>.N`).
const MAX_ROTATION: usize = 1000;

/// This machine's file for the shared log `path`: `<stem>@<host>.<ext>` in the same folder
/// (`<name>@<host>` when the name has no extension).
pub fn host_path(path: &Path, host: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}@{host}.{ext}"),
        _ => format!("{name}@{host}"),
    };
    path.with_file_name(file)
}

/// One file of a shared log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// The machine that writes it; `None` for the PRD-named file of an older store.
    pub host: Option<String>,
    /// Rotation: 0 for the current file, N for `<file>.N` (older as N grows).
    pub rotation: usize,
    /// Where it is.
    pub path: PathBuf,
}

/// Splits `name` (a file in the folder of the shared log `<stem>.<ext>`) into its host and
/// rotation, or `None` when it is not a file of that log.
fn parse_name(name: &str, stem: &str, ext: &str) -> Option<(Option<String>, usize)> {
    let rotation = |rest: &str| -> Option<usize> {
        if rest.is_empty() {
            return Some(0);
        }
        let digits = rest.strip_prefix('.')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits
            .parse()
            .ok()
            .filter(|n| (1..=MAX_ROTATION).contains(n))
    };
    let dotted_ext = if ext.is_empty() {
        String::new()
    } else {
        format!(".{ext}")
    };
    // The PRD-named file (older stores, or a user's own lines): `<stem>.<ext>[.N]`.
    if let Some(rest) = name
        .strip_prefix(stem)
        .and_then(|r| r.strip_prefix(dotted_ext.as_str()))
        && let Some(n) = rotation(rest)
    {
        return Some((None, n));
    }
    let rest = name.strip_prefix(stem)?.strip_prefix('@')?;
    // `<host><.ext>` or `<host><.ext>.N`; the digits come after the extension only.
    let (host, n) = match rest.rsplit_once('.') {
        Some((before, digits))
            if !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && before.ends_with(dotted_ext.as_str()) =>
        {
            (
                before.strip_suffix(dotted_ext.as_str())?,
                rotation(&format!(".{digits}"))?,
            )
        }
        _ => (rest.strip_suffix(dotted_ext.as_str())?, 0),
    };
    crate::model::is_safe_id(host).then(|| (Some(host.to_string()), n))
}

/// Every file of the shared log `path` (see the module notes): the PRD-named file and its
/// rotations, and each machine's. Sorted by host (the PRD-named file first), then oldest
/// first. Links and anything not a regular file are left out (no link is followed in the
/// store). A missing folder is an empty log.
pub fn host_files(path: &Path) -> io::Result<Vec<HostFile>> {
    let Some(dir) = path.parent() else {
        return Ok(Vec::new());
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_string(), e.to_string()),
        _ => (name.clone(), String::new()),
    };
    let entries = match safe::list_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<HostFile> = entries
        .into_iter()
        .filter(|e| e.kind == EntryKind::File)
        .filter_map(|e| {
            let n = e.name.to_str()?;
            let (host, rotation) = parse_name(n, &stem, &ext)?;
            Some(HostFile {
                host,
                rotation,
                path: dir.join(n),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.host
            .cmp(&b.host)
            .then_with(|| b.rotation.cmp(&a.rotation))
    });
    Ok(out)
}

/// One line of a shared log and the machine whose file held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    /// The machine (`None`: the PRD-named file of an older store).
    pub host: Option<String>,
    /// The file it came from.
    pub path: PathBuf,
    /// The line, without its newline.
    pub text: String,
}

/// Every line of every file of the shared log `path`, file by file as [`host_files`] orders
/// them. A file is read up to twice the store's log cap (a bigger one was not written by
/// us; the rest of it is not read).
pub fn read_lines(path: &Path) -> io::Result<Vec<HostLine>> {
    let limit = safe::log_limits(path).max_bytes.saturating_mul(2);
    let mut out = Vec::new();
    for f in host_files(path)? {
        let mut bytes = Vec::new();
        match safe::open_read(&f.path) {
            Ok(file) => file.take(limit).read_to_end(&mut bytes)?,
            // Rotated away between the listing and the read: its lines are in the next file.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            if !line.trim().is_empty() {
                out.push(HostLine {
                    host: f.host.clone(),
                    path: f.path.clone(),
                    text: line.to_string(),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_one_way() {
        let p = Path::new("/s/logs/queue-poplar.v2.log");
        assert_eq!(
            host_path(p, "alpha.lab"),
            Path::new("/s/logs/queue-poplar.v2@alpha.lab.log")
        );
        let (s, e) = ("queue-poplar.v2", "log");
        assert_eq!(parse_name("queue-poplar.v2.log", s, e), Some((None, 0)));
        assert_eq!(parse_name("queue-poplar.v2.log.3", s, e), Some((None, 3)));
        assert_eq!(
            parse_name("queue-poplar.v2@alpha.lab.log", s, e),
            Some((Some("alpha.lab".into()), 0))
        );
        assert_eq!(
            parse_name("queue-poplar.v2@alpha.lab.log.2", s, e),
            Some((Some("alpha.lab".into()), 2))
        );
        // Another queue's log, a conflict copy, a temp file: not this log.
        assert_eq!(parse_name("queue-poplar.v2.x.log", s, e), None);
        assert_eq!(
            parse_name("queue-poplar.v2.log.sync-conflict-1", s, e),
            None
        );
        assert_eq!(parse_name("queue-poplar.v2@a b.log", s, e), None);
        assert_eq!(parse_name("queue-poplar.v2@.log", s, e), None);
        assert_eq!(parse_name("queue-poplar.v2@alpha.log.0", s, e), None);
        assert_eq!(
            host_path(Path::new("/s/JSONValidation/errors.out"), "b"),
            Path::new("/s/JSONValidation/errors@b.out")
        );
    }
}
