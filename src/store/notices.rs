//! Notices: what a person should hear about (issue 31), written by the daemon that saw it and
//! delivered by the notifier (`crate::notify`).
//!
//! A notice is one file, `notifications/pending/<id>.json`, written whole and only when absent
//! ([`write_new_atomic`]): its id is derived from what it is about (`job_failed` of job X in
//! queue Q is always the same id), so a daemon that emits it again after a crash, or a second
//! machine that saw the same thing, adds nothing. Files written by several machines never
//! share a name, so a sync engine never makes a conflict copy of one. The notifier moves a
//! notice to `notifications/delivered/` once every sink it was meant for has either taken it
//! or given up on it; what was sent is recorded in its per-machine ledger, not here.

use super::fsio::write_new_atomic;
use super::{Store, StoreError};
use crate::model::{Timestamp, is_safe_id};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The folder of notices, under the store root.
pub const NOTICES_DIR: &str = "notifications";

/// What a notice is about (a user chooses among these in their `notify.events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// A job finished.
    JobFinished,
    /// A job failed (with its error and cost).
    JobFailed,
    /// An approval waits for an answer (with its deadline).
    ApprovalWaiting,
    /// An approval was answered.
    ApprovalAnswered,
    /// A machine stopped answering (its heartbeat went stale).
    MachineLost,
    /// A PRD's tasks were written (its task graph exists).
    TasksCreated,
    /// A PRD / task graph is done.
    GraphDone,
    /// A PRD / task graph is blocked.
    GraphBlocked,
    /// A job failed and its retries are used up.
    RetryExhausted,
    /// `orchestrator notify test`: checks a set-up end to end.
    Test,
}

impl NoticeKind {
    /// Every kind, in the order they are documented.
    pub const ALL: [NoticeKind; 10] = [
        NoticeKind::JobFinished,
        NoticeKind::JobFailed,
        NoticeKind::ApprovalWaiting,
        NoticeKind::ApprovalAnswered,
        NoticeKind::MachineLost,
        NoticeKind::TasksCreated,
        NoticeKind::GraphDone,
        NoticeKind::GraphBlocked,
        NoticeKind::RetryExhausted,
        NoticeKind::Test,
    ];

