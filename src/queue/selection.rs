//! Which queued job starts next: highest `priority` first, then oldest `queue_time`, ties
//! by id. What the picker needs of each job (priority, queue time, dependencies, not-before)
//! is cached per file so a busy queue is not re-read on every event; inotify tells the manager
//! which names to forget.

use crate::model::{DocKind, Job, Timestamp};
use crate::schema::Validator;
use crate::store::{file_id, scan_dir};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a file that ends early may still be being written (`cat > file` is not atomic).
const WRITE_GRACE: Duration = Duration::from_secs(2);

/// What a scan of `queued_jobs/` found.
#[derive(Debug, Default)]
pub struct QueuedScan {
    /// Startable job ids, highest priority first, then oldest first.
    pub ordered: Vec<String>,
    /// Files that do not parse: to be failed as invalid.
    pub invalid: Vec<String>,
    /// Dropbox conflict copies: to be set aside.
    pub conflicts: Vec<PathBuf>,
    /// Links, FIFOs and other non-regular `*.json` entries: never read; to be set aside.
    pub refused: Vec<PathBuf>,
    /// Files that may still be being written (checked again on their close event).
    pub pending: usize,
}

/// What the picker knows of one queued job.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedHead {
    /// `config.priority`, bounded (absent: normal).
    pub priority: i32,
    /// `config.queue_time`.
    pub queue_time: Timestamp,
    /// `config.after` (empty: none).
    pub after: Vec<String>,
    /// `config.after_any`.
    pub after_any: bool,
    /// `config.not_before`.
    pub not_before: Option<Timestamp>,
    /// A pipeline step (`supporting_data.pipeline`).
    pub pipeline: bool,
    /// Its dependencies were walked once and do not lead back to it (a document dropped into
    /// queued_jobs/ is never checked at submission).
    pub acyclic: bool,
}

impl QueuedHead {
    fn of(job: &Job) -> QueuedHead {
        let c = &job.config;
        QueuedHead {
            priority: crate::model::flow::effective_priority(c.priority),
            queue_time: c.queue_time,
            after: c.after.clone().unwrap_or_default(),
            after_any: c.after_any == Some(true),
            not_before: c.not_before,
            pipeline: c.supporting_data.contains_key("pipeline"),
            acyclic: false,
        }
    }

    /// Sort key: higher priority first, then older, then id.
    fn key<'a>(&self, id: &'a str) -> (std::cmp::Reverse<i32>, Timestamp, &'a str) {
        (std::cmp::Reverse(self.priority), self.queue_time, id)
    }
}

/// Cache of queued jobs' heads by job id.
#[derive(Debug, Default)]
pub struct QueuedIndex {
    times: HashMap<String, QueuedHead>,
}

impl QueuedIndex {
    /// What is known of queued job `id`.
    pub fn head(&self, id: &str) -> Option<&QueuedHead> {
        self.times.get(id)
    }

    /// Notes that queued job `id`'s dependencies were found free of cycles.
    pub fn mark_acyclic(&mut self, id: &str) {
        if let Some(h) = self.times.get_mut(id) {
            h.acyclic = true;
        }
    }

    /// Forgets what is known about `id` (its file changed).
    pub fn forget(&mut self, id: &str) {
        self.times.remove(id);
    }

    /// Scans `dir`. A file is judged by the same parser as the full read that starts the job
    /// (`validator`, duplicate keys rejected), so a file the picker accepts is never refused
    /// later and one it refuses is failed, never left queued.
    pub fn scan(&mut self, dir: &Path, validator: &Validator) -> std::io::Result<QueuedScan> {
        let scan = scan_dir(dir)?;
        let mut out = QueuedScan {
            conflicts: scan.conflicts,
            refused: scan.refused,
            ..QueuedScan::default()
        };
        let mut seen = HashSet::with_capacity(scan.documents.len());
        let mut jobs: Vec<String> = Vec::with_capacity(scan.documents.len());
        for path in &scan.documents {
            let Some(id) = file_id(path) else { continue };
            seen.insert(id.to_string());
            if self.times.contains_key(id) {
                jobs.push(id.to_string());
                continue;
            }
            let bytes = match crate::store::read_limited(path) {
                Ok(b) => b,
                // Gone between listing and reading (cancelled, taken): not ours to judge.
                Err(_) => continue,
            };
            if let Err(e) = crate::model::strict::parse_value(&bytes)
                && e.is_eof()
                && recently_modified(path)
            {
                out.pending += 1;
                continue;
            }
            match validator.parse::<Job>(DocKind::Job, &bytes) {
                Ok(job) => {
                    self.times.insert(id.to_string(), QueuedHead::of(&job));
                    jobs.push(id.to_string());
                }
                Err(_) => out.invalid.push(id.to_string()),
            }
        }
        self.times.retain(|id, _| seen.contains(id));
        let times = &self.times;
        jobs.sort_by(|a, b| match (times.get(a), times.get(b)) {
            (Some(x), Some(y)) => x.key(a).cmp(&y.key(b)),
            _ => a.cmp(b),
        });
        out.ordered = jobs;
        Ok(out)
    }
}

