//! A queue's runtime, apart from its config (issue 13): `Queues/<q>/queue.json` is the
//! user's (its `config`; a queue manager never writes it), and each machine whose manager
//! serves the queue writes `Queues/<q>/runtime@<host>.json` (PRD §4.5's runtime fields),
//! only when something in it other than `last_update` changed. A user's edit of
//! `queue.json` can then never be lost to a runtime write, and a sync engine never sees two
//! machines write one file. Readers ([`Store::queue`], hence `view-queue`, `list-queues`,
//! the web pages) show `queue.json` with the runtime merged from every machine's file; a
//! store whose managers have not written one yet shows the runtime `queue.json` carries.

use super::safe::{self, EntryKind};
use super::{Store, read_limited};
use crate::model::{Queue, QueueRuntime};
use std::io;
use std::path::PathBuf;

const PREFIX: &str = "runtime@";
const SUFFIX: &str = ".json";

impl Store {
    /// `Queues/<q>/runtime@<host>.json`: the runtime of the manager of `queue` on `host`.
    pub fn queue_runtime_path(&self, queue: &str, host: &str) -> PathBuf {
        self.queue_dir(queue)
            .join(format!("{PREFIX}{host}{SUFFIX}"))
    }

    /// The runtime written by `host`'s manager of `queue`, if there is one.
    pub fn queue_runtime(&self, queue: &str, host: &str) -> Option<QueueRuntime> {
        let bytes = read_limited(&self.queue_runtime_path(queue, host)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every machine's runtime of `queue` (host, runtime), sorted by host. A file that is
    /// not a regular file or does not parse is reported in the journal and left out.
    pub fn queue_runtimes(&self, queue: &str) -> Vec<(String, QueueRuntime)> {
        let dir = self.queue_dir(queue);
        let Ok(entries) = safe::list_dir(&dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries {
            let Some(host) = e
                .name
                .to_str()
                .and_then(|n| n.strip_prefix(PREFIX))
                .and_then(|n| n.strip_suffix(SUFFIX))
                .filter(|h| crate::model::is_safe_id(h))
            else {
                continue;
            };
            let path = dir.join(&e.name);
            if e.kind != EntryKind::File {
                tracing::warn!(queue, "{} is not a regular file; left out", path.display());
                continue;
            }
            match read_limited(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(r) => out.push((host.to_string(), r)),
                Err(err) => tracing::warn!(queue, "{}: {err}; left out", path.display()),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Writes `host`'s runtime of `queue` when it differs from the one on disk in anything
    /// but the time in `last_update` (an idle manager rewrites nothing). Returns whether it
    /// wrote.
    pub fn write_queue_runtime(
        &self,
        queue: &str,
        host: &str,
        runtime: &QueueRuntime,
    ) -> io::Result<bool> {
        // The first loop after the start reset is recorded (`last_update` set); later loops
        // that changed nothing else are not.
        let unchanged = self.queue_runtime(queue, host).is_some_and(|old| {
            old.last_update.is_some() == runtime.last_update.is_some()
                && QueueRuntime {
                    last_update: None,
                    ..old
                } == QueueRuntime {
                    last_update: None,
                    ..runtime.clone()
                }
        });
        if unchanged {
            return Ok(false);
        }
        // Not synced: a status snapshot the manager rewrites at every start (a power loss
        // may keep an older one, never a torn one).
        let mut bytes = serde_json::to_vec_pretty(runtime).map_err(io::Error::other)?;
        bytes.push(b'\n');
        super::write_atomic_volatile(&self.queue_runtime_path(queue, host), &bytes)?;
        Ok(true)
    }

    /// `queue` with its runtime merged from every machine's file (see the module notes).
    pub(super) fn with_runtime(&self, mut queue: Queue) -> Queue {
        let all = self.queue_runtimes(&queue.config.id);
        if let Some(r) = merge_runtimes(&all) {
            queue.runtime = r;
        }
        queue
    }
}

/// One runtime from every machine's: the latest of the managers that are up (a
/// `process_id`) — else the latest of all — with the running jobs of every manager that is
/// up added together (each machine runs its own). `None` when there is none.
pub fn merge_runtimes(all: &[(String, QueueRuntime)]) -> Option<QueueRuntime> {
    let up: Vec<&QueueRuntime> = all
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.process_id.is_some())
        .collect();
    let pool: Vec<&QueueRuntime> = if up.is_empty() {
        all.iter().map(|(_, r)| r).collect()
    } else {
        up.clone()
    };
    let mut base = (*pool.iter().max_by_key(|r| r.last_update)?).clone();
    if up.len() > 1 {
        base.active_jobs = up.iter().fold(0u32, |n, r| n.saturating_add(r.active_jobs));
    }
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(pid: Option<u32>, active: u32, at: &str) -> QueueRuntime {
        QueueRuntime {
            process_id: pid,
            active_jobs: active,
            last_update: at.parse().ok(),
            ..QueueRuntime::default()
        }
    }

    /// The managers that are up count their running jobs together; a stopped machine's old
    /// file neither leads nor counts while one is up.
    #[test]
    fn runtimes_merge_across_machines() {
        assert_eq!(merge_runtimes(&[]), None);
        let all = vec![
            ("a".to_string(), rt(Some(10), 2, "2025-10-01T00:00:05Z")),
            ("b".to_string(), rt(Some(20), 3, "2025-10-01T00:00:09Z")),
            ("c".to_string(), rt(None, 7, "2025-10-01T00:00:30Z")),
        ];
        let m = merge_runtimes(&all).unwrap_or_default();
        assert_eq!((m.process_id, m.active_jobs), (Some(20), 5));
        let stopped = vec![
            ("a".to_string(), rt(None, 0, "2025-10-01T00:00:05Z")),
            ("c".to_string(), rt(None, 1, "2025-10-01T00:00:30Z")),
        ];
        let m = merge_runtimes(&stopped).unwrap_or_default();
        assert_eq!((m.process_id, m.active_jobs), (None, 1));
    }
}
