//! Starting queued jobs (PRD §7): highest priority, then oldest first, up to `worker_count`
//! (dependencies and retry back-offs permitting, see `flow`), reading and checking
//! each job, launching its worker, recording it running, and backing off when the store
//! cannot be written.

use super::Manager;
use super::launcher::{self, LaunchSpec, release};
use super::poison::{MarkKind, handling};
use super::{Running, add_secs, job_limit};
use crate::model::{DocKind, Job, JobStatus, MAX_WORKER_COUNT, Timestamp};
use crate::permissions::project_owner_login;
use crate::store::{Record, StoreError, move_no_replace, read_limited};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

mod prepare;
pub(in crate::queue) use prepare::unsaved_result;

/// How long a job waits for a project or user document it names that is not (yet) in this
/// copy of the store (`Manager::awaited_document`).
const SYNC_ARRIVAL_GRACE_SECONDS: f64 = 600.0;

/// A queued job read and ready to launch.
pub(super) struct PreparedStart {
    pub(super) id: String,
    pub(super) path: PathBuf,
    pub(super) job: Job,
    pub(super) args: Vec<String>,
    pub(super) limit: u64,
}

/// What a launch needs, owned, so it can go on while the manager's loop runs.
struct OwnedSpec {
    launcher: launcher::JobLauncher,
    worker: PathBuf,
    env: Vec<(String, String)>,
    limits: Option<crate::model::ResourceLimits>,
    /// The job's start marker: a panic during the launch is recorded there (poison.rs).
    marker: PathBuf,
    /// Where the launched job is claimed and recorded running (beside the manager's loop).
    store: std::sync::Arc<crate::store::Store>,
    queue: String,
    host: String,
}

/// What the launch did with the job file once its worker was launched (off the manager's
/// loop, so the syncs of several starts overlap instead of queueing behind one another).
pub(super) enum Placed {
    /// Claimed and recorded running: the job is in `running_jobs/` at this path, naming the
    /// worker, which is still gated.
    Running(PathBuf),
    /// Claimed, not recorded running (the launch failed, so there is no worker to name):
    /// the claim's path.
    Claimed(PathBuf),
    /// Claimed, but the store refused the job's running record: the claim's path and why.
    NotRecorded(PathBuf, StoreError),
    /// Another manager of the queue took the job first (it runs there).
    Taken,
    /// The claim itself failed (the store cannot be written).
    NotClaimed(StoreError),
}

/// Claims job `id` (`claim_queued`) and, when its worker was launched, records it running
/// on `host` in `running_jobs/` naming the worker (`place_running_at`). Blocking file work:
/// runs beside the manager's loop.
fn claim_and_place(
    store: &crate::store::Store,
    queue: &str,
    host: &str,
    id: &str,
    job: &Job,
    launched: Option<(u32, Option<String>)>,
) -> Placed {
    let claim = match crate::store::jobfile::claim_queued(store, queue, host, id) {
        Ok(path) => path,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Placed::Taken;
        }
        Err(e) => return Placed::NotClaimed(e),
    };
    let Some((pid, unit)) = launched else {
        return Placed::Claimed(claim);
    };
    let mut job = job.clone();
    let r = &mut job.runtime;
    r.start_time = Some(Timestamp::now());
    r.process_id = Some(pid);
    r.unit = unit;
    match place_running_at(store, queue, host, id, &mut job, &claim) {
        Ok(()) => Placed::Running(store.job_path(queue, JobStatus::Running, id)),
        Err(e) => Placed::NotRecorded(claim, e),
    }
}

/// Marks `job` (at `path`: its start's claim, or `queued_jobs/` for a Slurm start) running
/// on `host` with the start time, pid and unit the caller set, and moves it into
/// `running_jobs/` — the move first, then the write (`move_claimed`): a job another process
/// took meanwhile is never written back into being (`NotFound`).
fn place_running_at(
    store: &crate::store::Store,
    queue: &str,
    host: &str,
    id: &str,
    job: &mut Job,
    path: &Path,
) -> Result<(), StoreError> {
    let r = &mut job.runtime;
    r.status = JobStatus::Running;
    r.finish_time = None;
    r.llm_process_id = None;
    r.error = None;
    r.output = None;
    r.host = Some(host.to_string());
    crate::store::jobfile::move_claimed(store, queue, id, path, job).map(|_| ())
}

/// A completed launch, for [`Manager::on_launched`].
pub(super) struct LaunchDone {
    prepared: PreparedStart,
    started_at: Instant,
    marked: bool,
    result: Result<launcher::Launched, launcher::LaunchError>,
    placed: Placed,
    /// A worker whose scope could not be made: still gated, discarded once the job is
    /// ended (it must not find its job in running_jobs/ and put it back).
    leftover: Option<launcher::Launched>,
}

