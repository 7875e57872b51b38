//! Slack threads opened by an `/agentstore` command that queues a job (issue 31): the Slack
//! app ([`crate::slackapp`]) opens the thread in the asker's direct messages with the app and
//! records it here, under the message's correlation id, BEFORE it submits the message; the
//! job carries that correlation id, so when the job ends its `job_finished` / `job_failed`
//! notice is delivered as a reply in the thread ([`reply_for`]) — exactly once, through the
//! ledger like every delivery — whichever machine sends by then.
//!
//! A record is store content, hostile to its reader: it chooses no channel. The reply goes
//! to the direct-message channel of the job's own user (their `slack_username`), and only
//! when the record names that user; the record gives the thread's `ts` and nothing else.

use crate::model::{Job, JobStatus, Timestamp, is_safe_id};
use crate::store::notices::{NOTICES_DIR, clip};
use crate::store::{Store, read_limited, safe};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::PathBuf;

/// The folder of thread records, under `notifications/`.
pub const THREADS_DIR: &str = "slack-threads";

/// One thread: `notifications/slack-threads/<correlation_id>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackThread {
    /// The message (and so the job) the thread is about.
    pub correlation_id: String,
    /// The agentstore user who asked.
    pub user: String,
    /// Their Slack member id.
    pub member: String,
    /// The direct-message channel the thread is in.
    pub channel: String,
    /// The thread's first message.
    pub ts: String,
    /// When it was opened.
    pub created: Timestamp,
}

