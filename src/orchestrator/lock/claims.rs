//! Each machine's own claim beside the shared lock file: `<lock>@<machine>` (issue 34).
//!
//! A sync engine carries one file written by two machines badly: when both rewrite
//! `.orchestrator.lock` within a sync interval (a partition healing, a reboot), Syncthing
//! keeps each machine's own copy as the file and the other's as a conflict copy, on both
//! sides, for as long as both keep writing. Each holder then reads itself in the lock and
//! answers; the soak saw two active orchestrators for 80 minutes after one reboot.
//!
//! So every holder also writes a claim file that only its machine ever writes, and every
//! decision reads all of them beside the shared file: a holder yields to a live claim that
//! outranks its own, a taker never takes over while another machine's claim is live, a
//! standby watches every claim for change, and a new epoch counts on from the highest one
//! any file names. A file written by one machine alone never conflicts. The shared file
//! stays: older versions read only it, and it is the compare-and-rename point on one host.
//!
//! A claim counts only for the machine its file is named after (the name is the machine
//! key, [`crate::store::hostname`]): a file cannot speak for another machine.

use super::{LockInfo, is_stale_after, parse_lock};
use crate::model::Timestamp;
use crate::store::{read_limited, safe};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The claim file of machine `host` beside the lock at `path`.
pub(super) fn claim_path(path: &Path, host: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}@{host}"))
}

/// Every machine's claim beside the lock at `path`, as its files say now: regular files
/// named `<lock>@<machine>` whose contents name that machine. Unreadable or foreign ones are
/// left out (a sync engine replacing one: it is read again next time).
pub fn read_claims(path: &Path) -> Vec<LockInfo> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}@", name.to_string_lossy());
    let mut hosts = Vec::new();
    let _ = safe::for_each_entry(dir, |entry, kind| {
        if kind != safe::EntryKind::File {
            return;
        }
        if let Some(host) = entry.to_str().and_then(|e| e.strip_prefix(&prefix))
            && crate::model::is_safe_id(host)
        {
            hosts.push(host.to_string());
        }
    });
    hosts
        .into_iter()
        .filter_map(|host| {
            let info = read_limited(&claim_path(path, &host))
                .ok()
                .and_then(|b| parse_lock(&b))?;
            (info.host == host).then_some(info)
        })
        .collect()
}

/// The claims of other machines that are live now (by their heartbeats, [`is_stale_after`]).
pub(super) fn live_claims_elsewhere(path: &Path, me: &str, stale_after: Duration) -> Vec<LockInfo> {
    let now = Timestamp::now();
    read_claims(path)
        .into_iter()
        .filter(|c| c.host != me && !is_stale_after(c, &now, stale_after))
        .collect()
}

