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
        if !self.paused && self.standing_down.is_none() {
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

    /// Reads a queued job and works out how to launch it; `None` when it was taken away,
    /// has been failed (invalid, no account to run as) or is put off (the store cannot be
    /// written).
    pub(super) async fn prepare_start(&mut self, id: &str) -> Option<PreparedStart> {
        let q = self.cfg.queue.clone();
        // Option-like names (`--help.json`) run like any job; a name longer than an id may
        // be cannot: every name made from it (its probe, claim, worker's files) is too long.
        if id.len() > crate::model::MAX_ID_BYTES {
            let why = format!(
                "{} bytes; a job id has at most {}",
                id.len(),
                crate::model::MAX_ID_BYTES
            );
            self.fail_bad_name(id, &why).await;
            return None;
        }
        let path = self.store.job_path(&q, JobStatus::Queued, id);
        let bytes = match read_limited(&path) {
            Ok(b) => b,
            Err(_) => return None, // taken away meanwhile
        };
        let job: Job = match self.store.parse_doc(DocKind::Job, &path, &bytes) {
            Ok(j) => j,
            Err(_) => {
                self.fail_invalid(id, JobStatus::Queued).await;
                return None;
            }
        };
        self.index.forget(id);
        if let Some((state, read)) = self
            .store
            .moved_on_copy(&q, id)
            .map(|s| (s, self.same_job_moved_on(&q, id, s, &job)))
            .filter(|(_, same)| *same != Some(false))
        {
            // Through a sync engine: the job's move on arrived here, the delete of its queued
            // file not (yet): it already ran or runs elsewhere. Never started twice. (A
            // DIFFERENT job under a used id is not this: it goes on, to end failed as an id
            // collision when its worker cannot move it next to the other.)
            if read == Some(true) && matches!(state, JobStatus::Finished | JobStatus::Failed) {
                // The job has ended (read whole, the same job): the queued copy holds nothing
                // the ended one lacks. Removed, so it never waits here for a delete that may
                // never come (its machine lost) and never runs once the ended job is archived.
                match crate::store::safe::remove_file(&path) {
                    Ok(()) => self.record(Record::info(
                        self.event("stale_copy_removed").job(id).detail(state.dir()),
                        format!(
                            "job {id}: removed its stale queued copy (the job ended, in {}/)",
                            state.dir()
                        ),
                    )),
                    Err(e) => {
                        tracing::warn!(job_id = %id, "cannot remove its stale queued copy: {e}")
                    }
                }
                return None;
            }
            self.back_off(
                id,
                &format!(
                    "it is also in {}/ in this copy of the store (a move not fully synced yet): the queued file is a stale copy",
                    state.dir()
                ),
            );
            return None;
        }
        let mut job = job;
        if let Some(why) = self.awaited_document(&job) {
            self.back_off(id, &why);
            return None;
        }
        if let Err(e) = self
            .may_run(&job)
            .and_then(|_| self.fill_pipeline_step(&mut job))
        {
            self.fail_owned(id, JobStatus::Queued, job, e).await;
            return None;
        }
        let run_as = if self.root_mode {
            // Only an account the machine allows (issue 27): the store's users/*.json choose
            // among them, never root, a system account or one outside the allowed groups.
            let allowed = project_owner_login(&self.store, &job)
                .map_err(|e| e.to_string())
                .and_then(|n| {
                    let a = crate::trust::Account::lookup(&n).map_err(|e| {
                        format!("Cannot run the job as the project owner's account: {e}")
                    })?;
                    let policy = crate::trust::Policy::load();
                    crate::trust::check_run_as(&policy, &a).map_err(|e| e.to_string())?;
                    Ok(n)
                });
            match allowed {
                Ok(n) => Some(n),
                Err(e) => {
                    self.fail_owned(id, JobStatus::Queued, job, e.to_string())
                        .await;
                    return None;
                }
            }
        } else {
            None
        };
        let limit = match job_limit(&job, &self.config) {
            Ok(l) => l,
            Err(e) => {
                self.fail_owned(id, JobStatus::Queued, job, e).await;
                return None;
            }
        };
        // The store must take the job's next write before a worker is started for it: on a
        // full disk the start is put off (with a growing pause), not tried again at once.
        // A probe beside the job, never the job's own file: another manager of the queue may
        // have taken it meanwhile, and it must not be written back into being.
        if let Err(e) = self.probe_write(&path, &job) {
            self.back_off(id, &e.to_string());
            return None;
        }
        // Values glued to their options and `--` before the job id: a job file named
        // `--help.json` or `-V.json` is a job like any other, never an option.
        let mut args = vec![
            format!("--root={}", self.cfg.root.display()),
            format!("--queue={q}"),
            "--gate".to_string(),
        ];
        if let Some(u) = &run_as {
            args.push(format!("--run-as={u}"));
        }
        args.push("--".to_string());
        args.push(id.to_string());
        Some(PreparedStart {
            id: id.to_string(),
            path,
            job,
            args,
            limit,
        })
    }

    /// Releases a launched worker whose job the launch recorded in running_jobs/.
    async fn finish_start(
        &mut self,
        p: PreparedStart,
        started_at: Instant,
        launched: Result<launcher::Launched, launcher::LaunchError>,
    ) {
        let q = self.cfg.queue.clone();
        let PreparedStart {
            id,
            path,
            job,
            limit,
            ..
        } = p;
        let id = id.as_str();
        let launched = match launched {
            Ok(l) => l,
            Err(e) => {
                let p = PreparedStart {
                    id: id.to_string(),
                    path,
                    job,
                    args: Vec::new(),
                    limit,
                };
                return self
                    .fail_claimed(&p, format!("Cannot start job: {e}"))
                    .await;
            }
        };
        // The launch recorded the job in running_jobs/ naming this worker (`claim_and_place`).
        self.backoff.remove(id);
        #[cfg(debug_assertions)]
        super::poison::injected_fault("release", id).await;
        let key = self.approval_key(id);
        if let Err(e) = release(launched.gate, &self.config, &key).await {
            // It died before it could start; the exit watcher reports it as dead.
            tracing::warn!(job_id = %id, queue = %q, "worker gone before start: {e}");
        }
        let tx = self.exits_tx.clone();
        let job_id = id.to_string();
        let mut child = launched.child;
        self.tasks.spawn(async move {
            let _ = child.wait().await;
            let _ = tx.send(job_id);
        });
        self.beat_due = true;
        self.running.insert(
            id.to_string(),
            Running {
                pid: launched.pid,
                unit: launched.unit.clone(),
                started_at,
                limit,
                deadline: add_secs(started_at, limit),
                end: None,
                kill_at: None,
            },
        );
        self.record(Record::info(
            self.event("job_started")
                .job(id)
                .project(&job.config.project)
                .detail(format!("pid {}", launched.pid)),
            format!(
                "job {id} started (worker pid {}, unit {})",
                launched.pid,
                launched.unit.as_deref().unwrap_or("-")
            ),
        ));
        self.signal(id, JobStatus::Queued, JobStatus::Running).await;
    }

    /// Writes `job`'s bytes to a probe file beside `path` (then removes it): whether the
    /// store takes the job's next write, without writing the job's own file.
    fn probe_write(&self, path: &Path, job: &Job) -> Result<(), StoreError> {
        let bytes = self.store.doc_bytes(DocKind::Job, path, job)?;
        // A name of its own, not the job's: within NAME_MAX whatever the job's id.
        let probe = path.with_file_name(format!(
            ".probe-{}-{}.tmp",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        // Not synced: a full disk refuses the write itself (the job's own write, synced,
        // comes before its worker is released).
        let res = crate::store::safe::create_new(&probe, 0o600).and_then(|mut f| {
            use std::io::Write;
            f.write_all(&bytes)
        });
        let _ = crate::store::safe::remove_file(&probe);
        res.map_err(|source| StoreError::Io {
            path: probe,
            source,
        })
    }

    /// Puts claimed job `id` (its claim at `claim`), never released to a worker, back into
    /// `queued_jobs/` to be started again.
    pub(super) fn give_back(&self, id: &str, claim: &Path) {
        let q = &self.cfg.queue;
        match crate::store::jobfile::give_back_claim(&self.store, q, id, claim) {
            Ok(_) => tracing::warn!(job_id = %id, queue = %q,
                "start not completed: the job, which never ran, is back in queued_jobs"),
            Err(e) => tracing::warn!(job_id = %id, queue = %q,
                "start not completed; cannot put the job back: {e}"),
        }
    }

    /// At start, before the poison markers are read: this machine's claims left by a manager
    /// that stopped between a claim and its worker's release go back to `queued_jobs/`
    /// (nothing of them ran; the start marker, if any, counts the interrupted attempt).
    pub(super) fn give_back_claims(&self) {
        let q = &self.cfg.queue;
        for (id, claim) in crate::store::jobfile::claims_of(&self.store, q, &self.host) {
            match crate::store::jobfile::give_back_left_claim(&self.store, q, &id, &claim) {
                Ok(_) => tracing::warn!(job_id = %id, queue = %q,
                    "a start left unfinished by an earlier manager: the job, which never ran, is back in queued_jobs"),
                Err(e) => tracing::warn!(job_id = %id, queue = %q, "left claim: {e}"),
            }
        }
    }

    /// Fails claimed job `p` (never released to a worker) with `error`.
    async fn fail_claimed(&mut self, p: &PreparedStart, error: String) {
        let mut job = p.job.clone();
        crate::store::jobfile::set_failed(&mut job, error.clone());
        match crate::store::jobfile::write_and_move_from(
            &self.store,
            &self.cfg.queue,
            &p.id,
            &p.path,
            &job,
        ) {
            Ok(_) => {
                self.ended(&p.id, JobStatus::Queued, JobStatus::Failed, &error)
                    .await
            }
            Err(e) => {
                tracing::error!(job_id = %p.id, queue = %self.cfg.queue, "cannot fail job: {e}")
            }
        }
    }

    /// Puts off starting `id` after a failure that is not the job's fault (the store cannot be
    /// written): 2 s, doubling up to 5 minutes.
    pub(super) fn back_off(&mut self, id: &str, error: &str) {
        let n = self
            .backoff
            .get(id)
            .map_or(0, |(_, n)| *n)
            .saturating_add(1);
        let pause = Duration::from_secs(1u64 << n.min(8)).min(Duration::from_secs(300));
        self.backoff.insert(
            id.to_string(),
            (add_secs(Instant::now(), pause.as_secs()), n),
        );
        self.record(
            Record::warn(
                self.event("job_start_put_off").job(id),
                format!(
                    "job {id} not started (attempt {n}): {error}; next try in {} s",
                    pause.as_secs()
                ),
            )
            .no_event_line(),
        );
    }

    /// Whether the store takes a write now (a worker that died without a word may have died
    /// of a full disk): `Some(reason)` when it does not.
    pub(super) fn store_write_error(&self) -> Option<String> {
        let dir = self.store.jobs_dir(&self.cfg.queue, JobStatus::Running);
        let probe = dir.join(format!(".write-probe-{}.tmp", std::process::id()));
        let res = std::fs::write(&probe, [0u8; 4096])
            .and_then(|_| std::fs::File::open(&probe)?.sync_all());
        let _ = std::fs::remove_file(&probe);
        res.err().map(|e| {
            format!(
                "The job's result could not be saved: the store cannot be written ({e}); the worker stopped when it could not write the job file"
            )
        })
    }

    /// Whether the copy of job `id` in `state`/ is the queued `job` itself, moved on, or one
    /// that cannot be read yet (a partial sync): not a different job that happens to carry
    /// the same id (that one goes on, and ends failed as an id collision).
    /// `None`: the later copy could not be read (taken as the same job: never started).
    fn same_job_moved_on(&self, q: &str, id: &str, state: JobStatus, job: &Job) -> Option<bool> {
        match self
            .store
            .read_doc::<Job>(DocKind::Job, &self.store.job_path(q, state, id))
        {
            Ok(other) => Some(job.is_same_job_as(&other)),
            Err(_) => None,
        }
    }

    /// The checks a job file gets whoever wrote it (the orchestrator makes the same ones when
    /// it creates a job): PRD §10 — a job that names its user runs only if that user owns the
    /// project or is an admin — and extra args never widen the queue's permissions.
    /// In a synced store files arrive in any order: a job can be here before the project or
    /// user document it names. A job queued less than [`SYNC_ARRIVAL_GRACE_SECONDS`] ago
    /// waits for them (its start put off, saying which) instead of failing; an older one is
    /// judged on what is here.
    fn awaited_document(&self, job: &Job) -> Option<String> {
        let young =
            job.config.queue_time.claimed_age(&Timestamp::now()) < SYNC_ARRIVAL_GRACE_SECONDS;
        if !young {
            return None;
        }
        let missing = |r: Result<(), StoreError>| matches!(r, Err(StoreError::NotFound { .. }));
        let p = &job.config.project;
        if missing(self.store.project(p).map(|_| ())) {
            return Some(format!(
                "project {p} is not in this copy of the store (yet: waiting for it to sync)"
            ));
        }
        match &job.config.user {
            Some(u) if missing(self.store.user(u).map(|_| ())) => Some(format!(
                "user {u} is not in this copy of the store (yet: waiting for it to sync)"
            )),
            _ => None,
        }
    }

    pub(super) fn may_run(&self, job: &Job) -> Result<(), String> {
        if let Some(arg) = crate::model::permission_widening_arg(&job.config.claude_extra_args)
            && self.config.allow_permission_args != Some(true)
        {
            return Err(format!(
                "Invalid job: claude_extra_args {arg:?} would change the agent's permissions, which queue {} does not allow (its allow_permission_args is not true)",
                self.cfg.queue
            ));
        }
        if let Some(u) = &job.config.user {
            let user = self
                .store
                .user(u)
                .map_err(|e| format!("Job refused: its user {u}: {e}"))?;
            let project = self
                .store
                .project(&job.config.project)
                .map_err(|e| format!("Job refused: project {}: {e}", job.config.project))?;
            if !crate::permissions::Caller::User(user).can_modify_project(&project) {
                return Err(format!(
                    "Job refused: only the owner of project {} or an admin can create jobs for it; {u} is neither",
                    project.id
                ));
            }
        }
        Ok(())
    }
}