/// Whether `s` looks like a Slack id (`U…`, `D…`, `C…`: capitals and digits).
pub fn is_slack_id(s: &str) -> bool {
    (2..=32).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// Whether `s` looks like a Slack message timestamp (`1700000000.000100`).
pub fn is_slack_ts(s: &str) -> bool {
    let Some((a, b)) = s.split_once('.') else {
        return false;
    };
    s.len() <= 32
        && !a.is_empty()
        && !b.is_empty()
        && a.chars().chain(b.chars()).all(|c| c.is_ascii_digit())
}

impl SlackThread {
    /// Checks what a record read from the store claims.
    pub fn check(&self) -> Result<(), String> {
        if !is_safe_id(&self.correlation_id) || !is_safe_id(&self.user) {
            return Err("correlation_id and user must be safe ids".into());
        }
        if !is_slack_id(&self.member) || !is_slack_id(&self.channel) {
            return Err("member and channel must be Slack ids".into());
        }
        if !is_slack_ts(&self.ts) {
            return Err(format!("ts {:?} is not a Slack timestamp", self.ts));
        }
        Ok(())
    }
}

fn dir(store: &Store) -> PathBuf {
    store.root().join(NOTICES_DIR).join(THREADS_DIR)
}

/// Records `t` (a new correlation id each time: an existing record is an error).
pub fn save(store: &Store, t: &SlackThread) -> Result<(), String> {
    t.check()?;
    let d = dir(store);
    safe::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    let path = d.join(format!("{}.json", t.correlation_id));
    let mut bytes = serde_json::to_vec_pretty(t).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    crate::store::write_new_atomic(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Forgets the record of `correlation_id` (its message was refused: no job will end).
pub fn forget(store: &Store, correlation_id: &str) {
    if is_safe_id(correlation_id) {
        let _ = safe::remove_file(&dir(store).join(format!("{correlation_id}.json")));
    }
}

/// How long a thread record is kept: a job asked for from Slack that has not ended by then
/// ends without a reply in its thread (its notices go where its user chose).
pub const KEEP_SECS: u64 = 30 * 24 * 3600;

/// Removes the records opened more than `keep_secs` ago (by the store's clock claims: one
/// from beyond the clock skew counts as old), and those that cannot be read. Returns how
/// many went.
pub fn prune(store: &Store, keep_secs: u64) -> usize {
    let now = Timestamp::now();
    let mut gone = 0;
    for cid in recorded(store) {
        let keep =
            load(store, &cid).is_some_and(|t| t.created.claimed_age(&now) <= keep_secs as f64);
        if !keep && safe::remove_file(&dir(store).join(format!("{cid}.json"))).is_ok() {
            gone += 1;
        }
    }
    gone
}

/// The correlation ids that have a thread (read once per delivery pass).
pub fn recorded(store: &Store) -> HashSet<String> {
    let Ok(entries) = safe::list_dir(&dir(store)) else {
        return HashSet::new();
    };
    entries
        .into_iter()
        .filter(|e| e.kind == safe::EntryKind::File)
        .filter_map(|e| {
            let name = e.name.to_str()?;
            if crate::store::is_ignored(name) {
                return None;
            }
            name.strip_suffix(".json").map(str::to_string)
        })
        .filter(|id| is_safe_id(id))
        .collect()
}

/// The record of `correlation_id`, when there is a sound one.
pub fn load(store: &Store, correlation_id: &str) -> Option<SlackThread> {
    if !is_safe_id(correlation_id) {
        return None;
    }
    let path = dir(store).join(format!("{correlation_id}.json"));
    let t: SlackThread = read_limited(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())?;
    match t.check() {
        Ok(()) if t.correlation_id == correlation_id => Some(t),
        Ok(()) => {
            tracing::warn!("{}: names another correlation id", path.display());
            None
        }
        Err(why) => {
            tracing::warn!("{}: {why}", path.display());
            None
        }
    }
}

/// The thread a job's end is answered in: the job (read from `finished_jobs/` or
/// `failed_jobs/` of `queue`) was asked for from Slack by `user`, and `user` is the job's
/// own. `known`: [`recorded`], read once per pass.
pub fn thread_of_job(
    store: &Store,
    known: &HashSet<String>,
    queue: &str,
    job_id: &str,
    user: &str,
) -> Option<(SlackThread, Job)> {
    if known.is_empty() {
        return None;
    }
    let job = [JobStatus::Finished, JobStatus::Failed]
        .into_iter()
        .find_map(|s| {
            store
                .read_doc::<Job>(
                    crate::model::DocKind::Job,
                    &store.job_path(queue, s, job_id),
                )
                .ok()
        })?;
    let cid = job.config.correlation_id.as_deref()?;
    if !known.contains(cid) || job.config.user.as_deref() != Some(user) {
        return None;
    }
    let t = load(store, cid)?;
    (t.user == user).then_some((t, job))
}

/// The reply in the thread when job `job_id` ended: how it ended, its result (or error),
/// its cost, and where the whole of it is; at most `max` characters.
pub fn reply_for(job_id: &str, job: &Job, max: usize) -> String {
    let r = &job.runtime;
    let failed = r.status == JobStatus::Failed;
    let mut head = format!(
        "Job {job_id} {}",
        if failed { "failed" } else { "finished" }
    );
    if let Some(c) = r.cost_usd {
        head.push_str(&format!(" (cost ${c:.4})"));
    }
    let tail = format!("\n\nThe whole of it: `orchestrator view-job {job_id}`");
    let body = if failed {
        format!("Error: {}", r.error.as_deref().unwrap_or("none recorded"))
    } else {
        job.result_text()
    };
    let room = max.saturating_sub(head.chars().count() + tail.chars().count() + 2);
    format!("{head}\n\n{}{tail}", clip(body.trim(), room))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_threads_are_found_by_their_file_names() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(&d.path().join("S")).unwrap();
        let t = SlackThread {
            correlation_id: "c-1".into(),
            user: "alice".into(),
            member: "UALICE".into(),
            channel: "DALICE".into(),
            ts: "1700000000.000001".into(),
            created: Timestamp::now(),
        };
        save(&store, &t).unwrap();
        assert!(save(&store, &t).is_err(), "a record is written once");
        std::fs::write(dir(&store).join(".c-2.json"), "{}").unwrap();
        assert_eq!(recorded(&store), HashSet::from(["c-1".to_string()]));
        assert_eq!(load(&store, "c-1"), Some(t.clone()));
        let mut old = t.clone();
        old.correlation_id = "c-old".into();
        old.created = serde_json::from_value(serde_json::json!("2020-01-01T00:00:00Z")).unwrap();
        save(&store, &old).unwrap();
        std::fs::write(dir(&store).join("c-bad.json"), "{").unwrap();
        assert_eq!(
            prune(&store, KEEP_SECS),
            2,
            "the old one and the unreadable one"
        );
        assert_eq!(recorded(&store), HashSet::from(["c-1".to_string()]));
        forget(&store, "c-1");
        assert!(recorded(&store).is_empty());
    }

    #[test]
    fn ids_and_timestamps_are_checked() {
        assert!(is_slack_id("UALICE") && is_slack_id("D0123"));
        assert!(!is_slack_id("u1") && !is_slack_id("D../x") && !is_slack_id("U"));
        assert!(is_slack_ts("1700000000.000100"));
        for bad in ["1700000000", ".1", "1.", "1.2.3", "1e5.1", "../1.2"] {
            assert!(!is_slack_ts(bad), "{bad}");
        }
    }
}
