//! Machines keyed by machine id (issue 35), and stores from before: a daemon's new heartbeat
//! carries the keys its machine had before ([`Heartbeat::formerly`]), so the jobs whose
//! `runtime.host` names the old key stay its jobs.
//!
//! Before machine ids a machine was keyed by its host name (`machines/<host name>/…`). A
//! daemon that finds such a folder adopts it when a heartbeat there was written in this very
//! boot (same boot id: the daemons were upgraded in place) by a version before machine ids
//! (no `hostname` field): then the old key goes into `formerly` and its own old heartbeat
//! file is removed. A folder of another boot is not adopted: a clone with the same host name
//! may have written it; it goes stale (or says it stopped) like any silent machine.

use super::machines::{Heartbeat, boot_id, read_heartbeat};
use super::{Store, identity, safe, scan_dir};

impl Store {
    /// A new heartbeat of `daemon` (serving `queue`) for this machine, with the keys it had
    /// before: those its previous heartbeat carried, and its host name when the folder under
    /// that name is this machine's from before machine ids.
    pub fn new_heartbeat(&self, daemon: &str, queue: Option<&str>, interval: u64) -> Heartbeat {
        let mut hb = Heartbeat::new(daemon, queue, interval);
        let own = self.machines_dir().join(&hb.host).join(hb.file_name());
        if let Ok(prev) = read_heartbeat(&own)
            && prev.host == hb.host
        {
            hb.formerly = prev.formerly;
        }
        if let Some(legacy) = identity::legacy_key()
            && !hb.formerly.contains(&legacy)
            && self.adopt_legacy(&legacy, &hb)
        {
            hb.formerly.push(legacy);
        }
        hb
    }

    /// True when `machines/<legacy>/` is this machine's from before machine ids; its file of
    /// `hb`'s daemon is then removed (the new heartbeat stands for it).
    fn adopt_legacy(&self, legacy: &str, hb: &Heartbeat) -> bool {
        let Some(boot) = boot_id() else {
            return false;
        };
        let dir = self.machines_dir().join(legacy);
        let Ok(scan) = scan_dir(&dir) else {
            return false;
        };
        let beats: Vec<(std::path::PathBuf, Heartbeat)> = scan
            .documents
            .into_iter()
            .filter_map(|p| read_heartbeat(&p).ok().map(|b| (p, b)))
            .filter(|(_, b)| b.host == legacy)
            .collect();
        let ours = !beats.is_empty()
            && beats.iter().all(|(_, b)| b.hostname.is_none())
            && beats
                .iter()
                .any(|(_, b)| b.boot_id.as_deref() == Some(&boot));
        if !ours {
            return false;
        }
        tracing::info!(
            "machines/{legacy}/ is this machine's from before machine ids (same boot): it is now {}, formerly {legacy}",
            hb.host
        );
        let old = dir.join(hb.file_name());
        if beats.iter().any(|(p, _)| *p == old) {
            let _ = safe::remove_file(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::Timestamp;

    fn legacy_beat(host: &str, boot: Option<String>) -> Heartbeat {
        let mut hb = Heartbeat::new("queue-manager", Some("q"), 30);
        hb.host = host.to_string();
        hb.hostname = None;
        hb.boot_id = boot;
        hb.last_seen = Timestamp::now();
        hb
    }

    #[test]
    fn a_folder_of_this_boot_is_adopted_and_one_of_another_boot_is_not() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        let me = Heartbeat::new("queue-manager", Some("q"), 30);
        // Another boot (a clone with the same host name, or before a reboot): not ours.
        store
            .write_heartbeat(&legacy_beat("oldname", Some("another-boot".into())))
            .unwrap();
        assert!(!store.adopt_legacy("oldname", &me));
        // This boot, written before machine ids: ours, and our old file goes.
        store
            .write_heartbeat(&legacy_beat("oldname", boot_id()))
            .unwrap();
        assert!(store.adopt_legacy("oldname", &me));
        assert!(
            !store
                .machines_dir()
                .join("oldname")
                .join(me.file_name())
                .exists()
        );
        // A heartbeat with a display name is a current version's (under AGENTSTORE_HOSTNAME).
        let mut current = legacy_beat("named", boot_id());
        current.hostname = Some("named".into());
        store.write_heartbeat(&current).unwrap();
        assert!(!store.adopt_legacy("named", &me));
    }
}
