//! Store administration: init, validate, add-user, add-project, add-queue.

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, LauncherArg, PermissionArg, open_store};
use crate::model::approval::{ApprovalRule, Decision, MAX_DEADLINE_SECONDS};
use crate::model::{DocKind, Project, QueueConfig, ResourceLimits, Timestamp, User};
use crate::schema::FieldError;
use crate::store::{Store, is_conflict_copy, is_ignored, read_limited, resolve_root};
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

pub(super) fn init(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let (root, _) = resolve_root(g.root.as_deref());
    let (store, created) = Store::init(&root)?;
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({
                "root": store.root(),
                "created": created,
                "queues_default": store.config().queues_default,
            }),
        )?,
        Format::Text => {
            if created.is_empty() {
                writeln!(
                    out,
                    "AgentStore at {} is already complete",
                    store.root().display()
                )?;
            } else {
                writeln!(out, "Initialised AgentStore at {}", store.root().display())?;
                for p in &created {
                    writeln!(out, "  created {}", store.relative(p).display())?;
                }
            }
        }
    }
    Ok(())
}

/// The schema a store file follows, from where it is.
pub fn kind_for_path(path: &Path) -> Option<DocKind> {
    let name = path.file_name()?.to_str()?;
    let parent = path.parent()?.file_name()?.to_str()?;
    if name == "queue.json" {
        return Some(DocKind::Queue);
    }
    if name == "project.json" {
        return Some(DocKind::Project);
    }
    if name.ends_with(".schema.json") {
        return None;
    }
    match parent {
        "users" => Some(DocKind::User),
        "inbox" | "outbox" | "processed_inbox" | "processed_outbox" => Some(DocKind::Message),
        p if p.ends_with("_prds") => Some(DocKind::Prd),
        p if p.ends_with("_jobs") => Some(DocKind::Job),
        _ => None,
    }
}

#[derive(Debug, Serialize)]
struct Failure {
    path: PathBuf,
    kind: Option<String>,
    errors: Vec<FailureField>,
}

#[derive(Debug, Serialize)]
struct FailureField {
    pointer: String,
    message: String,
}

impl From<&FieldError> for FailureField {
    fn from(e: &FieldError) -> Self {
        FailureField {
            pointer: e.pointer.clone(),
            message: e.message.clone(),
        }
    }
}

fn collect(path: &Path, forced: bool, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            collect(&e.path(), false, files)?;
        }
    } else if forced || !is_ignored(&path.file_name().unwrap_or_default().to_string_lossy()) {
        files.push(path.to_path_buf());
    }
    Ok(())
}

pub(super) fn validate(
    g: &GlobalArgs,
    out: &mut dyn Write,
    paths: &[PathBuf],
    kind: Option<&str>,
) -> CliResult {
    let forced = match kind {
        None => None,
        Some(k) => Some(DocKind::from_name(k).ok_or_else(|| {
            CliError::new(format!(
                "unknown kind {k:?}: expected one of user, message, project, prd, queue, job"
            ))
        })?),
    };
    let store = open_store(g)?;
    let mut files = Vec::new();
    let roots: Vec<PathBuf> = if paths.is_empty() {
        vec![store.root().to_path_buf()]
    } else {
        paths.to_vec()
    };
    for p in &roots {
        if !p.exists() {
            return Err(CliError::new(format!(
                "{}: no such file or folder",
                p.display()
            )));
        }
        collect(p, p.is_file(), &mut files)
            .map_err(|e| CliError::new(format!("{}: {e}", p.display())))?;
    }
    let mut failures = Vec::new();
    let mut checked = 0usize;
    let mut skipped = 0usize;
    for f in &files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if is_conflict_copy(&name) {
            failures.push(Failure {
                path: f.clone(),
                kind: None,
                errors: vec![FailureField {
                    pointer: String::new(),
                    message: format!(
                        "{}: resolve it with `orchestrator conflicts resolve`",
                        crate::store::conflicts::conflict_label(&name)
                    ),
                }],
            });
            continue;
        }
        let Some(kind) = forced.or_else(|| kind_for_path(f)) else {
            if paths.iter().any(|p| p == f) {
                return Err(CliError::new(format!(
                    "{}: cannot tell which schema applies from where the file is; pass --kind",
                    f.display()
                )));
            }
            skipped += 1;
            continue;
        };
        checked += 1;
        let bytes = read_limited(f)?;
        if let Err(rej) = store.validator().validate_bytes(kind, &bytes) {
            store.log_rejection(f, &bytes, &rej);
            failures.push(Failure {
                path: f.clone(),
                kind: Some(kind.name().into()),
                errors: rej.errors.iter().map(Into::into).collect(),
            });
        }
    }
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({"checked": checked, "skipped": skipped, "invalid": failures}),
        )?,
        Format::Text => {
            for f in &failures {
                for e in &f.errors {
                    let at = if e.pointer.is_empty() {
                        "/"
                    } else {
                        &e.pointer
                    };
                    writeln!(out, "{}: {}: {}", f.path.display(), at, e.message)?;
                }
            }
            writeln!(
                out,
                "{checked} document(s) checked, {} invalid{}",
                failures.len(),
                if skipped > 0 {
                    format!(", {skipped} other file(s) skipped")
                } else {
                    String::new()
                }
            )?;
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError {
            message: String::new(),
            code: 1,
        })
    }
}

