//! Poison markers (PRD §7): before a start or a re-adoption the manager writes
//! `Queues/<q>/.handling/<host>/{start,adopt}-<id>` holding the number of attempts so far
//! (`attempts N`, written atomically and fsynced); it removes the marker when the attempt
//! is over. A marker found at the next start means that attempt was interrupted (the manager
//! crashed or was killed). The first interruption is forgiven (the job is tried again and the
//! next attempt counts 2); at [`POISON_ATTEMPTS`] interrupted attempts the job is failed with
//! [`poison_reason`], so one poison document cannot crash-loop the manager.

use super::Manager;
use super::{POISON_ATTEMPTS, pidwatch, poison_reason};
use crate::model::JobStatus;
use crate::store::jobfile::fail_raw;
use crate::store::safe::{self, EntryKind};
use crate::store::{read_limited, write_atomic};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};

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

    /// What the attempt was doing, for the reason text.
    fn doing(self) -> &'static str {
        match self {
            MarkKind::Start => "starting",
            MarkKind::Adopt => "re-adopting",
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

    /// Records on disk that an attempt at handling `id` begins: the marker's attempt count
    /// goes up by one (1 for a fresh marker). False when it could not be recorded (a full
    /// disk): the attempt goes on unprotected, as nothing else can be written either.
    pub(super) fn mark(&self, kind: MarkKind, id: &str) -> bool {
        let p = self.marker_path(kind, id);
        let attempts = read_attempts(&p).unwrap_or(0).saturating_add(1);
        let text = format!("attempts {attempts}\npid {}\n", std::process::id());
        let res = p
            .parent()
            .map_or(Ok(()), safe::create_dir_all)
            .and_then(|_| write_atomic(&p, text.as_bytes()));
        if let Err(e) = &res {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot write {}: {e}", p.display());
        }
        res.is_ok()
    }

    /// True when an earlier attempt at starting `id` was interrupted (its marker is still
    /// on disk): the job is then started on its own.
    pub(super) fn start_was_interrupted(&self, id: &str) -> bool {
        read_attempts(&self.marker_path(MarkKind::Start, id)).is_some()
    }

    /// The attempt is over (whatever its outcome): the marker goes.
    pub(super) fn unmark(&self, kind: MarkKind, id: &str) {
        let p = self.marker_path(kind, id);
        if let Err(e) = safe::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot remove {}: {e}", p.display());
        }
    }

    /// At start: every job whose handling an earlier manager began and never finished
    /// [`POISON_ATTEMPTS`] times is failed with [`poison_reason`] (its worker, if one runs,
    /// is stopped first). After fewer interruptions the marker stays (the next attempt counts
    /// on from it) and the job is tried again. Markers of jobs that have left the state the
    /// attempt started from are removed.
    pub(super) async fn recover_poisoned(&mut self) {
        let dir = self.marker_dir();
        let Ok(entries) = safe::list_dir(&dir) else {
            return;
        };
        let q = self.cfg.queue.clone();
        for e in entries {
            let marker = dir.join(&e.name);
            let name = e.name.to_string_lossy().into_owned();
            let parsed = MarkKind::parse(&name).filter(|_| e.kind == EntryKind::File);
            let Some((kind, id)) = parsed else {
                if e.kind != EntryKind::Dir && !name.starts_with('.') {
                    // Not ours (a link, a stray file): never followed, removed.
                    let _ = safe::remove_file(&marker);
                }
                continue;
            };
            let from = match kind {
                MarkKind::Start => JobStatus::Queued,
                MarkKind::Adopt => JobStatus::Running,
            };
            let path = self.store.job_path(&q, from, id);
            let Ok(bytes) = read_limited(&path) else {
                // The job has moved on (started, cancelled, settled): nothing to guard.
                let _ = safe::remove_file(&marker);
                continue;
            };
            let attempts = read_attempts(&marker).unwrap_or(1);
            if attempts < POISON_ATTEMPTS {
                let text = format!(
                    "job {id}: a previous queue manager stopped while {} it (interrupted attempts: {attempts}; the job is failed at {POISON_ATTEMPTS}); trying again",
                    kind.doing()
                );
                tracing::warn!(job_id = %id, queue = %q, "{text}");
                self.store.append_daemon_log(&self.log_file, &text);
                continue;
            }
            if from == JobStatus::Running {
                let pid = crate::model::strict::parse_value(&bytes)
                    .ok()
                    .and_then(|v| v.pointer("/runtime/process_id")?.as_u64())
                    .and_then(|p| u32::try_from(p).ok());
                if let Some(pid) = pid.filter(|p| pidwatch::is_worker_of(*p, id))
                    && let Ok(pid) = i32::try_from(pid)
                {
                    let _ =
                        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
                    let _ =
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            let reason = poison_reason(kind.doing(), attempts);
            match fail_raw(&self.store, &q, id, from, &bytes, &reason) {
                Ok(_) => self.ended(id, from, JobStatus::Failed, &reason).await,
                Err(e) => {
                    tracing::error!(job_id = %id, queue = %q, "cannot fail poisoned job: {e}");
                    continue; // keep the marker: tried again at the next start
                }
            }
            let _ = safe::remove_file(&marker);
        }
    }
}

/// The attempts a marker records: `None` when there is no marker; 1 for a marker of an older
/// version (it held only a PID) or one that cannot be read, as it still proves one attempt.
fn read_attempts(marker: &Path) -> Option<u32> {
    let bytes = match read_limited(marker) {
        Ok(b) => b,
        Err(crate::store::StoreError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return None;
        }
        Err(_) => return Some(1),
    };
    let text = String::from_utf8_lossy(&bytes);
    Some(
        text.lines()
            .find_map(|l| l.strip_prefix("attempts ")?.trim().parse::<u32>().ok())
            .unwrap_or(1)
            .max(1),
    )
}