/// A launch runs as its own task (spawned at once, on any of the runtime's threads), so its
/// fork, its scope's placement and its claim go on while the loop prepares the next start.
type LaunchFuture = tokio::task::JoinHandle<LaunchDone>;

/// The launches in flight (local launchers): a job is here from the start of its launch
/// (its file in queued_jobs/, then in its start claim, then in running_jobs/; a pass never
/// starts it twice, and a reader of the state folders finds it queued while it is in the
/// claim, see `flow::settled_state`) until its worker is released (or it failed, or another
/// manager took it); the sweep leaves it alone meanwhile.
#[derive(Default)]
pub(super) struct Launching {
    /// In start order: each launch runs as its own task, all overlapping, but their
    /// completions are taken in the order the jobs were picked (priority, then oldest), so
    /// jobs are recorded running and released in that order.
    futures: futures_util::stream::FuturesOrdered<LaunchFuture>,
    /// Job ids in flight, with who cancelled each meanwhile.
    ids: std::collections::HashMap<String, Option<String>>,
    /// The one in flight is a start that was interrupted before: nothing else starts.
    alone: bool,
}

impl Launching {
    /// Launches in flight.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// None in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// `id` is being launched.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    /// A start that must be alone is in flight.
    pub(super) fn alone(&self) -> bool {
        self.alone && !self.ids.is_empty()
    }

    /// Marks `id` cancelled by `by`: it fails as cancelled once its launch completes.
    /// False when it is not being launched.
    pub(super) fn cancel(&mut self, id: &str, by: &str) -> bool {
        match self.ids.get_mut(id) {
            Some(c) => {
                c.get_or_insert_with(|| by.to_string());
                true
            }
            None => false,
        }
    }

    fn push(&mut self, p: PreparedStart, marked: bool, alone: bool, spec: OwnedSpec) {
        self.ids.insert(p.id.clone(), None);
        self.alone = alone;
        let marker = spec.marker.clone();
        self.futures
            .push_back(tokio::spawn(handling(marker, async move {
                // Measured from before the launch: systemd's RuntimeMaxSec clock starts with
                // the scope, so a job it kills at the limit has run at least `limit` by this
                // clock.
                let started_at = Instant::now();
                let lspec = LaunchSpec {
                    worker: &spec.worker,
                    args: p.args.clone(),
                    env: &spec.env,
                    job_id: &p.id,
                    runtime_max_secs: p.limit,
                    limits: spec.limits.as_ref(),
                };
                let spawned = spec.launcher.spawn(&lspec);
                // The claim and the running record (with their syncs) go on beside the loop and
                // beside the scope's placement: the worker stays gated until both are done and
                // the loop has seen them (`on_launched`). The record names the scope the worker
                // is being placed in; if it cannot be made, the job is failed from there before
                // the worker is discarded.
                let unit = spec.launcher.unit_for(&p.id);
                let launched = spawned.as_ref().ok().map(|l| (l.pid, unit.clone()));
                let (store, marker) = (spec.store.clone(), spec.marker.clone());
                let (queue, host, id, job) = (
                    spec.queue.clone(),
                    spec.host.clone(),
                    p.id.clone(),
                    p.job.clone(),
                );
                let placing = tokio::task::spawn_blocking(move || {
                    super::poison::handling_sync(marker, || {
                        claim_and_place(&store, &queue, &host, &id, &job, launched)
                    })
                });
                let (result, leftover) = match spawned {
                    Ok(mut l) => match spec.launcher.place(&l, &lspec).await {
                        Ok(()) => {
                            l.unit = unit;
                            (Ok(l), None)
                        }
                        Err(e) => (Err(e), Some(l)),
                    },
                    Err(e) => (Err(e), None),
                };
                let placed = placing.await.unwrap_or_else(|e| {
                    Placed::NotClaimed(StoreError::Io {
                        path: spec.marker.clone(),
                        source: std::io::Error::other(format!(
                            "the start's store work failed: {e}"
                        )),
                    })
                });
                LaunchDone {
                    prepared: p,
                    started_at,
                    marked,
                    result,
                    placed,
                    leftover,
                }
            })));
    }

    /// The next completed launch; pending forever when none is in flight (for `select!`).
    pub(super) async fn next(&mut self) -> LaunchDone {
        use futures_util::StreamExt;
        match self.futures.next().await {
            Some(Ok(d)) => d,
            // A panic in a launch is the manager's, as when the loop itself ran it (the
            // crash recorder has written it into the job's start marker).
            Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Launch tasks are never aborted.
            Some(Err(_)) | None => std::future::pending().await,
        }
    }

    /// A completed launch if one is ready now.
    pub(super) fn ready(&mut self) -> Option<LaunchDone> {
        use futures_util::FutureExt;
        self.next().now_or_never()
    }

