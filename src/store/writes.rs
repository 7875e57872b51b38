//! Writing the store's documents: validated first, then written atomically; adding users,
//! projects and queues.

use super::{Result, Store, StoreError, check_id, io_err, safe};
use crate::model::{DocKind, JobStatus, PrdState, Project, Queue, QueueConfig, QueueRuntime, User};
use std::io;
use std::path::{Path, PathBuf};

impl Store {
    /// Validates `doc` against `kind` and writes it atomically to `path`.
    pub fn write_doc<T: serde::Serialize>(
        &self,
        kind: DocKind,
        path: &Path,
        doc: &T,
    ) -> Result<()> {
        let bytes = self.doc_bytes(kind, path, doc)?;
        if let Some(dir) = path.parent() {
            safe::create_dir_all(dir).map_err(io_err(dir))?;
        }
        super::write_atomic(path, &bytes).map_err(io_err(path))
    }

    /// [`Store::write_doc`], but never replacing: `Ok(false)` when `path` exists already
    /// (another writer got there first) and nothing was written.
    pub fn write_doc_new<T: serde::Serialize>(
        &self,
        kind: DocKind,
        path: &Path,
        doc: &T,
    ) -> Result<bool> {
        let bytes = self.doc_bytes(kind, path, doc)?;
        if let Some(dir) = path.parent() {
            safe::create_dir_all(dir).map_err(io_err(dir))?;
        }
        match super::fsio::write_new_atomic(path, &bytes) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_err(path)(e)),
        }
    }

    /// `doc` validated against `kind` (a rejection is logged naming `path`, where it was to
    /// be written) and serialised as it is written to the store.
    pub fn doc_bytes<T: serde::Serialize>(
        &self,
        kind: DocKind,
        path: &Path,
        doc: &T,
    ) -> Result<Vec<u8>> {
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
        json_bytes(path, &value)
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
}

/// `value` as the store writes JSON: pretty, with a final newline.
pub(crate) fn json_bytes<T: serde::Serialize>(path: &Path, value: &T) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Io {
        path: path.to_path_buf(),
        source: io::Error::other(e),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}
