//! The Slurm launcher (issue 14): one Slurm batch job per job, Slurm doing the scheduling.
//!
//! Submission is gated like a local start, without a Slurm hold: `sbatch` first (the job
//! still in `queued_jobs/`), then the Slurm job id is recorded on the job as it moves into
//! `running_jobs/`. The batch step's first lines wait until the job's file there names its
//! own Slurm job (`$SLURM_JOB_ID`) before `agent-worker` runs ([`batch_script`]), so Slurm
//! schedules the job as soon as it is submitted (a held job waits for the controller's next
//! scheduling cycle after `scontrol release`). A manager killed anywhere in between submits
//! nothing twice: a queued job whose submission may have happened (an interrupted start, an
//! unanswered sbatch) is first looked up by its Slurm job name (`agentstore-<id>`), in one
//! `squeue` for all such jobs of a pass; a batch step whose job is never recorded gives up
//! after [`GATE_SECONDS`] without running the worker.
//!
//! Supervision is one `squeue` per pass for all of the queue's Slurm jobs (every
//! `slurm.poll_seconds`; at once after a submission or a cancel, and within a second after a
//! pass that saw a job change state). A job's end is the worker's own when it wrote one; else
//! it is taken from Slurm's state (TIMEOUT, CANCELLED, NODE_FAIL, OUT_OF_MEMORY, …) and, for a
//! worker that died, Slurm's exit record (`scontrol show job`, only for such jobs).

use super::Manager;
use super::poison::{MarkKind, handling, handling_sync};
use super::{EndCause, KILL_GRACE, WORKER_DIED, add_secs, job_limit};
use crate::model::{Job, JobStatus, ResourceLimits, SlurmConfig, Timestamp};
use crate::store::{Record, read_limited};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// Seconds between two polls when `slurm.poll_seconds` is absent.
pub const DEFAULT_POLL_SECONDS: u64 = 5;

/// Jobs handed to Slurm in one pass at most (the loop stays responsive during a burst).
const SUBMIT_BATCH: usize = 64;

/// How long a Slurm command may take before it counts as the controller not answering.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an ended Slurm job's file may stay in `running_jobs/` before the job is failed
/// from Slurm's record (the worker's last write may take a moment to show on a shared
/// filesystem).
const SETTLE_GRACE: Duration = Duration::from_secs(3);

/// How long the partition's limits read by `sinfo` are used before they are read again.
const PARTITION_TTL: Duration = Duration::from_secs(60);

/// `sbatch` commands run at once during a pass (each waits on the controller's answer).
const SBATCH_PARALLEL: usize = 8;

/// How long a batch step waits for the manager to record its Slurm job on the job's file
/// before it gives up without running the worker (its job is then submitted again).
pub const GATE_SECONDS: u64 = 300;

/// A pass that saw a job change state is followed by another this soon (the state changes of
/// a burst come close together); a quiet queue is looked at every `poll_seconds`.
const BUSY_POLL: Duration = Duration::from_secs(1);

/// Prefix of the Slurm job name of every job (`agentstore-<id>`).
pub const JOB_NAME_PREFIX: &str = "agentstore-";

/// Why a Slurm command did not do its work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlurmError {
    /// The command is not installed (or not on PATH).
    #[error(
        "{0} not found: Slurm's client commands (sbatch, squeue, scancel, scontrol) are not installed on this host or not on the queue manager's PATH"
    )]
    Missing(String),
    /// The controller did not answer (down, unreachable, timed out).
    #[error("the Slurm controller does not answer ({0})")]
    Unreachable(String),
    /// Slurm refused the queue's own settings (unknown partition, account or QOS): every job
    /// of the queue would be refused alike, so they stay queued until the settings are fixed.
    #[error("Slurm refuses the queue's settings (config.slurm in its queue.json): {0}")]
    Settings(String),
    /// Slurm answered with a refusal of this job.
    #[error("{0}")]
    Refused(String),
}

impl SlurmError {
    /// Whether the cause lies outside the job (it is kept queued and tried again).
    pub fn is_transient(&self) -> bool {
        !matches!(self, SlurmError::Refused(_))
    }
}

/// Long `sbatch` options a queue's `slurm.extra_args` may give: where and on what the job
/// runs, its size and its bookkeeping. None of them changes which program runs, as whom, with
/// which environment, where its files go, which cluster takes it, whether it is held, or how
/// many jobs one submission makes (`--wrap`, `--uid`, `--export`, `--error`, `--output`,
/// `--chdir`, `--clusters`, `--array`, `--hold`, `--wait`, `--test-only`, a script path, … are
/// refused): the store's contents are untrusted (DESIGN §8), and a root manager submits as
/// root.
pub const EXTRA_ARGS_ALLOWED: &[&str] = &[
    "acctg-freq",
    "begin",
    "cluster-constraint",
    "comment",
    "constraint",
    "contiguous",
    "core-spec",
    "cores-per-socket",
    "cpu-freq",
    "cpus-per-gpu",
    "deadline",
    "delay-boot",
    "distribution",
    "exclude",
    "exclusive",
    "extra-node-info",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "hint",
    "licenses",
    "mail-type",
    "mail-user",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mincpus",
    "nice",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "oversubscribe",
    "reservation",
    "signal",
    "sockets-per-node",
    "spread-job",
    "switches",
    "thread-spec",
    "threads-per-core",
    "time-min",
    "tmp",
    "tres-per-task",
    "use-min-nodes",
    "wckey",
];

/// Most `slurm.extra_args` a queue may give.
const MAX_EXTRA_ARGS: usize = 64;

/// Longest value of one Slurm setting (a partition, account, QOS, gres or extra argument).
const MAX_SETTING_CHARS: usize = 256;

/// Why `v` (the value of `field`) is not a Slurm name made of ASCII letters, digits and
/// `extra` characters.
fn bad_name(field: &str, v: &str, extra: &str) -> Option<String> {
    if v.is_empty() || v.len() > MAX_SETTING_CHARS {
        return Some(format!(
            "{field} must have 1 to {MAX_SETTING_CHARS} characters (it has {})",
            v.len()
        ));
    }
    let bad = v
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || extra.contains(*c)))?;
    Some(format!(
        "{field} {v:?} has the character {bad:?}; only letters, digits and {extra:?} are allowed"
    ))
}

/// `0`, `+5`, `100`: a nice value that does not raise a job's priority.
fn non_negative(v: &str) -> bool {
    let digits = v.strip_prefix('+').unwrap_or(v);
    !digits.is_empty() && digits.len() <= 9 && digits.chars().all(|c| c.is_ascii_digit())
}

/// Why one of `extra_args` (number `i`) is not passed to sbatch.
fn bad_extra_arg(i: usize, a: &str) -> Option<String> {
    let field = format!("config.slurm.extra_args[{i}]");
    if a.len() > MAX_SETTING_CHARS || a.chars().any(char::is_control) {
        return Some(format!(
            "{field} {a:?} is longer than {MAX_SETTING_CHARS} characters or has a control character (a newline, tab, …)"
        ));
    }
    let Some(opt) = a.strip_prefix("--") else {
        return Some(format!(
            "{field} {a:?} is not a long option: give each extra argument as one --option=value (e.g. \"--constraint=haswell\")"
        ));
    };
    let (name, value) = opt
        .split_once('=')
        .map_or((opt, None), |(n, v)| (n, Some(v)));
    if name == "nice" {
        // A job may lower its own priority, never raise it: a negative nice is an
        // administrator's (and root submits it).
        return match value {
            None => None,
            Some(v) if non_negative(v) => None,
            Some(v) => Some(format!(
                "{field} {a:?}: sbatch --nice={v} is not allowed: only a nice value of 0 or more (a job may lower its own priority, never raise it)"
            )),
        };
    }
    if EXTRA_ARGS_ALLOWED.contains(&name) {
        return None;
    }
    Some(format!(
        "{field} {a:?}: sbatch --{name} is not allowed in extra_args (only options that place and size the job are: {}; the queue manager sets the job's name, script, output, time limit, partition, account, QOS, gres, memory and CPUs itself)",
        EXTRA_ARGS_ALLOWED.join(", ")
    ))
}

