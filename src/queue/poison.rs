//! Poison markers (PRD §7): a job whose handling stopped an earlier queue manager is failed
//! with [`POISON`] at the next start instead of being tried again.

use super::Manager;
use super::{POISON, pidwatch};
use crate::model::JobStatus;
use crate::store::jobfile::fail_raw;
use crate::store::read_limited;
use nix::sys::signal::Signal;
use std::path::PathBuf;

/// Folder of the poison markers, `Queues/<q>/.handling/`.
const MARKER_DIR: &str = ".handling";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MarkKind {
    Start,
    Adopt,
}

impl MarkKind {
    fn prefix(self) -> &'static str {
        match self {
            MarkKind::Start => "start",
            MarkKind::Adopt => "adopt",
        }
    }

    fn parse(name: &str) -> Option<(MarkKind, &str)> {
        [MarkKind::Start, MarkKind::Adopt]
            .into_iter()
            .find_map(|k| {
                name.strip_prefix(k.prefix())
                    .and_then(|r| r.strip_prefix('-'))
                    .filter(|id| crate::model::is_safe_id(id))
                    .map(|id| (k, id))
            })
    }
}

impl Manager {
    // ---- poison markers ----------------------------------------------------------------

    /// `Queues/<q>/.handling/<host>/`: each machine's manager sees only its own markers (a
    /// synced store carries the others').
    pub(super) fn marker_dir(&self) -> PathBuf {
        let host = if crate::model::is_safe_id(&self.host) {
            self.host.as_str()
        } else {
            "this-host"
        };
        self.store
            .queue_dir(&self.cfg.queue)
            .join(MARKER_DIR)
            .join(host)
    }

    pub(super) fn marker_path(&self, kind: MarkKind, id: &str) -> PathBuf {
        self.marker_dir().join(format!("{}-{id}", kind.prefix()))
    }

    /// Records on disk that handling `id` begins. False when it could not be recorded (a
    /// full disk): the attempt goes on unprotected, as nothing else can be written either.
    pub(super) fn mark(&self, kind: MarkKind, id: &str) -> bool {
        let p = self.marker_path(kind, id);
        let res = p
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&p, std::process::id().to_string()))
            .and_then(|_| std::fs::File::open(&p)?.sync_all());
        if let Err(e) = &res {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot write {}: {e}", p.display());
        }
        res.is_ok()
    }

    pub(super) fn unmark(&self, kind: MarkKind, id: &str) {
        let p = self.marker_path(kind, id);
        if let Err(e) = std::fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot remove {}: {e}", p.display());
        }
    }

    /// At start: every job whose handling an earlier manager began and never finished is
    /// failed with [`POISON`] (its worker, if one runs, is stopped first).
    pub(super) async fn recover_poisoned(&mut self) {
        let dir = self.marker_dir();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let q = self.cfg.queue.clone();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((kind, id)) = MarkKind::parse(&name) else {
                continue;
            };
            let from = match kind {
                MarkKind::Start => JobStatus::Queued,
                MarkKind::Adopt => JobStatus::Running,
            };
            let path = self.store.job_path(&q, from, id);
            if let Ok(bytes) = read_limited(&path) {
                if from == JobStatus::Running {
                    let pid = crate::model::strict::parse_value(&bytes)
                        .ok()
                        .and_then(|v| v.pointer("/runtime/process_id")?.as_u64())
                        .and_then(|p| u32::try_from(p).ok());
                    if let Some(pid) = pid.filter(|p| pidwatch::is_worker_of(*p, id))
                        && let Ok(pid) = i32::try_from(pid)
                    {
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(pid),
                            Signal::SIGKILL,
                        );
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            Signal::SIGKILL,
                        );
                    }
                }
                match fail_raw(&self.store, &q, id, from, &bytes, POISON) {
                    Ok(_) => self.ended(id, from, JobStatus::Failed, POISON).await,
                    Err(e) => {
                        tracing::error!(job_id = %id, queue = %q, "cannot fail poisoned job: {e}");
                        continue; // keep the marker: tried again at the next start
                    }
                }
            }
            let _ = std::fs::remove_file(e.path());
        }
    }
}
