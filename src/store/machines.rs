//! Machine heartbeats (DESIGN §8, issue 13): which machines serve the store and when each
//! was last heard from, and the end of jobs whose machine stopped reporting.
//!
//! Each daemon writes its own file, `machines/<host>/<daemon>.json` (`orchestratord.json`,
//! `queue-manager.<queue>.json`), atomically every `machines.heartbeat_seconds`: no file has
//! two writers, so a sync engine never makes a conflict copy of one. Readers merge a host's
//! files into one [`Machine`]. The store's contents are hostile: a file that is a link, too
//! large, unparseable, or that claims another host is reported in [`Machines::problems`] and
//! skipped; nothing in it is trusted for a path.

use super::{Event, Record, Store, StoreError, check_id, safe, scan_dir, write_json_atomic};
use crate::model::{DocKind, Job, JobStatus, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A heartbeat file larger than this is refused (a real one is a few hundred bytes).
pub const MAX_HEARTBEAT_BYTES: u64 = 64 * 1024;

/// The text a job failed for its machine's silence carries: `Machine <host> stopped
/// reporting at <time>`.
pub fn machine_lost_error(host: &str, last_seen: &Timestamp) -> String {
    format!("Machine {host} stopped reporting at {last_seen}")
}

/// The host an error written by [`machine_lost_error`] names; `None` for any other error.
pub fn machine_lost_host(error: &str) -> Option<&str> {
    error
        .strip_prefix("Machine ")?
        .split_once(" stopped reporting at ")
        .map(|(host, _)| host)
}

/// True for an error written by [`machine_lost_error`].
pub fn is_machine_lost_error(error: &str) -> bool {
    machine_lost_host(error).is_some()
}

/// One daemon's heartbeat: `machines/<host>/<daemon>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The machine's key in the store ([`crate::store::hostname`]: made from its machine id,
    /// or `AGENTSTORE_HOSTNAME`).
    pub host: String,
    /// Its host name, for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The keys this machine had before (its host name, from before machine ids): jobs whose
    /// `runtime.host` names one of them are its jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub formerly: Vec<String>,
    /// `orchestratord` or `queue-manager`.
    pub daemon: String,
    /// The queue a queue manager serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The daemon's PID on that host.
    pub pid: u32,
    /// The machine's boot id (a new one means it rebooted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The agentstore version the daemon runs.
    pub version: String,
    /// When the daemon started.
    pub started: Timestamp,
    /// The writer's clock when it wrote this file.
    pub last_seen: Timestamp,
    /// How often it writes.
    pub interval_seconds: u64,
    /// Set by the last write of a daemon that stopped cleanly (an idle exit, a stop).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// An orchestratord's role: `active` (holds the store lock), `standby` or `read-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The epoch of the store lock an active orchestratord holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The jobs a queue manager runs (as of `last_seen`): a live machine's own word that a
    /// job runs there, which a job file's `runtime.host` (shared input) cannot outvote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<String>,
}

impl Heartbeat {
    /// A heartbeat of `daemon` (serving `queue`, if any) on this host, now.
    pub fn new(daemon: &str, queue: Option<&str>, interval_seconds: u64) -> Heartbeat {
        let now = Timestamp::now();
        Heartbeat {
            host: super::hostname(),
            hostname: Some(super::identity::display_hostname()),
            formerly: Vec::new(),
            daemon: daemon.to_string(),
            queue: queue.map(str::to_string),
            pid: std::process::id(),
            boot_id: boot_id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started: now,
            last_seen: now,
            interval_seconds,
            stopped: false,
            role: None,
            epoch: None,
            running: Vec::new(),
        }
    }

    /// The file name of this daemon's heartbeat.
    pub(super) fn file_name(&self) -> String {
        match &self.queue {
            Some(q) => format!("{}.{q}.json", self.daemon),
            None => format!("{}.json", self.daemon),
        }
    }
}

/// This machine's boot id.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// One machine, merged from its daemons' heartbeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// Its key in the store.
    pub host: String,
    /// Its host name (the latest heartbeat's), for display.
    pub hostname: Option<String>,
    /// Keys it had before (see [`Heartbeat::formerly`]).
    pub formerly: Vec<String>,
    /// The latest heartbeat of any of its daemons.
    pub last_seen: Timestamp,
    /// Boot id of the latest heartbeat.
    pub boot_id: Option<String>,
    /// Versions its daemons run.
    pub versions: Vec<String>,
    /// Queues its queue managers serve.
    pub queues: Vec<String>,
    /// Each daemon's heartbeat, by file name.
    pub daemons: Vec<Heartbeat>,
}