/// Why a Slurm queue's settings cannot be used (each value is checked here, whatever schema
/// the store carries: DESIGN §8), naming the field; None when they can.
pub fn settings_problem(cfg: &SlurmConfig, limits: Option<&ResourceLimits>) -> Option<String> {
    let names = [
        ("config.slurm.partition", &cfg.partition, "_.,-"),
        ("config.slurm.account", &cfg.account, "_.-"),
        ("config.slurm.qos", &cfg.qos, "_.,-"),
        ("config.slurm.gres", &cfg.gres, "_.,:=-"),
    ];
    for (field, v, extra) in names {
        if let Some(why) = v.as_deref().and_then(|v| bad_name(field, v, extra)) {
            return Some(why);
        }
    }
    if cfg.max_in_slurm == Some(0) {
        return Some(
            "config.slurm.max_in_slurm is 0: no job could ever be submitted (give at least 1, or leave it out to let Slurm schedule them all)".into(),
        );
    }
    if cfg.extra_args.len() > MAX_EXTRA_ARGS {
        return Some(format!(
            "config.slurm.extra_args has {} arguments; at most {MAX_EXTRA_ARGS} are taken",
            cfg.extra_args.len()
        ));
    }
    if let Some(why) = cfg
        .extra_args
        .iter()
        .enumerate()
        .find_map(|(i, a)| bad_extra_arg(i, a))
    {
        return Some(why);
    }
    let limits = limits?;
    if let Some(m) = &limits.memory_max
        && mem_mib(m).is_none_or(|mib| mib == 0)
    {
        return Some(format!(
            "config.resource_limits.memory_max {m} is not a memory size Slurm can take (bytes, or digits with a K/M/G/T suffix, at least 1, e.g. \"4G\")"
        ));
    }
    if let Some(c) = &limits.cpu_quota
        && cpus_arg(c).is_none()
    {
        return Some(format!(
            "config.resource_limits.cpu_quota {c:?} is not a CPU percentage Slurm can take (e.g. \"200%\" for sbatch --cpus-per-task=2)"
        ));
    }
    None
}

/// Runs a Slurm command; its stdout, or why it failed.
async fn run(prog: &str, args: &[String], env: &[(String, String)]) -> Result<String, SlurmError> {
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .kill_on_drop(true);
    let out = match tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await {
        Err(_) => {
            return Err(SlurmError::Unreachable(format!(
                "{prog} did not answer within {} s",
                COMMAND_TIMEOUT.as_secs()
            )));
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SlurmError::Missing(prog.to_string()));
        }
        Ok(Err(e)) => return Err(SlurmError::Unreachable(format!("cannot run {prog}: {e}"))),
        Ok(Ok(o)) => o,
    };
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let text = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let text = if text.is_empty() {
        format!("{prog} exited with {}", out.status)
    } else {
        text
    };
    Err(classify(&text))
}

/// Sorts a Slurm command's error text into unreachable controller or refusal.
pub fn classify(text: &str) -> SlurmError {
    const UNREACHABLE: [&str; 6] = [
        "Unable to contact slurm controller",
        "Socket timed out",
        "Connection refused",
        "Transport endpoint",
        "Zero Bytes were transmitted",
        "Slurm backup controller in standby mode",
    ];
    // Refusals of the queue's own settings (Slurm 22.05's words): every job would get them.
    const SETTINGS: [&str; 6] = [
        "invalid partition",
        "invalid account",
        "invalid qos",
        "invalid generic resource",
        "invalid wckey",
        "invalid reservation",
    ];
    let lower = text.to_ascii_lowercase();
    if UNREACHABLE.iter().any(|m| text.contains(m)) {
        SlurmError::Unreachable(text.to_string())
    } else if SETTINGS.iter().any(|m| lower.contains(m)) {
        SlurmError::Settings(text.to_string())
    } else {
        SlurmError::Refused(text.to_string())
    }
}

/// Whether `sid` is a Slurm job id as `sbatch --parsable` prints it and this manager records
/// it (`123` or `123_4`): checked in code before a job file's `runtime.slurm_job_id` reaches
/// a Slurm command (the store is untrusted, whatever schema it carries).
pub fn is_slurm_job_id(sid: &str) -> bool {
    let (job, task) = sid.split_once('_').unwrap_or((sid, "0"));
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.chars().all(|c| c.is_ascii_digit());
    digits(job) && digits(task)
}

/// `'…'` for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Minutes of `sbatch --time` for a job limit of `limit` seconds: rounded up, with the kill
/// grace.
pub fn time_minutes(limit: u64) -> u64 {
    limit
        .saturating_add(KILL_GRACE.as_secs())
        .div_ceil(60)
        .max(1)
}

/// `sbatch --mem` for `memory_max` (bytes as a number or digits; else digits with a
/// K/M/G/T suffix, which Slurm reads the same way); None for anything else.
fn mem_arg(v: &serde_json::Value) -> Option<String> {
    let bytes = match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) if s.chars().all(|c| c.is_ascii_digit()) => s.parse().ok(),
        serde_json::Value::String(s) => {
            let digits = s.strip_suffix(['K', 'M', 'G', 'T'])?;
            let n: u64 = digits.parse().ok()?;
            return (n > 0 && digits.chars().all(|c| c.is_ascii_digit())).then(|| s.clone());
        }
        _ => None,
    }?;
    (bytes > 0).then(|| format!("{}M", bytes.div_ceil(1024 * 1024)))
}

/// `memory_max` in MiB (bytes as a number or digits, or digits with a K/M/G/T suffix).
fn mem_mib(v: &serde_json::Value) -> Option<u64> {
    let text = mem_arg(v)?;
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = digits.parse().ok()?;
    match unit.to_ascii_uppercase().as_str() {
        "K" | "KB" => Some(n.div_ceil(1024)),
        "M" | "MB" => Some(n),
        "G" | "GB" => n.checked_mul(1024),
        "T" | "TB" => n.checked_mul(1024 * 1024),
        _ => None,
    }
}

/// What a partition offers, from `sinfo` (absent: unlimited or not known).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionLimits {
    /// The partition's name.
    pub name: String,
    /// Its MaxTime in seconds.
    pub max_time: Option<u64>,
    /// The most CPUs of one of its nodes.
    pub cpus: Option<u64>,
    /// The most memory of one of its nodes, MiB.
    pub mem_mib: Option<u64>,
}

/// `sinfo`'s format for [`parse_sinfo`] (one line per node and partition).
pub const SINFO_FORMAT: &str = "%P|%l|%c|%m";

