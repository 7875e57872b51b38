//! `/agentstore` commands about jobs, asked of orchestratord (`Orchestrator1`) for the
//! agentstore user the Slack member maps to — the path the web takes (a trusted caller names
//! the user, the orchestrator applies PRD §10 in `permissions`), so a command means the same
//! whichever door it came through (DESIGN §9):
//!
//! - `research-code <project> [--jobtype T] [--queue Q] [--timeout S] <task…>` (and
//!   `create-prd`, which needs a task): a thread opens in the member's direct messages with
//!   the app; the mapping and PRD §10 are answered there (queued as job X, or refused), and
//!   when the job ends its result is posted there ([`crate::notify::threads`]);
//! - `list-jobs [status]` and `view-job <job>`: answered in the member's direct messages with
//!   the app (only they read it), with what §10 lets their user see.
//!
//! Everything here runs after the envelope's acknowledgement: orchestratord may need longer
//! than Slack's three seconds (bus activation, a loaded machine).

use super::SlackApp;
use crate::bus::orchestrator::{Orchestrator1Proxy, again_while_stopping, submit_when_up};
use crate::model::{Command, User, is_safe_id};
use crate::notify::sinks::slack::{MAX_TEXT, escape};
use crate::notify::threads::{self, SlackThread, is_slack_id};
use crate::store::notices::clip;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// How long orchestratord may take to answer (bus activation included).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Jobs shown by `list-jobs` (the newest).
const LIST_ROWS: u32 = 20;

/// The usage of the job commands.
pub const USAGE: &str = "`/agentstore research-code <project> [--jobtype claude|agent|codex|noop] [--queue Q] [--timeout SECONDS] <what to look into>`, `/agentstore create-prd <project> [options] <what the PRD is about>`, `/agentstore list-jobs [queued|running|finished|failed]`, `/agentstore view-job <job>`";

/// A job asked for: checked for its shape, not yet for who asks.
#[derive(Debug, Clone)]
pub struct JobAsk {
    /// The Slack member who asked.
    pub member: String,
    /// `research-code` or `create-prd`.
    pub command: Command,
    /// The project.
    pub project: String,
    /// The message's `content` (task, jobtype, queue, timeout).
    pub content: Map<String, Value>,
}

/// The work left after the acknowledgement.
#[derive(Debug, Clone)]
pub enum Deferred {
    /// Queue a job, answered in a thread.
    Job(JobAsk),
    /// `list-jobs` for `user`, narrowed to a status.
    List {
        /// The Slack member.
        member: String,
        /// Their user.
        user: String,
        /// The status asked for.
        status: Option<String>,
    },
    /// `view-job` of `job` for `user`.
    View {
        /// The Slack member.
        member: String,
        /// Their user.
        user: String,
        /// The job id.
        job: String,
    },
}

