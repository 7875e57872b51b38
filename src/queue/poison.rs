//! Poison markers (PRD §7): before a start or a re-adoption the manager writes
//! `Queues/<q>/.handling/<host>/{start,adopt}-<id>` holding the number of attempts so far
//! (`attempts N`, written atomically and fsynced); it removes the marker when the attempt
//! is over. A marker found at the next start means that attempt was interrupted.
//!
//! Two causes are told apart. The manager's own failure: every per-job step of a start or a
//! re-adoption runs inside [`handling`], and a panic hook ([`install_crash_recorder`]; the
//! release profile aborts on panic, the hook still runs first) writes `crashed <panic>` into
//! the marker of the job being handled — that job, and only it, is failed at the next start
//! with [`crash_reason`]. An external kill (an operator's or a soak's `kill -9`, the OOM
//! killer, a reboot) leaves no such line: it is not the job's fault, so the job is tried again
//! (alone, before the others) and failed with [`poison_reason`] only after
//! [`POISON_ATTEMPTS`] interruptions in a row, the bound for crashes no hook sees (a stack
//! overflow, a signal). So one poison document cannot crash-loop the manager.

use super::Manager;
use super::starting::PreparedStart;
use super::{POISON_ATTEMPTS, crash_reason, pidwatch, poison_reason};
use crate::model::JobStatus;
use crate::store::jobfile::fail_raw;
use crate::store::safe::{self, EntryKind};
use crate::store::{read_limited, write_atomic};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};

/// Folder of the poison markers, `Queues/<q>/.handling/`.
const MARKER_DIR: &str = ".handling";

/// Longest panic text kept in a marker (and so in the job's error).
const MAX_CRASH_TEXT: usize = 500;

tokio::task_local! {
    /// The marker of the job the current task is handling.
    static HANDLING: PathBuf;
}

/// Runs `f` as handling the job whose marker is `marker`: a panic inside is recorded there.
pub(super) async fn handling<F: std::future::Future>(marker: PathBuf, f: F) -> F::Output {
    HANDLING.scope(marker, f).await
}

/// [`handling`] for a step that does not wait.
pub(super) fn handling_sync<R>(marker: PathBuf, f: impl FnOnce() -> R) -> R {
    HANDLING.sync_scope(marker, f)
}

/// Installs (once per process) the panic hook that records a panic in the marker of the job
/// being handled ([`handling`]), before the previous hook runs (and the process aborts).
pub(super) fn install_crash_recorder() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(marker) = HANDLING.try_with(|m| m.clone()) {
                record_crash(&marker, info);
            }
            previous(info);
        }));
    });
}

/// Adds `crashed <where>: <message>` (one line, bounded) to `marker`, fsynced.
fn record_crash(marker: &Path, info: &std::panic::PanicHookInfo<'_>) {
    let p = info.payload();
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string());
    let at = info
        .location()
        .map(|l| format!(" at {}:{}", l.file(), l.line()))
        .unwrap_or_default();
    let line: String = format!("panicked{at}: {msg}")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_CRASH_TEXT)
        .collect();
    let old = read_limited(marker)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|_| "attempts 1\n".to_string());
    let mut text: String = old
        .lines()
        .filter(|l| !l.starts_with("crashed "))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&format!("crashed {line}\n"));
    let _ = marker.parent().map_or(Ok(()), safe::create_dir_all);
    let _ = write_atomic(marker, text.as_bytes());
}

/// Test hook, debug builds only (release binaries have none): `AGENTSTORE_TEST_FAULT` set to
/// `panic-<point>:<id>` makes the manager panic at `point` of job `<id>`'s start, and
/// `hold-<point>:<id>` makes it stop there for good (to be killed), so tests can crash or
/// kill a manager at a known point. Points: `start` (marker written, job not yet read),
/// `release` (job in `running_jobs/`, worker not yet released).
#[cfg(debug_assertions)]
pub(super) async fn injected_fault(point: &str, id: &str) {
    let Ok(f) = std::env::var("AGENTSTORE_TEST_FAULT") else {
        return;
    };
    let Some((what, at)) = f.split_once('-') else {
        return;
    };
    if at != format!("{point}:{id}") {
        return;
    }
    match what {
        "panic" => panic!("injected fault at {point} of job {id}"),
        "hold" => std::future::pending::<()>().await,
        _ => {}
    }
}