/// The limits of `partition` (absent: the default one, marked `*`) from
/// `sinfo --noheader --Node --format=SINFO_FORMAT`; None when it is not listed.
pub fn parse_sinfo(out: &str, partition: Option<&str>) -> Option<PartitionLimits> {
    let mut found: Option<PartitionLimits> = None;
    let num = |s: &str| s.trim().trim_end_matches('+').parse::<u64>().ok();
    for line in out.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        let [p, time, cpus, mem] = f[..] else {
            continue;
        };
        let name = p.trim().trim_end_matches('*');
        let wanted = match partition {
            Some(want) => name == want,
            None => p.trim().ends_with('*'),
        };
        if !wanted {
            continue;
        }
        let l = found.get_or_insert_with(|| PartitionLimits {
            name: name.to_string(),
            max_time: parse_elapsed(time.trim()),
            ..PartitionLimits::default()
        });
        l.cpus = l.cpus.max(num(cpus));
        l.mem_mib = l.mem_mib.max(num(mem));
    }
    found
}

/// The partitions `sinfo --noheader --Node --format=SINFO_FORMAT` lists, each once.
pub fn sinfo_partitions(out: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in out.lines() {
        let Some((p, _)) = line.trim().split_once('|') else {
            continue;
        };
        let name = p.trim().trim_end_matches('*').to_string();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Why a job can never start in partition `p` (it would pend forever): its time limit
/// (`limit` seconds, as `sbatch --time`) above the MaxTime, or more CPUs or memory than any
/// node has.
pub fn beyond_partition(
    p: &PartitionLimits,
    limit: u64,
    limits: Option<&ResourceLimits>,
) -> Option<String> {
    let minutes = time_minutes(limit);
    if let Some(max) = p.max_time
        && minutes.saturating_mul(60) > max
    {
        return Some(format!(
            "Cannot start job: its time limit needs sbatch --time={minutes} (minutes: timeout_seconds {limit} + {} s kill grace, rounded up) but Slurm partition {}'s MaxTime is {} min; it would pend forever. Lower timeout_seconds or use a partition with a longer MaxTime",
            KILL_GRACE.as_secs(),
            p.name,
            max / 60
        ));
    }
    let want_cpus = limits.and_then(|l| l.cpu_quota.as_deref().and_then(cpus_arg));
    if let (Some(want), Some(have)) = (want_cpus, p.cpus)
        && want > have
    {
        return Some(format!(
            "Cannot start job: the queue's resource_limits.cpu_quota asks sbatch --cpus-per-task={want} but the largest node of Slurm partition {} has {have} CPUs; it would pend forever",
            p.name
        ));
    }
    let want_mem = limits.and_then(|l| l.memory_max.as_ref().and_then(mem_mib));
    if let (Some(want), Some(have)) = (want_mem, p.mem_mib)
        && want > have
    {
        return Some(format!(
            "Cannot start job: the queue's resource_limits.memory_max asks sbatch --mem={want}M but the largest node of Slurm partition {} has {have}M; it would pend forever",
            p.name
        ));
    }
    None
}

/// `sbatch --cpus-per-task` for a `cpu_quota` like `250%` (rounded up); None for anything
/// else (no sign, no zero, no more than Slurm's 65,535 CPUs).
fn cpus_arg(quota: &str) -> Option<u64> {
    let digits = quota.strip_suffix('%')?;
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let pct: u64 = digits.parse().ok()?;
    let cpus = pct.div_ceil(100);
    (pct > 0 && cpus <= 65_535).then_some(cpus)
}

/// The batch step of a job: waits (at most [`GATE_SECONDS`]) until the job's file in
/// `running_jobs/` (`running`) names this Slurm job, then runs `command` (each word quoted
/// for `sh` here). The manager records the id right after `sbatch` answers, so the wait is
/// normally over before Slurm starts the step; a step whose job is never recorded (the
/// manager died, the job was cancelled) exits 3 without running the worker.
pub fn batch_script(running: &Path, command: &[String]) -> String {
    let file = shell_quote(&running.display().to_string());
    let polls = GATE_SECONDS * 5;
    let cmd: Vec<String> = command.iter().map(|s| shell_quote(s)).collect();
    format!(
        "n=0; until [ ! -h {file} ] && grep -Eqs '\"slurm_job_id\": *\"'\"$SLURM_JOB_ID\"'\"' {file}; do \
         n=$((n+1)); if [ $n -gt {polls} ]; then \
         echo \"agentstore: Slurm job $SLURM_JOB_ID was never recorded on its job file; the worker is not started\" >&2; \
         exit 3; fi; sleep 0.2; done; exec {}",
        cmd.join(" ")
    )
}

/// The `sbatch` arguments of one job: the queue's extra arguments first, then ours (which
/// win), and the batch step ([`batch_script`]) that runs `command` once `running` (the job's
/// file in `running_jobs/`) names the Slurm job.
pub fn sbatch_args(
    cfg: &SlurmConfig,
    job_id: &str,
    limit: u64,
    limits: Option<&ResourceLimits>,
    output: &Path,
    running: &Path,
    command: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = cfg.extra_args.clone();
    a.push("--parsable".into());
    a.push("--no-requeue".into());
    a.push(format!("--job-name={JOB_NAME_PREFIX}{job_id}"));
    a.push(format!("--time={}", time_minutes(limit)));
    a.push(format!("--output={}", output.display()));
    a.push("--chdir=/".into());
    if let Some(p) = &cfg.partition {
        a.push(format!("--partition={p}"));
    }
    if let Some(x) = &cfg.account {
        a.push(format!("--account={x}"));
    }
    if let Some(x) = &cfg.qos {
        a.push(format!("--qos={x}"));
    }
    if let Some(x) = &cfg.gres {
        a.push(format!("--gres={x}"));
    }
    if let Some(l) = limits {
        if let Some(m) = l.memory_max.as_ref().and_then(mem_arg) {
            a.push(format!("--mem={m}"));
        }
        if let Some(c) = l.cpu_quota.as_deref().and_then(cpus_arg) {
            a.push(format!("--cpus-per-task={c}"));
        }
    }
    a.push(format!("--wrap={}", batch_script(running, command)));
    a
}

/// One line of `squeue -o '%i|%j|%T|%r|%M'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Slurm job id.
    pub id: String,
    /// Job name (`agentstore-<id>` for ours).
    pub name: String,
    /// State (PENDING, RUNNING, COMPLETED, TIMEOUT, …).
    pub state: String,
    /// Slurm's reason (why pending, or why it ended).
    pub reason: String,
    /// Seconds it has run.
    pub elapsed: u64,
}

/// `squeue`'s format for [`parse_squeue`].
pub const SQUEUE_FORMAT: &str = "%i|%j|%T|%r|%M";

/// Parses `squeue -h -o SQUEUE_FORMAT` output (lines it cannot read are skipped).
pub fn parse_squeue(out: &str) -> Vec<SlurmJob> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().splitn(5, '|').collect();
            let [id, name, state, reason, elapsed] = f[..] else {
                return None;
            };
            Some(SlurmJob {
                id: id.trim().to_string(),
                name: name.trim().to_string(),
                state: state.trim().to_string(),
                reason: reason.trim().to_string(),
                elapsed: parse_elapsed(elapsed.trim()).unwrap_or(0),
            })
        })
        .collect()
}

