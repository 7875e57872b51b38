//! Idle exit of a queue manager (DESIGN §5, "zero resident processes when idle"): the
//! manager exits once its queue has had nothing queued and nothing of this host running for
//! a while; `queue-manager@.path` starts it again for the next job, and a restart re-adopts
//! what runs.

use crate::model::{DocKind, Job, JobStatus};
use crate::store::Store;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Resolves once the queue has had nothing queued and nothing of this host running for
/// `limit` without a break (never for 0). Read from the job folders every second, so it
/// needs nothing from the manager's insides; a job queued after the exit starts the
/// manager again through `queue-manager@.path`, and a restart re-adopts what runs.
pub async fn idle_exit(root: PathBuf, queue: String, limit: Duration) {
    if limit.is_zero() {
        return std::future::pending().await;
    }
    let host = crate::store::hostname();
    let mut idle_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (r, q, h) = (root.clone(), queue.clone(), host.clone());
        let busy = tokio::task::spawn_blocking(move || busy(&r, &q, &h))
            .await
            .unwrap_or(true);
        if busy {
            idle_since = Instant::now();
        } else if idle_since.elapsed() >= limit {
            tracing::info!(queue = %queue, "idle for {} s: exiting", limit.as_secs());
            crate::systemd::notify_stopping("idle: nothing queued or running");
            return;
        }
    }
}

/// True when `queue` has anything in `queued_jobs/`, or a running job of this host (or of
/// no host yet).
/// Anything unreadable counts as busy: never exit on a doubt.
fn busy(root: &Path, queue: &str, host: &str) -> bool {
    let Ok(store) = Store::open(root) else {
        return true;
    };
    let has_json = |status: JobStatus| -> Result<Vec<PathBuf>, ()> {
        let dir = store.jobs_dir(queue, status);
        let rd = std::fs::read_dir(&dir).map_err(|_| ())?;
        Ok(rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                name.ends_with(".json") && !name.starts_with('.')
            })
            .collect())
    };
    // Any entry at all, not only jobs: `queue-manager@.path` (DirectoryNotEmpty) would start
    // the manager again at once for a stray file, so such a file keeps it up instead.
    let queued_empty = std::fs::read_dir(store.jobs_dir(queue, JobStatus::Queued))
        .is_ok_and(|mut rd| rd.next().is_none());
    if !queued_empty {
        return true;
    }
    let Ok(running) = has_json(JobStatus::Running) else {
        return true;
    };
    running
        .iter()
        .any(|p| match store.read_doc::<Job>(DocKind::Job, p) {
            Ok(job) => job.runtime.host.as_deref().is_none_or(|h| h == host),
            Err(_) => true,
        })
}
