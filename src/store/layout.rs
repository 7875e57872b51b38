//! Where everything lives in the store (PRD §3): the folder and file of each kind of
//! document.

use super::Store;
use crate::model::{JobStatus, PrdState};
use std::path::{Component, Path, PathBuf};

impl Store {
    /// Whether the absolute path `p` lies beneath the store root — judged on its words
    /// (`.` and `..` resolved lexically, links not followed), against the root as given and
    /// as resolved. A file in the store is the store's to write (its owner's daemons), never
    /// a job's: a job may run as a user who cannot write the store at all.
    pub fn holds(&self, p: &Path) -> bool {
        if !p.is_absolute() {
            return false;
        }
        let mut words = PathBuf::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    words.pop();
                }
                Component::CurDir => {}
                c => words.push(c),
            }
        }
        words.starts_with(&self.root)
            || std::fs::canonicalize(&self.root).is_ok_and(|r| words.starts_with(r))
    }

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
    /// How many job documents wait in `queue`'s `queued_jobs/` (what a manager would count;
    /// 0 when the folder cannot be read).
    pub fn queued_count(&self, queue: &str) -> u32 {
        let dir = self.jobs_dir(queue, JobStatus::Queued);
        let n = super::safe::list_dir(&dir)
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| {
                        let n = e.name.to_string_lossy();
                        n.ends_with(".json") && !n.starts_with('.')
                    })
                    .count()
            })
            .unwrap_or(0);
        u32::try_from(n).unwrap_or(u32::MAX)
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
}
