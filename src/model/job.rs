use super::Timestamp;
use super::flow::RetryPolicy;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `Queues/<q>/Jobs/<state>_jobs/<id>.json` (PRD §4.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Schema version of the document (extension; absent means v0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// Job id (extension; the file stem is authoritative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What to run.
    pub config: JobConfig,
    /// What happened.
    pub runtime: JobRuntime,
}

/// Job settings, written once by whoever queued it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Project id.
    pub project: String,
    /// cwd of the agent.
    pub working_directory: String,
    /// When the job was queued.
    pub queue_time: Timestamp,
    /// Runner kind.
    pub jobtype: JobType,
    /// Claude slash command (`~/.claude/commands/<name>.md`).
    pub claude_command: String,
    /// Extra CLI arguments for this job.
    pub claude_extra_args: Vec<String>,
    /// The prompt.
    pub task_description: String,
    /// Context handed to the agent; free-form.
    pub supporting_data: Map<String, Value>,
    /// Timeout; `null` uses the queue's `max_job_runtime_seconds`.
    pub timeout_seconds: Option<u64>,
    /// Queue name (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Orchestrator command that made the job (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// PRD this job works on (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prd: Option<String>,
    /// Inbox message that made the job (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// User who asked for the job (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Model for `jobtype: agent` (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Start order within the queue, higher first (extension; absent means normal, 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Jobs that must end before this one starts (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
    /// Start once the `after` jobs ended, failed or not (extension; default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_any: Option<bool>,
    /// Retry policy of this job, replacing the queue's (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Which attempt this is, 1 for the first (extension; absent means 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The job this one retries (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// Not started before this time (extension; a retry's back-off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
}

impl JobConfig {
    /// The settings the PRD requires, queued now: no extra args, no supporting data, the
    /// queue's timeout, and none of the extensions (set them by struct update).
    pub fn new(
        project: impl Into<String>,
        working_directory: impl Into<String>,
        jobtype: JobType,
        claude_command: impl Into<String>,
        task_description: impl Into<String>,
    ) -> JobConfig {
        JobConfig {
            project: project.into(),
            working_directory: working_directory.into(),
            queue_time: Timestamp::now(),
            jobtype,
            claude_command: claude_command.into(),
            claude_extra_args: Vec::new(),
            task_description: task_description.into(),
            supporting_data: Map::new(),
            timeout_seconds: None,
            queue: None,
            command: None,
            prd: None,
            correlation_id: None,
            user: None,
            model: None,
            priority: None,
            after: None,
            after_any: None,
            retry: None,
            attempt: None,
            retry_of: None,
            not_before: None,
        }
    }
}

/// Job kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    /// `claude -p`.
    Claude,
    /// Does nothing (PRD M3/M4).
    Noop,
    /// The built-in agent (`agentshell exec`).
    Agent,
    /// The Codex CLI (`codex exec --json`, extension, issue 35).
    Codex,
    /// `venvman create` for the project (`create-environment`), run by the job on the
    /// compute host as the job's user; its options are `supporting_data.venvman`.
    Venvman,
}

