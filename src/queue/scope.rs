//! The `systemd` launcher's half: each job's worker is placed in a transient scope
//! `agentstore-job-<id>.scope` through `org.freedesktop.systemd1.Manager.StartTransientUnit`,
//! with `RuntimeMaxSec` and the queue's `resource_limits`. systemd then kills the whole
//! cgroup at the limit, grandchildren that left the session included.

use crate::model::ResourceLimits;
use futures_util::StreamExt;
use std::time::Duration;
use zbus::OwnedVariant;
use zbus::wire::Variant;
use zbus_systemd::systemd1::ManagerProxy;

/// One property of the transient unit, typed so it can be checked without a bus.
#[derive(Debug, Clone, PartialEq)]
pub enum PropValue {
    /// `s`
    Str(String),
    /// `t`
    U64(u64),
    /// `au`
    Pids(Vec<u32>),
    /// `b`
    Bool(bool),
}

/// A `resource_limits` value systemd would not take.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LimitError {
    /// `memory_max` is not bytes, `infinity` or a number with K/M/G/T.
    #[error("resource_limits.memory_max {0:?}: expected bytes or a size like \"4G\"")]
    Memory(String),
    /// `cpu_quota` is not a percentage.
    #[error("resource_limits.cpu_quota {0:?}: expected a percentage like \"200%\"")]
    Cpu(String),
}

/// Errors placing a worker in its scope.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// A limit cannot be expressed.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// systemd refused or the bus failed.
    #[error("systemd: {0}")]
    Bus(#[from] zbus::Error),
    /// systemd's job for the scope did not end with `done`.
    #[error("systemd could not start {unit}: job result {result}")]
    JobFailed {
        /// Unit name.
        unit: String,
        /// `failed`, `timeout`, …
        result: String,
    },
    /// No JobRemoved signal came in time.
    #[error("systemd did not confirm {0} within 30 s")]
    NoConfirmation(String),
}

/// The start of every job scope's name.
const SCOPE_PREFIX: &str = "agentstore-job-";

/// Where the unified (cgroup v2) hierarchy is mounted, read once from this process's mounts.
fn unified_mount() -> Option<&'static std::path::Path> {
    static MOUNT: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    MOUNT
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            cgroup2_mount_in(&text)
        })
        .as_deref()
}

/// The mount point of the first cgroup2 file system in `mountinfo` text.
fn cgroup2_mount_in(mountinfo: &str) -> Option<std::path::PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split(' ').next() == Some("cgroup2"))
            .then(|| left.split(' ').nth(4).map(std::path::PathBuf::from))
            .flatten()
    })
}

/// The unified cgroup folder process `pid` is in (`0::<path>` of /proc/PID/cgroup).
fn unified_cgroup_of(pid: u32) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = rel.trim().trim_start_matches('/');
    (!rel.is_empty() && !rel.split('/').any(|c| c == ".."))
        .then(|| unified_mount().map(|m| m.join(rel)))
        .flatten()
}

/// True when cgroup folder `dir` has no process left in it or below it (`populated 0`), or
/// is gone already. Anything unreadable counts as not empty (the scope is then stopped).
fn cgroup_empty(dir: &std::path::Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(t) => t.lines().any(|l| l.trim() == "populated 0"),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound && !dir.exists(),
    }
}

/// `agentstore-job-<id>.scope` (ids are safe file names, all valid in unit names except
/// none: `[A-Za-z0-9._-]`).
pub fn scope_name(job_id: &str) -> String {
    format!("{SCOPE_PREFIX}{job_id}.scope")
}

