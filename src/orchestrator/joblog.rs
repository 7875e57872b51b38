//! `job-log`: a job's journal lines, page by page after a cursor — what
//! `orchestrator logs ID --follow` prints, for callers that cannot run journalctl
//! themselves (the dashboard's live log, through the bus). PRD §10: only who may see the
//! job may read its log.
//!
//! Only lines whose sender journald itself vouches for are shown: the `JOB_ID=` field is
//! written by the sender, so any local account could log lines under another user's job
//! id; the match also requires `_UID` (set by journald, not the sender) to be root, this
//! daemon's own account, the `agentstore` service account, or the job's own account.

use super::RouteError;
use crate::model::{JobStatus, Message};
use crate::permissions::Caller;
use crate::store::Store;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Lines in one answer, at most.
pub const MAX_LINES: usize = 500;
/// Bytes of one line kept (the rest is cut, said with `…`).
const MAX_LINE_BYTES: usize = 4096;

/// The accounts whose lines count for a job run as `unix_user`.
fn trusted_uids(store: &Store, project_owner: Option<&str>) -> Vec<u32> {
    let mut uids = vec![0, nix::unistd::geteuid().as_raw()];
    let names = ["agentstore".to_string()]
        .into_iter()
        .chain(project_owner.and_then(|o| store.user(o).ok().map(|u| u.unix_name().to_string())));
    for name in names {
        if let Ok(a) = crate::trust::account::Account::lookup(&name) {
            uids.push(a.uid);
        }
    }
    uids.sort_unstable();
    uids.dedup();
    uids
}

/// Cuts `s` to [`MAX_LINE_BYTES`] at a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_LINE_BYTES {
        let mut end = MAX_LINE_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// Answers `job-log` (content: `job`, optional `after` cursor and `limit`):
/// `{"lines": [...], "cursor": "...", "ended": bool, "more": bool}`. `cursor` is what to
/// pass as `after` next time (unchanged when nothing new came); `ended` says the job has
/// finished or failed (a reader stops once it has read everything after that); `more`
/// says lines are waiting beyond `limit`.
pub fn answer(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    let str_arg = |k: &str| msg.content.get(k).and_then(Value::as_str);
    let id = str_arg("job")
        .or(str_arg("job_id"))
        .ok_or_else(|| RouteError::Invalid("job-log: content.job is required (a string)".into()))?;
    crate::store::check_id("job", id)?;
    let after = str_arg("after").unwrap_or("");
    if after.len() > 512 || !after.chars().all(|c| c.is_ascii_graphic()) {
        return Err(RouteError::Invalid(
            "job-log: content.after is not a journal cursor (at most 512 printable ASCII characters, no spaces)"
                .into(),
        ));
    }
    let limit = match msg.content.get("limit") {
        None | Some(Value::Null) => MAX_LINES,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_LINES as u64).contains(n))
            .map(|n| n as usize)
            .ok_or_else(|| {
                RouteError::Invalid(format!(
                    "job-log: content.limit must be a number from 1 to {MAX_LINES}"
                ))
            })?,
    };
    let loc = store.find_job(id)?;
    let job = store.job(&loc)?;
    let project = store.project(&job.config.project).ok();
    if !who.can_see_job(&job, project.as_ref()) {
        return Err(crate::permissions::job_hidden(id).into());
    }
    let ended = matches!(loc.status, JobStatus::Finished | JobStatus::Failed);
    if !crate::systemd::journal_readable() {
        return Err(RouteError::Failed(
            "no systemd journal on this machine: the job's stored output is all there is (view-job)"
                .into(),
        ));
    }
    let mut cmd = Command::new("journalctl");
    cmd.args([
        "--no-pager",
        "--quiet",
        "-o",
        "json",
        "--output-fields=MESSAGE,__CURSOR",
    ]);
    if !after.is_empty() {
        cmd.arg(format!("--after-cursor={after}"));
    }
    // `--` first: nothing after it is an option. Fields of one name are ORed, of different
    // names ANDed: JOB_ID=id AND (_UID=a OR _UID=b …).
    cmd.arg("--").arg(format!("JOB_ID={id}"));
    for uid in trusted_uids(store, project.as_ref().map(|p| p.owner.as_str())) {
        cmd.arg(format!("_UID={uid}"));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| RouteError::Failed(format!("cannot run journalctl: {e}")))?;
    let mut lines = Vec::new();
    let mut cursor = after.to_string();
    let mut more = false;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if lines.len() == limit {
                more = true;
                break;
            }
            // MESSAGE is a string, or an array of bytes when it is not UTF-8.
            let text = match entry.get("MESSAGE") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(b)) => String::from_utf8_lossy(
                    &b.iter()
                        .filter_map(|x| x.as_u64().and_then(|n| u8::try_from(n).ok()))
                        .collect::<Vec<u8>>(),
                )
                .into_owned(),
                _ => String::new(),
            };
            if let Some(c) = entry.get("__CURSOR").and_then(Value::as_str) {
                cursor = c.to_string();
            }
            lines.push(cut(text));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(json!({"job": id, "lines": lines, "cursor": cursor, "ended": ended, "more": more}))
}