/// Job state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRuntime {
    /// State; matches the folder.
    pub status: JobStatus,
    /// When the worker started.
    pub start_time: Option<Timestamp>,
    /// When it ended.
    pub finish_time: Option<Timestamp>,
    /// Worker PID.
    pub process_id: Option<u32>,
    /// Agent CLI PID.
    pub llm_process_id: Option<u32>,
    /// Why it failed (or a truncation note).
    pub error: Option<String>,
    /// Captured output (≤ 10 MB).
    pub output: Option<String>,
    /// Agent exit code (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Cost reported by the agent (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Tokens the agent used, one shape for every agent (extension, issue 35).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::TokenUsage>,
    /// Turns reported by the agent (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<u64>,
    /// Agent session id (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Host that ran the job (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// systemd unit of the job (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Slurm job id of the job, for a Slurm queue (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
    /// Set once the orchestrator's completion handler has run (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled: Option<bool>,
    /// Approval decisions while the job ran: who, when, what (extension).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<super::approval::ApprovalRecord>,
    /// The commit a task job made on its branch (extension, issue 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Where a task job worked: its worktree and branch, or why the single tree (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// Where a task job's branch was pushed (the project's `push_remote`), or why the push
    /// failed; the commit stays on the local branch either way (extension, issue 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<String>,
    /// The kernel confinement the agent ran under, and what it allowed (extension, issue 28);
    /// absent: the queue does not sandbox its jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// What the sandbox refused the job, as its socket supervisor saw it: a UDP or other
    /// socket, a connect to a port or Unix socket it may not reach (extension, issue 28);
    /// the files and ports Landlock refused, where the kernel's audit is on and readable
    /// (`sandbox` says whether they are listed); steering files it made, moved aside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandbox_refused: Vec<String>,
    /// What the job was meant to have and did not get, said where the user looks (view-job,
    /// the dashboard): a Slurm job the queue manager could not hand its job keys to
    /// (extension, issue 35). Never a secret's value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Job {
    /// Whether `later` (a copy of this job's id in a later state) is this job, moved on: it
    /// was queued at the same time for the same project and command, with what starting adds
    /// (a pipeline step's filled-in prompt: more text, `prd`/`pipeline` data) and nothing
    /// else changed. A DIFFERENT job that happens to carry the same id is not. Two copies
    /// made from one inbox message (its correlation id; two machines that both answered it
    /// while the sync engine kept their locks apart) are the same job though each has its
    /// maker's queue time.
    pub fn is_same_job_as(&self, later: &Job) -> bool {
        let (a, b) = (&self.config, &later.config);
        let one_message = a.correlation_id.is_some() && a.correlation_id == b.correlation_id;
        (a.queue_time == b.queue_time || one_message)
            && a.project == b.project
            && a.jobtype == b.jobtype
            && a.claude_command == b.claude_command
            && b.task_description.starts_with(&a.task_description)
            && a.supporting_data
                .iter()
                .all(|(k, v)| k == "pipeline" || b.supporting_data.get(k) == Some(v))
    }

    /// The useful text of the job's output: see [`result_text`].
    pub fn result_text(&self) -> String {
        result_text(self.runtime.output.as_deref().unwrap_or(""))
    }
}

impl JobRuntime {
    /// A fresh runtime for a queued job.
    pub fn queued() -> JobRuntime {
        JobRuntime {
            status: JobStatus::Queued,
            start_time: None,
            finish_time: None,
            process_id: None,
            llm_process_id: None,
            error: None,
            output: None,
            exit_code: None,
            cost_usd: None,
            usage: None,
            num_turns: None,
            session_id: None,
            host: None,
            unit: None,
            slurm_job_id: None,
            handled: None,
            approvals: Vec::new(),
            sandbox: None,
            commit: None,
            worktree: None,
            push: None,
            sandbox_refused: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// Key of `supporting_data` naming the file a `research-code` job writes its result to
/// (the project's `code_research_document`, put there by the orchestrator).
pub const RESEARCH_DOCUMENT_KEY: &str = "code_research_document";

/// Key of `supporting_data` holding a `venvman` job's options (`python`, `install_deps`,
/// `force`).
pub const VENVMAN_KEY: &str = "venvman";

/// The useful text of a job's output: the `result` of Claude Code's (or agentshell's) JSON,
/// the last `agent_message` of Codex's JSONL events, else the output itself.
pub fn result_text(output: &str) -> String {
    // The JSON values from the start: stdout comes first, stderr may follow it
    // (worker::STDERR_MARKER), where the stream of values ends.
    let mut values = serde_json::Deserializer::from_str(output)
        .into_iter::<Value>()
        .map_while(Result::ok);
    let Some(first) = values.next() else {
        return output.to_string();
    };
    if let Some(r) = first.get("result").and_then(Value::as_str) {
        return r.to_string();
    }
    if first.get("type").and_then(Value::as_str) == Some("thread.started") {
        let last = values
            .filter(|v| v.get("type").and_then(Value::as_str) == Some("item.completed"))
            .filter_map(|v| {
                let item = v.get("item")?;
                (item.get("type").and_then(Value::as_str) == Some("agent_message"))
                    .then(|| item.get("text").and_then(Value::as_str).map(str::to_string))?
            })
            .last();
        if let Some(text) = last {
            return text;
        }
    }
    output.to_string()
}

/// Job state, one folder each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// `queued_jobs/`
    Queued,
    /// `running_jobs/`
    Running,
    /// `finished_jobs/`
    Finished,
    /// `failed_jobs/`
    Failed,
}

impl JobStatus {
    /// All states.
    pub const ALL: [JobStatus; 4] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Finished,
        JobStatus::Failed,
    ];

    /// Folder name.
    pub fn dir(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued_jobs",
            JobStatus::Running => "running_jobs",
            JobStatus::Finished => "finished_jobs",
            JobStatus::Failed => "failed_jobs",
        }
    }

