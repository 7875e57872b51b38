//! Writing the store's documents: validated first, then written atomically; adding users,
//! projects and queues.

use super::{Result, Store, StoreError, check_id, io_err, safe, write_json_atomic};
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
        self.write_doc_mode(kind, path, doc, false).map(|_| ())
    }

    /// [`Store::write_doc`], but never replacing: `Ok(false)` when `path` exists already
    /// (another writer got there first) and nothing was written.
    pub fn write_doc_new<T: serde::Serialize>(
        &self,
        kind: DocKind,
        path: &Path,
        doc: &T,
    ) -> Result<bool> {
        self.write_doc_mode(kind, path, doc, true)
    }

    fn write_doc_mode<T: serde::Serialize>(
        &self,
        kind: DocKind,
        path: &Path,
        doc: &T,
        only_new: bool,
    ) -> Result<bool> {
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
        if !only_new {
            return write_json_atomic(path, &value)
                .map(|()| true)
                .map_err(io_err(path));
        }
        let mut bytes = serde_json::to_vec_pretty(&value).map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            source: io::Error::other(e),
        })?;
        bytes.push(b'\n');
        match super::fsio::write_new_atomic(path, &bytes) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_err(path)(e)),
        }
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