impl Machine {
    /// Seconds since its last heartbeat, by `now` (0 for a clock slightly ahead of ours;
    /// `u64::MAX` for a heartbeat from beyond the clock skew, which is never fresh).
    pub fn silent_for(&self, now: &Timestamp) -> u64 {
        let s = self.last_seen.claimed_age(now);
        if s.is_finite() { s as u64 } else { u64::MAX }
    }

    /// True when no daemon of it has written for more than `after` seconds.
    pub fn is_stale(&self, now: &Timestamp, after: u64) -> bool {
        self.silent_for(now) > after
    }

    /// True when every daemon's last heartbeat says it stopped cleanly.
    pub fn all_stopped(&self) -> bool {
        self.daemons.iter().all(|d| d.stopped)
    }
}

/// One machine as `list-machines` / `view-machine` show it (the CLI, Orchestrator1's
/// `Submit` and the web API give the same rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineView {
    /// Its key in the store.
    pub host: String,
    /// Its host name, for display (two machines may share one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `ok`, `stale for 3m12s` or `stopped 3m12s ago`.
    pub state: String,
    /// Silent past `machines.stale_after_seconds` without having stopped cleanly.
    pub stale: bool,
    /// Seconds since its last heartbeat.
    pub silent_seconds: u64,
    /// Its last heartbeat's time.
    pub last_seen: String,
    /// Boot id of the latest heartbeat.
    pub boot_id: Option<String>,
    /// Versions its daemons run.
    pub versions: Vec<String>,
    /// Queues its queue managers serve.
    pub queues: Vec<String>,
    /// `orchestratord (active)`, `queue-manager@<queue>`, …
    pub daemons: Vec<String>,
    /// The role of its orchestratord, if one runs there: `active`, `standby`, `read-only`.
    pub orchestrator_role: Option<String>,
    /// The store lock's epoch when its orchestratord is the active one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_epoch: Option<u64>,
}

/// `3m12s`, `2h05m`, `4d03h`, `42s`.
pub fn duration_text(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

impl Machine {
    /// How it is shown at `now`, stale past `stale_after` seconds.
    pub fn view(&self, now: &Timestamp, stale_after: u64) -> MachineView {
        let silent = self.silent_for(now);
        let stale = self.is_stale(now, stale_after) && !self.all_stopped();
        let state = if self.all_stopped() {
            format!("stopped {} ago", duration_text(silent))
        } else if stale {
            format!("stale for {}", duration_text(silent))
        } else {
            "ok".to_string()
        };
        // The orchestrator daemon's heartbeat name (orchestrator::DAEMON; the store layer
        // does not depend on the orchestrator's).
        let orchestrator = self
            .daemons
            .iter()
            .find(|d| d.daemon == "orchestratord" && !d.stopped);
        MachineView {
            orchestrator_role: orchestrator.and_then(|d| d.role.clone()),
            lock_epoch: orchestrator.and_then(|d| d.epoch),
            host: self.host.clone(),
            hostname: self.hostname.clone(),
            state,
            stale,
            silent_seconds: silent,
            last_seen: self.last_seen.to_string(),
            boot_id: self.boot_id.clone(),
            versions: self.versions.clone(),
            queues: self.queues.clone(),
            daemons: self
                .daemons
                .iter()
                .map(|d| match (&d.queue, &d.role) {
                    (Some(q), _) => format!("{}@{q}", d.daemon),
                    (None, Some(r)) if !d.stopped => format!("{} ({r})", d.daemon),
                    (None, _) => d.daemon.clone(),
                })
                .collect(),
        }
    }
}

/// All machines, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Machines {
    /// By host name.
    pub machines: Vec<Machine>,
    /// Files or folders skipped, each with why (named relative to the store).
    pub problems: Vec<String>,
}

impl Machines {
    /// The machine `host`, if it ever reported: the one keyed so, else the one that had that
    /// key before ([`Heartbeat::formerly`]).
    pub fn get(&self, host: &str) -> Option<&Machine> {
        self.machines.iter().find(|m| m.host == host).or_else(|| {
            self.machines
                .iter()
                .find(|m| m.formerly.iter().any(|f| f == host))
        })
    }

