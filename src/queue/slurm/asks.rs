//! Approval requests of the jobs a root manager runs in Slurm as their own account (issue 27,
//! [`relay`](super::relay)): read from the step's output at each poll, checked, and put in the
//! store by the manager itself, where the job's owner lists and answers them as any other;
//! answers go back through [`Relay::deliver`].

use super::relay::ASKS_CHUNK;
use super::*;
use crate::model::approval::{ApprovalRequest, is_request_id_of, summary};

/// The most approval requests one relay job may put in the store.
const MAX_RELAYED_REQUESTS: usize = 256;

/// The longest request line taken (the store's request files are read up to 1 MiB).
const MAX_ASK_BYTES: usize = 512 << 10;

impl Manager {
    /// Reads what the queue's running relay jobs wrote since the last poll and puts each new
    /// approval request in the store.
    pub(super) async fn relay_asks(&mut self) {
        let due: Vec<(String, Relay, u64)> = self
            .slurm
            .jobs()
            .filter(|(_, t)| !matches!(t.state.as_str(), "PENDING" | ""))
            .filter_map(|(id, t)| Some((id.clone(), t.relay.clone()?, t.asks_read)))
            .collect();
        for (id, relay, offset) in due {
            let Some(bytes) = relay.read_from(offset).await else {
                continue;
            };
            // Whole lines only; a line longer than a whole read is skipped.
            let whole = match bytes.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None if bytes.len() as u64 >= ASKS_CHUNK => bytes.len(),
                None => 0,
            };
            if let Some(t) = self.slurm.job_mut(&id) {
                t.asks_read = offset.saturating_add(whole as u64);
            }
            for ask in crate::model::relay::asks_in(&bytes[..whole]) {
                self.take_relayed_ask(&id, &relay, ask).await;
            }
        }
        // The step denies at the deadline itself; here the request leaves the list.
        let relayed: Vec<String> = self
            .slurm
            .jobs()
            .filter(|(_, t)| t.relay.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        self.expire_requests_of(&relayed).await;
    }

    /// One request line of relay job `id` (untrusted: the account wrote it). Only the tool
    /// and its input are taken from it; the ids must be the job's own, and the time and the
    /// deadline are the manager's.
    async fn take_relayed_ask(&mut self, id: &str, relay: &Relay, line: &[u8]) {
        let q = self.cfg.queue.clone();
        let refuse = |why: &str| {
            tracing::warn!(job_id = %id, queue = %q, file = %relay.file.display(),
                "a relayed approval request was refused: {why}");
        };
        if line.len() > MAX_ASK_BYTES {
            return refuse(&format!("longer than {MAX_ASK_BYTES} bytes"));
        }
        let theirs: ApprovalRequest = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => return refuse(&format!("not an approval request: {e}")),
        };
        let rid = theirs.request_id.clone();
        if theirs.job_id != id || !is_request_id_of(id, &rid) {
            return refuse(&format!(
                "request {rid:?} of job {:?} is not this job's",
                theirs.job_id
            ));
        }
        let Some(t) = self.slurm.job_mut(id) else {
            return;
        };
        if t.asked.contains(&rid) {
            return;
        }
        if t.asked.len() >= MAX_RELAYED_REQUESTS {
            return refuse(&format!("more than {MAX_RELAYED_REQUESTS} requests"));
        }
        t.asked.push(rid.clone());
        // Read again after a restart: already in the store (asked, perhaps answered).
        let there = |p: std::path::PathBuf| crate::store::safe::exists(&p);
        if there(self.store.approval_request_path(&q, &rid))
            || there(self.store.approval_answer_path(&q, &rid))
        {
            return;
        }
        let secs = self.config.approvals.clone().unwrap_or_default().deadline();
        let now = Timestamp::now();
        let tool: String = theirs.tool.chars().take(200).collect();
        let req = ApprovalRequest {
            request_id: rid.clone(),
            job_id: id.to_string(),
            summary: summary(&tool, &theirs.input),
            tool,
            input: theirs.input,
            requested_at: now,
            deadline: now.plus_secs(secs),
        };
        if let Err(e) = self.store.write_approval_request(&q, &req) {
            tracing::warn!(job_id = %id, queue = %q, "cannot put the relayed approval request {rid} in the store: {e}");
            return;
        }
        let name = format!("{rid}{}", crate::store::approvals::REQUEST_SUFFIX);
        self.on_approval_file(Some(&name)).await;
    }

    /// The relay of running Slurm job `id`, if it is one.
    pub(in crate::queue) fn relay_job(&self, id: &str) -> Option<Relay> {
        self.slurm.job(id).and_then(|t| t.relay.clone())
    }

    /// Removes the store's files of the requests an ended relay job asked (its step never
    /// opens the store, so nothing else does).
    pub(super) fn forget_asks(&self, t: &Tracked) {
        for rid in &t.asked {
            self.store.remove_approval(&self.cfg.queue, rid);
        }
    }
}
