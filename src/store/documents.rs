//! Reading the store's documents: validated and parsed (rejections logged to
//! `errors.out`), one or all of a kind, with no link followed and a size limit.

use super::{Result, Store, StoreError, check_id, file_id, io_err, safe, scan_dir, scan_subdirs};
use crate::model::{
    DocKind, Job, JobStatus, Message, Prd, PrdState, Project, Queue, User, is_safe_id,
};
use crate::schema::{Rejection, document_id};
use serde::de::DeserializeOwned;
use std::io;
use std::path::{Path, PathBuf};

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

impl Store {
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

    /// One queue as readers show it: `queue.json` with the runtime of every machine's
    /// manager merged in (`Queues/<q>/runtime@<host>.json`, see `queue_runtime`).
    pub fn queue(&self, id: &str) -> Result<Queue> {
        Ok(self.with_runtime(self.queue_file(id)?))
    }

    /// `Queues/<q>/queue.json` as it is (the user's config; what an edit writes back).
    pub fn queue_file(&self, id: &str) -> Result<Queue> {
        check_id("queue", id)?;
        let path = self.queue_path(id);
        not_found_as(self.read_doc(DocKind::Queue, &path), "queue", id)
    }

    /// All queues.
    pub fn queues(&self, on_error: &mut dyn FnMut(StoreError)) -> Result<Vec<Queue>> {
        let mut out = Vec::new();
        for id in self.queue_ids()? {
            match self.read_doc(DocKind::Queue, &self.queue_path(&id)) {
                Ok(q) => out.push(self.with_runtime(q)),
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

    /// Finds a job by id in any queue and state, archived ones included (their location
    /// names the archive file and the state it ended in).
    pub fn find_job(&self, id: &str) -> Result<JobLocation> {
        check_id("job", id)?;
        // A job being started is, for a few milliseconds, only a claim
        // (`Queues/<q>/.claimed/<host>/<id>.json`) between queued_jobs/ and running_jobs/:
        // look again while a claim of it exists rather than call it unknown (≤ 1 s).
        let queues = self.queue_ids()?;
        for _ in 0..20 {
            if let Some(loc) = self.find_live_job(&queues, id) {
                return Ok(loc);
            }
            if !self.is_claimed(&queues, id) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Archived (`orchestrator archive`): still a job of the store, ended, its file in
        // Queues/<q>/Jobs/archive/YYYY-MM/<state>_jobs/. Looked at only after the live
        // folders, so an id is never reused for a job already archived.
        for queue in &queues {
            if let Some((status, path)) =
                super::archive::find_archived(self, std::slice::from_ref(queue), id)
            {
                return Ok(JobLocation {
                    queue: queue.clone(),
                    status,
                    id: id.to_string(),
                    path,
                });
            }
        }
        Err(StoreError::NotFound {
            kind: "job",
            id: id.to_string(),
        })
    }

    /// Job `id` in a live state folder of any queue. A job moves only forward (queued →
    /// running → finished | failed), so where a sync engine has brought in a move's new file
    /// but not yet its delete (the other machine died mid-sync) the furthest state is the
    /// job's: it is looked for first.
    fn find_live_job(&self, queues: &[String], id: &str) -> Option<JobLocation> {
        for queue in queues {
            for status in JobStatus::ALL.into_iter().rev() {
                let path = self.job_path(queue, status, id);
                if safe::is_file(&path) {
                    return Some(JobLocation {
                        queue: queue.clone(),
                        status,
                        id: id.to_string(),
                        path,
                    });
                }
            }
        }
        None
    }

    /// The state folder beyond `queued_jobs/` (running, finished, failed) that also holds
    /// job `id` of `queue`, if any: then the queued file is a stale copy a sync engine has
    /// not removed yet (the move's new file arrived, its delete did not), never to be run.
    pub fn moved_on_copy(&self, queue: &str, id: &str) -> Option<JobStatus> {
        [JobStatus::Running, JobStatus::Finished, JobStatus::Failed]
            .into_iter()
            .find(|s| safe::is_file(&self.job_path(queue, *s, id)))
    }

    /// Whether some machine holds a start claim of job `id` in one of `queues`.
    fn is_claimed(&self, queues: &[String], id: &str) -> bool {
        self.claim_of(queues, id).is_some()
    }

    /// The start claim of job `id` (`Queues/<q>/.claimed/<host>/<id>.json`, any machine) in
    /// one of `queues`: a job between `queued_jobs/` and `running_jobs/`, being started.
    pub fn claim_of(&self, queues: &[String], id: &str) -> Option<PathBuf> {
        let file = format!("{id}.json");
        queues.iter().find_map(|queue| {
            std::fs::read_dir(super::jobfile::claims_root(self, queue))
                .ok()?
                .flatten()
                .map(|h| h.path().join(&file))
                .find(|p| safe::is_file(p))
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

    pub(super) fn read_all<T: DeserializeOwned>(
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
            let label = super::conflicts::conflict_label(
                &c.file_name().unwrap_or_default().to_string_lossy(),
            );
            on_error(StoreError::Io {
                path: c,
                source: io::Error::other(format!(
                    "{label}; not read (resolve it with `orchestrator conflicts resolve`)"
                )),
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

/// [`read_limited`] for a reader that reports per file: a file over the document size limit
/// is an error saying so (not a parse error at the cut), any error as text.
pub fn read_document(path: &Path) -> std::result::Result<Vec<u8>, String> {
    let bytes = read_limited(path).map_err(|e| e.to_string())?;
    let limit = crate::schema::MAX_DOCUMENT_BYTES;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "larger than the {} MiB document limit; left as it is",
            limit >> 20
        ));
    }
    Ok(bytes)
}

pub(super) fn not_found_as<T>(r: Result<T>, kind: &'static str, id: &str) -> Result<T> {
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
