//! Lost-job claims (DESIGN §5): a running job of a machine judged lost is claimed by one
//! rename to `running_jobs/.<id>.lost` (a dot-file every scan passes over), written failed
//! with its error there, and only then moved into `failed_jobs/`, so no reader sees a failed
//! job without its error. A claim a crash left half-done is completed by the next sweep.

use super::machines::{Machines, machine_lost_error};
use super::{Store, StoreError, safe, write_json_atomic};
use crate::model::{DocKind, Job, JobStatus, Timestamp};
use std::path::Path;

impl Store {
    /// Claims running `id` (false if another process did first), writes the failure into
    /// it, and only then moves it into `failed_jobs/`: a reader never sees a failed job
    /// without its error. The claim is one rename to `running_jobs/.<id>.lost` (a dot-file
    /// every scan passes over); a crash between the claim and the move leaves that file,
    /// which [`Store::finish_lost_claims`] completes on the next sweep.
    pub(super) fn claim_lost(&self, queue: &str, id: &str, error: &str) -> super::Result<bool> {
        let src = self.job_path(queue, JobStatus::Running, id);
        let claim = lost_claim_path(&src, id);
        match super::move_no_replace(&src, &claim) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => {
                return Err(StoreError::Io {
                    path: claim,
                    source,
                });
            }
        }
        self.finish_lost_claim(queue, id, &claim, error)?;
        Ok(true)
    }

    /// Writes the failure into a claimed lost job and moves it into `failed_jobs/`.
    fn finish_lost_claim(
        &self,
        queue: &str,
        id: &str,
        claim: &Path,
        error: &str,
    ) -> super::Result<()> {
        let dst = self.job_path(queue, JobStatus::Failed, id);
        let bytes = super::read_limited(claim)?;
        match self.parse_doc::<Job>(DocKind::Job, claim, &bytes) {
            Ok(mut job) => {
                if job.runtime.status != JobStatus::Failed || job.runtime.error.is_none() {
                    super::jobfile::set_failed(&mut job, error);
                }
                match self.write_doc(DocKind::Job, claim, &job) {
                    Ok(()) => {}
                    Err(StoreError::Invalid { .. }) => {
                        write_json_atomic(claim, &job).map_err(|source| StoreError::Io {
                            path: claim.to_path_buf(),
                            source,
                        })?
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(_) => super::jobfile::rewrite_failed_raw(claim, &bytes, error)?,
        }
        match super::move_no_replace(claim, &dst) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.settle_second_failure(claim, &dst)
            }
            other => other.map_err(|source| StoreError::Io { path: dst, source }),
        }
    }

    /// A failed copy of the claimed job is already in `failed_jobs/`: another machine judged
    /// the same machine lost and claimed its own copy, and the sync engine brought both. The
    /// same job: the claim is a second record of one failure and goes. Another job under
    /// the same id: the claim is set aside under `conflicts/` (never lost, never retried
    /// forever).
    fn settle_second_failure(&self, claim: &Path, dst: &Path) -> super::Result<()> {
        let read = |p: &Path| self.read_doc::<Job>(DocKind::Job, p).ok();
        let same = match (read(claim), read(dst)) {
            (Some(a), Some(b)) => a.is_same_job_as(&b) || b.is_same_job_as(&a),
            _ => false,
        };
        if same {
            tracing::info!(
                "lost-job claim {}: the job is already failed in {} (another machine claimed it too); the claim goes",
                claim.display(),
                dst.display()
            );
            return safe::remove_file(claim).map_err(|source| StoreError::Io {
                path: claim.to_path_buf(),
                source,
            });
        }
        let aside = super::conflicts::set_aside_path(self, claim);
        let mut to = aside.clone();
        for n in 1.. {
            if !safe::exists(&to) {
                break;
            }
            to = aside.with_extension(format!("lost.{n}"));
        }
        if let Some(dir) = to.parent() {
            safe::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        tracing::warn!(
            "lost-job claim {}: {} holds another job under the same id; set aside as {}",
            claim.display(),
            dst.display(),
            to.display()
        );
        super::move_no_replace(claim, &to).map_err(|source| StoreError::Io { path: to, source })
    }

    /// Completes the lost-job claims a crash left in `running_jobs/` (`.<id>.lost`): the
    /// failure written (if it was not yet) and the job moved into `failed_jobs/`.
    pub(super) fn finish_lost_claims(&self, queue: &str, machines: &Machines) {
        let dir = self.jobs_dir(queue, JobStatus::Running);
        let Ok(entries) = safe::list_dir(&dir) else {
            return;
        };
        for e in entries {
            let name = e.name.to_string_lossy();
            let Some(id) = name
                .strip_prefix('.')
                .and_then(|n| n.strip_suffix(".lost"))
                .filter(|id| crate::model::is_safe_id(id))
            else {
                continue;
            };
            let claim = dir.join(&e.name);
            let host = self
                .read_doc::<Job>(DocKind::Job, &claim)
                .ok()
                .and_then(|j| j.runtime.host);
            let last_seen = host
                .as_deref()
                .and_then(|h| machines.get(h))
                .map(|m| m.last_seen)
                .unwrap_or_else(Timestamp::now);
            let error = machine_lost_error(host.as_deref().unwrap_or("unknown"), &last_seen);
            match self.finish_lost_claim(queue, id, &claim, &error) {
                Ok(()) => tracing::info!(
                    job_id = id,
                    queue,
                    "completed a lost-job claim left by a crash"
                ),
                Err(e) => tracing::warn!(
                    job_id = id,
                    queue,
                    "cannot complete the lost-job claim {}: {e}",
                    claim.display()
                ),
            }
        }
    }
}

/// Where a lost job is claimed: `running_jobs/.<id>.lost`, beside its running file.
fn lost_claim_path(running: &Path, id: &str) -> std::path::PathBuf {
    running.with_file_name(format!(".{id}.lost"))
}