/// `add-user` options.
#[derive(Debug, Args)]
pub struct AddUserArgs {
    /// User id (letters, digits, '.', '_', '-').
    pub id: String,
    /// Display name.
    #[arg(long)]
    pub name: String,
    /// E-mail address.
    #[arg(long)]
    pub email: String,
    /// Permission level.
    #[arg(long, value_enum, default_value = "user")]
    pub permissions: PermissionArg,
    /// Slack handle.
    #[arg(long)]
    pub slack_username: Option<String>,
    /// Unix account this user's jobs run as (default: the id).
    #[arg(long)]
    pub unix_user: Option<String>,
}

pub(super) fn add_user(g: &GlobalArgs, out: &mut dyn Write, a: AddUserArgs) -> CliResult {
    let store = open_store(g)?;
    let user = User {
        id: a.id,
        slack_username: a.slack_username,
        name: a.name,
        email: a.email,
        permissions: a.permissions.into(),
        unix_user: a.unix_user,
        notify: None,
    };
    let path = store.add_user(&user)?;
    created(g, out, &store, &path, &user)
}

/// `add-project` options.
#[derive(Debug, Args)]
pub struct AddProjectArgs {
    /// Project id.
    pub id: String,
    /// The project's working directory (jobs run there).
    #[arg(long)]
    pub directory: PathBuf,
    /// Owning user id (default: the logged-in user).
    #[arg(long)]
    pub owner: Option<String>,
    /// Default queue for its jobs (default: `queues_default` of config.yaml).
    #[arg(long = "default-queue")]
    pub default_queue: Option<String>,
    /// Git remote URL.
    #[arg(long)]
    pub git_repository: Option<String>,
    /// Description.
    #[arg(long)]
    pub description: Option<String>,
    /// Collaborator user ids.
    #[arg(long = "collaborator")]
    pub collaborators: Vec<String>,
    /// File research-code writes (default: <directory>/CODE_RESEARCH.md).
    #[arg(long)]
    pub code_research_document: Option<PathBuf>,
}

pub(super) fn add_project(g: &GlobalArgs, out: &mut dyn Write, a: AddProjectArgs) -> CliResult {
    let store = open_store(g)?;
    let owner = match a.owner {
        Some(o) => o,
        None => super::Session::load()
            .map_err(CliError::new)?
            .username
            .ok_or_else(|| {
                CliError::new(
                    "no --owner given and nobody is logged in (orchestrator login <user>)",
                )
            })?,
    };
    store.user(&owner)?;
    for c in &a.collaborators {
        store.user(c)?;
    }
    let queue = a
        .default_queue
        .unwrap_or_else(|| store.config().queues_default.clone());
    store.queue(&queue)?;
    let directory = std::path::absolute(&a.directory)?;
    let now = Timestamp::now();
    let project = Project {
        id: a.id,
        code_research_document: Some(
            a.code_research_document
                .map(|p| std::path::absolute(p).unwrap_or_default())
                .unwrap_or_else(|| directory.join("CODE_RESEARCH.md"))
                .display()
                .to_string(),
        ),
        directory: directory.display().to_string(),
        git_repository: a.git_repository,
        create_time: now,
        update_time: now,
        description: a.description,
        owner,
        collaborators: a.collaborators,
        default_queue: queue,
        check_command: None,
        push_remote: None,
    };
    let path = store.add_project(&project)?;
    warn_missing_directory(&project.id, &directory);
    created(g, out, &store, &path, &project)
}

/// Warns (stderr) when a project's folder is not on this machine: its jobs would fail
/// "Working directory does not exist" on a compute host that lacks it too. A warning, not a
/// refusal: the folder may live only on the machines that run the jobs.
pub(super) fn warn_missing_directory(project: &str, dir: &Path) {
    if !dir.is_dir() {
        super::render::warning(&format!(
            "{} does not exist on this machine ({}); jobs of project {project} fail \
             \"Working directory does not exist\" on any machine without it: create it \
             (`mkdir -p {}`) or change it (`orchestrator edit-project {project} --directory DIR`)",
            dir.display(),
            crate::store::identity::display_hostname(),
            dir.display()
        ));
    }
}

