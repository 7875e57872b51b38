//! The AgentStore folder (PRD §3): paths, `config.yaml`, atomic I/O, state moves, scans and
//! typed access to the documents.
//!
//! This file is the façade: the [`Store`] handle and its opening. The parts: `error`
//! (StoreError, the id check), `layout` (where each document lives), `documents` (reading,
//! validated), `writes` (validated atomic writes, adding users/projects/queues), `init` (a
//! new store), `fsio`/`safe` (the I/O rules: atomic, no link followed), `scan`, `config`,
//! `root` (which store), `events`/`error_log` (what happened; one file per machine: `perhost`), `jobfile`, `listing`.

pub mod approvals;
pub mod archive;
mod config;
pub mod conflicts;
mod documents;
mod error;
mod error_log;
mod events;
mod fsio;
pub mod grouped;
pub mod identity;
mod init;
pub mod jobfile;
mod layout;
pub mod listing;
mod listing_docs;
mod lost_claims;
pub mod machines;
mod machines_legacy;
pub mod migrate;
pub mod notice_hooks;
pub mod notice_hooks_graph;
pub mod notices;
pub mod notify_config;
pub mod owner;
pub mod perhost;
mod queue_runtime;
mod replacing;
mod root;
pub mod safe;
mod scan;
mod tasks;
mod writes;

pub use config::{
    Config, ConfigError, LoggingConfig, MachinesConfig, OrchestratorConfig, ProgramsPolicy,
    RunAsPolicy, SlackConfig,
};
pub use documents::{JobLocation, read_document, read_limited};
use error::io_err;
pub use error::{Result, StoreError, check_id};
pub use error_log::{ErrorLog, ErrorLogEntry};
pub use events::{Event, FromHost, HOSTNAME_ENV, Level, Merged, Record, hostname};
pub use fsio::{
    append_line_locked, move_no_replace, move_no_replace_into, remove_stale_temp_files,
    sync_parent, write_atomic, write_atomic_moved_on, write_atomic_volatile, write_json_atomic,
    write_new_atomic,
};
pub use queue_runtime::merge_runtimes;
pub use root::{
    RootSource, RootUser, SYSTEM_CONFIG, expand_tilde, home_dir, resolve_daemon_root, resolve_root,
    resolve_root_for, user_config_path,
};
pub use scan::{
    Scan, Scanned, file_id, is_conflict_copy, is_ignored, scan_dir, scan_each, scan_subdirs,
};

use crate::schema::Validator;
use std::path::{Path, PathBuf};

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
        // This machine's file of errors.out: a sync engine cannot merge two machines' appends.
        let errors = ErrorLog::new(perhost::host_path(
            &root.join(error_log::ERRORS_OUT),
            &hostname(),
        ));
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

    /// This machine's `JSONValidation/errors@<host>.out` (read them all with
    /// [`Store::read_errors`]).
    pub fn error_log(&self) -> &ErrorLog {
        &self.errors
    }

    /// Path relative to the root, for messages (`Queues/poplar/Jobs/…`).
    pub fn relative<'a>(&self, p: &'a Path) -> &'a Path {
        p.strip_prefix(&self.root).unwrap_or(p)
    }
}
