//! `orchestrator setup`: per-user mode for a new researcher, in one re-runnable command —
//! the store, the user document (and login), a project, the queue this machine serves, the
//! user config and unit drop-ins that make the daemons find the same store, and the user
//! units enabled. Never asks: what is not given is defaulted, what exists is kept.

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, Session};
use crate::model::{Permission, Project, QueueConfig, Timestamp, User};
use crate::store::{RootSource, Store, StoreError, home_dir, resolve_daemon_root};
use clap::Args;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `setup` options.
#[derive(Debug, Args, Clone)]
pub struct SetupArgs {
    /// Your user id in the store (default: your login name).
    #[arg(long)]
    pub user: Option<String>,
    /// Your full name (default: the login name).
    #[arg(long)]
    pub name: Option<String>,
    /// Your e-mail (default: login@hostname).
    #[arg(long)]
    pub email: Option<String>,
    /// A project to add (with --directory).
    #[arg(add = crate::cli::complete::project(), long, requires = "directory")]
    pub project: Option<String>,
    /// The project's folder.
    #[arg(long)]
    pub directory: Option<PathBuf>,
    /// The queue this machine serves (default: the store's default queue).
    #[arg(add = crate::cli::complete::queue(), long = "serve-queue", value_name = "QUEUE")]
    pub serve_queue: Option<String>,
    /// Also route messages on this machine (enable the orchestrator's units); default yes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub orchestrator: bool,
    /// Only write files; do not run `systemctl --user`.
    #[arg(long)]
    pub no_units: bool,
}

fn login() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "user".into())
}

fn config_home() -> Result<PathBuf, CliError> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home_dir().map(|h| h.join(".config")))
        .ok_or_else(|| CliError::new("HOME is not set"))
}

/// Writes `path` with `text` unless it already holds exactly that; returns what happened.
fn write_file(path: &Path, text: &str) -> Result<&'static str, CliError> {
    if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
        return Ok("unchanged");
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| CliError::new(format!("{}: {e}", d.display())))?;
    }
    crate::store::write_atomic(path, text.as_bytes())
        .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
    Ok("written")
}

