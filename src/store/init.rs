//! Creating a store (PRD §3 skeleton, idempotent) and the settings of a new queue.

use super::{Config, Result, Store, io_err, safe, write_atomic};
use crate::model::QueueConfig;
use std::path::{Path, PathBuf};

impl Store {
    /// Creates the PRD §3 skeleton at `root` (idempotent: nothing existing is replaced) and
    /// opens it. Returns the paths it created.
    pub fn init(root: &Path) -> Result<(Store, Vec<PathBuf>)> {
        Store::init_for_queue(root, None)
    }

    /// [`Store::init`]; a store made here with `queue` given has that queue as its default
    /// (`queues_default` of its config.yaml, the queue new projects use) instead of
    /// `poplar`, so that `setup --serve-queue birch` on a new store does not leave projects
    /// added later on a queue nobody serves. An existing config.yaml is never changed.
    pub fn init_for_queue(root: &Path, queue: Option<&str>) -> Result<(Store, Vec<PathBuf>)> {
        if let Some(q) = queue {
            super::error::check_id("queue", q)?;
        }
        let mut created = Vec::new();
        if !root.is_dir() {
            std::fs::create_dir_all(root).map_err(io_err(root))?;
            created.push(root.to_path_buf());
        }
        safe::register_root(root, safe::DEFAULT_LOG_LIMITS);
        let dirs = [
            "messaging/inbox",
            "messaging/processed_inbox",
            "messaging/outbox",
            "messaging/processed_outbox",
            "users",
            "projects",
            "Queues",
            "JSONValidation/Schemas",
            "logs",
        ];
        for d in dirs {
            let p = root.join(d);
            if !safe::is_dir(&p) {
                safe::create_dir_all(&p).map_err(io_err(&p))?;
                created.push(p);
            }
        }
        let cfg = root.join("config.yaml");
        if !safe::exists(&cfg) {
            let text = match queue {
                Some(q) => Config::default_yaml_for_queue(root, q),
                None => Config::default_yaml(root),
            };
            write_atomic(&cfg, text.as_bytes()).map_err(io_err(&cfg))?;
            created.push(cfg);
        }
        for (kind, text) in crate::schema::EMBEDDED {
            let p = root.join(format!("JSONValidation/Schemas/{kind}.schema.json"));
            if !safe::exists(&p) {
                write_atomic(&p, text.as_bytes()).map_err(io_err(&p))?;
                created.push(p);
            }
        }
        let errors = root.join("JSONValidation/errors.out");
        if !safe::exists(&errors) {
            safe::open_append(&errors).map_err(io_err(&errors))?;
            created.push(errors);
        }
        let store = Store::open(root)?;
        let default_queue = store.config.queues_default.clone();
        if !safe::exists(&store.queue_path(&default_queue)) {
            created.push(store.add_queue(QueueConfig::defaults(&default_queue))?);
        }
        Ok((store, created))
    }
}

impl QueueConfig {
    /// The settings of a new queue: PRD §4.5 values, auto launcher.
    pub fn defaults(id: &str) -> QueueConfig {
        QueueConfig {
            id: id.to_string(),
            worker_count: 2,
            claude_cli_path: "claude".to_string(),
            rest_interval: 60,
            // Unattended jobs may edit files in their working directory without asking (and
            // nothing more: no `--dangerously-skip-permissions`). `set-queue
            // --claude-default-arg …` widens or narrows it per queue.
            claude_default_args: ["-p", "--permission-mode", "acceptEdits"]
                .map(String::from)
                .to_vec(),
            max_job_runtime_seconds: 3600,
            launcher: None,
            resource_limits: None,
            agentshell_path: None,
            codex_cli_path: None,
            codex_default_args: Vec::new(),
            integration: None,
            allow_permission_args: None,
            approvals: None,
            retry: None,
            slurm: None,
            // New queues confine their jobs (issue 28).
            sandbox: Some(crate::model::SandboxSetting {
                enabled: true,
                connect_ports: Vec::new(),
            }),
        }
    }
}