    /// Who serves `queue` at `now`, from the queue managers' heartbeats: a manager that
    /// reports, or stopped cleanly (its `.path` unit starts it again for the next job),
    /// serves it; one whose machine has been silent past `stale_after` seconds does not.
    pub fn queue_service(&self, queue: &str, now: &Timestamp, stale_after: u64) -> QueueService {
        let mut lost: Option<(String, Timestamp)> = None;
        for m in &self.machines {
            for hb in m
                .daemons
                .iter()
                .filter(|d| d.daemon == QUEUE_MANAGER && d.queue.as_deref() == Some(queue))
            {
                if hb.stopped || !m.is_stale(now, stale_after) {
                    return QueueService::Served {
                        host: m.host.clone(),
                    };
                }
                if lost.as_ref().is_none_or(|(_, t)| hb.last_seen > *t) {
                    lost = Some((m.host.clone(), hb.last_seen));
                }
            }
        }
        match lost {
            Some((host, last_seen)) => QueueService::Lost { host, last_seen },
            None => QueueService::Never,
        }
    }
}

/// The heartbeat name of queue managers (the store layer does not depend on the queue's).
const QUEUE_MANAGER: &str = "queue-manager";

/// Whether some machine serves a queue (see [`Machines::queue_service`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueService {
    /// A manager on `host` reports, or stopped cleanly.
    Served {
        /// One machine that serves it.
        host: String,
    },
    /// The last manager of the queue was on `host`, silent since `last_seen`.
    Lost {
        /// Its machine.
        host: String,
        /// Its last heartbeat.
        last_seen: Timestamp,
    },
    /// No manager of the queue ever reported.
    Never,
}

/// A job failed because its machine stopped reporting.
#[derive(Debug, Clone, PartialEq)]
pub struct LostJob {
    /// The job.
    pub id: String,
    /// Its machine.
    pub host: String,
    /// The error it was failed with.
    pub error: String,
}

impl Store {
    /// `machines/`.
    pub fn machines_dir(&self) -> PathBuf {
        self.root.join("machines")
    }

