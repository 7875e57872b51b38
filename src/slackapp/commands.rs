//! `/agentstore` slash commands, for the agentstore user the Slack member maps to:
//!
//! - `status`: the approval requests waiting that this user may answer (PRD §10, the rule the
//!   manager applies), with the commands that answer them;
//! - `approve <queue> <request>` / `deny <queue> <request> [reason…]`: `Queue1.AnswerFor`.
//!
//! The answer is the text of the envelope's acknowledgement (seen only by the member).

use super::SlackApp;
use crate::model::{DocKind, Job, JobStatus};
use crate::permissions::Caller;
use serde_json::Value;

/// The usage line.
const USAGE: &str = "Commands: `/agentstore status`, `/agentstore approve <queue> <request>`, `/agentstore deny <queue> <request> [reason]`.";

/// Longest command text taken.
const MAX_TEXT: usize = 2000;

/// The reply to the slash command payload `p`.
pub async fn handle(app: &SlackApp, p: &Value) -> String {
    let Some(member) = p["user_id"].as_str() else {
        return "Refused: the command names no Slack user.".into();
    };
    let text = p["text"].as_str().unwrap_or("");
    if text.chars().count() > MAX_TEXT {
        return format!("Refused: the command is longer than {MAX_TEXT} characters.");
    }
    let user = match app.user_for(member) {
        Ok(u) => u,
        Err(why) => return why,
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        [] | ["help"] => USAGE.into(),
        ["status"] => status(app, &user),
        [verb @ ("approve" | "deny"), queue, request, reason @ ..] => {
            let allow = *verb == "approve";
            if allow && !reason.is_empty() {
                return format!("Refused: `approve` takes a queue and a request only. {USAGE}");
            }
            let why = if reason.is_empty() {
                format!("answered in Slack by {} ({member})", user.id)
            } else {
                reason.join(" ")
            };
            answer(app, &user.id, queue, request, allow, &why).await
        }
        ["approve" | "deny", ..] => {
            format!("Refused: name the queue and the request. {USAGE}")
        }
        [other, ..] => format!(
            "Unknown command {:?}. {USAGE}",
            crate::store::notices::clip(other, 40)
        ),
    }
}

async fn answer(
    app: &SlackApp,
    user: &str,
    queue: &str,
    request: &str,
    allow: bool,
    why: &str,
) -> String {
    if !crate::model::is_safe_id(queue) || !crate::model::is_safe_id(request) {
        return "Refused: the queue and request must be ids (letters, digits, - and _).".into();
    }
    let proxy = match crate::bus::queue::queue_proxy(&app.conn, queue).await {
        Ok(p) => p,
        Err(e) => return format!("Not answered: {}", super::bus_error_text(queue, &e)),
    };
    match proxy.answer_for(request, allow, false, why, user).await {
        Ok(()) => format!(
            "{} request {request} of queue {queue} as {user}.",
            if allow { "Allowed" } else { "Denied" }
        ),
        Err(e) => format!("Refused for {user}: {}", super::bus_error_text(queue, &e)),
    }
}

/// The waiting requests `user` may answer, read from the store by the manager's rule.
fn status(app: &SlackApp, user: &crate::model::User) -> String {
    let caller = Caller::User(user.clone());
    let store = &app.store;
    let mut lines = Vec::new();
    for q in store.queue_ids().unwrap_or_default() {
        for r in store.pending_approvals(&q) {
            // Answered (the manager settles it when its worker reads the answer).
            if store.approval_answer(&q, &r.request_id).is_some() {
                continue;
            }
            let path = store.job_path(&q, JobStatus::Running, &r.job_id);
            let job: Option<Job> = store.read_doc(DocKind::Job, &path).ok();
            let project = job
                .as_ref()
                .and_then(|j| store.project(&j.config.project).ok());
            if !caller.can_answer_request(job.as_ref(), project.as_ref()) {
                continue;
            }
            lines.push(format!(
                "• {q} {}: job {} asks to use {} (answer by {}) — `/agentstore approve {q} {}`",
                r.request_id,
                r.job_id,
                crate::store::notices::clip(&r.tool, 60),
                r.deadline,
                r.request_id
            ));
        }
    }
    if lines.is_empty() {
        return format!("{}: no approval waits for you.", user.id);
    }
    format!(
        "{}: {} approval(s) wait for you:\n{}",
        user.id,
        lines.len(),
        lines.join("\n")
    )
}