/// Parses `/agentstore <command> <words…>` for a job command; the error is the reply.
pub fn parse_ask(member: &str, command: Command, words: &[&str]) -> Result<JobAsk, String> {
    let mut content = Map::new();
    let mut project = None;
    let mut task: Vec<&str> = Vec::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let flag = match *w {
            "--project" | "--jobtype" | "--queue" | "--timeout" => *w,
            other if other.starts_with("--") => {
                return Err(format!(
                    "Refused: unknown option {:?}. {USAGE}",
                    clip(other, 40)
                ));
            }
            other => {
                if project.is_none() && task.is_empty() {
                    project = Some(other.to_string());
                } else {
                    task.push(other);
                }
                continue;
            }
        };
        let Some(v) = it.next() else {
            return Err(format!("Refused: {flag} needs a value. {USAGE}"));
        };
        match flag {
            "--project" => project = Some(v.to_string()),
            "--jobtype" => {
                if !["claude", "agent", "codex", "noop"].contains(v) {
                    return Err(format!(
                        "Refused: --jobtype {:?} is not one of claude, agent, codex, noop.",
                        clip(v, 40)
                    ));
                }
                content.insert("jobtype".into(), json!(v));
            }
            "--queue" => {
                content.insert("queue".into(), json!(v));
            }
            _ => {
                let secs: u64 = v.parse().map_err(|_| {
                    format!(
                        "Refused: --timeout {:?} is not a number of seconds.",
                        clip(v, 40)
                    )
                })?;
                content.insert("timeout".into(), json!(secs));
            }
        }
    }
    let Some(project) = project else {
        return Err(format!("Refused: name the project. {USAGE}"));
    };
    for (what, id) in [
        ("project", Some(project.as_str())),
        ("queue", content.get("queue").and_then(Value::as_str)),
    ] {
        if let Some(id) = id
            && !is_safe_id(id)
        {
            return Err(format!(
                "Refused: the {what} must be an id (letters, digits, ., - and _)."
            ));
        }
    }
    if task.is_empty() && command == Command::CreatePrd {
        return Err(format!(
            "Refused: create-prd needs what the PRD is about. {USAGE}"
        ));
    }
    if !task.is_empty() {
        content.insert("task".into(), json!(task.join(" ")));
    }
    Ok(JobAsk {
        member: member.to_string(),
        command,
        project,
        content,
    })
}

/// Runs what was deferred.
pub async fn run(app: &SlackApp, d: Deferred) {
    match d {
        Deferred::Job(a) => ask(app, a).await,
        Deferred::List {
            member,
            user,
            status,
        } => {
            let text = list(app, &user, status.as_deref()).await;
            post_dm(app, &member, &text).await;
        }
        Deferred::View { member, user, job } => {
            let text = view(app, &user, &job).await;
            post_dm(app, &member, &text).await;
        }
    }
}

/// The direct-message channel of the app with `member`.
async fn dm(app: &SlackApp, member: &str) -> Result<String, String> {
    if !is_slack_id(member) {
        return Err(format!("{member:?} is not a Slack member id"));
    }
    let v = app
        .bot
        .call("conversations.open", json!({ "users": member }))
        .await
        .map_err(|e| e.to_string())?;
    v["channel"]["id"]
        .as_str()
        .filter(|c| is_slack_id(c))
        .map(str::to_string)
        .ok_or_else(|| "slack conversations.open: no channel id".to_string())
}

/// Posts `text` (escaped, at most [`MAX_TEXT`] characters) to `channel`, in thread `ts`
/// when given; the new message's ts.
async fn post(
    app: &SlackApp,
    channel: &str,
    thread: Option<&str>,
    text: &str,
) -> Result<String, String> {
    post_raw(app, channel, thread, &escape(&clip(text, MAX_TEXT))).await
}

/// Posts `text`, Slack markup as it is, to `channel` (in thread `ts` when given); the new
/// message's ts.
async fn post_raw(
    app: &SlackApp,
    channel: &str,
    thread: Option<&str>,
    text: &str,
) -> Result<String, String> {
    let mut body = json!({ "channel": channel, "text": text, "unfurl_links": false });
    if let Some(ts) = thread {
        body["thread_ts"] = json!(ts);
    }
    let v = app
        .bot
        .call("chat.postMessage", body)
        .await
        .map_err(|e| e.to_string())?;
    Ok(v["ts"].as_str().unwrap_or_default().to_string())
}

/// Posts `text` to `member`'s direct messages with the app (a failure is logged).
async fn post_dm(app: &SlackApp, member: &str, text: &str) {
    let r = match dm(app, member).await {
        Ok(c) => post(app, &c, None, text).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        tracing::warn!(member, "slack: answer not posted: {e}");
    }
}

