//! The AgentStore folder (PRD §3): paths, `config.yaml`, atomic I/O, state moves, scans and
//! typed access to the documents.

pub mod archive;
mod config;
mod error_log;
mod events;
mod fsio;
pub mod jobfile;
pub mod listing;
pub mod migrate;
mod root;
pub mod safe;
mod scan;

pub use config::{Config, ConfigError, LoggingConfig, OrchestratorConfig, SlackConfig};
pub use error_log::{ErrorLog, ErrorLogEntry};
pub use events::{Event, hostname};
pub use fsio::{
    append_line_locked, move_no_replace, remove_stale_temp_files, sync_parent, write_atomic,
    write_json_atomic,
};
pub use root::{
    MODE_ENV, RootSource, RootUser, SYSTEM_CONFIG, expand_tilde, home_dir, resolve_daemon_root,
    resolve_root, resolve_root_for, system_mode,
};
pub use scan::{Scan, file_id, is_conflict_copy, is_ignored, scan_dir, scan_subdirs};

use crate::model::{
    DocKind, Job, JobStatus, Message, Prd, PrdState, Project, Queue, QueueConfig, QueueRuntime,
    User, is_safe_id,
};
use crate::schema::{Rejection, SchemaError, Validator, document_id};
use serde::de::DeserializeOwned;
use std::io;
use std::path::{Path, PathBuf};

/// Errors from store access.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A document that was asked for does not exist.
    #[error("{kind} not found: {id}")]
    NotFound {
        /// What kind of document (user, project, prd, queue, job).
        kind: &'static str,
        /// The id asked for.
        id: String,
    },
    /// An id that is not a safe file name.
    #[error(
        "invalid {kind} id {id:?}: ids are letters, digits, '.', '_' and '-', starting with a letter or digit, no '..', at most 200 bytes"
    )]
    BadId {
        /// What kind of id.
        kind: &'static str,
        /// The id.
        id: String,
    },
    /// A document failed its schema.
    #[error("{path}: {rejection}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The failing fields.
        rejection: Rejection,
    },
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// `config.yaml` is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A schema is wrong.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Creating something that exists.
    #[error("{kind} already exists: {id}")]
    Exists {
        /// What kind.
        kind: &'static str,
        /// The id.
        id: String,
    },
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks an id before it becomes part of a path.
pub fn check_id(kind: &'static str, id: &str) -> Result<()> {
    if is_safe_id(id) {
        Ok(())
    } else {
        Err(StoreError::BadId {
            kind,
            id: crate::schema::quote_limited(id, crate::schema::MAX_QUOTE_BYTES),
        })
    }
}

/// Where a job file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLocation {
    /// Queue name.
    pub queue: String,
    /// State folder it is in.
    pub status: JobStatus,
    /// Job id (file stem).
    pub id: String,
    /// Full path.
    pub path: PathBuf,
}

/// An opened store: its root, configuration and validator.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    config: Config,
    validator: Validator,
    errors: ErrorLog,
}

impl Store {
    /// Opens the store at `root`: reads `config.yaml` and compiles the schemas (the store's
    /// `JSONValidation/Schemas/` copies where present).
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let root = root.into();
        // Register first: even config.yaml is read with no link followed.
        safe::register_root(&root, safe::DEFAULT_LOG_LIMITS);
        let config = Config::load(&root.join("config.yaml"))?;
        safe::register_root(
            &root,
            safe::LogLimits {
                max_bytes: config.logging.max_file_bytes.max(4096),
                keep: config.logging.keep_files,
            },
        );
        // No link followed, only a regular file read (a link there is an error).
        let validator =
            Validator::with_overrides(Some(&root.join("JSONValidation/Schemas")), &|p| {
                if !safe::exists(p) {
                    return Ok(None);
                }
                let mut t = String::new();
                std::io::Read::read_to_string(&mut safe::open_read(p)?, &mut t)?;
                Ok(Some(t))
            })?;
        let errors = ErrorLog::new(root.join("JSONValidation/errors.out"));
        Ok(Store {
            root,
            config,
            validator,
            errors,
        })
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The parsed `config.yaml`.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The schema validator.
    pub fn validator(&self) -> &Validator {
        &self.validator
    }