    /// Writes `hb` as `machines/<host>/<file>` atomically. A host or queue name that is no
    /// safe file name is refused.
    pub fn write_heartbeat(&self, hb: &Heartbeat) -> super::Result<PathBuf> {
        check_id("host", &hb.host)?;
        check_id("daemon", &hb.daemon)?;
        if let Some(q) = &hb.queue {
            check_id("queue", q)?;
        }
        let dir = self.machines_dir().join(&hb.host);
        safe::create_dir_all(&dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(hb.file_name());
        write_json_atomic(&path, hb).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// The heartbeat `daemon` (no queue) last wrote on `host`, if it can be read.
    pub fn heartbeat_of(&self, host: &str, daemon: &str) -> Option<Heartbeat> {
        check_id("host", host).ok()?;
        let path = self
            .machines_dir()
            .join(host)
            .join(format!("{daemon}.json"));
        read_heartbeat(&path)
            .ok()
            .filter(|hb| hb.host == host && hb.daemon == daemon)
    }

    /// Reads every machine's heartbeats. Never fails: what cannot be read is reported.
    pub fn machines(&self) -> Machines {
        let mut out = Machines::default();
        let dir = self.machines_dir();
        let entries = match safe::list_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
            Err(e) => {
                out.problems
                    .push(format!("{}: {e}", self.relative(&dir).display()));
                return out;
            }
        };
        let mut hosts: BTreeMap<String, Vec<Heartbeat>> = BTreeMap::new();
        let now = Timestamp::now();
        for entry in entries {
            let name = entry.name.to_string_lossy().to_string();
            if name.starts_with('.') {
                continue; // temp files, sync engines' own files
            }
            let path = dir.join(&name);
            let rel = self.relative(&path).display().to_string();
            if entry.kind != safe::EntryKind::Dir {
                out.problems
                    .push(format!("{rel}: not a folder of heartbeats; skipped"));
                continue;
            }
            if check_id("host", &name).is_err() {
                out.problems
                    .push(format!("{rel}: not a valid host name; skipped"));
                continue;
            }
            let scan = match scan_dir(&path) {
                Ok(s) => s,
                Err(e) => {
                    out.problems.push(format!("{rel}: {e}"));
                    continue;
                }
            };
            for p in scan.refused.iter() {
                out.problems.push(format!(
                    "{}: a link or special file; skipped",
                    self.relative(p).display()
                ));
            }
            for p in scan.conflicts.iter() {
                out.problems.push(format!(
                    "{}: a sync engine's conflict copy; skipped",
                    self.relative(p).display()
                ));
            }
            for p in scan.documents {
                match read_heartbeat(&p) {
                    // A heartbeat from the future would keep its machine "alive" forever (or
                    // make a live one look lost beside it): it is no heartbeat.
                    Ok(hb) if hb.host == name && hb.last_seen.is_beyond_skew(&now) => {
                        let text = format!(
                            "{}: last_seen {} is more than {} s ahead of this machine's clock; not trusted, skipped",
                            self.relative(&p).display(),
                            hb.last_seen,
                            crate::model::MAX_CLOCK_SKEW_SECS
                        );
                        tracing::warn!("{text}");
                        out.problems.push(text);
                    }
                    Ok(hb) if hb.host == name => hosts.entry(name.clone()).or_default().push(hb),
                    Ok(hb) => out.problems.push(format!(
                        "{}: claims host {:?} inside the folder of {name}; skipped",
                        self.relative(&p).display(),
                        hb.host
                    )),
                    Err(e) => out
                        .problems
                        .push(format!("{}: {e}; skipped", self.relative(&p).display())),
                }
            }
        }
        for (host, mut daemons) in hosts {
            daemons.sort_by_key(Heartbeat::file_name);
            let Some(latest) = daemons.iter().max_by(|a, b| a.last_seen.cmp(&b.last_seen)) else {
                continue;
            };
            let mut queues: Vec<String> = daemons.iter().filter_map(|d| d.queue.clone()).collect();
            queues.sort();
            queues.dedup();
            let mut versions: Vec<String> = daemons.iter().map(|d| d.version.clone()).collect();
            versions.sort();
            versions.dedup();
            let mut formerly: Vec<String> =
                daemons.iter().flat_map(|d| d.formerly.clone()).collect();
            formerly.sort();
            formerly.dedup();
            out.machines.push(Machine {
                hostname: latest.hostname.clone(),
                formerly,
                host,
                last_seen: latest.last_seen,
                boot_id: latest.boot_id.clone(),
                versions,
                queues,
                daemons,
            });
        }
        out
    }

    /// Fails the jobs in `Queues/<queue>/Jobs/running_jobs/` whose machine (the job's
    /// `runtime.host`, never `me`) has been silent for more than
    /// `machines.lost_job_grace_seconds`, with [`machine_lost_error`]. A machine that never
    /// reported is not judged. Safe to run from several processes and machines at once: the
    /// job is claimed by one rename into `failed_jobs/` (the loser finds it gone), then
    /// written there. A running copy of a job that has ended in this copy of the store is
    /// never failed again (`settle_running_beside_ended`).
    pub fn fail_lost_jobs(&self, queue: &str, me: &str, machines: &Machines) -> Vec<LostJob> {
        let grace = self.config.machines.lost_job_grace_seconds;
        let now = Timestamp::now();
        self.finish_lost_claims(queue, machines);
        let dir = self.jobs_dir(queue, JobStatus::Running);
        let Ok(scan) = scan_dir(&dir) else {
            return Vec::new();
        };
        let mut lost = Vec::new();
        for path in scan.documents {
            let Some(id) = super::file_id(&path).map(str::to_string) else {
                continue;
            };
            let Ok(job) = self.read_doc::<Job>(DocKind::Job, &path) else {
                continue;
            };
            let Some(host) = job.runtime.host.clone() else {
                continue;
            };
            // The job file says where it runs, and the store is shared input: a live machine
            // whose manager of this queue says it runs the job outvotes it (a forged host
            // would otherwise get a running job failed and run again).
            let runs_on_live = machines.machines.iter().find(|m| {
                m.host != host
                    && !m.is_stale(&now, grace)
                    && m.daemons.iter().any(|d| {
                        d.queue.as_deref() == Some(queue) && !d.stopped && d.running.contains(&id)
                    })
            });
            if let Some(m) = runs_on_live {
                tracing::warn!(job_id = %id, queue,
                    "job {id} names machine {host} as where it runs, but machine {} (live) runs it: not judged lost", m.host);
            }
            let lost_machine = machines
                .get(&host)
                .filter(|m| m.host != me && m.is_stale(&now, grace))
                .filter(|_| runs_on_live.is_none());
            if self.settle_running_beside_ended(queue, &id, &job, &host, lost_machine.is_some()) {
                continue;
            }
            let Some(m) = lost_machine else {
                continue;
            };
            let error = machine_lost_error(&host, &m.last_seen);
            match self.claim_lost(queue, &id, &error) {
                Ok(true) => {
                    self.record(Record::warn(
                        Event::new("agentstore", "job_failed")
                            .job(&id)
                            .queue(queue)
                            .detail(&error),
                        format!("job {id} failed: {error}"),
                    ));
                    lost.push(LostJob { id, host, error });
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(job_id = %id, queue, "cannot fail lost job: {e}"),
            }
        }
        // Starts a lost machine claimed and never released to a worker (nothing of them
        // ran): back into queued_jobs/ for any machine to run.
        for m in machines.machines.iter().filter(|m| m.host != me) {
            if !m.is_stale(&now, grace) {
                continue;
            }
            for (id, claim) in super::jobfile::claims_of(self, queue, &m.host) {
                if super::jobfile::give_back_left_claim(self, queue, &id, &claim).is_ok() {
                    let text = format!(
                        "{}; its claimed start of job {id} never ran: the job is queued again",
                        machine_lost_error(&m.host, &m.last_seen)
                    );
                    self.record(Record::warn(
                        Event::new("agentstore", "job_requeued")
                            .job(&id)
                            .queue(queue)
                            .detail(&text),
                        text,
                    ));
                }
            }
        }
        lost
    }

    /// Running job `id` (`job`, on machine `host`, lost or not) when this copy
    /// of the store also holds an ended copy of it. Through a sync engine a running copy can
    /// outlive the job's end: its delete arrives after the ended file, or never (its machine
    /// died), or loses to a change the lost machine made and never sent before it died
    /// (Syncthing keeps a modified file over a concurrent delete, so the failed job's running
    /// copy comes back when the machine does). The ended copy is then the job's state: the
    /// running copy is removed (and said so) when the same job ended on a lost machine, or
    /// was failed for its machine's silence (a decision that stands: a machine coming back
    /// stops that worker, `stop_jobs_ended_elsewhere`). Any other running copy beside an
    /// ended one is left for its delete to arrive. True when an ended copy exists: such a job
    /// is never failed again; false when there is none, or it is a DIFFERENT job under the
    /// same id (judged as any running job).
    fn settle_running_beside_ended(
        &self,
        queue: &str,
        id: &str,
        job: &Job,
        host: &str,
        machine_lost: bool,
    ) -> bool {
        let Some((state, path)) = [JobStatus::Failed, JobStatus::Finished]
            .into_iter()
            .map(|s| (s, self.job_path(queue, s, id)))
            .find(|(_, p)| safe::is_file(p))
        else {
            return false;
        };
        let ended = match self.read_doc::<Job>(DocKind::Job, &path) {
            Ok(j) => j,
            Err(_) => return true, // not readable (yet): never failed twice meanwhile
        };
        if !job.is_same_job_as(&ended) {
            return false;
        }
        let failed_for_silence = state == JobStatus::Failed
            && ended.runtime.error.as_deref().and_then(machine_lost_host) == Some(host);
        if !(machine_lost || failed_for_silence) {
            return true;
        }
        let running = self.job_path(queue, JobStatus::Running, id);
        match safe::remove_file(&running) {
            Ok(()) => {
                let why = if failed_for_silence {
                    format!("failed for machine {host}'s silence")
                } else {
                    format!("ended, and its machine {host} is not reporting")
                };
                let text = format!(
                    "job {id}: removed its stale running copy (the job {why}: it is in {}/; a sync engine kept or brought back the running file)",
                    state.dir()
                );
                self.record(Record::warn(
                    Event::new("agentstore", "stale_copy_removed")
                        .job(id)
                        .queue(queue)
                        .detail(&text),
                    text,
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(job_id = %id, queue, "cannot remove its stale running copy: {e}")
            }
        }
        true
    }
}

/// Reads one heartbeat file: a regular file (no link followed), at most
/// [`MAX_HEARTBEAT_BYTES`], strict JSON of [`Heartbeat`].
pub(super) fn read_heartbeat(path: &Path) -> Result<Heartbeat, String> {
    let f = safe::open_read(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if len > MAX_HEARTBEAT_BYTES {
        return Err(format!(
            "{len} bytes, more than a heartbeat's limit of {MAX_HEARTBEAT_BYTES}"
        ));
    }
    let mut bytes = Vec::new();
    f.take(MAX_HEARTBEAT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_HEARTBEAT_BYTES {
        return Err(format!(
            "more than a heartbeat's limit of {MAX_HEARTBEAT_BYTES} bytes"
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("not a heartbeat: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lost_machine_error_names_its_host_and_nothing_else_does() {
        let t: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let e = machine_lost_error("beta", &t);
        assert_eq!(machine_lost_host(&e), Some("beta"));
        assert!(is_machine_lost_error(&e));
        assert_ne!(machine_lost_host(&e), Some("bet"));
        assert_eq!(machine_lost_host("Job cancelled by beta"), None);
        assert_eq!(machine_lost_host("Machine beta went away"), None);
    }
}