/// Parses `memory_max`: bytes as a number, or a string with a K/M/G/T (1024-based) suffix,
/// or `infinity`.
pub fn memory_bytes(v: &serde_json::Value) -> Result<u64, LimitError> {
    let err = || LimitError::Memory(v.to_string());
    match v {
        serde_json::Value::Number(n) => n.as_u64().ok_or_else(err),
        serde_json::Value::String(s) => {
            let s = s.trim();
            if s == "infinity" {
                return Ok(u64::MAX);
            }
            let (num, mult) = match s.char_indices().last() {
                Some((i, c)) if c.is_ascii_alphabetic() => {
                    let m: u64 = match c.to_ascii_uppercase() {
                        'K' => 1 << 10,
                        'M' => 1 << 20,
                        'G' => 1 << 30,
                        'T' => 1 << 40,
                        _ => return Err(err()),
                    };
                    (&s[..i], m)
                }
                _ => (s, 1),
            };
            let n: u64 = num.trim().parse().map_err(|_| err())?;
            n.checked_mul(mult).ok_or_else(err)
        }
        _ => Err(err()),
    }
}

/// Parses `cpu_quota` (`"200%"`) into systemd's `CPUQuotaPerSecUSec`.
pub fn cpu_quota_usec(s: &str) -> Result<u64, LimitError> {
    let pct: f64 = s
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse().ok())
        .filter(|p: &f64| *p > 0.0 && p.is_finite())
        .ok_or_else(|| LimitError::Cpu(s.to_string()))?;
    Ok((pct * 10_000.0).round() as u64)
}

/// The properties of a job's scope: what `StartTransientUnit` is sent.
pub fn scope_properties(
    job_id: &str,
    pid: u32,
    runtime_max_secs: u64,
    limits: Option<&ResourceLimits>,
) -> Result<Vec<(String, PropValue)>, LimitError> {
    let mut p = vec![
        (
            "Description".to_string(),
            PropValue::Str(format!("agentstore job {job_id}")),
        ),
        ("PIDs".to_string(), PropValue::Pids(vec![pid])),
        (
            "RuntimeMaxUSec".to_string(),
            PropValue::U64(runtime_max_secs.saturating_mul(1_000_000)),
        ),
        // Gone from `systemctl list-units` once it ends, failed or not.
        (
            "CollectMode".to_string(),
            PropValue::Str("inactive-or-failed".into()),
        ),
        // Stop sends SIGTERM to every process in the scope, then SIGKILL after 5 s.
        ("TimeoutStopUSec".to_string(), PropValue::U64(5_000_000)),
        ("SendSIGKILL".to_string(), PropValue::Bool(true)),
    ];
    if let Some(l) = limits {
        if let Some(m) = &l.memory_max {
            p.push(("MemoryMax".into(), PropValue::U64(memory_bytes(m)?)));
        }
        if let Some(c) = &l.cpu_quota {
            p.push((
                "CPUQuotaPerSecUSec".into(),
                PropValue::U64(cpu_quota_usec(c)?),
            ));
        }
        if let Some(t) = l.tasks_max {
            p.push(("TasksMax".into(), PropValue::U64(t)));
        }
    }
    Ok(p)
}

fn to_variant(v: PropValue) -> zbus::Result<OwnedVariant> {
    match v {
        PropValue::Str(s) => OwnedVariant::try_from(Variant::from(s)),
        PropValue::U64(n) => Ok(OwnedVariant::from(n)),
        PropValue::Pids(p) => OwnedVariant::try_from(Variant::from(p)),
        PropValue::Bool(b) => Ok(OwnedVariant::from(b)),
    }
}

/// A connection to the service manager that starts scopes: the system instance when the
/// queue manager is root, else the user's instance.
#[derive(Debug, Clone)]
pub struct ScopeLauncher {
    manager: ManagerProxy<'static>,
    /// Confirmations of scope starts, read from ONE JobRemoved stream for every start (a
    /// stream per start would put each systemd job's signal through every start in flight).
    jobs: std::sync::Arc<parking_lot::Mutex<JobResults>>,
    /// The unified cgroup folder of each scope this launcher placed a worker in, so `stop`
    /// can see the scope has emptied and leave its end to systemd.
    cgroups:
        std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<String, std::path::PathBuf>>>,
}

/// systemd jobs whose end is awaited, and ends of our scopes' jobs that came before anyone
/// waited for them (the signal can overtake the reply that names the job).
#[derive(Debug, Default)]
struct JobResults {
    waiting: std::collections::HashMap<String, tokio::sync::oneshot::Sender<String>>,
    early: std::collections::VecDeque<(String, String)>,
}

