//! Archiving (issue 17): finished and failed jobs older than a cutoff move, one rename each,
//! into `Queues/<q>/Jobs/archive/YYYY-MM/<state>_jobs/<id>.json` (the month of their end), so
//! the state folders the daemons and listings read stay small. Nothing is copied or
//! rewritten; running the command again moves only what became old since.

use super::{Store, file_id, scan_dir, scan_subdirs};
use crate::model::{JobStatus, Timestamp};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The job documents of state folder `dir` for a pass over the whole store (archive,
/// migrate). What it cannot use is named in `errors`, never passed over in silence: a folder
/// that is a symbolic link or cannot be read (its jobs are left as they are), and entries that
/// are links, FIFOs, devices or folders (never followed or read). A missing folder has none.
pub(super) fn scan_reporting(dir: &Path, errors: &mut Vec<String>) -> Vec<PathBuf> {
    match scan_dir(dir) {
        Ok(scan) => {
            errors.extend(scan.refused.iter().map(|p| {
                format!(
                    "{}: not a regular file (a symbolic link, FIFO or device); never followed or read, left as it is",
                    p.display()
                )
            }));
            scan.documents
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            errors.push(format!(
                "{}: cannot be read ({e}); the jobs in it are left as they are",
                dir.display()
            ));
            Vec::new()
        }
    }
}

/// The month folders of archive folder `root`; entries that are not folders (a symbolic link
/// to elsewhere, a file) are named in `errors` when `errors` is given.
fn months(root: &Path, errors: Option<&mut Vec<String>>) -> Vec<String> {
    let entries = match super::safe::list_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            if let Some(errors) = errors {
                errors.push(format!(
                    "{}: cannot be read ({e}); the jobs in it are left as they are",
                    root.display()
                ));
            }
            return Vec::new();
        }
    };
    if let Some(errors) = errors {
        errors.extend(
            entries
                .iter()
                .filter(|e| e.kind != super::safe::EntryKind::Dir)
                .filter(|e| !e.name.as_encoded_bytes().starts_with(b"."))
                .map(|e| {
                    format!(
                        "{}: not a month folder (a symbolic link, file or device); never followed or read, left as it is",
                        root.join(&e.name).display()
                    )
                }),
        );
    }
    scan_subdirs(root).unwrap_or_default()
}

/// The two states that are archived.
pub const ARCHIVED_STATES: [JobStatus; 2] = [JobStatus::Finished, JobStatus::Failed];

/// What one archive run did (or, dry, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Jobs moved: queue, state, id, month.
    pub moved: Vec<(String, JobStatus, String, String)>,
    /// Jobs old enough but kept: finished jobs the completion handler has not handled yet.
    pub not_handled: Vec<String>,
    /// Jobs old enough whose archive name is taken (an id seen twice); kept in place.
    pub collisions: Vec<String>,
    /// Files that could not be read or moved, with why.
    pub errors: Vec<String>,
    /// Jobs looked at.
    pub seen: usize,
}

#[derive(Deserialize)]
struct Head {
    config: HeadConfig,
    runtime: HeadRuntime,
}

#[derive(Deserialize)]
struct HeadConfig {
    queue_time: Timestamp,
}

#[derive(Deserialize)]
struct HeadRuntime {
    #[serde(default)]
    finish_time: Option<Timestamp>,
    #[serde(default)]
    handled: Option<bool>,
}

/// `Queues/<q>/Jobs/archive`.
pub fn archive_root(store: &Store, queue: &str) -> PathBuf {
    store.queue_dir(queue).join("Jobs").join("archive")
}

/// Parses `30d`, `12h`, `90m`, `45s`, `2w` (a bare number is days).
pub fn parse_age(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "d"),
    };
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => 0,
    };
    num.parse::<u64>()
        .ok()
        .filter(|_| mult > 0)
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| {
            format!(
                "--older-than {s:?}: expected a whole number with a unit, s (seconds), m (minutes), h (hours), d (days) or w (weeks), e.g. 30d"
            )
        })
}