/// Slurm's time format (`S`, `M:SS`, `H:MM:SS`, `D-HH:MM:SS`) in seconds.
pub fn parse_elapsed(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let mut secs = 0u64;
    for part in rest.split(':') {
        secs = secs
            .checked_mul(60)?
            .checked_add(part.parse::<u64>().ok()?)?;
    }
    days.checked_mul(86_400)?.checked_add(secs)
}

/// Whether Slurm is done with a job in `state`.
pub fn is_terminal(state: &str) -> bool {
    !matches!(
        state,
        "PENDING"
            | "RUNNING"
            | "CONFIGURING"
            | "COMPLETING"
            | "SUSPENDED"
            | "REQUEUED"
            | "REQUEUE_HOLD"
            | "REQUEUE_FED"
            | "RESIZING"
            | "SIGNALING"
            | "STAGE_OUT"
            | "STOPPED"
            | "RESV_DEL_HOLD"
    )
}

/// The error of a job Slurm ended without the worker writing a result (`end`: why the
/// manager stopped it, if it did; `exit`: Slurm's `ExitCode=` when known).
pub(super) fn end_error(
    job: &SlurmJob,
    limit: u64,
    end: Option<&EndCause>,
    exit: Option<&str>,
) -> String {
    let timeout = || format!("Job timeout after {}s (limit: {limit}s)", job.elapsed);
    match (end, job.state.as_str()) {
        (Some(EndCause::Cancelled(by)), _) => format!("Job cancelled by {by}"),
        (Some(EndCause::Timeout), _) | (None, "TIMEOUT" | "DEADLINE") => timeout(),
        (None, "CANCELLED") => format!(
            "Job cancelled in Slurm (Slurm job {}, outside agentstore)",
            job.id
        ),
        (None, "COMPLETED" | "FAILED") => {
            let exit = exit.map(|e| format!(", exit code {e}")).unwrap_or_default();
            format!(
                "{WORKER_DIED} (Slurm job {} {}{exit}, reason {})",
                job.id, job.state, job.reason
            )
        }
        (None, state) => format!(
            "Slurm ended job {} with {state} (reason: {}); the worker wrote no result",
            job.id, job.reason
        ),
    }
}

/// A job of the queue handed to Slurm.
#[derive(Debug)]
pub(super) struct Tracked {
    slurm_id: String,
    limit: u64,
    state: String,
    end: Option<EndCause>,
    /// When it was first seen ended (or gone from Slurm) with its file still running.
    ended_at: Option<Instant>,
}

/// The Slurm side of a manager.
#[derive(Debug, Default)]
pub(super) struct SlurmState {
    pub(super) jobs: HashMap<String, Tracked>,
    /// Next poll.
    pub(super) poll_at: Option<Instant>,
    /// Why Slurm cannot be used now (shown as the queue's `slurm_status`).
    pub(super) status: Option<String>,
    /// Slurm commands run so far.
    pub(super) calls: u64,
    /// The partition's limits and when they were read (`sinfo`, at most once a minute).
    partition: Option<(Instant, Option<PartitionLimits>)>,
    /// The partitions that `sinfo` listed then (None: it did not answer).
    partitions: Option<Vec<String>>,
    /// Queued jobs an sbatch of this manager may have submitted without their record.
    unsure: HashSet<String>,
    /// The shared-store probe: its Slurm job id and the file it writes, while it runs.
    probe: Option<(String, std::path::PathBuf)>,
    /// Whether the probe was submitted (once per manager).
    probed: bool,
    /// The probe found the store not shared: nothing more is submitted.
    unshared: bool,
}

impl SlurmState {
    /// Jobs running in Slurm now, and jobs pending there.
    pub(super) fn counts(&self) -> (usize, usize) {
        let running = self
            .jobs
            .values()
            .filter(|t| !matches!(t.state.as_str(), "PENDING" | ""))
            .count();
        (running, self.jobs.len() - running)
    }
}

/// A queued job ready to be handed to Slurm.
struct Submission {
    /// Whether an earlier submission may exist (looked up by name first).
    unsure: bool,
    id: String,
    path: std::path::PathBuf,
    job: Job,
    args: Vec<String>,
    limit: u64,
}

impl Manager {
    fn slurm_cfg(&self) -> SlurmConfig {
        self.config.slurm.clone().unwrap_or_default()
    }

    fn poll_interval(&self) -> u64 {
        self.slurm_cfg()
            .poll_seconds
            .unwrap_or(DEFAULT_POLL_SECONDS)
            .clamp(1, 3600)
    }

    /// How many more jobs may go to Slurm now.
    pub(super) fn slurm_free(&self) -> usize {
        let max = self
            .slurm_cfg()
            .max_in_slurm
            .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
        if self.slurm.unshared {
            return 0;
        }
        max.saturating_sub(self.slurm.jobs.len()).min(SUBMIT_BATCH)
    }

    fn set_slurm_status(&mut self, status: Option<String>) {
        if status != self.slurm.status {
            match &status {
                Some(s) => self.record(Record::warn(
                    self.event("slurm_unavailable").detail(s),
                    format!("queue {}: {s}", self.cfg.queue),
                )),
                None => self.record(Record::info(
                    self.event("slurm_available"),
                    format!("queue {}: Slurm answers again", self.cfg.queue),
                )),
            }
        }
        self.slurm.status = status;
    }

    async fn slurm_run(&mut self, prog: &str, args: &[String]) -> Result<String, SlurmError> {
        // sbatch exports its environment to the batch step: the workers' extra environment.
        let env = if prog == "sbatch" {
            self.cfg.worker_env.clone()
        } else {
            Vec::new()
        };
        self.slurm.calls = self.slurm.calls.saturating_add(1);
        let r = run(prog, args, &env).await;
        self.note_transient(&r);
        r
    }

    /// A controller that does not answer is the queue's `slurm_status`.
    fn note_transient<T>(&mut self, r: &Result<T, SlurmError>) {
        if let Err(e) = r
            && e.is_transient()
        {
            self.set_slurm_status(Some(format!("jobs stay queued: {e}")));
        }
    }

    /// `sbatch` for each submission, [`SBATCH_PARALLEL`] in flight at once; each answer is
    /// recorded as it comes ([`submitted`](Self::submitted)), so a job's batch step finds
    /// its record (its gate opens) without waiting for the rest of the burst. Each sbatch and
    /// the handling of its answer run as handling that job (poison.rs): a panic there is
    /// recorded in its start marker and fails that job, and only it, at the next start.
    async fn sbatch_all(&mut self, subs: Vec<(Submission, Vec<String>)>) {
        use futures_util::StreamExt;
        let env = self.cfg.worker_env.clone();
        let n = u64::try_from(subs.len()).unwrap_or(u64::MAX);
        self.slurm.calls = self.slurm.calls.saturating_add(n);
        // Each job's approval key goes in sbatch's own environment, which Slurm gives the
        // batch step (issue 27: without it every person-approval of a Slurm job was denied);
        // never on a command line (any local user reads those) nor in the store.
        type Sub = (
            Submission,
            Vec<String>,
            std::path::PathBuf,
            Vec<(String, String)>,
        );
        let jobs: Vec<Sub> = subs
            .into_iter()
            .map(|(s, line)| {
                let marker = self.marker_path(MarkKind::Start, &s.id);
                let mut env = env.clone();
                env.push((
                    crate::model::approval::APPROVAL_KEY_ENV.to_string(),
                    self.approval_key(&s.id),
                ));
                (s, line, marker, env)
            })
            .collect();
        let mut answers =
            futures_util::stream::iter(jobs.into_iter().map(|(s, line, marker, env)| {
                handling(marker.clone(), async move {
                    let r = run("sbatch", &line, &env).await;
                    (s, r, marker)
                })
            }))
            .buffer_unordered(SBATCH_PARALLEL);
        while let Some((s, answer, marker)) = answers.next().await {
            self.note_transient(&answer);
            handling(marker, self.submitted(s, answer)).await;
        }
    }