    /// JSON name.
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Finished => "finished",
            JobStatus::Failed => "failed",
        }
    }

    /// Parses the JSON name.
    pub fn from_name(s: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|k| k.name() == s)
    }

    /// A listing's `status` filter (`what` names it in the error: "list-jobs: content.status").
    pub fn from_filter(what: &str, s: &str) -> Result<JobStatus, String> {
        JobStatus::from_name(s)
            .ok_or_else(|| format!("{what} {s:?} is not one of queued, running, finished, failed"))
    }
}

/// Normalised names (lower case, no `-`/`_`) of agent CLI options that change what the agent
/// may do without asking: permission modes, tool allow/deny lists, extra directories, MCP
/// servers, settings files, plugins, sub-agents. Matched as substrings of the option name, so
/// spelling variants (`--allowedTools`, `--allowed-tools`, `--permission-mode=…`) are caught.
const PERMISSION_OPTION_PARTS: [&str; 11] = [
    "permission",
    "dangerous",
    "tool",
    "adddir",
    "mcp",
    "setting",
    "plugin",
    "agents",
    "sandbox",
    "bypass",
    "yolo",
];

/// The first of `args` that would widen the agent's permissions beyond the queue's own
/// `claude_default_args` (PRD §10: a job never gets more than its queue allows), if any.
pub fn permission_widening_arg(args: &[String]) -> Option<&str> {
    args.iter().map(String::as_str).find(|a| {
        let Some(opt) = a.strip_prefix('-') else {
            return false;
        };
        let name = opt.split('=').next().unwrap_or_default();
        let norm: String = name
            .chars()
            .filter(|c| !matches!(c, '-' | '_'))
            .flat_map(char::to_lowercase)
            .collect();
        PERMISSION_OPTION_PARTS.iter().any(|p| norm.contains(p))
    })
}

/// Codex options a job may add to its queue's `codex_default_args`: the model, and how the
/// JSONL looks. Everything else (`-c` sets any configuration: sandbox, approvals, the model
/// provider, the shell's environment; `-s`, `--add-dir`, `--profile`, `--cd`, `--oss`, the
/// dangerous bypasses …) could widen what the agent may do or where it sends the code.
const CODEX_JOB_OPTIONS: [&str; 4] = ["-m", "--model", "--color", "--ephemeral"];

/// [`permission_widening_arg`] for a job of `jobtype`: for Codex, any option but the few of
/// `CODEX_JOB_OPTIONS` (an allow-list: its `-c key=value` reaches every setting).
pub fn permission_widening_arg_for(jobtype: JobType, args: &[String]) -> Option<&str> {
    if jobtype != JobType::Codex {
        return permission_widening_arg(args);
    }
    let mut it = args.iter().map(String::as_str);
    while let Some(a) = it.next() {
        if !a.starts_with('-') {
            continue;
        }
        let name = a.split('=').next().unwrap_or_default();
        if !CODEX_JOB_OPTIONS.contains(&name) {
            return Some(a);
        }
        if !a.contains('=') && matches!(name, "-m" | "--model" | "--color") {
            it.next();
        }
    }
    None
}

/// `agent-worker`'s exit status when it failed because the store was full (ENOSPC,
/// EDQUOT): the queue manager then records the disk error as the job's, even if there is
/// room again by the time it looks (any other failure exits 2).
pub const WORKER_EXIT_STORE_FULL: u8 = 3;

#[cfg(test)]
mod tests {
    use super::permission_widening_arg;

