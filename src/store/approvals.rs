//! `Queues/<q>/Jobs/approvals/`: the request and answer files a running job's worker and its
//! queue manager exchange (issue 15). A request is `<request_id>.request.json` (written by
//! the worker); its answer `<request_id>.answer.json` is written once, never replaced —
//! by the manager for the person who answered, or by the worker at the deadline — so the
//! first answer wins. The worker removes both when its job ends. Whether an answer counts is
//! not this module's to say: see `ApprovalAnswer::verify` (a planted file proves nothing).

use super::{Store, fsio, safe};
use crate::model::approval::{ApprovalAnswer, ApprovalRequest};
use std::io;
use std::path::{Path, PathBuf};

/// Largest request or answer file read.
const MAX_FILE: u64 = 1 << 20;

/// Suffix of a request file.
pub const REQUEST_SUFFIX: &str = ".request.json";
/// Suffix of an answer file.
pub const ANSWER_SUFFIX: &str = ".answer.json";

impl Store {
    /// `Queues/<q>/Jobs/approvals/`.
    pub fn approvals_dir(&self, queue: &str) -> PathBuf {
        self.queue_dir(queue).join("Jobs").join("approvals")
    }

    /// The request file of `request_id`.
    pub fn approval_request_path(&self, queue: &str, request_id: &str) -> PathBuf {
        self.approvals_dir(queue)
            .join(format!("{request_id}{REQUEST_SUFFIX}"))
    }

    /// The answer file of `request_id`.
    pub fn approval_answer_path(&self, queue: &str, request_id: &str) -> PathBuf {
        self.approvals_dir(queue)
            .join(format!("{request_id}{ANSWER_SUFFIX}"))
    }

    /// Writes a request (atomically; the folder is made when missing).
    pub fn write_approval_request(&self, queue: &str, req: &ApprovalRequest) -> io::Result<()> {
        safe::create_dir_all(&self.approvals_dir(queue))?;
        fsio::write_json_atomic(&self.approval_request_path(queue, &req.request_id), req)
    }

    /// Writes an answer unless one is there: `Ok(true)` when this one is now the answer,
    /// `Ok(false)` when another was first.
    pub fn write_approval_answer(&self, queue: &str, answer: &ApprovalAnswer) -> io::Result<bool> {
        let dir = self.approvals_dir(queue);
        safe::create_dir_all(&dir)?;
        let to = self.approval_answer_path(queue, &answer.request_id);
        let tmp = dir.join(format!(".{}.answer.tmp", uuid::Uuid::new_v4().simple()));
        fsio::write_json_atomic(&tmp, answer)?;
        let r = safe::rename_noreplace(&tmp, &to);
        match r {
            Ok(()) => {
                fsio::sync_parent(&to)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = safe::remove_file(&tmp);
                Ok(false)
            }
            Err(e) => {
                let _ = safe::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// The request `request_id`, if there.
    pub fn approval_request(&self, queue: &str, request_id: &str) -> Option<ApprovalRequest> {
        read_json(&self.approval_request_path(queue, request_id))
    }

    /// The answer to `request_id`, if there.
    pub fn approval_answer(&self, queue: &str, request_id: &str) -> Option<ApprovalAnswer> {
        read_json(&self.approval_answer_path(queue, request_id))
    }

    /// Every request in the folder, answered or not (whether an answer counts is for the
    /// queue manager to judge: see `queue::approval`). A file whose request id is not its
    /// name is left out.
    pub fn pending_approvals(&self, queue: &str) -> Vec<ApprovalRequest> {
        let Ok(entries) = safe::list_dir(&self.approvals_dir(queue)) else {
            return Vec::new();
        };
        let mut out: Vec<ApprovalRequest> = entries
            .iter()
            .filter_map(|e| e.name.to_str().map(str::to_string))
            .filter_map(|n| n.strip_suffix(REQUEST_SUFFIX).map(str::to_string))
            .filter_map(|id| {
                self.approval_request(queue, &id)
                    .filter(|r| r.request_id == id)
            })
            .collect();
        out.sort_by(|a, b| (a.requested_at, &a.request_id).cmp(&(b.requested_at, &b.request_id)));
        out
    }

    /// Removes the files of one request (the job ended or the request was settled).
    pub fn remove_approval(&self, queue: &str, request_id: &str) {
        let _ = safe::remove_file(&self.approval_request_path(queue, request_id));
        let _ = safe::remove_file(&self.approval_answer_path(queue, request_id));
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let f = safe::open_read(path).ok()?;
    let mut bytes = Vec::new();
    use std::io::Read;
    f.take(MAX_FILE).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}