/// The queue settings `add-queue` and `set-queue` take: every field of the queue's
/// `config` (PRD §4.5 and the extensions). `add-queue` fills what is not given from the
/// defaults; `set-queue` changes only what is given.
#[derive(Debug, Args, Clone, Default)]
pub struct QueueFields {
    /// Maximum simultaneous jobs (default 2).
    #[arg(long)]
    pub worker_count: Option<u32>,
    /// Command that runs Claude Code (default `claude`).
    #[arg(long)]
    pub claude_cli_path: Option<String>,
    /// Seconds between backstop sweeps (default 60).
    #[arg(long)]
    pub rest_interval: Option<u64>,
    /// Default job timeout in seconds (default 3600).
    #[arg(long)]
    pub max_job_runtime_seconds: Option<u64>,
    /// Arguments given to every Claude job; repeat it, once per argument, to replace the
    /// whole list (e.g. --claude-default-arg=-p --claude-default-arg=--permission-mode
    /// --claude-default-arg=acceptEdits). Default: -p --permission-mode acceptEdits.
    #[arg(
        long = "claude-default-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub claude_default_args: Vec<String>,
    /// Give Claude jobs no default arguments at all.
    #[arg(long, conflicts_with = "claude_default_args")]
    pub no_claude_default_args: bool,
    /// How jobs are started.
    #[arg(long, value_enum)]
    pub launcher: Option<LauncherArg>,
    /// MemoryMax= for each job (e.g. 4G; "" removes it).
    #[arg(long)]
    pub memory_max: Option<String>,
    /// CPUQuota= for each job (e.g. 200%; "" removes it).
    #[arg(long)]
    pub cpu_quota: Option<String>,
    /// TasksMax= for each job (0 removes it).
    #[arg(long)]
    pub tasks_max: Option<u64>,
    /// Command that runs the built-in agent (default `agentshell`; "" restores it).
    #[arg(long)]
    pub agentshell_path: Option<String>,
    /// An approval rule, `TOOL=DECISION` or `TOOL:GLOB=DECISION` (DECISION: allow, deny or
    /// ask; TOOL a tool name such as Bash, Write, run_command, or `*`; GLOB over the command
    /// or path, `*` any text). Repeat it, first match wins; the given rules replace the
    /// queue's. E.g. --approval-rule 'Bash:git status*=allow' --approval-rule 'Write=ask'.
    #[arg(long = "approval-rule", value_name = "RULE", value_parser = parse_approval_rule)]
    pub approval_rules: Vec<ApprovalRule>,
    /// Remove every approval rule (the default decides each request).
    #[arg(long, conflicts_with = "approval_rules")]
    pub no_approval_rules: bool,
    /// What a request no rule matches gets: ask (a person answers, `orchestrator approve`),
    /// allow or deny.
    #[arg(long, value_name = "DECISION", value_parser = parse_decision)]
    pub approval_default: Option<Decision>,
    /// Seconds a request waits for a person before it is denied (1 to 86400; default 300).
    #[arg(long, value_name = "SECONDS")]
    pub approval_deadline: Option<u64>,
    /// How a PRD's integration job merges its tasks' branches: merge (plain git merge; a
    /// conflict puts the PRD in review) or agent (a conflict is handed to the job's agent in
    /// the integration worktree, taken only with no conflict marker left, the merge committed
    /// and the project's check passing).
    #[arg(long, value_enum, value_name = "HOW")]
    pub integration: Option<crate::model::IntegrationMode>,
    /// Turn approvals off for the queue (its jobs run with the agent's own permissions).
    #[arg(long, conflicts_with_all = ["approval_rules", "no_approval_rules", "approval_default", "approval_deadline"])]
    pub no_approvals: bool,
}

fn parse_decision(s: &str) -> Result<Decision, String> {
    match s.trim() {
        "allow" => Ok(Decision::Allow),
        "deny" => Ok(Decision::Deny),
        "ask" => Ok(Decision::Ask),
        other => Err(format!("{other:?} is not a decision: allow, deny or ask")),
    }
}

/// `TOOL=DECISION` or `TOOL:GLOB=DECISION` (the glob may hold `=`: the last one splits).
fn parse_approval_rule(s: &str) -> Result<ApprovalRule, String> {
    let (head, decision) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected TOOL=DECISION or TOOL:GLOB=DECISION"))?;
    let decision = parse_decision(decision)?;
    let (tool, pattern) = match head.split_once(':') {
        Some((t, p)) => (t, Some(p.to_string())),
        None => (head, None),
    };
    let tool = tool.trim();
    if tool.is_empty() {
        return Err(format!(
            "{s:?}: the tool is empty (a name such as Bash, or *)"
        ));
    }
    Ok(ApprovalRule {
        tool: tool.to_string(),
        pattern,
        decision,
    })
}