/// Moves (unless `dry_run`) the finished and failed jobs of every queue that ended before
/// `cutoff` into their queue's archive.
pub fn archive(store: &Store, cutoff: Timestamp, dry_run: bool) -> super::Result<ArchiveReport> {
    let handler = store.config().orchestrator.enable_job_completion_handler;
    let mut r = ArchiveReport::default();
    let mut made_dirs: HashSet<PathBuf> = HashSet::new();
    let mut synced: HashSet<PathBuf> = HashSet::new();
    for q in store.queue_ids()? {
        for state in ARCHIVED_STATES {
            let dir = store.jobs_dir(&q, state);
            for path in scan_reporting(&dir, &mut r.errors) {
                let Some(id) = file_id(&path).map(str::to_string) else {
                    continue;
                };
                r.seen += 1;
                let head: Head = match super::read_document(&path)
                    .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
                {
                    Ok(h) => h,
                    Err(e) => {
                        r.errors.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                };
                let ended = head.runtime.finish_time.unwrap_or(head.config.queue_time);
                if ended >= cutoff {
                    continue;
                }
                if state == JobStatus::Finished && handler && head.runtime.handled != Some(true) {
                    r.not_handled.push(id);
                    continue;
                }
                let month = ended.0.format("%Y-%m").to_string();
                let to_dir = archive_root(store, &q).join(&month).join(state.dir());
                let to = to_dir.join(format!("{id}.json"));
                if super::safe::exists(&to) {
                    r.collisions.push(format!("{q}/{id}"));
                    continue;
                }
                if !dry_run {
                    // One rename each; every folder touched is synced once at the end (an
                    // fsync per move made 100,000 jobs take minutes).
                    let made = if made_dirs.contains(&to_dir) {
                        Ok(())
                    } else {
                        super::safe::create_dir_all(&to_dir)
                            .map(|()| {
                                made_dirs.insert(to_dir.clone());
                            })
                            .map_err(|e| {
                                std::io::Error::other(format!(
                                    "cannot create {} ({e}); left in place",
                                    to_dir.display()
                                ))
                            })
                    };
                    let moved = made.and_then(|()| super::safe::rename_noreplace(&path, &to));
                    if let Err(e) = moved {
                        r.errors.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                    synced.insert(dir.clone());
                }
                r.moved.push((q.clone(), state, id, month));
            }
        }
    }
    for d in made_dirs.iter().chain(&synced) {
        if let Err(e) = super::safe::sync_dir(d) {
            r.errors.push(format!("{}: {e}", d.display()));
        }
    }
    Ok(r)
}

/// One archived job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    /// Queue.
    pub queue: String,
    /// `YYYY-MM`.
    pub month: String,
    /// Finished or failed.
    pub status: JobStatus,
    /// Job id.
    pub id: String,
    /// The file.
    pub path: PathBuf,
}

/// Every archived job of `queue` (all queues when `None`), by queue, month, state and id.
pub fn archived(store: &Store, queue: Option<&str>) -> super::Result<Vec<Archived>> {
    archived_reporting(store, queue, None)
}

/// [`archived`], naming in `errors` (when given) what it cannot use: month folders that are
/// links or unreadable, entries that are not regular files.
pub(super) fn archived_reporting(
    store: &Store,
    queue: Option<&str>,
    mut errors: Option<&mut Vec<String>>,
) -> super::Result<Vec<Archived>> {
    let queues = match queue {
        Some(q) => vec![q.to_string()],
        None => store.queue_ids()?,
    };
    let mut out = Vec::new();
    for q in queues {
        let root = archive_root(store, &q);
        for month in months(&root, errors.as_deref_mut()) {
            for status in ARCHIVED_STATES {
                let dir = root.join(&month).join(status.dir());
                let mut ignored = Vec::new();
                let paths = scan_reporting(&dir, errors.as_deref_mut().unwrap_or(&mut ignored));
                for path in paths {
                    let Some(id) = file_id(&path).map(str::to_string) else {
                        continue;
                    };
                    out.push(Archived {
                        queue: q.clone(),
                        month: month.clone(),
                        status,
                        id,
                        path,
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| {
        (&a.queue, &a.month, a.status.name(), &a.id).cmp(&(
            &b.queue,
            &b.month,
            b.status.name(),
            &b.id,
        ))
    });
    Ok(out)
}

/// Where archived job `id` is, if it is (a few directory lookups per queue and month).
pub fn find_archived(store: &Store, queues: &[String], id: &str) -> Option<(JobStatus, PathBuf)> {
    for q in queues {
        let root = archive_root(store, q);
        let Ok(months) = scan_subdirs(&root) else {
            continue;
        };
        for month in months {
            for s in ARCHIVED_STATES {
                let p = root.join(&month).join(s.dir()).join(format!("{id}.json"));
                if super::safe::is_file(&p) {
                    return Some((s, p));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::parse_age;

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("30d"), Ok(30 * 86_400));
        assert_eq!(parse_age("2w"), Ok(14 * 86_400));
        assert_eq!(parse_age("90m"), Ok(5400));
        assert_eq!(parse_age("7"), Ok(7 * 86_400));
        assert!(parse_age("30y").unwrap_err().contains("30y"));
        assert!(parse_age("").is_err());
    }
}