/// What a marker records.
#[derive(Debug, PartialEq, Eq)]
struct Marker {
    /// Attempts begun (≥ 1).
    attempts: u32,
    /// The panic that ended the last attempt, when the manager recorded one.
    crashed: Option<String>,
}

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
        let attempts = read_marker(&p).map_or(0, |m| m.attempts).saturating_add(1);
        let text = format!("attempts {attempts}\npid {}\n", std::process::id());
        let res = p
            .parent()
            .map_or(Ok(()), safe::create_dir_all)
            // Not synced: a marker guards against a crash of the manager's process (the
            // page cache outlives it); a power loss at most forgets one attempt.
            .and_then(|_| crate::store::write_atomic_volatile(&p, text.as_bytes()));
        if let Err(e) = &res {
            tracing::warn!(job_id = %id, queue = %self.cfg.queue, "cannot write {}: {e}", p.display());
        }
        res.is_ok()
    }

    /// True when an earlier attempt at starting `id` was interrupted (its marker is still
    /// on disk): the job is then started on its own.
    pub(super) fn start_was_interrupted(&self, id: &str) -> bool {
        // Only the markers an earlier manager left (a start of this manager that is not in
        // flight has ended, its marker removed): one look-up per pass for each of them, not
        // one per queued job (each a walk of the store's path where openat2 is refused).
        self.interrupted.contains(id)
            && read_marker(&self.marker_path(MarkKind::Start, id)).is_some()
    }

    /// The first step of starting `id`: its marker written (true when it could be), then the
    /// job read and checked ([`Manager::prepare_start`]) as handling it.
    pub(super) async fn begin_start(&mut self, id: &str) -> (bool, Option<PreparedStart>) {
        let marked = self.mark(MarkKind::Start, id);
        let marker = self.marker_path(MarkKind::Start, id);
        let prepared = handling(marker, async {
            #[cfg(debug_assertions)]
            injected_fault("start", id).await;
            self.prepare_start(id).await
        })
        .await;
        (marked, prepared)
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

    /// At start: every job whose handling crashed an earlier manager (a `crashed` line) is
    /// failed with [`crash_reason`], and every job whose handling was interrupted
    /// [`POISON_ATTEMPTS`] times with [`poison_reason`] (its worker, if one runs, is stopped
    /// first). After fewer interruptions the marker stays (the next attempt counts on from it)
    /// and the job is tried again. Markers of jobs that have left the state the attempt
    /// started from are removed.
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
            let Marker { attempts, crashed } = read_marker(&marker).unwrap_or(Marker {
                attempts: 1,
                crashed: None,
            });
            if crashed.is_none() && attempts < POISON_ATTEMPTS {
                let text = format!(
                    "job {id}: a previous queue manager stopped while {} it (interrupted attempts: {attempts}; the job is failed at {POISON_ATTEMPTS}); trying again",
                    kind.doing()
                );
                tracing::warn!(job_id = %id, queue = %q, "{text}");
                self.store.append_daemon_log(&self.log_file, &text);
                if kind == MarkKind::Start {
                    self.interrupted.insert(id.to_string());
                }
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
            let reason = match crashed {
                Some(panic) => crash_reason(kind.doing(), &panic),
                None => poison_reason(kind.doing(), attempts),
            };
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

/// What a marker records: `None` when there is no marker; one attempt for a marker of an
/// older version (it held only a PID) or one that cannot be read, as it still proves one.
fn read_marker(marker: &Path) -> Option<Marker> {
    let bytes = match read_limited(marker) {
        Ok(b) => b,
        Err(crate::store::StoreError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return None;
        }
        Err(_) => {
            return Some(Marker {
                attempts: 1,
                crashed: None,
            });
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let attempts = text
        .lines()
        .find_map(|l| l.strip_prefix("attempts ")?.trim().parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let crashed = text
        .lines()
        .find_map(|l| l.strip_prefix("crashed "))
        .map(|c| c.chars().take(MAX_CRASH_TEXT).collect());
    Some(Marker { attempts, crashed })
}