/// Ends kept for a start that has not asked yet (only `agentstore-job-*` units).
const EARLY_RESULTS: usize = 1024;

impl ScopeLauncher {
    /// Connects, or fails when there is no systemd to talk to (PID 1 is not systemd, or the
    /// bus has no `org.freedesktop.systemd1`).
    pub async fn connect() -> Result<ScopeLauncher, ScopeError> {
        if !std::path::Path::new("/run/systemd/system").is_dir() {
            return Err(ScopeError::Bus(zbus::Error::Failure(
                "this machine was not booted with systemd (/run/systemd/system is missing)".into(),
            )));
        }
        let conn = if nix::unistd::geteuid().is_root() {
            zbus::Connection::system().await?
        } else {
            zbus::Connection::session().await?
        };
        let manager = ManagerProxy::new(&conn).await?;
        let mut removed = manager.receive_job_removed().await?;
        manager.subscribe().await?;
        let jobs = std::sync::Arc::new(parking_lot::Mutex::new(JobResults::default()));
        let results = std::sync::Arc::downgrade(&jobs);
        tokio::spawn(async move {
            while let Some(sig) = removed.next().await {
                let Ok(args) = sig.args() else { continue };
                let Some(results) = results.upgrade() else {
                    return;
                };
                let mut r = results.lock();
                let job = args.job().to_string();
                let result = args.result().to_string();
                if let Some(tx) = r.waiting.remove(&job) {
                    let _ = tx.send(result);
                } else if args.unit().starts_with(SCOPE_PREFIX) {
                    if r.early.len() >= EARLY_RESULTS {
                        r.early.pop_front();
                    }
                    r.early.push_back((job, result));
                }
            }
            // The bus is gone: every start waiting now fails unconfirmed (its sender dropped).
            if let Some(results) = results.upgrade() {
                results.lock().waiting.clear();
            }
        });
        Ok(ScopeLauncher {
            manager,
            jobs,
            cgroups: Default::default(),
        })
    }

    /// Places `pid` in `agentstore-job-<id>.scope` and returns once systemd reports the
    /// scope started (the caller releases the worker only then).
    pub async fn start(
        &self,
        job_id: &str,
        pid: u32,
        runtime_max_secs: u64,
        limits: Option<&ResourceLimits>,
    ) -> Result<String, ScopeError> {
        let unit = scope_name(job_id);
        let props = scope_properties(job_id, pid, runtime_max_secs, limits)?
            .into_iter()
            .map(|(k, v)| to_variant(v).map(|v| (k, v)))
            .collect::<zbus::Result<Vec<_>>>()?;
        let job = self
            .manager
            .start_transient_unit(unit.clone(), "fail".into(), props, Vec::new())
            .await?
            .to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let early = {
            let mut r = self.jobs.lock();
            match r.early.iter().position(|(j, _)| *j == job) {
                Some(i) => r.early.remove(i).map(|(_, result)| result),
                None => {
                    r.waiting.insert(job.clone(), tx);
                    None
                }
            }
        };
        let result = match early {
            Some(r) => Some(r),
            None => match tokio::time::timeout(Duration::from_secs(30), rx).await {
                Ok(Ok(r)) => Some(r),
                _ => {
                    self.jobs.lock().waiting.remove(&job);
                    None
                }
            },
        };
        match result {
            Some(r) if r == "done" => {
                // The worker is in the scope now (gated, alive): where its cgroup is.
                if let Some(dir) = unified_cgroup_of(pid) {
                    self.cgroups.lock().insert(unit.clone(), dir);
                }
                Ok(unit)
            }
            Some(result) => Err(ScopeError::JobFailed { unit, result }),
            None => Err(ScopeError::NoConfirmation(unit)),
        }
    }

    /// Sends `signal` to every process of the scope.
    pub async fn kill(&self, unit: &str, signal: i32) -> Result<(), ScopeError> {
        self.manager
            .kill_unit(unit.to_string(), "all".into(), signal)
            .await?;
        Ok(())
    }