/// Opens the thread, then answers in it: refused (an unmapped member, PRD §10) or queued;
/// the job's end is posted there by the notifier.
async fn ask(app: &SlackApp, a: JobAsk) {
    let channel = match dm(app, &a.member).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(member = %a.member, "slack: no thread for a command: {e}");
            return;
        }
    };
    let task = a.content.get("task").and_then(Value::as_str).unwrap_or("");
    // The mention is ours (a checked member id); what the member typed is escaped.
    let head = format!(
        "{} in project {} asked by <@{}>{}",
        a.command.name(),
        escape(&a.project),
        a.member,
        if task.is_empty() {
            String::new()
        } else {
            format!(": {}", escape(&clip(task, 500)))
        }
    );
    let ts = match post_raw(app, &channel, None, &head).await {
        Ok(ts) if threads::is_slack_ts(&ts) => ts,
        Ok(_) => {
            tracing::warn!("slack: chat.postMessage gave no ts; the command is not answered");
            return;
        }
        Err(e) => {
            tracing::warn!(member = %a.member, "slack: thread not opened: {e}");
            return;
        }
    };
    let answer = match app.user_for(&a.member) {
        Err(why) => why,
        Ok(user) => queue(app, &a, &user, &channel, &ts).await,
    };
    if let Err(e) = post(app, &channel, Some(&ts), &answer).await {
        tracing::warn!(member = %a.member, "slack: answer not posted in the thread: {e}");
    }
}

/// Submits the job for `user`, its thread recorded first; the reply.
async fn queue(app: &SlackApp, a: &JobAsk, user: &User, channel: &str, ts: &str) -> String {
    let cid = uuid::Uuid::new_v4().to_string();
    let t = SlackThread {
        correlation_id: cid.clone(),
        user: user.id.clone(),
        member: a.member.clone(),
        channel: channel.to_string(),
        ts: ts.to_string(),
        created: crate::model::Timestamp::now(),
    };
    // Before the job exists: its end cannot come before its thread is known.
    if let Err(e) = threads::save(&app.store, &t) {
        tracing::warn!("slack: thread not recorded: {e}");
        return format!("Not queued: agentstore cannot record this thread ({e}).");
    }
    let msg = json!({
        "correlation_id": cid,
        "command": a.command.name(),
        "project": a.project,
        "content": a.content,
        "user": user.id,
    });
    let answer = match orchestrator(app).await {
        Ok(p) => tokio::time::timeout(ANSWER_WITHIN, submit_when_up(&p, &msg.to_string()))
            .await
            .unwrap_or_else(|_| {
                Err(zbus::Error::Failure(format!(
                    "orchestratord did not answer within {} s",
                    ANSWER_WITHIN.as_secs()
                )))
            }),
        Err(e) => Err(e),
    };
    match answer {
        Ok(text) => {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let c = &v["content"];
            let job = c["job_id"].as_str().unwrap_or("?");
            let q = c["queue"].as_str().or(v["queue"].as_str()).unwrap_or("?");
            tracing::info!(user = %user.id, job, queue = q, "slack: job queued");
            format!(
                "Queued as job {job} in queue {q}, for {}. Its result comes in this thread.",
                user.id
            )
        }
        Err(e) => {
            threads::forget(&app.store, &cid);
            format!("Refused for {}: {}", user.id, orchestrator_error_text(&e))
        }
    }
}