    /// What `sbatch` answered for `s`: recorded, put off, or the job failed.
    async fn submitted(&mut self, s: Submission, answer: Result<String, SlurmError>) {
        #[cfg(debug_assertions)]
        super::poison::injected_fault("submit", &s.id).await;
        match answer {
            Ok(out) => {
                let sid = out.trim().split(';').next().unwrap_or_default().to_string();
                if sid.is_empty() || !sid.chars().all(|c| c.is_ascii_digit() || c == '_') {
                    self.back_off(
                        &s.id,
                        &format!("sbatch printed no job id (it printed {:?})", out.trim()),
                    );
                    return;
                }
                self.record_submission(s, sid).await;
            }
            Err(e) if e.is_transient() => self.back_off(&s.id, &e.to_string()),
            Err(e) => {
                self.slurm.unsure.remove(&s.id);
                self.fail_owned(
                    &s.id,
                    JobStatus::Queued,
                    s.job,
                    format!("Cannot start job: Slurm refused it: {e}"),
                )
                .await;
            }
        }
    }

    /// The queue's live Slurm jobs named after `ids` (one `squeue`).
    async fn squeue(&mut self, ids: &[&str]) -> Result<Vec<SlurmJob>, SlurmError> {
        let mut args = vec![
            "--noheader".to_string(),
            "--states=all".to_string(),
            format!("--format={SQUEUE_FORMAT}"),
        ];
        // A long list of names is filtered here instead (the command line stays short).
        if ids.len() <= 200 {
            let names: Vec<String> = ids
                .iter()
                .map(|i| format!("{JOB_NAME_PREFIX}{i}"))
                .collect();
            args.push(format!("--name={}", names.join(",")));
        }
        let out = self.slurm_run("squeue", &args).await?;
        let wanted: HashSet<String> = ids
            .iter()
            .map(|i| format!("{JOB_NAME_PREFIX}{i}"))
            .collect();
        Ok(parse_squeue(&out)
            .into_iter()
            .filter(|j| wanted.contains(&j.name))
            .collect())
    }