    /// Stops the scope (SIGTERM to all, SIGKILL after 5 s); a scope already gone is fine. A
    /// scope this launcher placed whose cgroup has emptied (the worker and everything it
    /// started have exited) needs no stop: systemd ends it by itself, with no round trip.
    pub async fn stop(&self, unit: &str) {
        let dir = self.cgroups.lock().remove(unit);
        if dir.is_some_and(|d| cgroup_empty(&d)) {
            return;
        }
        if let Err(e) = self
            .manager
            .stop_unit(unit.to_string(), "replace".into())
            .await
        {
            tracing::debug!(unit, "stop: {e}");
        }
    }

    /// True when the unit is loaded and active.
    pub async fn is_active(&self, unit: &str) -> bool {
        self.manager
            .get_unit_processes(unit.to_string())
            .await
            .is_ok_and(|p| !p.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn properties_sent_for_a_job() {
        let limits = ResourceLimits {
            memory_max: Some(json!("4G")),
            cpu_quota: Some("200%".into()),
            tasks_max: Some(64),
        };
        let p = scope_properties("job-1", 4242, 90, Some(&limits)).unwrap();
        assert_eq!(
            p,
            vec![
                (
                    "Description".into(),
                    PropValue::Str("agentstore job job-1".into())
                ),
                ("PIDs".into(), PropValue::Pids(vec![4242])),
                ("RuntimeMaxUSec".into(), PropValue::U64(90_000_000)),
                (
                    "CollectMode".into(),
                    PropValue::Str("inactive-or-failed".into())
                ),
                ("TimeoutStopUSec".into(), PropValue::U64(5_000_000)),
                ("SendSIGKILL".into(), PropValue::Bool(true)),
                ("MemoryMax".into(), PropValue::U64(4 << 30)),
                ("CPUQuotaPerSecUSec".into(), PropValue::U64(2_000_000)),
                ("TasksMax".into(), PropValue::U64(64)),
            ]
        );
        for (_, v) in p {
            to_variant(v).unwrap();
        }
        assert_eq!(scope_name("job-1"), "agentstore-job-job-1.scope");
    }

    #[test]
    fn the_unified_hierarchy_and_an_emptied_scope_are_recognised() {
        // Hybrid (a container under systemd 252) and pure cgroup v2 mount tables.
        let hybrid = "29 22 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      30 29 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount_in(hybrid),
            Some(std::path::PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let v2 = "25 20 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount_in(v2),
            Some(std::path::PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            cgroup2_mount_in("1 0 0:1 / / rw - ext4 /dev/sda rw\n"),
            None
        );
        // cgroup.events says whether anything is left; a folder gone is empty; anything
        // unreadable is not (the scope is then stopped).
        let dir = tempfile::tempdir().unwrap();
        let scope = dir.path().join("agentstore-job-a.scope");
        std::fs::create_dir(&scope).unwrap();
        std::fs::write(scope.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        assert!(!cgroup_empty(&scope));
        std::fs::write(scope.join("cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
        assert!(cgroup_empty(&scope));
        std::fs::remove_file(scope.join("cgroup.events")).unwrap();
        assert!(
            !cgroup_empty(&scope),
            "a folder without the file is not known empty"
        );
        std::fs::remove_dir(&scope).unwrap();
        assert!(cgroup_empty(&scope), "the scope's folder is gone");
    }

    #[test]
    fn limit_parsing() {
        assert_eq!(memory_bytes(&json!(1024)), Ok(1024));
        assert_eq!(memory_bytes(&json!("512M")), Ok(512 << 20));
        assert_eq!(memory_bytes(&json!("infinity")), Ok(u64::MAX));
        assert!(memory_bytes(&json!("lots")).is_err());
        assert!(memory_bytes(&json!(-1)).is_err());
        assert_eq!(cpu_quota_usec("50%"), Ok(500_000));
        assert!(cpu_quota_usec("2").is_err());
    }
}
