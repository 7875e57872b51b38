//! Per-message claims (issue 13, failover): before an orchestratord acts on an inbox message
//! it renames it, without replacing anything, to `inbox/.claim@<host>@<name>`. Of two
//! orchestrators that overlap for a moment (the old one resumed after a pause, before it
//! saw the newer lock) only one rename succeeds; the other finds the file gone. A claim left
//! behind by a process that stopped in the middle (killed, paused for good) goes back into
//! the inbox under its own name when the lock holder recovers claims: at take-over all of
//! them, later those of other hosts that are older than a grace. The answer itself is written
//! without replacing (`outbox/<correlation_id>.json`) and the job id derives from the
//! correlation id, so a message processed twice after a recovery still gets one answer and
//! one job.
//!
//! The claim name starts with a dot: scanners, the inotify watcher and sync-engine readers
//! skip it like a temp file, but it never looks like one of ours (no `.tmp`), so the start-up
//! temp sweep leaves it alone.

use crate::store::{Store, hostname, move_no_replace, safe};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PREFIX: &str = ".claim@";

/// The claim name of inbox file `name` for `host`.
pub fn claim_name(host: &str, name: &str) -> String {
    format!("{PREFIX}{host}@{name}")
}

/// `(host, original name)` of a claim file name.
pub fn parse_claim(file: &str) -> Option<(&str, &str)> {
    let rest = file.strip_prefix(PREFIX)?;
    let (host, name) = rest.split_once('@')?;
    (crate::model::is_safe_id(host) && !name.is_empty() && !name.starts_with('.'))
        .then_some((host, name))
}

/// Claims inbox file `path` for this host: `Ok(Some(claim))` when ours now, `Ok(None)` when
/// it is gone (another process took it). A name too long to claim is processed in place
/// (`Ok(Some(path))`).
pub fn claim(path: &Path) -> io::Result<Option<PathBuf>> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(Some(path.to_path_buf()));
    };
    let claimed = path.with_file_name(claim_name(&hostname(), name));
    if claimed.file_name().is_some_and(|n| n.len() > 255) {
        return Ok(Some(path.to_path_buf()));
    }
    match safe::rename_noreplace(path, &claimed) {
        Ok(()) => Ok(Some(claimed)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // A claim of ours under this name already exists (a crash of an earlier process of
        // this host): it goes back into the inbox at the next recovery; leave this one.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// Puts a claim back into the inbox under its own name (`original`); a new file that took
/// the name meanwhile keeps it, and the claim waits for the next recovery.
pub fn unclaim(claimed: &Path, original: &Path) {
    if claimed == original {
        return;
    }
    if let Err(e) = move_no_replace(claimed, original)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(
            "cannot put {} back into the inbox as {}: {e}",
            claimed.display(),
            original.display()
        );
    }
}

/// Which claims [`recover`] puts back.
#[derive(Debug, Clone, Copy)]
pub enum Recover {
    /// All, ours included: this process just became the holder, no other process of this
    /// host runs, and the holder before it stopped.
    All,
    /// Those of other hosts whose claim is older than this: an old holder that resumed and
    /// claimed a message before it saw the newer lock, then stopped again.
    OthersOlderThan(Duration),
}

/// Puts claims left in the inbox back under their own names; returns how many.
pub fn recover(store: &Store, which: Recover) -> usize {
    let inbox = store.inbox();
    let Ok(entries) = safe::list_dir(&inbox) else {
        return 0;
    };
    let me = hostname();
    let mut n = 0;
    for e in entries {
        let Some(file) = e.name.to_str() else {
            continue;
        };
        let Some((host, name)) = parse_claim(file) else {
            continue;
        };
        let path = inbox.join(file);
        let take = match which {
            Recover::All => true,
            Recover::OthersOlderThan(age) => host != me && changed_before(&path, age),
        };
        if !take {
            continue;
        }
        let original = inbox.join(name);
        match move_no_replace(&path, &original) {
            Ok(()) => {
                tracing::warn!(
                    "put {file} (claimed by {host}, never answered) back into the inbox"
                );
                n += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot put claim {file} back as {name}: {e}"),
        }
    }
    n
}

/// True when `path`'s status last changed (its claim rename) longer than `age` ago.
fn changed_before(path: &Path, age: Duration) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = safe::symlink_metadata(path) else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let ctime = meta.ctime() as f64 + meta.ctime_nsec() as f64 / 1e9;
    now - ctime > age.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_names_round_trip_and_refuse_others() {
        let n = claim_name("node-1.example.org", "m@1.json");
        assert_eq!(parse_claim(&n), Some(("node-1.example.org", "m@1.json")));
        assert_eq!(parse_claim(".claim@bad host@x.json"), None);
        assert_eq!(parse_claim(".claim@h@"), None);
        assert_eq!(parse_claim("x.json"), None);
        assert_eq!(parse_claim(".x.json.1.2.tmp"), None);
    }
}