    /// Submits the shared-store probe (once): a short Slurm job that writes a file into the
    /// store's `logs/`, which this host must then see.
    async fn slurm_probe(&mut self) {
        self.slurm.probed = true;
        let cfg = self.slurm_cfg();
        let logs = self.store.logs_dir();
        let file = logs.join(format!(
            ".slurm-probe-{}-{}",
            self.cfg.queue,
            std::process::id()
        ));
        // The manager writes the probe's file (with the store's own I/O, which follows no
        // link) and the probe only reads it back: nothing a root Slurm job creates or
        // writes lies in the store (issue 27). The token tells this probe's file from any
        // other.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let _ = crate::store::safe::remove_file(&file);
        if let Err(e) = crate::store::write_atomic(&file, format!("{token}\n").as_bytes()) {
            tracing::warn!(queue = %self.cfg.queue, "cannot write the Slurm probe's file {}: {e}; the store's sharing is not checked", file.display());
            return;
        }
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name={JOB_NAME_PREFIX}probe-{}", self.cfg.queue),
            "--time=1".into(),
            "--output=/dev/null".into(),
            "--chdir=/".into(),
        ];
        for (opt, v) in [
            ("partition", &cfg.partition),
            ("account", &cfg.account),
            ("qos", &cfg.qos),
        ] {
            if let Some(v) = v {
                args.push(format!("--{opt}={v}"));
            }
        }
        // Read only, and never through a link planted in logs/ (the step runs as root).
        let (dq, fq) = (
            shell_quote(&logs.display().to_string()),
            shell_quote(&file.display().to_string()),
        );
        args.push(format!(
            "--wrap=[ ! -h {dq} ] && [ ! -h {fq} ] && grep -qsx {token} {fq}"
        ));
        if let Ok(out) = self.slurm_run("sbatch", &args).await {
            let sid = out.trim().split(';').next().unwrap_or_default().to_string();
            self.slurm.probe = Some((sid, file));
            self.slurm.poll_at = Some(Instant::now());
        } else {
            // Submitted again with the next job.
            self.slurm.probed = false;
        }
    }

    /// The probe's verdict once Slurm ended it.
    fn probe_verdict(&mut self, listed: &[SlurmJob]) {
        let Some((sid, file)) = self.slurm.probe.clone() else {
            return;
        };
        let state = listed
            .iter()
            .find(|j| j.id == sid)
            .map_or("UNKNOWN", |j| j.state.as_str());
        if !is_terminal(state) {
            return;
        }
        self.slurm.probe = None;
        let _ = crate::store::safe::remove_file(&file);
        // It completed only when it read this manager's token from the file.
        if state == "COMPLETED" {
            return;
        }
        self.slurm.unshared = true;
        let text = format!(
            "jobs stay queued: the store {} is not shared with the compute nodes: Slurm job {sid} (the probe) ended {state}: the file it reads, {}, written on this host, was not visible to it; put the store on the cluster's shared filesystem at the same path on every node, then restart the queue manager",
            self.cfg.root.display(),
            file.display()
        );
        self.set_slurm_status(Some(text));
    }

    /// Hands `ids` (queued jobs) to Slurm.
    pub(super) async fn slurm_start_batch(&mut self, ids: &[String]) {
        // Settings every job would be refused for: nothing is submitted, nothing is failed.
        // Checked also when no job can be taken (max_in_slurm 0 takes none).
        let problem = settings_problem(&self.slurm_cfg(), self.config.resource_limits.as_ref());
        if problem.is_none() && ids.is_empty() {
            return;
        }
        let problem = match problem {
            Some(why) => Some(why),
            None => self.partition_unknown().await,
        };
        if let Some(why) = problem {
            self.set_slurm_status(Some(format!(
                "jobs stay queued: {}: {why}",
                self.store.queue_path(&self.cfg.queue).display()
            )));
            return;
        }
        if !self.slurm.probed {
            self.slurm_probe().await;
        }
        let mut marked = Vec::new();
        let mut ready = Vec::new();
        for id in ids {
            // An earlier attempt (its marker still on disk) may have reached sbatch.
            let mut unsure = self.start_was_interrupted(id) || self.slurm.unsure.contains(id);
            let (was_marked, prepared) = self.begin_start(id).await;
            if was_marked {
                marked.push(id.clone());
            } else {
                unsure = true;
            }
            if let Some(p) = prepared {
                ready.push(Submission {
                    unsure,
                    args: p
                        .args
                        .iter()
                        .filter(|a| a.as_str() != "--gate")
                        .cloned()
                        .collect(),
                    id: p.id,
                    path: p.path,
                    job: p.job,
                    limit: p.limit,
                });
            }
        }
        // Submitted before (by a manager that died before recording it, or by an sbatch of
        // ours that did not answer): found by name, in one squeue for all such jobs.
        let names: Vec<&str> = ready
            .iter()
            .filter(|s| s.unsure)
            .map(|s| s.id.as_str())
            .collect();
        let existing = if names.is_empty() {
            Ok(Vec::new())
        } else {
            self.squeue(&names).await
        };
        let existing = match existing {
            Ok(l) => l,
            Err(e) => {
                // Only the jobs that needed the look-up wait; the others go on.
                let (wait, go): (Vec<Submission>, Vec<Submission>) =
                    ready.into_iter().partition(|s| s.unsure);
                for s in &wait {
                    self.back_off(&s.id, &e.to_string());
                }
                ready = go;
                Vec::new()
            }
        };
        let partition = if ready.iter().any(|s| {
            !existing
                .iter()
                .any(|j| j.name == format!("{JOB_NAME_PREFIX}{}", s.id))
        }) {
            self.partition_limits().await
        } else {
            None
        };
        let mut found = Vec::new();
        let mut fresh = Vec::new();
        for s in ready {
            let name = format!("{JOB_NAME_PREFIX}{}", s.id);
            match existing
                .iter()
                .find(|j| j.name == name && !is_terminal(&j.state))
            {
                Some(j) => found.push((s, j.clone())),
                None => {
                    let marker = self.marker_path(MarkKind::Start, &s.id);
                    if let Some(why) = partition.as_ref().and_then(|p| {
                        beyond_partition(p, s.limit, self.config.resource_limits.as_ref())
                    }) {
                        let id = s.id.clone();
                        handling(marker, self.fail_owned(&id, JobStatus::Queued, s.job, why)).await;
                        continue;
                    }
                    let line = handling_sync(marker, || self.sbatch_line(&s));
                    // From here on, a submission may exist whatever sbatch answers.
                    self.slurm.unsure.insert(s.id.clone());
                    fresh.push((s, line));
                }
            }
        }
        let mut release = Vec::new();
        for (s, j) in found {
            self.record(Record::info(
                self.event("slurm_job_found").job(&s.id).detail(&j.id),
                format!(
                    "job {}: Slurm job {} from an earlier submission taken over",
                    s.id, j.id
                ),
            ));
            // Submitted held by an earlier version of the manager.
            if j.state == "PENDING" && j.reason == "JobHeldUser" {
                release.push(j.id.clone());
            }
            let marker = self.marker_path(MarkKind::Start, &s.id);
            handling(marker, self.record_submission(s, j.id)).await;
        }
        self.sbatch_all(fresh).await;
        self.slurm_release(&release).await;
        self.slurm.poll_at = Some(Instant::now());
        for id in &marked {
            self.unmark(MarkKind::Start, id);
        }
    }

    /// Why the queue's partition cannot be used: Slurm does not list it (`sinfo`).
    async fn partition_unknown(&mut self) -> Option<String> {
        let cfg = self.slurm_cfg();
        let wanted = cfg.partition.as_deref()?;
        self.partition_limits().await;
        let listed = self.slurm.partitions.as_ref()?;
        if listed.iter().any(|p| p == wanted) {
            return None;
        }
        Some(format!(
            "config.slurm.partition: Slurm has no partition {wanted:?} (sinfo lists: {})",
            if listed.is_empty() {
                "none".to_string()
            } else {
                listed.join(", ")
            }
        ))
    }

    /// The limits of the queue's partition (`sinfo`, read again after a minute); None when
    /// they cannot be known (the job then goes to sbatch, which judges it).
    async fn partition_limits(&mut self) -> Option<PartitionLimits> {
        if let Some((at, l)) = &self.slurm.partition
            && at.elapsed() < PARTITION_TTL
        {
            return l.clone();
        }
        let cfg = self.slurm_cfg();
        // Every partition (not only the queue's): an unknown one is told by name.
        let args = vec![
            "--noheader".to_string(),
            "--all".to_string(),
            "--Node".to_string(),
            format!("--format={SINFO_FORMAT}"),
        ];
        let l = match self.slurm_run("sinfo", &args).await {
            Ok(out) => {
                self.slurm.partitions = Some(sinfo_partitions(&out));
                parse_sinfo(&out, cfg.partition.as_deref())
            }
            Err(e) => {
                tracing::warn!(queue = %self.cfg.queue, "sinfo (the partition's limits are not checked): {e}");
                self.slurm.partitions = None;
                None
            }
        };
        self.slurm.partition = Some((Instant::now(), l.clone()));
        l
    }

    /// The `sbatch` arguments of a submission.
    fn sbatch_line(&self, s: &Submission) -> Vec<String> {
        let q = &self.cfg.queue;
        let mut command = vec![self.cfg.worker.display().to_string()];
        command.extend(s.args.iter().cloned());
        // The batch step runs as root on the node when the manager is root: its output goes
        // nowhere in the store, where a planted link would send it (issue 27). What the job
        // did is in its job file (the worker records its end, output and error there).
        let output = Path::new("/dev/null");
        let running = self.store.job_path(q, JobStatus::Running, &s.id);
        sbatch_args(
            &self.slurm_cfg(),
            &s.id,
            s.limit,
            self.config.resource_limits.as_ref(),
            output,
            &running,
            &command,
        )
    }

    /// Records Slurm job `sid` on a submitted job as it moves into `running_jobs/` (which
    /// opens the batch step's gate) and follows it.
    async fn record_submission(&mut self, s: Submission, sid: String) {
        let q = self.cfg.queue.clone();
        let Submission {
            id,
            path,
            mut job,
            limit,
            ..
        } = s;
        let now = Timestamp::now();
        let r = &mut job.runtime;
        r.start_time = Some(now);
        r.process_id = None;
        r.unit = None;
        r.slurm_job_id = Some(sid.clone());
        if let Err(e) = self.place_running(&id, &mut job, &path) {
            // The batch step waits at its gate: the next attempt finds it by name.
            self.back_off(&id, &e.to_string());
            return;
        }
        self.slurm.unsure.remove(&id);
        self.backoff.remove(&id);
        if !self.slurm.unshared {
            self.set_slurm_status(None);
        }
        tracing::info!(job_id = %id, queue = %q, slurm_job_id = %sid, "job handed to Slurm");
        self.record(Record::info(
            self.event("job_started")
                .job(&id)
                .project(&job.config.project)
                .detail(format!("slurm job {sid}")),
            format!("job {id} submitted to Slurm (Slurm job {sid})"),
        ));
        self.slurm.jobs.insert(
            id.clone(),
            Tracked {
                slurm_id: sid,
                limit,
                state: "PENDING".to_string(),
                end: None,
                ended_at: None,
            },
        );
        self.signal(&id, JobStatus::Queued, JobStatus::Running)
            .await;
    }

    async fn slurm_release(&mut self, sids: &[String]) {
        if sids.is_empty() {
            return;
        }
        let args = vec!["release".to_string(), sids.join(",")];
        if let Err(e) = self.slurm_run("scontrol", &args).await {
            // The next poll releases what is still held.
            tracing::warn!(queue = %self.cfg.queue, "scontrol release {}: {e}", sids.join(","));
        }
    }

    /// Takes over a running job that has a Slurm job id (after a restart).
    pub(super) fn slurm_adopt(&mut self, id: &str, job: &Job, sid: &str) {
        let limit = job_limit(job, &self.config).unwrap_or(crate::model::MAX_TIMEOUT_SECONDS);
        self.record(
            Record::info(
                self.event("job_adopted").job(id),
                format!("job {id} re-adopted (Slurm job {sid})"),
            )
            .no_event_line(),
        );
        self.slurm.jobs.insert(
            id.to_string(),
            Tracked {
                slurm_id: sid.to_string(),
                limit,
                state: String::new(),
                end: None,
                ended_at: None,
            },
        );
        self.slurm.poll_at = Some(Instant::now());
    }

    /// Watches `running_jobs/` of a Slurm queue: a worker that wrote its end (its file moved
    /// out) is settled at once ([`slurm_reap`](Self::slurm_reap)) instead of at the next
    /// `squeue` poll. A worker on another node of a shared filesystem raises no inotify event
    /// here: the poll still sees it. `None` (logged) when it cannot watch.
    pub(super) fn watch_running(&self) -> Option<inotify::Inotify> {
        let dir = self.store.jobs_dir(&self.cfg.queue, JobStatus::Running);
        let watch = || -> std::io::Result<inotify::Inotify> {
            crate::store::safe::create_dir_all(&dir)?;
            let i = inotify::Inotify::init()?;
            use inotify::WatchMask as W;
            crate::store::safe::watch_dir(&mut i.watches(), &dir, W::MOVED_FROM | W::DELETE)?;
            Ok(i)
        };
        match watch() {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!(queue = %self.cfg.queue,
                    "cannot watch {} (Slurm jobs' ends are seen at each poll only): {e}", dir.display());
                None
            }
        }
    }

    /// Settles the Slurm jobs whose file left `running_jobs/` (the worker wrote its end),
    /// without asking Slurm; `name`: the file the event named (None: look at them all).
    pub(super) async fn slurm_reap(&mut self, name: Option<&str>) {
        let q = self.cfg.queue.clone();
        let ids: Vec<String> = match name.map(|n| n.trim_end_matches(".json")) {
            Some(id) if self.slurm.jobs.contains_key(id) => vec![id.to_string()],
            Some(_) => return,
            None => self.slurm.jobs.keys().cloned().collect(),
        };
        for id in ids {
            if self.store.job_path(&q, JobStatus::Running, &id).is_file() {
                continue;
            }
            if self.slurm.jobs.remove(&id).is_some() {
                self.settle(&id, None).await;
            }
        }
    }

    /// `cancel-job` of a job in Slurm: `scancel`; its end is settled by the poll.
    pub(super) async fn slurm_cancel(&mut self, id: &str, cause: EndCause) -> Result<(), String> {
        let Some(t) = self.slurm.jobs.get_mut(id) else {
            return Ok(());
        };
        if t.end.is_none() {
            t.end = Some(cause);
        }
        let sid = t.slurm_id.clone();
        if !is_slurm_job_id(&sid) {
            return Err(format!(
                "job {id}: its runtime.slurm_job_id {sid:?} is not a Slurm job id; nothing cancelled in Slurm"
            ));
        }
        // Only the Slurm job of this job: one whose id a job file names but whose name is
        // not `agentstore-<id>` (another user's, named by a forged file) is left alone.
        let args = [format!("--name={JOB_NAME_PREFIX}{id}"), sid.clone()];
        self.slurm_run("scancel", &args)
            .await
            .map_err(|e| format!("scancel {sid}: {e}"))?;
        self.slurm.poll_at = Some(Instant::now());
        Ok(())
    }

    /// When the next poll is due.
    pub(super) fn slurm_deadline(&self) -> Option<Instant> {
        if self.slurm.jobs.is_empty() && self.slurm.probe.is_none() {
            None
        } else {
            self.slurm.poll_at
        }
    }

    /// One look at all of the queue's Slurm jobs, if due.
    pub(super) async fn slurm_poll_if_due(&mut self) {
        if self.slurm_deadline().is_some_and(|at| at <= Instant::now()) {
            self.slurm_poll().await;
        }
    }

    /// One look at all of the queue's Slurm jobs: states, ends, held jobs to release, our own
    /// time limit.
    pub(super) async fn slurm_poll(&mut self) {
        let every = self.poll_interval();
        self.slurm.poll_at = Some(add_secs(Instant::now(), every));
        if self.slurm.jobs.is_empty() && self.slurm.probe.is_none() {
            return;
        }
        let q = self.cfg.queue.clone();
        let ids: Vec<String> = self.slurm.jobs.keys().cloned().collect();
        let probe = format!("probe-{q}");
        let refs: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .chain(self.slurm.probe.as_ref().map(|_| probe.as_str()))
            .collect();
        let listed = match self.squeue(&refs).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(queue = %q, "squeue: {e}");
                return;
            }
        };
        if !self.slurm.unshared {
            self.set_slurm_status(None);
        }
        self.probe_verdict(&listed);
        let mut release = Vec::new();
        let mut over = Vec::new();
        let mut ended = Vec::new();
        let mut changed = false;
        let now = Instant::now();
        for id in ids {
            let running_file = self.store.job_path(&q, JobStatus::Running, &id).is_file();
            let Some(t) = self.slurm.jobs.get_mut(&id) else {
                continue;
            };
            if !running_file {
                // The worker wrote its end (or the file was taken away).
                changed = true;
                ended.push((id, None));
                continue;
            }
            let me = listed
                .iter()
                .find(|j| j.id == t.slurm_id && j.name == format!("{JOB_NAME_PREFIX}{id}"))
                .cloned()
                .unwrap_or_else(|| SlurmJob {
                    id: t.slurm_id.clone(),
                    name: format!("{JOB_NAME_PREFIX}{id}"),
                    state: "UNKNOWN".to_string(),
                    reason: if is_slurm_job_id(&t.slurm_id) {
                        format!("no longer listed by squeue as {JOB_NAME_PREFIX}{id}")
                    } else {
                        format!(
                            "its runtime.slurm_job_id {:?} is not a Slurm job id",
                            t.slurm_id
                        )
                    },
                    elapsed: 0,
                });
            // Our own hold (sbatch --hold: JobHeldUser), never an administrator's.
            if me.state == "PENDING" && me.reason == "JobHeldUser" {
                release.push(me.id.clone());
            }
            changed |= t.state != me.state;
            t.state = me.state.clone();
            if !is_terminal(&me.state) {
                t.ended_at = None;
                if me.state == "RUNNING" && t.end.is_none() && me.elapsed >= t.limit {
                    over.push(id);
                }
                continue;
            }
            match t.ended_at {
                None => t.ended_at = Some(now),
                Some(at) if now.duration_since(at) >= SETTLE_GRACE => ended.push((id, Some(me))),
                Some(_) => {}
            }
        }
        if self.slurm.jobs.values().any(|t| t.ended_at.is_some()) {
            let soon = add_secs(Instant::now(), SETTLE_GRACE.as_secs());
            self.slurm.poll_at = self.slurm.poll_at.map(|at| at.min(soon));
        }
        if changed {
            let soon = Instant::now() + BUSY_POLL;
            self.slurm.poll_at = self.slurm.poll_at.map(|at| at.min(soon));
        }
        self.slurm_release(&release).await;
        for id in over {
            tracing::warn!(job_id = %id, queue = %q, "job timed out; scancel");
            if let Err(e) = self.slurm_cancel(&id, EndCause::Timeout).await {
                tracing::warn!(job_id = %id, queue = %q, "{e}");
            }
        }
        for (id, slurm_job) in ended {
            let Some(t) = self.slurm.jobs.remove(&id) else {
                continue;
            };
            match slurm_job {
                None => self.settle(&id, None).await,
                Some(j) => self.slurm_settle(&id, t, j).await,
            }
        }
    }

    /// Fails a job Slurm ended whose worker wrote no result.
    async fn slurm_settle(&mut self, id: &str, t: Tracked, j: SlurmJob) {
        let q = self.cfg.queue.clone();
        let path = self.store.job_path(&q, JobStatus::Running, id);
        let exit = if t.end.is_none() && matches!(j.state.as_str(), "COMPLETED" | "FAILED") {
            self.slurm_exit_code(&j.id).await
        } else {
            None
        };
        let error = end_error(&j, t.limit, t.end.as_ref(), exit.as_deref());
        let Ok(bytes) = read_limited(&path) else {
            return self.settle(id, None).await;
        };
        self.fail_running(id, &path, &bytes, error).await;
    }

    /// Slurm's `ExitCode=` of an ended job (`scontrol show job`), when it still knows it.
    async fn slurm_exit_code(&mut self, sid: &str) -> Option<String> {
        let out = self
            .slurm_run(
                "scontrol",
                &["show".into(), "job".into(), "--oneliner".into(), sid.into()],
            )
            .await
            .ok()?;
        out.split_whitespace()
            .find_map(|f| f.strip_prefix("ExitCode="))
            .map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_and_limits() {
        assert_eq!(time_minutes(55), 1);
        assert_eq!(time_minutes(56), 2);
        assert_eq!(time_minutes(3600), 61);
        assert_eq!(parse_elapsed("0:07"), Some(7));
        assert_eq!(parse_elapsed("1:02:03"), Some(3723));
        assert_eq!(parse_elapsed("2-00:00:01"), Some(172_801));
        assert_eq!(parse_elapsed("x"), None);
        assert_eq!(mem_arg(&serde_json::json!(1)), Some("1M".into()));
        assert_eq!(mem_arg(&serde_json::json!("3145728")), Some("3M".into()));
        assert_eq!(mem_arg(&serde_json::json!("4G")), Some("4G".into()));
        assert_eq!(cpus_arg("250%"), Some(3));
        assert_eq!(cpus_arg("abc"), None);
    }

    #[test]
    fn extra_args_never_raise_priority() {
        let refused = |a: &str| bad_extra_arg(0, a);
        for a in [
            "--priority=TOP",
            "--priority=100",
            "--nice=-10000",
            "--nice=-1",
            "--nice=-0",
            "--nice=",
            "--nice=1e9",
            "--nice=1234567890",
            "--uid=0",
            "--gid=0",
            "--chdir=/root",
            "--output=/etc/x",
        ] {
            assert!(refused(a).is_some(), "{a}");
        }
        assert!(refused("--nice=-5").unwrap().contains("0 or more"));
        for a in [
            "--nice",
            "--nice=0",
            "--nice=+5",
            "--nice=100",
            "--constraint=x",
        ] {
            assert_eq!(refused(a), None, "{a}");
        }
    }

    #[test]
    fn sbatch_line() {
        let cfg = SlurmConfig {
            partition: Some("debug".into()),
            extra_args: vec!["--constraint=x".into()],
            ..SlurmConfig::default()
        };
        let limits = ResourceLimits {
            memory_max: Some(serde_json::json!("2G")),
            cpu_quota: Some("200%".into()),
            tasks_max: None,
        };
        let a = sbatch_args(
            &cfg,
            "j1",
            60,
            Some(&limits),
            Path::new("/s/logs/o.out"),
            Path::new("/s/Queues/q/Jobs/running_jobs/j1.json"),
            &["/bin/agent-worker".into(), "it's".into()],
        );
        assert!(!a.iter().any(|x| x == "--hold"), "{a:?}");
        assert_eq!(a[0], "--constraint=x");
        for want in [
            "--job-name=agentstore-j1",
            "--time=2",
            "--partition=debug",
            "--mem=2G",
            "--cpus-per-task=2",
            "--output=/s/logs/o.out",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        let wrap = a.last().unwrap();
        assert!(
            wrap.ends_with(r"; exec '/bin/agent-worker' 'it'\''s'")
                && wrap.contains("'/s/Queues/q/Jobs/running_jobs/j1.json'"),
            "{wrap}"
        );
    }

    #[test]
    fn partition_limits() {
        let out = "big*|infinite|64|512000+\nshort|2:00|2|1000\nshort|2:00|4+|800\nbad\n";
        let short = parse_sinfo(out, Some("short")).unwrap();
        assert_eq!(short.max_time, Some(120));
        assert_eq!((short.cpus, short.mem_mib), (Some(4), Some(1000)));
        let big = parse_sinfo(out, None).unwrap();
        assert_eq!((big.name.as_str(), big.max_time), ("big", None));
        assert_eq!(parse_sinfo(out, Some("nosuch")), None);
        assert_eq!(beyond_partition(&short, 115, None), None);
        assert!(
            beyond_partition(&short, 116, None)
                .unwrap()
                .contains("--time=3")
        );
        let rl = |cpu: &str, mem: serde_json::Value| ResourceLimits {
            memory_max: Some(mem),
            cpu_quota: Some(cpu.into()),
            tasks_max: None,
        };
        assert_eq!(
            beyond_partition(&short, 60, Some(&rl("400%", json!("1000M")))),
            None
        );
        assert!(
            beyond_partition(&short, 60, Some(&rl("500%", json!(1))))
                .unwrap()
                .contains("--cpus-per-task=5")
        );
        assert!(
            beyond_partition(&short, 60, Some(&rl("100%", json!("1G"))))
                .unwrap()
                .contains("--mem=1024M")
        );
        assert_eq!(mem_mib(&json!("3K")), Some(1));
        assert_eq!(mem_mib(&json!(2_097_152)), Some(2));
    }

    #[test]
    fn slurm_job_ids_are_checked() {
        for ok in ["1", "123", "123_4"] {
            assert!(is_slurm_job_id(ok), "{ok}");
        }
        for bad in [
            "",
            "--user=root",
            "1 2",
            "1;c",
            "_1",
            "1_",
            "-1",
            "1,2",
            "12a",
        ] {
            assert!(!is_slurm_job_id(bad), "{bad}");
        }
    }

    #[test]
    fn states_and_errors() {
        let l = parse_squeue("12|agentstore-a|TIMEOUT|TimeLimit|1:05\nbad line\n");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].elapsed, 65);
        assert!(is_terminal("TIMEOUT") && !is_terminal("PENDING"));
        assert_eq!(
            end_error(&l[0], 30, None, None),
            "Job timeout after 65s (limit: 30s)"
        );
        let nf = SlurmJob {
            state: "NODE_FAIL".into(),
            reason: "NodeDown".into(),
            ..l[0].clone()
        };
        assert!(end_error(&nf, 30, None, None).contains("NODE_FAIL (reason: NodeDown)"));
        let c = end_error(&nf, 30, Some(&EndCause::Cancelled("alice".into())), None);
        assert_eq!(c, "Job cancelled by alice");
        assert!(
            classify("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)")
                .is_transient()
        );
        // The queue's own settings refused: every job would be, so they stay queued.
        let p = classify("sbatch: error: invalid partition specified: nosuch");
        assert!(
            matches!(p, SlurmError::Settings(_)) && p.is_transient(),
            "{p:?}"
        );
        let a = classify(
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
        );
        assert!(matches!(a, SlurmError::Settings(_)), "{a:?}");
        // A refusal of one job fails that job.
        assert!(
            !classify("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)")
                .is_transient()
        );
    }
}