impl QueueFields {
    /// Applies the given fields to `c`.
    fn apply(self, c: &mut QueueConfig) -> Result<(), CliError> {
        if self.worker_count == Some(0) {
            return Err(CliError::new("--worker-count must be at least 1"));
        }
        if let Some(v) = self.worker_count {
            c.worker_count = v;
        }
        if let Some(v) = self.claude_cli_path {
            if v.trim().is_empty() {
                return Err(CliError::new("--claude-cli-path must not be empty"));
            }
            c.claude_cli_path = v;
        }
        if let Some(v) = self.rest_interval {
            c.rest_interval = v;
        }
        if let Some(v) = self.max_job_runtime_seconds {
            c.max_job_runtime_seconds = v;
        }
        if self.no_claude_default_args {
            c.claude_default_args.clear();
        } else if !self.claude_default_args.is_empty() {
            c.claude_default_args = self.claude_default_args;
        }
        if let Some(l) = self.launcher {
            c.launcher = Some(l);
        }
        let mut limits = c.resource_limits.clone().unwrap_or_default();
        if let Some(m) = self.memory_max {
            limits.memory_max = (!m.is_empty()).then_some(serde_json::Value::String(m));
        }
        if let Some(q) = self.cpu_quota {
            limits.cpu_quota = (!q.is_empty()).then_some(q);
        }
        if let Some(t) = self.tasks_max {
            limits.tasks_max = (t != 0).then_some(t);
        }
        c.resource_limits = (limits != ResourceLimits::default()).then_some(limits);
        if let Some(a) = self.agentshell_path {
            c.agentshell_path = (!a.is_empty()).then_some(a);
        }
        if let Some(i) = self.integration {
            c.integration = Some(i);
        }
        if self.no_approvals {
            c.approvals = None;
        } else if self.no_approval_rules
            || !self.approval_rules.is_empty()
            || self.approval_default.is_some()
            || self.approval_deadline.is_some()
        {
            let mut p = c.approvals.clone().unwrap_or_default();
            if self.no_approval_rules {
                p.rules.clear();
            } else if !self.approval_rules.is_empty() {
                p.rules = self.approval_rules;
            }
            if let Some(d) = self.approval_default {
                p.default = d;
            }
            if let Some(d) = self.approval_deadline {
                if !(1..=MAX_DEADLINE_SECONDS).contains(&d) {
                    return Err(CliError::new(format!(
                        "--approval-deadline must be 1 to {MAX_DEADLINE_SECONDS} seconds"
                    )));
                }
                p.deadline_seconds = d;
            }
            c.approvals = Some(p);
        }
        Ok(())
    }
}

/// `add-queue` options.
#[derive(Debug, Args)]
pub struct AddQueueArgs {
    /// Queue name.
    pub id: String,
    /// The settings.
    #[command(flatten)]
    pub fields: QueueFields,
}

pub(super) fn add_queue(g: &GlobalArgs, out: &mut dyn Write, a: AddQueueArgs) -> CliResult {
    let store = open_store(g)?;
    let mut config = QueueConfig::defaults(&a.id);
    a.fields.apply(&mut config)?;
    let path = store.add_queue(config)?;
    let queue = store.queue(&a.id)?;
    created(g, out, &store, &path, &queue)
}

/// `set-queue` options.
#[derive(Debug, Args)]
pub struct SetQueueArgs {
    /// Queue name.
    #[arg(add = crate::cli::complete::queue())]
    pub id: String,
    /// The settings to change.
    #[command(flatten)]
    pub fields: QueueFields,
}

/// `set-queue NAME --field …`: changes the given config fields of an existing queue; its
/// runtime (written by the queue manager) is kept. A running manager picks the change up
/// on its next pass.
pub(super) fn set_queue(g: &GlobalArgs, out: &mut dyn Write, a: SetQueueArgs) -> CliResult {
    let store = open_store(g)?;
    let mut queue = store.queue_file(&a.id)?;
    a.fields.apply(&mut queue.config)?;
    let path = store.queue_path(&a.id);
    store.write_doc(DocKind::Queue, &path, &queue)?;
    match g.format {
        Format::Json => write_json(out, &queue)?,
        Format::Text => writeln!(out, "Updated {}", store.relative(&path).display())?,
    }
    Ok(())
}

fn created(
    g: &GlobalArgs,
    out: &mut dyn Write,
    store: &Store,
    path: &Path,
    doc: &impl Serialize,
) -> CliResult {
    match g.format {
        Format::Json => write_json(out, doc)?,
        Format::Text => writeln!(out, "Created {}", store.relative(path).display())?,
    }
    Ok(())
}
