//! A job index for listings: per state folder, each job's queue time, project and user (a
//! few dozen bytes a job, never its output), kept up to date by re-listing only the folders
//! whose modification time changed and reading only files not seen before. Listings sort it
//! and read whole documents only for the page they return.

use super::{Store, file_id, scan_dir};
use crate::model::{JobStatus, Timestamp};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Which jobs a listing wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only this state.
    pub status: Option<JobStatus>,
    /// Only this project.
    pub project: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
}

/// What the index knows of one job file.
#[derive(Debug, Clone)]
pub struct JobHead {
    /// `config.queue_time` (the listing order, ties by id).
    pub queue_time: Timestamp,
    /// `config.project`.
    pub project: String,
    /// `config.user`.
    pub user: Option<String>,
    /// `config.priority`.
    pub priority: Option<i32>,
}

#[derive(Deserialize)]
struct RawHead {
    config: RawConfig,
}

#[derive(Deserialize)]
struct RawConfig {
    project: String,
    queue_time: Timestamp,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    priority: Option<i32>,
}

/// One listed job: where it is and its head.
#[derive(Debug, Clone, Copy)]
pub struct Listed<'a> {
    /// Queue.
    pub queue: &'a str,
    /// State folder.
    pub status: JobStatus,
    /// Job id (file stem).
    pub id: &'a str,
    /// What the index read.
    pub head: &'a JobHead,
}

#[derive(Debug, Default)]
struct DirIndex {
    mtime: Option<SystemTime>,
    /// `None` for a file that did not parse as a job (reported by whoever reads it whole).
    jobs: HashMap<String, Option<JobHead>>,
}

/// Per-folder job heads.
#[derive(Debug, Default)]
pub struct JobIndex {
    dirs: HashMap<(String, JobStatus), DirIndex>,
}

/// Reads the head of a job file; `None` when it is not a readable job.
pub fn read_head(path: &std::path::Path) -> Option<JobHead> {
    let bytes = super::read_limited(path).ok()?;
    let h: RawHead = serde_json::from_slice(&bytes).ok()?;
    Some(JobHead {
        queue_time: h.config.queue_time,
        project: h.config.project,
        user: h.config.user,
        priority: h.config.priority,
    })
}

impl JobIndex {
    /// Brings the folders `filter` can match up to date.
    pub fn refresh(&mut self, store: &Store, filter: &JobFilter) {
        let queues = match &filter.queue {
            Some(q) => vec![q.clone()],
            None => store.queue_ids().unwrap_or_default(),
        };
        let states: Vec<JobStatus> = match filter.status {
            Some(s) => vec![s],
            None => JobStatus::ALL.to_vec(),
        };
        if filter.queue.is_none() && filter.status.is_none() {
            self.dirs.retain(|(q, _), _| queues.contains(q));
        }
        for q in &queues {
            for &s in &states {
                let dir = store.jobs_dir(q, s);
                let entry = self.dirs.entry((q.clone(), s)).or_default();
                refresh_dir(entry, &dir);
            }
        }
    }

    /// Files in the folders `filter` matches that did not parse as jobs: (queue, state, id).
    pub fn unreadable<'a>(
        &'a self,
        filter: &'a JobFilter,
    ) -> impl Iterator<Item = (&'a str, JobStatus, &'a str)> + 'a {
        self.dirs
            .iter()
            .filter(move |((q, s), _)| {
                filter.queue.as_deref().is_none_or(|f| f == q)
                    && filter.status.is_none_or(|f| f == *s)
            })
            .flat_map(|((q, s), d)| {
                d.jobs
                    .iter()
                    .filter(|(_, h)| h.is_none())
                    .map(move |(id, _)| (q.as_str(), *s, id.as_str()))
            })
    }

    /// The jobs matching `filter` that `visible` admits, oldest `queue_time` first (ties by
    /// id). Unreadable files are left out.
    pub fn select<'a>(
        &'a self,
        filter: &JobFilter,
        mut visible: impl FnMut(&Listed<'a>) -> bool,
    ) -> Vec<Listed<'a>> {
        let mut out = Vec::new();
        for ((q, s), d) in &self.dirs {
            if filter.queue.as_deref().is_some_and(|f| f != q)
                || filter.status.is_some_and(|f| f != *s)
            {
                continue;
            }
            for (id, head) in &d.jobs {
                let Some(head) = head else { continue };
                if filter.project.as_deref().is_some_and(|p| p != head.project) {
                    continue;
                }
                let l = Listed {
                    queue: q,
                    status: *s,
                    id,
                    head,
                };
                if visible(&l) {
                    out.push(l);
                }
            }
        }
        out.sort_by(|a, b| {
            a.head
                .queue_time
                .cmp(&b.head.queue_time)
                .then(a.id.cmp(b.id))
                .then(a.queue.cmp(b.queue))
        });
        out
    }
}

fn refresh_dir(d: &mut DirIndex, dir: &PathBuf) {
    let mtime = std::fs::symlink_metadata(dir)
        .and_then(|m| m.modified())
        .ok();
    if mtime.is_some() && mtime == d.mtime {
        return;
    }
    let docs = match scan_dir(dir) {
        Ok(s) => s.documents,
        Err(e) => {
            tracing::warn!("cannot list {}: {e}", dir.display());
            d.mtime = None;
            return;
        }
    };
    let mut jobs = HashMap::with_capacity(docs.len());
    for p in docs {
        let Some(id) = file_id(&p) else { continue };
        let head = match d.jobs.remove(id) {
            // A file is replaced by rename, which changes the folder's time too; a head
            // once read stays right for as long as the name stays.
            Some(Some(h)) => Some(h),
            _ => read_head(&p),
        };
        jobs.insert(id.to_string(), head);
    }
    d.jobs = jobs;
    // A change within the timestamp granularity of this listing could leave the time as it
    // is: trust only times safely in the past.
    d.mtime = mtime.filter(|m| m.elapsed().is_ok_and(|age| age > Duration::from_secs(2)));
}
