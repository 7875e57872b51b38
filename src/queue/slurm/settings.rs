//! Slurm settings: their checks, and the parsers and builders of the Slurm commands'
//! lines (`sbatch`, `squeue`, `sinfo`).

use crate::model::{ResourceLimits, SlurmConfig};
use crate::queue::KILL_GRACE;
use std::path::Path;
use std::time::Duration;

/// Seconds between two polls when `slurm.poll_seconds` is absent.
pub const DEFAULT_POLL_SECONDS: u64 = 5;

/// Jobs handed to Slurm in one pass at most (the loop stays responsive during a burst).
pub(super) const SUBMIT_BATCH: usize = 64;

/// How long a Slurm command may take before it counts as the controller not answering.
pub(super) const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an ended Slurm job's file may stay in `running_jobs/` before the job is failed
/// from Slurm's record (the worker's last write may take a moment to show on a shared
/// filesystem).
pub(super) const SETTLE_GRACE: Duration = Duration::from_secs(3);

/// How long the partition's limits read by `sinfo` are used before they are read again.
pub(super) const PARTITION_TTL: Duration = Duration::from_secs(60);

/// `sbatch` commands run at once during a pass (each waits on the controller's answer).
pub(super) const SBATCH_PARALLEL: usize = 8;

/// How long a batch step waits for the manager to record its Slurm job on the job's file
/// before it gives up without running the worker (its job is then submitted again).
pub const GATE_SECONDS: u64 = 300;

/// A pass that saw a job change state is followed by another this soon (the state changes of
/// a burst come close together); a quiet queue is looked at every `poll_seconds`.
pub(super) const BUSY_POLL: Duration = Duration::from_secs(1);

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
pub(super) const MAX_EXTRA_ARGS: usize = 64;

/// Longest value of one Slurm setting (a partition, account, QOS, gres or extra argument).
pub(super) const MAX_SETTING_CHARS: usize = 256;

/// Why `v` (the value of `field`) is not a Slurm name made of ASCII letters, digits and
/// `extra` characters.
pub(super) fn bad_name(field: &str, v: &str, extra: &str) -> Option<String> {
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
pub(super) fn non_negative(v: &str) -> bool {
    let digits = v.strip_prefix('+').unwrap_or(v);
    !digits.is_empty() && digits.len() <= 9 && digits.chars().all(|c| c.is_ascii_digit())
}

/// Why one of `extra_args` (number `i`) is not passed to sbatch.
pub(super) fn bad_extra_arg(i: usize, a: &str) -> Option<String> {
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
pub(super) async fn run(
    prog: &str,
    args: &[String],
    env: &[(String, String)],
) -> Result<String, SlurmError> {
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    run_command(prog, cmd, None).await
}

/// Runs a Slurm command made by the caller (`input`: its standard input), with the same
/// timeout and the same reading of its answer as [`run`].
pub(super) async fn run_command(
    prog: &str,
    mut cmd: tokio::process::Command,
    input: Option<Vec<u8>>,
) -> Result<String, SlurmError> {
    cmd.stdin(if input.is_some() {
        std::process::Stdio::piped()
    } else {
        std::process::Stdio::null()
    })
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .env_remove("NOTIFY_SOCKET")
    .env_remove("LISTEN_FDS")
    .env_remove("LISTEN_PID")
    .kill_on_drop(true);
    let output = async {
        let mut child = cmd.spawn()?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // A command that exits without reading it all answers for itself below.
            let _ = stdin.write_all(&input).await;
        }
        child.wait_with_output().await
    };
    let out = match tokio::time::timeout(COMMAND_TIMEOUT, output).await {
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
pub(super) fn shell_quote(s: &str) -> String {
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
pub(super) fn mem_arg(v: &serde_json::Value) -> Option<String> {
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
pub(super) fn mem_mib(v: &serde_json::Value) -> Option<u64> {
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
pub(super) fn cpus_arg(quota: &str) -> Option<u64> {
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