    /// The name used in user documents, config.yaml and the ledger (`job_failed`).
    pub fn name(self) -> &'static str {
        match self {
            NoticeKind::JobFinished => "job_finished",
            NoticeKind::JobFailed => "job_failed",
            NoticeKind::ApprovalWaiting => "approval_waiting",
            NoticeKind::ApprovalAnswered => "approval_answered",
            NoticeKind::MachineLost => "machine_lost",
            NoticeKind::TasksCreated => "tasks_created",
            NoticeKind::GraphDone => "graph_done",
            NoticeKind::GraphBlocked => "graph_blocked",
            NoticeKind::RetryExhausted => "retry_exhausted",
            NoticeKind::Test => "test",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<NoticeKind> {
        NoticeKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One notice (`notifications/pending/<id>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notice {
    /// Derived from what it is about ([`Notice::id_for`]).
    pub id: String,
    /// What it is about.
    pub kind: NoticeKind,
    /// When it was emitted (the order the notifier delivers in).
    pub created: Timestamp,
    /// Who it is for (a user id); `None`: the store's admins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// One line.
    pub title: String,
    /// The details, plain text.
    #[serde(default)]
    pub body: String,
    /// The job concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Its queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The project concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The error, for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the job cost, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// An approval's deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Who answered an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// The approval request concerned (its Slack message carries Allow / Deny buttons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The machine that emitted it.
    #[serde(default)]
    pub host: String,
}

/// Longest title and body a notice keeps (characters): a sink shortens further for its own
/// limits, saying so.
pub const MAX_TITLE: usize = 200;
/// See [`MAX_TITLE`].
pub const MAX_BODY: usize = 8000;

const NOTICE_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6a1f_3c0e_9b7d_4e51_8a2c_31d0_5e7f_0931);

impl Notice {
    /// A new notice of `kind` about `subject` (what makes it unique: `queue/job`, a request
    /// id, a machine and its heartbeat), for `user`.
    pub fn new(kind: NoticeKind, subject: &str, user: Option<&str>, title: &str) -> Notice {
        Notice {
            id: Notice::id_for(kind, subject, user),
            kind,
            // Full precision: notices emitted within one second keep their order.
            created: Timestamp(chrono::Utc::now()),
            user: user.map(str::to_string),
            title: clip(title, MAX_TITLE),
            body: String::new(),
            job_id: None,
            queue: None,
            project: None,
            error: None,
            cost_usd: None,
            deadline: None,
            answered_by: None,
            request_id: None,
            host: super::hostname(),
        }
    }

    /// The id of the notice of `kind` about `subject` for `user`: the same inputs, the same
    /// id, on every machine.
    pub fn id_for(kind: NoticeKind, subject: &str, user: Option<&str>) -> String {
        let key = format!("{}\n{subject}\n{}", kind.name(), user.unwrap_or(""));
        uuid::Uuid::new_v5(&NOTICE_NAMESPACE, key.as_bytes()).to_string()
    }

    /// Sets the body (clipped to [`MAX_BODY`]).
    pub fn body(mut self, body: &str) -> Notice {
        self.body = clip(body, MAX_BODY);
        self
    }

    /// Sets the job and its queue.
    pub fn job(mut self, queue: &str, id: &str) -> Notice {
        self.queue = Some(queue.to_string());
        self.job_id = Some(id.to_string());
        self
    }

    /// Checks what a notice read from the store claims: safe ids, bounded texts.
    pub fn check(&self) -> Result<(), String> {
        let ids = [
            ("id", Some(&self.id)),
            ("user", self.user.as_ref()),
            ("job_id", self.job_id.as_ref()),
            ("queue", self.queue.as_ref()),
            ("project", self.project.as_ref()),
            ("request_id", self.request_id.as_ref()),
        ];
        for (field, v) in ids {
            if let Some(v) = v
                && !is_safe_id(v)
            {
                return Err(format!("{field} {v:?} is not a safe id"));
            }
        }
        if self.title.chars().count() > MAX_TITLE || self.body.chars().count() > MAX_BODY {
            return Err(format!(
                "title or body too long (at most {MAX_TITLE} and {MAX_BODY} characters)"
            ));
        }
        Ok(())
    }
}

/// `s` cut to `max` characters, with an ellipsis when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

impl Store {
    /// `notifications/pending/`: notices not yet delivered everywhere.
    pub fn notices_pending_dir(&self) -> PathBuf {
        self.root().join(NOTICES_DIR).join("pending")
    }

    /// `notifications/delivered/`: notices every sink has taken or given up on.
    pub fn notices_delivered_dir(&self) -> PathBuf {
        self.root().join(NOTICES_DIR).join("delivered")
    }

    /// Emits `notice`: writes it to `notifications/pending/` unless a notice of that id was
    /// emitted before (pending or delivered). Returns whether it was written. Never fails the
    /// caller's work: callers log the error and go on.
    pub fn emit_notice(&self, notice: &Notice) -> Result<bool, StoreError> {
        notice.check().map_err(|e| StoreError::Io {
            path: self.notices_pending_dir(),
            source: std::io::Error::other(e),
        })?;
        let name = format!("{}.json", notice.id);
        if super::safe::exists(&self.notices_delivered_dir().join(&name)) {
            return Ok(false);
        }
        let dir = self.notices_pending_dir();
        let path = dir.join(&name);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        // The store's own folder maker: a root daemon (the worker harness, the system queue
        // manager) leaves the folder to the store's owner, never root's (a root-owned
        // notifications/pending/ stopped the service account and Syncthing writing there).
        super::safe::create_dir_all(&dir).map_err(io)?;
        let mut bytes = serde_json::to_vec_pretty(notice).map_err(|e| io(e.into()))?;
        bytes.push(b'\n');
        match write_new_atomic(&path, &bytes) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io(e)),
        }
    }

    /// [`Store::emit_notice`] for hooks: an error is a warning, never the caller's failure.
    pub fn notify(&self, notice: Notice) {
        if let Err(e) = self.emit_notice(&notice) {
            tracing::warn!(
                notice = %notice.id,
                kind = notice.kind.name(),
                "notice not written: {e}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root in a store another account owns (the packaged store is `agentstore`'s), the
    /// notice's folders and file belong to that account, not to root.
    #[test]
    fn a_notice_written_by_root_belongs_to_the_stores_owner() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "this test needs root (CI runs as root)"
            );
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(&d.path().join("s")).unwrap();
        let owner = nix::unistd::Uid::from_raw(65534);
        let group = nix::unistd::Gid::from_raw(65534);
        for e in walk(store.root()) {
            nix::unistd::chown(&e, Some(owner), Some(group)).unwrap();
        }
        let n = Notice::new(
            NoticeKind::JobFailed,
            "q/j1",
            Some("alice"),
            "Job j1 failed",
        );
        assert!(store.emit_notice(&n).unwrap());
        let dir = store.notices_pending_dir();
        for p in [
            dir.parent().unwrap().to_path_buf(),
            dir.clone(),
            dir.join(format!("{}.json", n.id)),
        ] {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!((m.uid(), m.gid()), (65534, 65534), "{}", p.display());
        }
    }

    fn walk(root: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = vec![root.to_path_buf()];
        let mut i = 0;
        while i < out.len() {
            if let Ok(rd) = std::fs::read_dir(&out[i]) {
                out.extend(rd.flatten().map(|e| e.path()));
            }
            i += 1;
        }
        out
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = Notice::id_for(NoticeKind::JobFailed, "q/j1", Some("alice"));
        assert_eq!(
            a,
            Notice::id_for(NoticeKind::JobFailed, "q/j1", Some("alice"))
        );
        assert_ne!(
            a,
            Notice::id_for(NoticeKind::JobFinished, "q/j1", Some("alice"))
        );
        assert_ne!(
            a,
            Notice::id_for(NoticeKind::JobFailed, "q/j1", Some("bob"))
        );
        for k in NoticeKind::ALL {
            assert_eq!(NoticeKind::parse(k.name()), Some(k));
        }
    }

    #[test]
    fn clip_marks_the_cut() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
