//! `/agentstore` slash commands, for the agentstore user the Slack member maps to:
//!
//! - `status`: the approval requests waiting that this user may answer (PRD §10, the rule the
//!   manager applies), with the commands that answer them;
//! - `approve <queue> <request>` / `deny <queue> <request> [reason…]`: `Queue1.AnswerFor`;
//! - `research-code`, `create-prd`, `list-jobs`, `view-job`: asked of orchestratord after the
//!   acknowledgement ([`super::jobs`]).
//!
//! The answer is the text of the envelope's acknowledgement (seen only by the member), and
//! for the job commands a message in the member's direct messages with the app.

use super::SlackApp;
use super::jobs::{self, Deferred};
use crate::model::{Command, DocKind, Job, JobStatus};
use crate::permissions::Caller;
use serde_json::Value;

/// The usage line.
fn usage() -> String {
    format!(
        "Commands: `/agentstore status`, `/agentstore approve <queue> <request>`, `/agentstore deny <queue> <request> [reason]`, {}.",
        jobs::USAGE
    )
}

/// Longest command text taken.
const MAX_TEXT: usize = 2000;

/// What a command is answered with.
#[derive(Debug)]
pub enum Reply {
    /// The acknowledgement's text.
    Now(String),
    /// The acknowledgement's text, and the work that follows it.
    Later(String, Deferred),
}

impl From<String> for Reply {
    fn from(s: String) -> Reply {
        Reply::Now(s)
    }
}

/// The reply to the slash command payload `p`.
pub async fn handle(app: &SlackApp, p: &Value) -> Reply {
    let Some(member) = p["user_id"].as_str() else {
        return Reply::Now("Refused: the command names no Slack user.".into());
    };
    let text = p["text"].as_str().unwrap_or("");
    if text.chars().count() > MAX_TEXT {
        return Reply::Now(format!(
            "Refused: the command is longer than {MAX_TEXT} characters."
        ));
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    // The commands of agentstore's own set, by the typed name (one home for the names).
    let (first, rest) = words.split_first().map_or(("", &[][..]), |(f, r)| (*f, r));
    let command = Command::parse(first);
    // A job asked for: who asks (the mapping, PRD §10) is answered in its thread.
    if let Some(c @ (Command::ResearchCode | Command::CreatePrd)) = command {
        return match jobs::parse_ask(member, c, rest) {
            Ok(ask) => Reply::Later(
                format!(
                    "Asked: {} in project {}. The answer comes in a thread of your direct messages with the agentstore app.",
                    c.name(),
                    ask.project
                ),
                Deferred::Job(ask),
            ),
            Err(why) => Reply::Now(why),
        };
    }
    let user = match app.user_for(member) {
        Ok(u) => u,
        Err(why) => return Reply::Now(why),
    };
    let member = member.to_string();
    match command {
        Some(Command::ListJobs) => {
            return match rest {
                [] => list_later(member, user.id, None),
                [s] if JobStatus::from_name(s).is_some() => {
                    list_later(member, user.id, Some(s.to_string()))
                }
                _ => Reply::Now(format!(
                    "Refused: `/agentstore {} [queued|running|finished|failed]`.",
                    Command::ListJobs.name()
                )),
            };
        }
        Some(Command::ViewJob) => {
            return match rest {
                [job] => Reply::Later(
                    format!(
                        "Looking up job {}; the answer comes in your direct messages with the agentstore app.",
                        crate::store::notices::clip(job, 80)
                    ),
                    Deferred::View {
                        member,
                        user: user.id,
                        job: job.to_string(),
                    },
                ),
                _ => Reply::Now(format!(
                    "Refused: name one job: `/agentstore {} <job>`.",
                    Command::ViewJob.name()
                )),
            };
        }
        _ => {}
    }
    match words.as_slice() {
        [] | ["help"] => usage().into(),
        ["status"] => status(app, &user).into(),
        [verb @ ("approve" | "deny"), queue, request, reason @ ..] => {
            let allow = *verb == "approve";
            if allow && !reason.is_empty() {
                return Reply::Now(format!(
                    "Refused: `approve` takes a queue and a request only. {}",
                    usage()
                ));
            }
            let why = if reason.is_empty() {
                format!("answered in Slack by {} ({member})", user.id)
            } else {
                reason.join(" ")
            };
            answer(app, &user.id, queue, request, allow, &why)
                .await
                .into()
        }
        ["approve" | "deny", ..] => {
            format!("Refused: name the queue and the request. {}", usage()).into()
        }
        [other, ..] => format!(
            "Unknown command {:?}. {}",
            crate::store::notices::clip(other, 40),
            usage()
        )
        .into(),
    }
}

fn list_later(member: String, user: String, status: Option<String>) -> Reply {
    Reply::Later(
        "Listing your jobs; the answer comes in your direct messages with the agentstore app."
            .into(),
        Deferred::List {
            member,
            user,
            status,
        },
    )
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