    #[test]
    fn the_result_of_codex_events_is_the_last_agent_message() {
        let out = concat!(
            r#"{"type":"thread.started","thread_id":"t1"}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"i0","type":"agent_message","text":"first"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"ls"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"Findings: none"}}"#,
            "\n",
            r#"{"type":"turn.completed","usage":{"input_tokens":9,"output_tokens":2}}"#,
            "\n",
            "\n--- stderr ---\nReading additional input from stdin...",
        );
        assert_eq!(super::result_text(out), "Findings: none");
        let claude = r#"{"type":"result","result":"hi"}"#;
        assert_eq!(super::result_text(claude), "hi");
        assert_eq!(super::result_text("plain"), "plain");
        let silent = r#"{"type":"thread.started","thread_id":"t1"}"#;
        assert_eq!(super::result_text(silent), silent);
    }

    #[test]
    fn codex_jobs_may_only_choose_the_model() {
        use super::{JobType, permission_widening_arg_for as w};
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for bad in [
            &["-c", "sandbox_mode=\"danger-full-access\""][..],
            &["--config=model_provider=\"x\""],
            &["-m", "gpt-5", "-s", "danger-full-access"],
            &["--dangerously-bypass-approvals-and-sandbox"],
            &["--add-dir", "/"],
            &["-p", "work"],
            &["-C", "/"],
            &["--oss"],
        ] {
            assert!(w(JobType::Codex, &v(bad)).is_some(), "{bad:?}");
        }
        for ok in [
            &["-m", "-c"][..],
            &["--model=gpt-5", "--ephemeral"],
            &["--color", "never"],
            &[],
        ] {
            assert_eq!(w(JobType::Codex, &v(ok)), None, "{ok:?}");
        }
        assert_eq!(w(JobType::Claude, &v(&["-c", "x"])), None);
    }

    #[test]
    fn widening_args_are_found_in_any_spelling() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for bad in [
            &["--dangerously-skip-permissions"][..],
            &["--model", "m", "--permission-mode", "bypassPermissions"],
            &["--permission-mode=bypassPermissions"],
            &["--allowedTools", "Bash"],
            &["--allowed-tools=Bash(*)"],
            &["--disallowedTools", "x"],
            &["--add-dir", "/"],
            &["--mcp-config", "x.json"],
            &["--settings", "{}"],
            &["--DANGEROUSLY_SKIP_PERMISSIONS"],
        ] {
            assert!(permission_widening_arg(&v(bad)).is_some(), "{bad:?}");
        }
        for ok in [
            &["--model", "m1"][..],
            &["--verbose", "--max-turns", "3"],
            &["a positional prompt mentioning tools"],
            &[],
        ] {
            assert_eq!(permission_widening_arg(&v(ok)), None, "{ok:?}");
        }
    }

    /// Two copies of one inbox message's job, made by two machines a few seconds apart (a
    /// sync engine kept their locks apart): the same job; a job that merely reuses the id
    /// is not, nor one from another message.
    #[test]
    fn copies_made_from_one_message_are_one_job() {
        let job = |at: &str, corr: Option<&str>, task: &str| -> super::Job {
            serde_json::from_value(serde_json::json!({
                "config": {
                    "project": "p", "working_directory": "/w", "queue_time": at,
                    "jobtype": "noop", "claude_command": "c", "claude_extra_args": [],
                    "task_description": task, "supporting_data": {}, "queue": "oak",
                    "correlation_id": corr
                },
                "runtime": {"status": "queued"}
            }))
            .unwrap()
        };
        let a = job("2026-12-02T21:19:36Z", Some("m-1"), "soak");
        assert!(a.is_same_job_as(&job("2026-12-02T21:19:39Z", Some("m-1"), "soak")));
        assert!(!a.is_same_job_as(&job("2026-12-02T21:19:39Z", Some("m-2"), "soak")));
        assert!(!a.is_same_job_as(&job("2026-12-02T21:19:39Z", None, "soak")));
        assert!(!a.is_same_job_as(&job("2026-12-02T21:19:39Z", Some("m-1"), "other")));
        let anon = job("2026-12-02T21:19:36Z", None, "soak");
        assert!(anon.is_same_job_as(&job("2026-12-02T21:19:36Z", None, "soak")));
        assert!(!anon.is_same_job_as(&job("2026-12-02T21:19:39Z", None, "soak")));
    }
}