    /// Ends `id`'s flight: who cancelled it, if anyone did.
    fn finish(&mut self, id: &str) -> Option<String> {
        self.ids.remove(id).flatten()
    }
}

impl Manager {
    /// Marks `job` (at `path`: its start's claim, or `queued_jobs/` for a Slurm start) running
    /// on this host with the start time, pid and unit the caller set, and moves it into
    /// `running_jobs/` — the move first, then the write (`move_claimed`): a job another
    /// process took meanwhile is never written back into being (`NotFound`).
    pub(super) fn place_running(
        &self,
        id: &str,
        job: &mut Job,
        path: &Path,
    ) -> Result<(), StoreError> {
        place_running_at(&self.store, &self.cfg.queue, &self.host, id, job, path)
    }

    // ---- starting ----------------------------------------------------------------------

    pub(super) async fn start_jobs(&mut self) {
        let q = self.cfg.queue.clone();
        let dir = self.store.jobs_dir(&q, JobStatus::Queued);
        let scan = match self.index.scan(&dir, self.store.validator()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(queue = %q, "cannot scan {}: {e}", dir.display());
                return;
            }
        };
        for c in &scan.conflicts {
            let name = c.file_name().unwrap_or_default().to_string_lossy();
            let to = crate::store::conflicts::set_aside_path(&self.store, c);
            self.set_aside_to(c, &crate::store::conflicts::conflict_label(&name), &to);
        }
        for r in &scan.refused {
            self.set_aside(
                r,
                "not a regular file (a symbolic link, FIFO or device; never followed or read):",
            );
        }
        for id in &scan.invalid {
            self.fail_invalid(id, JobStatus::Queued).await;
        }
        let mut waiting = scan.ordered.len() + scan.pending;
        if !self.paused && self.handover.may_start() {
            let workers = self.config.worker_count.min(MAX_WORKER_COUNT);
            let slurm = matches!(self.launcher, super::launcher::JobLauncher::Slurm);
            let free = if slurm {
                self.slurm_free()
            } else {
                usize::try_from(workers)
                    .unwrap_or(1)
                    .saturating_sub(self.running.len() + self.launching.len())
            };
            let now = Instant::now();
            self.backoff
                .retain(|id, _| scan.ordered.iter().any(|o| o == id));
            let (ready, failed) = self.flow_filter(&scan.ordered).await;
            waiting = waiting.saturating_sub(failed);
            let eligible: Vec<String> = ready
                .iter()
                .filter(|id| !self.launching.contains(id))
                .filter(|id| self.backoff.get(*id).is_none_or(|(at, _)| *at <= now))
                .cloned()
                .collect();
            let startable: Vec<String> = if slurm {
                // A job whose earlier start was interrupted is started alone, before the
                // others: if it is what stops the manager, only it is counted again.
                let startable: Vec<String> = eligible.into_iter().take(free).collect();
                let (retried, fresh): (Vec<String>, Vec<String>) = startable
                    .iter()
                    .cloned()
                    .partition(|id| self.start_was_interrupted(id));
                for id in &retried {
                    self.slurm_start_batch(std::slice::from_ref(id)).await;
                }
                self.slurm_start_batch(&fresh).await;
                startable
            } else {
                // Local starts overlap (see `start_batch`). A job whose earlier start was
                // interrupted is started alone: only when no other start is in flight, and
                // nothing else starts until its own is over. If it is what stops the
                // manager, only it is counted again (and failed at the second
                // interruption), never the innocent jobs whose starts overlapped it.
                let retried = eligible
                    .iter()
                    .find(|id| self.start_was_interrupted(id))
                    .cloned();
                let (startable, alone) = match retried {
                    _ if self.launching.alone() => (Vec::new(), false),
                    Some(r) if self.launching.is_empty() && free > 0 => (vec![r], true),
                    Some(_) => (Vec::new(), false),
                    None => (eligible.into_iter().take(free).collect(), false),
                };
                self.start_batch(&startable, alone).await;
                startable
            };
            // Started, starting, or failed while preparing: no longer waiting.
            let started = scan
                .ordered
                .iter()
                .filter(|id| {
                    self.launching.contains(id)
                        || (startable.contains(id) && !self.backoff.contains_key(id.as_str()))
                })
                .count();
            waiting = waiting.saturating_sub(started);
        }
        self.queued = u32::try_from(waiting).unwrap_or(u32::MAX);
    }

    /// Starts `ids`: each is marked, read and checked here, then its launch (worker spawned,
    /// scope placed) goes on in the background, overlapping the other launches and the
    /// manager's loop; [`on_launched`](Self::on_launched) records each as it completes. A
    /// marker naming each job is on disk for its whole attempt: if the manager dies
    /// meanwhile, its successor counts the interruption (poison.rs). `alone`: nothing else
    /// starts until this one is over.
    async fn start_batch(&mut self, ids: &[String], alone: bool) {
        for id in ids {
            // The launch claims the job and records it running beside the worker's
            // placement; the loop releases the worker once both are done (`on_launched`).
            let (marked, prepared) = self.begin_start(id).await;
            let Some(p) = prepared else {
                if marked {
                    self.unmark(MarkKind::Start, id);
                }
                continue;
            };
            let spec = OwnedSpec {
                launcher: self.launcher.clone(),
                worker: self.cfg.worker.clone(),
                env: self.cfg.worker_env.clone(),
                limits: self.config.resource_limits.clone(),
                marker: self.marker_path(MarkKind::Start, id),
                store: self.store.clone(),
                queue: self.cfg.queue.clone(),
                host: self.host.clone(),
            };
            self.launching.push(p, marked, alone, spec);
        }
    }

    /// A launch completed (its job claimed and, when the worker was launched, recorded
    /// running beside the loop): the worker released (or the job failed, or put off), then
    /// its start marker removed.
    pub(super) async fn on_launched(&mut self, done: LaunchDone) {
        let LaunchDone {
            prepared,
            started_at,
            marked,
            result,
            placed,
            leftover,
        } = done;
        let id = prepared.id.clone();
        let marker = self.marker_path(MarkKind::Start, &id);
        let cancelled = self.launching.finish(&id);
        let path = match placed {
            Placed::Running(p) | Placed::Claimed(p) => Some(p),
            Placed::NotRecorded(claim, e) => {
                // The store refused the running record: the worker never runs, the job,
                // which never ran, goes back to queued_jobs/ and its start is put off.
                tracing::error!(job_id = %id, queue = %self.cfg.queue,
                    "cannot move job to running_jobs: {e}");
                self.give_back(&id, &claim);
                self.back_off(&id, &e.to_string());
                None
            }
            Placed::Taken => {
                // Another manager of the queue started it, or a cancel ended it: its worker
                // is never released.
                tracing::debug!(job_id = %id, queue = %self.cfg.queue,
                    "job taken by another queue manager of the queue");
                self.index.forget(&id);
                None
            }
            Placed::NotClaimed(e) => {
                self.back_off(&id, &e.to_string());
                None
            }
        };
        match (path, cancelled) {
            (None, _) => self.discard_launch(result).await,
            (Some(path), Some(by)) => {
                let p = PreparedStart { path, ..prepared };
                handling(marker, self.cancel_launched(p, result, &by)).await
            }
            (Some(path), None) => {
                let p = PreparedStart { path, ..prepared };
                handling(marker, self.finish_start(p, started_at, result)).await
            }
        }
        // Its job ended (or given back) first: the worker then finds it gone.
        if let Some(l) = leftover {
            self.discard_launch(Ok(l)).await;
        }
        if marked {
            self.unmark(MarkKind::Start, &id);
        }
    }

    /// A job cancelled while its worker was being launched: the job fails as cancelled
    /// (from its claim, or from `running_jobs/` where its launch recorded it), then the
    /// worker, never released, is discarded (its gate closed, its scope stopped): it finds
    /// its job gone and leaves it alone.
    async fn cancel_launched(
        &mut self,
        p: PreparedStart,
        launched: Result<launcher::Launched, launcher::LaunchError>,
        by: &str,
    ) {
        let error = format!("Job cancelled by {by}");
        self.fail_claimed(&p, error).await;
        self.discard_launch(launched).await;
        self.index.forget(&p.id);
    }

    /// A launched worker that must never run: its gate closed, its exit awaited, its scope
    /// stopped.
    async fn discard_launch(
        &mut self,
        launched: Result<launcher::Launched, launcher::LaunchError>,
    ) {
        if let Ok(mut l) = launched {
            drop(l.gate);
            let _ = l.child.wait().await;
            self.launcher.clean_up(l.pid, l.unit.as_deref()).await;
        }
    }

    pub(super) fn set_aside(&self, path: &std::path::Path, what: &str) {
        let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
        self.set_aside_to(path, what, &self.store.conflicts_dir().join(name));
    }

    /// Moves `path` to `to` (never replacing), reporting it as `what`.
    pub(super) fn set_aside_to(&self, path: &std::path::Path, what: &str, to: &std::path::Path) {
        let dir = to.parent().unwrap_or(to);
        let res = crate::store::safe::create_dir_all(dir).and_then(|_| move_no_replace(path, to));
        let text = match res {
            Ok(()) => format!("{what} {} set aside in {}", path.display(), to.display()),
            Err(e) => format!("cannot set aside {what} {}: {e}", path.display()),
        };
        self.record(Record::warn(
            self.event("conflict_set_aside").detail(&text),
            text,
        ));
    }
}