/// `orchestrator setup`.
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, a: SetupArgs) -> CliResult {
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut step = |out: &mut dyn Write, what: &str, how: String| -> CliResult {
        if g.format == Format::Text {
            let width = super::render::terminal_width().saturating_sub(11).max(20);
            for (i, l) in super::render::wrap(&how, width).iter().enumerate() {
                let what = if i == 0 { what } else { "" };
                writeln!(out, "{what:<10} {l}")?;
            }
        }
        steps.push((what.to_string(), how));
        Ok(())
    };

    // 1. The store: the user's own, resolved as the user units resolve it (--root,
    // AGENT_STORE_ROOT, ~/.config/agentstore/config.yaml, else ~/Dropbox/AgentStore). The
    // package's /etc/agentstore/config.yaml names the system store: it is for the system
    // services, and must not turn a new user's setup into one of /var/lib/agentstore.
    let (root, source) = resolve_daemon_root(g.root.as_deref());
    // A new store's default queue is the one this machine serves (projects added later go
    // there, not to a `poplar` nobody serves); an existing store keeps its own.
    let (store, created) = Store::init_for_queue(&root, a.serve_queue.as_deref())?;
    let root = std::fs::canonicalize(store.root()).unwrap_or_else(|_| store.root().to_path_buf());
    step(
        out,
        "store",
        format!(
            "{} ({})",
            root.display(),
            if created.is_empty() {
                "already complete".to_string()
            } else {
                format!("{} folders and files created", created.len())
            }
        ),
    )?;

    // 2. The user config, so the user units and `.path` units find the same store.
    let home = home_dir().ok_or_else(|| CliError::new("HOME is not set"))?;
    let default_root = home.join("Dropbox/AgentStore");
    let is_default = crate::cli::agent::same_root(&root, &default_root);
    let cfg_path = config_home()?.join("agentstore/config.yaml");
    match (&source, is_default) {
        (RootSource::ConfigFile(p), _) if *p == cfg_path => {
            step(
                out,
                "config",
                format!("{} names the store", cfg_path.display()),
            )?;
        }
        (_, true) => step(
            out,
            "config",
            "the store is the default ~/Dropbox/AgentStore: nothing to write".into(),
        )?,
        _ => {
            if cfg_path.exists() {
                return Err(CliError::new(format!(
                    "{} exists and does not name {}: set agent_store_root: {} there (or remove it) and run setup again",
                    cfg_path.display(),
                    root.display(),
                    root.display()
                )));
            }
            let how = write_file(
                &cfg_path,
                &format!(
                    "# Written by `orchestrator setup`: where your AgentStore is (CLI and user units).\nagent_store_root: {}\n",
                    root.display()
                ),
            )?;
            step(out, "config", format!("{} {how}", cfg_path.display()))?;
        }
    }

    // 3. The user document, and login.
    let me = login();
    let user_id = a.user.clone().unwrap_or_else(|| me.clone());
    match store.user(&user_id) {
        Ok(_) => step(out, "user", format!("{user_id} exists"))?,
        Err(StoreError::NotFound { .. }) => {
            let first = store
                .users(&mut |_| {})
                .map(|u| u.is_empty())
                .unwrap_or(true);
            store.add_user(&User {
                id: user_id.clone(),
                name: a.name.clone().unwrap_or_else(|| me.clone()),
                email: a.email.clone().unwrap_or_else(|| {
                    format!("{me}@{}", crate::store::identity::display_hostname())
                }),
                permissions: if first {
                    Permission::Admin
                } else {
                    Permission::User
                },
                slack_username: None,
                unix_user: Some(me.clone()),
                notify: None,
            })?;
            step(
                out,
                "user",
                format!(
                    "{user_id} added ({}, runs jobs as {me})",
                    if first { "admin" } else { "user" }
                ),
            )?;
        }
        Err(e) => return Err(e.into()),
    }
    let mut session = Session::load().map_err(CliError::new)?;
    if session.username.as_deref() != Some(user_id.as_str()) {
        session.username = Some(user_id.clone());
        session.save().map_err(CliError::new)?;
    }

    // 4. The queue this machine serves.
    let queue = a
        .serve_queue
        .clone()
        .unwrap_or_else(|| store.config().queues_default.clone());
    if created.contains(&store.queue_path(&queue)) {
        step(
            out,
            "queue",
            format!("{queue} added (the store's default queue)"),
        )?;
    } else if store.queue_exists(&queue) {
        step(out, "queue", format!("{queue} exists"))?;
    } else {
        store.add_queue(QueueConfig::defaults(&queue))?;
        step(out, "queue", format!("{queue} added"))?;
    }

    // 5. A project.
    if let (Some(id), Some(dir)) = (&a.project, &a.directory) {
        match store.project(id) {
            Ok(p) => step(out, "project", format!("{id} exists ({})", p.directory))?,
            Err(StoreError::NotFound { .. }) => {
                let dir = std::path::absolute(dir)
                    .map_err(|e| CliError::new(format!("{}: {e}", dir.display())))?;
                let now = Timestamp::now();
                store.add_project(&Project {
                    id: id.clone(),
                    directory: dir.display().to_string(),
                    git_repository: None,
                    create_time: now,
                    update_time: now,
                    description: None,
                    owner: user_id.clone(),
                    collaborators: Vec::new(),
                    code_research_document: Some(
                        dir.join("CODE_RESEARCH.md").display().to_string(),
                    ),
                    default_queue: queue.clone(),
                    check_command: None,
                    push_remote: None,
                })?;
                step(out, "project", format!("{id} added ({})", dir.display()))?;
                super::admin::warn_missing_directory(id, &dir);
            }
            Err(e) => return Err(e.into()),
        }
        if session.project.as_deref() != Some(id.as_str()) {
            session.project = Some(id.clone());
            session.save().map_err(CliError::new)?;
        }
    }

    // 6. Unit drop-ins: path units cannot read config.yaml, so a store elsewhere than the
    // default is named to them here (removed again when the store is the default).
    let units_dir = config_home()?.join("systemd/user");
    let dropins = [
        (
            "agentstore-orchestrator.path.d/agentstore-store.conf",
            format!(
                "# Written by `orchestrator setup`.\n[Path]\nDirectoryNotEmpty=\nDirectoryNotEmpty={}/messaging/inbox\n",
                root.display()
            ),
        ),
        (
            "queue-manager@.path.d/agentstore-store.conf",
            format!(
                "# Written by `orchestrator setup`.\n[Path]\nDirectoryNotEmpty=\nDirectoryNotEmpty={}/Queues/%i/Jobs/queued_jobs\n",
                root.display()
            ),
        ),
    ];
    for (rel, text) in &dropins {
        let path = units_dir.join(rel);
        if is_default {
            if path.exists() {
                std::fs::remove_file(&path)
                    .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
                step(out, "drop-in", format!("{} removed", path.display()))?;
            }
        } else {
            let how = write_file(&path, text)?;
            step(out, "drop-in", format!("{} {how}", path.display()))?;
        }
    }

    // 7. The user units.
    let mut units = vec![
        format!("queue-manager@{queue}.path"),
        format!("queue-manager@{queue}.timer"),
    ];
    if a.orchestrator {
        units.push("agentstore-orchestrator.path".into());
        units.push("agentstore-orchestrator.timer".into());
    }
    let manual = format!(
        "systemctl --user daemon-reload && systemctl --user enable {} && systemctl --user enable --now agentstore.target",
        units.join(" ")
    );
    let systemd_user = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| Path::new(&d).join("systemd/private").exists());
    if a.no_units {
        step(
            out,
            "units",
            format!("skipped (--no-units); to enable: {manual}"),
        )?;
    } else if !systemd_user {
        step(
            out,
            "units",
            format!("no systemd user manager here; once there is one: {manual}"),
        )?;
    } else {
        let run = |args: &[&str]| super::job_keys::systemctl_user(args).map(drop);
        run(&["daemon-reload"])?;
        let mut enable = vec!["enable"];
        enable.extend(units.iter().map(String::as_str));
        run(&enable)?;
        run(&["enable", "--now", "agentstore.target"])?;
        step(
            out,
            "units",
            format!("enabled: agentstore.target, {}", units.join(", ")),
        )?;
        if !linger_enabled(&me) {
            step(
                out,
                "linger",
                format!(
                    "off: jobs stop when you log out; `loginctl enable-linger {me}` keeps them"
                ),
            )?;
        }
    }
    if g.format == Format::Json {
        write_json(
            out,
            &json!({
                "root": root,
                "user": user_id,
                "queue": queue,
                "project": a.project,
                "steps": steps.iter().map(|(k, v)| json!({"step": k, "result": v})).collect::<Vec<_>>(),
            }),
        )?;
    }
    Ok(())
}

fn linger_enabled(user: &str) -> bool {
    Path::new("/var/lib/systemd/linger").join(user).exists()
}