    /// `JSONValidation/errors.out`.
    pub fn error_log(&self) -> &ErrorLog {
        &self.errors
    }

    /// Path relative to the root, for messages (`Queues/poplar/Jobs/…`).
    pub fn relative<'a>(&self, p: &'a Path) -> &'a Path {
        p.strip_prefix(&self.root).unwrap_or(p)
    }

    // ---- paths -------------------------------------------------------------------------

    /// `messaging/<box>/`.
    pub fn messaging_dir(&self, mailbox: &str) -> PathBuf {
        self.root.join("messaging").join(mailbox)
    }
    /// `messaging/inbox/`.
    pub fn inbox(&self) -> PathBuf {
        self.messaging_dir("inbox")
    }
    /// `messaging/outbox/`.
    pub fn outbox(&self) -> PathBuf {
        self.messaging_dir("outbox")
    }
    /// `messaging/processed_inbox/`.
    pub fn processed_inbox(&self) -> PathBuf {
        self.messaging_dir("processed_inbox")
    }
    /// `messaging/processed_outbox/`.
    pub fn processed_outbox(&self) -> PathBuf {
        self.messaging_dir("processed_outbox")
    }
    /// `users/`.
    pub fn users_dir(&self) -> PathBuf {
        self.root.join("users")
    }
    /// `users/<id>.json`.
    pub fn user_path(&self, id: &str) -> PathBuf {
        self.users_dir().join(format!("{id}.json"))
    }
    /// `projects/`.
    pub fn projects_dir(&self) -> PathBuf {
        self.root.join("projects")
    }
    /// `projects/<id>/project.json`.
    pub fn project_path(&self, id: &str) -> PathBuf {
        self.projects_dir().join(id).join("project.json")
    }
    /// `projects/<id>/<state>_prds/`.
    pub fn prd_dir(&self, project: &str, state: PrdState) -> PathBuf {
        self.projects_dir().join(project).join(state.dir())
    }
    /// `Queues/`.
    pub fn queues_dir(&self) -> PathBuf {
        self.root.join("Queues")
    }
    /// `Queues/<q>/`.
    pub fn queue_dir(&self, queue: &str) -> PathBuf {
        self.queues_dir().join(queue)
    }
    /// `Queues/<q>/queue.json`.
    pub fn queue_path(&self, queue: &str) -> PathBuf {
        self.queue_dir(queue).join("queue.json")
    }
    /// `Queues/<q>/Jobs/<state>_jobs/`.
    pub fn jobs_dir(&self, queue: &str, status: JobStatus) -> PathBuf {
        self.queue_dir(queue).join("Jobs").join(status.dir())
    }
    /// `Queues/<q>/Jobs/<state>_jobs/<id>.json`.
    pub fn job_path(&self, queue: &str, status: JobStatus, id: &str) -> PathBuf {
        self.jobs_dir(queue, status).join(format!("{id}.json"))
    }
    /// `JSONValidation/Schemas/`.
    pub fn schemas_dir(&self) -> PathBuf {
        self.root.join("JSONValidation/Schemas")
    }
    /// `logs/`.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// `conflicts/`: where Dropbox conflict copies are set aside.
    pub fn conflicts_dir(&self) -> PathBuf {
        self.root.join("conflicts")
    }
    /// The orchestrator's singleton lock file.
    pub fn lock_path(&self) -> PathBuf {
        self.root
            .join(&self.config.orchestrator.singleton_lock_file)
    }

    // ---- reading -----------------------------------------------------------------------

    /// Reads, validates and parses a document. A rejection is logged to `errors.out`.
    pub fn read_doc<T: DeserializeOwned>(&self, kind: DocKind, path: &Path) -> Result<T> {
        let bytes = read_limited(path)?;
        self.parse_doc(kind, path, &bytes)
    }

    /// Validates and parses `bytes` read from `path`, logging a rejection.
    pub fn parse_doc<T: DeserializeOwned>(
        &self,
        kind: DocKind,
        path: &Path,
        bytes: &[u8],
    ) -> Result<T> {
        self.validator.parse(kind, bytes).map_err(|rejection| {
            self.log_rejection(path, bytes, &rejection);
            StoreError::Invalid {
                path: path.to_path_buf(),
                rejection,
            }
        })
    }

    /// Appends a rejection to `errors.out`, naming the document by its id (or file name).
    pub fn log_rejection(&self, path: &Path, bytes: &[u8], rejection: &Rejection) {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(bytes).ok();
        let id = parsed
            .as_ref()
            .and_then(document_id)
            .map(str::to_string)
            .or_else(|| file_id(path).map(str::to_string))
            .unwrap_or_else(|| path.display().to_string());
        if let Err(e) = self.errors.record(&id, rejection) {
            tracing::warn!("cannot append to {}: {e}", self.errors.path().display());
        }
    }

    /// One user.
    pub fn user(&self, id: &str) -> Result<User> {
        check_id("user", id)?;
        let path = self.user_path(id);
        not_found_as(self.read_doc(DocKind::User, &path), "user", id)
    }

    /// All users, sorted by id; invalid files are reported through `on_error`.
    pub fn users(&self, on_error: &mut dyn FnMut(StoreError)) -> Result<Vec<User>> {
        self.read_all(DocKind::User, &self.users_dir(), on_error)
    }

    /// One project.
    pub fn project(&self, id: &str) -> Result<Project> {
        check_id("project", id)?;
        let path = self.project_path(id);
        not_found_as(self.read_doc(DocKind::Project, &path), "project", id)
    }

    /// Project ids (folders under `projects/` holding a `project.json`).
    pub fn project_ids(&self) -> Result<Vec<String>> {
        let dir = self.projects_dir();
        let ids = scan_subdirs(&dir).map_err(io_err(&dir))?;
        Ok(ids
            .into_iter()
            .filter(|id| safe::is_file(&self.project_path(id)))
            .collect())
    }

    /// All projects.
    pub fn projects(&self, on_error: &mut dyn FnMut(StoreError)) -> Result<Vec<Project>> {
        let mut out = Vec::new();
        for id in self.project_ids()? {
            match self.read_doc(DocKind::Project, &self.project_path(&id)) {
                Ok(p) => out.push(p),
                Err(e) => on_error(e),
            }
        }
        Ok(out)
    }

    /// PRDs of one project (or every project), each with its state folder.
    pub fn prds(
        &self,
        project: Option<&str>,
        on_error: &mut dyn FnMut(StoreError),
    ) -> Result<Vec<(PrdState, Prd)>> {
        let projects = match project {
            Some(p) => {
                self.project(p)?;
                vec![p.to_string()]
            }
            None => self.project_ids()?,
        };
        let mut out = Vec::new();
        for p in &projects {
            for state in PrdState::ALL {
                for prd in self.read_all::<Prd>(DocKind::Prd, &self.prd_dir(p, state), on_error)? {
                    out.push((state, prd));
                }
            }
        }
        Ok(out)
    }

    /// Finds a PRD by id in any project and state.
    pub fn find_prd(&self, id: &str) -> Result<(PrdState, PathBuf, Prd)> {
        check_id("prd", id)?;
        for p in self.project_ids()? {
            for state in PrdState::ALL {
                let path = self.prd_dir(&p, state).join(format!("{id}.json"));
                if safe::is_file(&path) {
                    let prd = self.read_doc(DocKind::Prd, &path)?;
                    return Ok((state, path, prd));
                }
            }
        }
        Err(StoreError::NotFound {
            kind: "prd",
            id: id.to_string(),
        })
    }

    /// Queue names (folders under `Queues/` holding a `queue.json`).
    pub fn queue_ids(&self) -> Result<Vec<String>> {
        let dir = self.queues_dir();
        let ids = scan_subdirs(&dir).map_err(io_err(&dir))?;
        Ok(ids
            .into_iter()
            .filter(|q| safe::is_file(&self.queue_path(q)))
            .collect())
    }

    /// True when `Queues/<q>/queue.json` exists.
    pub fn queue_exists(&self, queue: &str) -> bool {
        is_safe_id(queue) && safe::is_file(&self.queue_path(queue))
    }

    /// One queue.
    pub fn queue(&self, id: &str) -> Result<Queue> {
        check_id("queue", id)?;
        let path = self.queue_path(id);
        not_found_as(self.read_doc(DocKind::Queue, &path), "queue", id)
    }

    /// All queues.
    pub fn queues(&self, on_error: &mut dyn FnMut(StoreError)) -> Result<Vec<Queue>> {
        let mut out = Vec::new();
        for id in self.queue_ids()? {
            match self.read_doc(DocKind::Queue, &self.queue_path(&id)) {
                Ok(q) => out.push(q),
                Err(e) => on_error(e),
            }
        }
        Ok(out)
    }

    /// Every job file, optionally limited to some states, without reading them.
    pub fn job_locations(&self, statuses: &[JobStatus]) -> Result<Vec<JobLocation>> {
        let states: &[JobStatus] = if statuses.is_empty() {
            &JobStatus::ALL
        } else {
            statuses
        };
        let mut out = Vec::new();
        for queue in self.queue_ids()? {
            for &status in states {
                let dir = self.jobs_dir(&queue, status);
                for path in scan_dir(&dir).map_err(io_err(&dir))?.documents {
                    let Some(id) = file_id(&path).map(str::to_string) else {
                        continue;
                    };
                    out.push(JobLocation {
                        queue: queue.clone(),
                        status,
                        id,
                        path,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Finds a job by id in any queue and state.
    pub fn find_job(&self, id: &str) -> Result<JobLocation> {
        check_id("job", id)?;
        for queue in self.queue_ids()? {
            for status in JobStatus::ALL {
                let path = self.job_path(&queue, status, id);
                if safe::is_file(&path) {
                    return Ok(JobLocation {
                        queue,
                        status,
                        id: id.to_string(),
                        path,
                    });
                }
            }
        }
        Err(StoreError::NotFound {
            kind: "job",
            id: id.to_string(),
        })
    }

    /// Reads a job.
    pub fn job(&self, loc: &JobLocation) -> Result<Job> {
        self.read_doc(DocKind::Job, &loc.path)
    }

    /// Reads a message file.
    pub fn message(&self, path: &Path) -> Result<Message> {
        self.read_doc(DocKind::Message, path)
    }

    fn read_all<T: DeserializeOwned>(
        &self,
        kind: DocKind,
        dir: &Path,
        on_error: &mut dyn FnMut(StoreError),
    ) -> Result<Vec<T>> {
        let scan = scan_dir(dir).map_err(io_err(dir))?;
        let mut out = Vec::with_capacity(scan.documents.len());
        for path in scan.documents {
            match self.read_doc(kind, &path) {
                Ok(d) => out.push(d),
                Err(e) => on_error(e),
            }
        }
        for c in scan.conflicts {
            on_error(StoreError::Io {
                path: c,
                source: io::Error::other("Dropbox conflict copy; not read (resolve it by hand)"),
            });
        }
        for r in scan.refused {
            on_error(StoreError::Io {
                path: r,
                source: io::Error::other(
                    "not a regular file (a symbolic link, FIFO or device); never followed or read",
                ),
            });
        }
        Ok(out)
    }

    // ---- writing -----------------------------------------------------------------------

    /// Validates `doc` against `kind` and writes it atomically to `path`.
    pub fn write_doc<T: serde::Serialize>(
        &self,
        kind: DocKind,
        path: &Path,
        doc: &T,
    ) -> Result<()> {
        let value = serde_json::to_value(doc).map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            source: io::Error::other(e),
        })?;
        if let Err(rejection) = self.validator.validate(kind, &value) {
            let bytes = serde_json::to_vec(&value).unwrap_or_default();
            self.log_rejection(path, &bytes, &rejection);
            return Err(StoreError::Invalid {
                path: path.to_path_buf(),
                rejection,
            });
        }
        if let Some(dir) = path.parent() {
            safe::create_dir_all(dir).map_err(io_err(dir))?;
        }
        write_json_atomic(path, &value).map_err(io_err(path))
    }

    /// Adds a user; refuses to replace one.
    pub fn add_user(&self, user: &User) -> Result<PathBuf> {
        check_id("user", &user.id)?;
        let path = self.user_path(&user.id);
        if safe::exists(&path) {
            return Err(StoreError::Exists {
                kind: "user",
                id: user.id.clone(),
            });
        }
        self.write_doc(DocKind::User, &path, user)?;
        Ok(path)
    }

    /// Adds a project with its PRD folders; refuses to replace one.
    pub fn add_project(&self, project: &Project) -> Result<PathBuf> {
        check_id("project", &project.id)?;
        let path = self.project_path(&project.id);
        if safe::exists(&path) {
            return Err(StoreError::Exists {
                kind: "project",
                id: project.id.clone(),
            });
        }
        for state in PrdState::ALL {
            let d = self.prd_dir(&project.id, state);
            safe::create_dir_all(&d).map_err(io_err(&d))?;
        }
        self.write_doc(DocKind::Project, &path, project)?;
        Ok(path)
    }

    /// Adds a queue with its job folders; refuses to replace one.
    pub fn add_queue(&self, config: QueueConfig) -> Result<PathBuf> {
        check_id("queue", &config.id)?;
        let path = self.queue_path(&config.id);
        if safe::exists(&path) {
            return Err(StoreError::Exists {
                kind: "queue",
                id: config.id.clone(),
            });
        }
        for status in JobStatus::ALL {
            let d = self.jobs_dir(&config.id, status);
            safe::create_dir_all(&d).map_err(io_err(&d))?;
        }
        let queue = Queue {
            config,
            runtime: QueueRuntime::default(),
        };
        self.write_doc(DocKind::Queue, &path, &queue)?;
        Ok(path)
    }

    /// Creates the PRD §3 skeleton at `root` (idempotent: nothing existing is replaced) and
    /// opens it. Returns the paths it created.
    pub fn init(root: &Path) -> Result<(Store, Vec<PathBuf>)> {
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
            write_atomic(&cfg, Config::default_yaml(root).as_bytes()).map_err(io_err(&cfg))?;
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
            allow_permission_args: None,
            retry: None,
        }
    }
}

/// Reads a file, refusing anything larger than the validator's limit without reading it.
/// Beneath a store root no link is followed and only a regular file is read
/// ([`safe::open_read`]).
pub fn read_limited(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = safe::open_read(path).map_err(io_err(path))?;
    let len = f.metadata().map_err(io_err(path))?.len();
    let limit = crate::schema::MAX_DOCUMENT_BYTES;
    let mut buf = Vec::with_capacity(len.min(limit) as usize + 1);
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(io_err(path))?;
    Ok(buf)
}

fn not_found_as<T>(r: Result<T>, kind: &'static str, id: &str) -> Result<T> {
    match r {
        Err(StoreError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Err(StoreError::NotFound {
                kind,
                id: id.to_string(),
            })
        }
        other => other,
    }
}