/// What a standby watches for change: the shared file's holder and every other machine's
/// claim, highest rank first (a live holder rewrites at least one of them each heartbeat).
pub fn holders_elsewhere(path: &Path, me: &str) -> Vec<LockInfo> {
    let mut all: Vec<LockInfo> = super::read_lock(path)
        .into_iter()
        .chain(read_claims(path))
        .filter(|l| l.host != me)
        .collect();
    all.sort_by(|a, b| {
        if a.outranks(b) {
            std::cmp::Ordering::Less
        } else if b.outranks(a) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    all.dedup();
    all
}

/// The highest epoch any claim beside `path` names (0 when none does).
pub(super) fn highest_epoch(path: &Path) -> u64 {
    read_claims(path).iter().map(|c| c.epoch).max().unwrap_or(0)
}

/// Removes this machine's claim when it still names `info`'s holder.
pub(super) fn remove_own(path: &Path, info: &LockInfo) {
    let own = claim_path(path, &info.host);
    if read_limited(&own)
        .ok()
        .and_then(|b| parse_lock(&b))
        .is_some_and(|c| c.same_holder(info))
    {
        let _ = safe::remove_file(&own);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LockError, StoreLock};
    use super::*;
    use crate::store::write_json_atomic;

    fn claim(host: &str, epoch: u64, heartbeat: Timestamp) -> LockInfo {
        LockInfo {
            host: host.into(),
            pid: 4242,
            started: heartbeat,
            heartbeat,
            boot_id: None,
            pid_start: None,
            epoch,
        }
    }

    fn put(path: &Path, file_host: &str, info: &LockInfo) {
        write_json_atomic(&claim_path(path, file_host), info).unwrap();
    }

    /// The soak's split brain: the shared file on this machine names this holder (Syncthing
    /// kept our copy, the other's became a conflict copy), yet another machine's live claim
    /// outranks ours: we yield.
    #[test]
    fn a_holder_yields_to_a_live_claim_that_outranks_it_whatever_the_shared_file_says() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".orchestrator.lock");
        let mut lock = StoreLock::acquire(&p).unwrap();
        let me = lock.info().clone();
        assert!(
            claim_path(&p, &me.host).exists(),
            "the holder writes its claim"
        );
        lock.heartbeat().unwrap();
        put(
            &p,
            "zz-other",
            &claim("zz-other", me.epoch + 1, Timestamp::now()),
        );
        assert_eq!(super::super::read_lock(&p).unwrap().host, me.host);
        match lock.heartbeat() {
            Err(LockError::Held { host, .. }) => assert_eq!(host, "zz-other"),
            other => panic!("expected Held by zz-other, got {other:?}"),
        }
        assert_eq!(
            super::super::holder_elsewhere(&p, Duration::from_secs(120)).map(|h| h.host),
            Some("zz-other".into())
        );
        drop(lock);
        assert!(
            !claim_path(&p, &me.host).exists(),
            "the claim goes with the lock"
        );
    }

    /// A lower-ranked machine still writing its claim is contested once per change (it
    /// may be answering); a claim that stops changing is not contested again.
    #[test]
    fn a_lower_ranked_claim_still_changing_is_contested_once_per_change() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".orchestrator.lock");
        let mut lock = StoreLock::acquire(&p).unwrap();
        let mut low = claim("zz-low", 0, Timestamp::now());
        put(&p, "zz-low", &low);
        lock.heartbeat().unwrap();
        assert_eq!(lock.take_contested().map(|c| c.host), Some("zz-low".into()));
        lock.heartbeat().unwrap();
        assert!(
            lock.take_contested().is_none(),
            "unchanged: not contested again"
        );
        low.heartbeat = low.heartbeat.plus_secs(1);
        put(&p, "zz-low", &low);
        lock.heartbeat().unwrap();
        assert!(
            lock.take_contested().is_some(),
            "written again: contested again"
        );
    }

    /// No take-over while another machine's claim is live, even with no shared file (a
    /// sync engine deleted ours); once it is stale, the new epoch counts on from it.
    #[test]
    fn a_live_claim_elsewhere_refuses_the_lock_and_a_stale_one_sets_the_next_epoch() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".orchestrator.lock");
        put(&p, "zz-other", &claim("zz-other", 7, Timestamp::now()));
        match StoreLock::acquire(&p) {
            Err(LockError::Held { host, .. }) => assert_eq!(host, "zz-other"),
            other => panic!("expected Held by zz-other, got {other:?}"),
        }
        let old: Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
        put(&p, "zz-other", &claim("zz-other", 7, old));
        let lock = StoreLock::acquire(&p).unwrap();
        assert_eq!(lock.info().epoch, 8);
    }

    /// A claim counts only for the machine its file is named after.
    #[test]
    fn a_claim_file_cannot_speak_for_another_machine() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".orchestrator.lock");
        put(&p, "zz-other", &claim("zz-third", 9, Timestamp::now()));
        std::fs::write(claim_path(&p, "not..safe"), b"{}").unwrap();
        assert!(read_claims(&p).is_empty());
        let lock = StoreLock::acquire(&p).unwrap();
        assert_eq!(lock.info().epoch, 1);
    }
}