/// The orchestrator's proxy on the app's bus.
async fn orchestrator(app: &SlackApp) -> zbus::Result<Orchestrator1Proxy<'static>> {
    Orchestrator1Proxy::builder(&app.conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

/// A D-Bus error of orchestratord as words.
fn orchestrator_error_text(e: &zbus::Error) -> String {
    super::bus_error_words(e, "orchestratord does not answer on the bus")
}

/// `list-jobs` for `user`: the newest [`LIST_ROWS`] jobs §10 lets them see.
async fn list(app: &SlackApp, user: &str, status: Option<&str>) -> String {
    let proxy = match orchestrator(app).await {
        Ok(p) => p,
        Err(e) => return format!("Not answered: {}", orchestrator_error_text(&e)),
    };
    let page = |offset: u32| {
        let mut filter = std::collections::HashMap::new();
        filter.insert("user", user);
        filter.insert("fields", "summary");
        if let Some(s) = status {
            filter.insert("status", s);
        }
        let proxy = proxy.clone();
        async move {
            tokio::time::timeout(
                ANSWER_WITHIN,
                again_while_stopping(|| proxy.list_jobs(filter.clone(), offset, LIST_ROWS)),
            )
            .await
            .unwrap_or_else(|_| Err(zbus::Error::Failure("orchestratord did not answer".into())))
        }
    };
    let mut got = page(0).await;
    if let Ok((_, total, _)) = &got
        && *total > LIST_ROWS
    {
        got = page(total - LIST_ROWS).await;
    }
    let (rows, total) = match got {
        Ok((rows, total, _)) => (rows, total),
        Err(e) => return format!("Refused for {user}: {}", orchestrator_error_text(&e)),
    };
    let rows: Vec<Value> = serde_json::from_str(&rows).unwrap_or_default();
    if rows.is_empty() {
        return format!(
            "{user}: no {}jobs that you may see.",
            status.map(|s| format!("{s} ")).unwrap_or_default()
        );
    }
    let mut out = format!(
        "{user}: {total} job(s){}, the newest {} here:",
        status.map(|s| format!(" {s}")).unwrap_or_default(),
        rows.len()
    );
    for r in rows.iter().rev() {
        let s = |k: &str| r[k].as_str().unwrap_or("?").to_string();
        out.push_str(&format!(
            "\n• {} — {} — project {}, queue {}, queued {}{}",
            s("id"),
            s("status"),
            s("project"),
            s("queue"),
            s("queue_time"),
            r["user"]
                .as_str()
                .map(|u| format!(", by {u}"))
                .unwrap_or_default()
        ));
    }
    out.push_str("\nOne job: `/agentstore view-job <job>`");
    out
}

/// `view-job` for `user`: the job, if §10 lets them see it.
async fn view(app: &SlackApp, user: &str, job: &str) -> String {
    if !is_safe_id(job) {
        return "Refused: the job must be an id (letters, digits, ., - and _).".into();
    }
    let msg = json!({"command": Command::ViewJob.name(), "content": {"job": job}, "user": user});
    let answer = match orchestrator(app).await {
        Ok(p) => tokio::time::timeout(ANSWER_WITHIN, submit_when_up(&p, &msg.to_string()))
            .await
            .unwrap_or_else(|_| Err(zbus::Error::Failure("orchestratord did not answer".into()))),
        Err(e) => Err(e),
    };
    let text = match answer {
        Ok(t) => t,
        Err(e) => return format!("Refused for {user}: {}", orchestrator_error_text(&e)),
    };
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let j = &v["content"]["result"];
    let job_doc: Option<crate::model::Job> = serde_json::from_value(j.clone()).ok();
    let Some(doc) = job_doc else {
        return format!("Job {job}: the answer is not a job document.");
    };
    let c = &doc.config;
    let r = &doc.runtime;
    let mut out = format!(
        "Job {job} — {}\nproject {}, queue {}, {} ({}), by {}\nqueued {}",
        r.status.name(),
        c.project,
        c.queue.as_deref().unwrap_or("?"),
        c.command.as_deref().unwrap_or(&c.claude_command),
        serde_json::to_value(c.jobtype)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        c.user.as_deref().unwrap_or("?"),
        c.queue_time
    );
    if let Some(t) = &r.start_time {
        out.push_str(&format!(", started {t}"));
    }
    if let Some(t) = &r.finish_time {
        out.push_str(&format!(", ended {t}"));
    }
    if let Some(cost) = r.cost_usd {
        out.push_str(&format!("\ncost ${cost:.4}"));
    }
    out.push_str(&format!("\nTask: {}", clip(&c.task_description, 500)));
    if let Some(e) = &r.error {
        out.push_str(&format!("\nError: {}", clip(e, 800)));
    }
    if r.output.is_some() {
        out.push_str(&format!(
            "\nResult: {}",
            clip(doc.result_text().trim(), 1500)
        ));
    }
    out
}