fn recently_modified(path: &Path) -> bool {
    crate::store::safe::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_none_or(|age| age < WRITE_GRACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(t: &str) -> String {
        format!(
            r#"{{"config":{{"project":"P","working_directory":"/tmp","queue_time":"{t}",
            "jobtype":"noop","claude_command":"noop","claude_extra_args":[],
            "task_description":"t","supporting_data":{{}},"timeout_seconds":60}},
            "runtime":{{"status":"queued","start_time":null,"finish_time":null,
            "process_id":null,"llm_process_id":null,"error":null,"output":null}}}}"#
        )
    }

    #[test]
    fn oldest_first_and_invalid_and_pending() {
        let d = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(d.path().join(n), s).unwrap();
        w("b.json", &job("2025-01-02T00:00:00Z"));
        w("a.json", &job("2025-01-03T00:00:00Z"));
        w("c.json", &job("2025-01-01T00:00:00Z"));
        w("d.json", &job("2025-01-02T00:00:00Z"));
        w("bad.json", "{\"config\": 3}");
        let dup = job("2025-01-01T00:00:00Z").replacen("{", "{\"config\": \"\",", 1);
        w("dup.json", &dup);
        w("half.json", "{\"config\": {\"queue_ti");
        w("x (conflicted copy).json", &job("2025-01-01T00:00:00Z"));
        let v = Validator::embedded().unwrap();
        let mut idx = QueuedIndex::default();
        let s = idx.scan(d.path(), &v).unwrap();
        assert_eq!(s.ordered, ["c", "b", "d", "a"]);
        let mut invalid = s.invalid.clone();
        invalid.sort();
        assert_eq!(invalid, ["bad", "dup"]);
        assert_eq!(s.pending, 1);
        assert_eq!(s.conflicts.len(), 1);
        std::fs::remove_file(d.path().join("c.json")).unwrap();
        assert_eq!(idx.scan(d.path(), &v).unwrap().ordered, ["b", "d", "a"]);
    }

    #[test]
    fn highest_priority_first_then_oldest() {
        let d = tempfile::tempdir().unwrap();
        let w = |n: &str, t: &str, p: Option<i32>| {
            let mut j: serde_json::Value = serde_json::from_str(&job(t)).unwrap();
            if let Some(p) = p {
                j["config"]["priority"] = p.into();
            }
            std::fs::write(d.path().join(n), j.to_string()).unwrap()
        };
        w("old-low.json", "2025-01-01T00:00:00Z", Some(-10));
        w("old.json", "2025-01-01T00:00:00Z", None);
        w("new-high.json", "2025-01-03T00:00:00Z", Some(10));
        w("mid-high.json", "2025-01-02T00:00:00Z", Some(10));
        w("new.json", "2025-01-03T00:00:00Z", Some(0));
        w("top.json", "2025-01-04T00:00:00Z", Some(1000));
        let v = Validator::embedded().unwrap();
        let s = QueuedIndex::default().scan(d.path(), &v).unwrap();
        assert_eq!(
            s.ordered,
            ["top", "mid-high", "new-high", "old", "new", "old-low"]
        );
        w("big.json", "2025-01-04T00:00:00Z", Some(1001));
        let s = QueuedIndex::default().scan(d.path(), &v).unwrap();
        assert_eq!(s.invalid, ["big"], "out of bounds fails the schema");
    }
}
