//! The jobs page and one job's page (with its timeline).

use super::*;
use crate::model::Command;

pub(super) async fn jobs_page(
    app: &App,
    who: &Actor,
    mut q: HashMap<String, String>,
) -> Result<Response<Body>, WebError> {
    q.insert("fields".into(), "summary".into());
    if q.get("limit").is_none_or(|l| l.is_empty()) {
        q.insert("limit".into(), "100".into());
    }
    let (rows, total, next) = list_jobs(app, who, &q).await?;
    let rows: Value = serde_json::from_str(&rows)
        .map_err(|e| WebError::new(502, "org.agentstore.Error.Failed", e.to_string()))?;
    let rows = rows.as_array().cloned().unwrap_or_default();
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let offset: u64 = get("offset").parse().unwrap_or(0);
    let limit: u64 = get("limit").parse().unwrap_or(100);
    let shown = rows.len() as u64;
    let b = html! {
        h1 { "Jobs" }
        form class="filters" method="get" action="/jobs" {
            label {
                "status "
                select name="status" {
                    option value="" { "any" }
                    @for st in ["queued", "running", "finished", "failed"] {
                        option selected[get("status") == st] { (st) }
                    }
                }
            }
            @for k in ["project", "queue", "as"] {
                label {
                    (if k == "as" { "user" } else { k }) " "
                    input name=(k) value=(get(k)) size="12";
                }
            }
            button type="submit" { "Filter" }
        }
        p id="count" {
            "Jobs " (if shown == 0 { 0 } else { offset + 1 }) "–" (offset + shown) " of "
            span id="total" { (total) }
        }
        table id="jobs" {
            thead { tr { th { "id" } th { "status" } th { "queue" } th { "project" } th { "user" } th { "queued" } } }
            tbody {
                @for r in &rows {
                    @let (id, st) = (s(r, "/id"), s(r, "/status"));
                    tr data-job=(id) {
                        td { a href={ "/jobs/" (percent_encode(id)) } { (id) } }
                        td class={ "s-" (st) } { (st) }
                        td { (s(r, "/queue")) }
                        td { (s(r, "/project")) }
                        td { (s(r, "/user")) }
                        td { (s(r, "/queue_time")) }
                    }
                }
            }
        }
        (pager(
            "/jobs",
            &q,
            &["status", "project", "queue", "as"],
            (offset, limit),
            (u64::from(next), u64::from(total)),
        ))
    };
    Ok(page("Jobs", who, true, b))
}

/// The rows of a job's table: label and where the value is.
const JOB_FIELDS: [(&str, &str); 11] = [
    ("status", "/runtime/status"),
    ("project", "/config/project"),
    ("queue", "/config/queue"),
    ("command", "/config/claude_command"),
    ("user", "/config/user"),
    ("PRD", "/config/prd"),
    ("queued", "/config/queue_time"),
    ("started", "/runtime/start_time"),
    ("ended", "/runtime/finish_time"),
    ("host", "/runtime/host"),
    ("error", "/runtime/error"),
];

pub(super) async fn job_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let job = direct(app, who, Command::ViewJob, c).await?;
    let st = s(&job, "/runtime/status");
    let parsed: Option<crate::model::Job> = serde_json::from_value(job.clone()).ok();
    let tokens = |k: &str| {
        job.pointer(&format!("/runtime/usage/{k}"))
            .and_then(Value::as_u64)
    };
    // A request of this job waiting for a person, answered here.
    let mut waiting = Vec::new();
    if matches!(st, "running")
        && let Ok(rows) = crate::web::api::approvals(app, who).await
    {
        waiting = rows
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| s(r, "/job_id") == id)
            .cloned()
            .collect();
    }
    let text = parsed.as_ref().map(|j| j.result_text()).unwrap_or_default();
    let empty = match st {
        "queued" => "(not started yet)",
        "running" => "(none yet: the job is running)",
        _ => "(the job left no output)",
    };
    let log = super::joblog::section(app, who, id).await;
    let b = html! {
        h1 { "Job " (id) }
        table id="job" {
            @for (label, ptr) in JOB_FIELDS {
                @let v = s(&job, ptr);
                @if !v.is_empty() {
                    tr {
                        th { (label) }
                        td id={ "f-" (label.replace(' ', "-")) } {
                            @match label {
                                "PRD" => a href={ "/prds/" (percent_encode(v)) } { (v) },
                                "status" => span class={ "s-" (v) } { (v) },
                                _ => (v),
                            }
                        }
                    }
                }
            }
            @if let Some(cost) = job.pointer("/runtime/cost_usd").and_then(Value::as_f64) {
                tr { th { "cost" } td id="f-cost" { "$" (format!("{cost:.4}")) } }
            }
            @if let (Some(i), Some(o)) = (tokens("input_tokens"), tokens("output_tokens")) {
                tr { th { "tokens" } td id="f-tokens" { (i) " in, " (o) " out" } }
            }
            @if let Some(turns) = job.pointer("/runtime/num_turns").and_then(Value::as_u64) {
                tr { th { "turns" } td id="f-turns" { (turns) } }
            }
        }
        @if matches!(st, "queued" | "running") {
            form method="post" action={ "/jobs/" (percent_encode(id)) "/cancel" } {
                button type="submit" { "Cancel job" }
            }
        }
        h2 { "Task" }
        pre id="task" { (s(&job, "/config/task_description")) }
        @if let Some(j) = &parsed {
            (timeline(j))
        }
        @if !waiting.is_empty() {
            h2 { "Waiting for an answer" }
            table id="pending" {
                tbody {
                    @for r in &waiting {
                        @let (queue, req) = (s(r, "/queue"), s(r, "/request_id"));
                        tr data-request=(req) {
                            td { (s(r, "/tool")) }
                            td { (s(r, "/summary")) }
                            td { "denied at " (s(r, "/deadline")) }
                            td { (answer_form(queue, req)) }
                        }
                    }
                }
            }
        }
        @if let Some(j) = parsed.as_ref().filter(|j| !j.runtime.approvals.is_empty()) {
            h2 { "Approvals decided" }
            table id="decided" {
                thead { tr { th { "request" } th { "tool" } th { "summary" } th { "answer" } th { "by" } th { "at" } th { "reason" } } }
                tbody {
                    @for a in &j.runtime.approvals {
                        tr {
                            td { (a.request_id) }
                            td { (a.tool) }
                            td { (a.summary) }
                            td class=(if a.allow { "s-finished" } else { "s-failed" }) {
                                (if a.allow { "allowed" } else { "denied" })
                                (if a.always { " (always)" } else { "" })
                            }
                            td { (a.by) }
                            td { (a.at.to_string()) }
                            td { (a.message.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
        @if let Some(j) = parsed.as_ref().filter(|j| !j.runtime.warnings.is_empty()) {
            h2 { "Warnings" }
            ul id="warnings" {
                @for w in &j.runtime.warnings { li { (w) } }
            }
        }
        @if let Some(j) = parsed.as_ref().filter(|j| j.runtime.sandbox.is_some()) {
            h2 { "Sandbox" }
            p id="sandbox" { (j.runtime.sandbox.as_deref().unwrap_or("")) }
            @if !j.runtime.sandbox_refused.is_empty() {
                ul id="sandbox-refused" {
                    @for l in &j.runtime.sandbox_refused { li { "refused: " (l) } }
                }
            }
        }
        h2 { "Output" }
        pre id="output" { (if text.is_empty() { empty } else { &text }) }
        (log)
    };
    Ok(page(&format!("Job {id}"), who, true, b))
}

/// The Allow/Deny form of a waiting request (`queue`, `request`), posted to
/// `/approvals/{queue}/{request}/answer`.
pub(super) fn answer_form(queue: &str, request: &str) -> Markup {
    html! {
        form method="post" action={ "/approvals/" (percent_encode(queue)) "/" (percent_encode(request)) "/answer" } {
            input name="message" placeholder="reason (optional)" size="16";
            label { input type="checkbox" name="always"; " always" }
            button name="decision" value="allow" class="allow" { "Allow" }
            button name="decision" value="deny" class="deny" { "Deny" }
        }
    }
}

/// Queued → started → ended, with the time between each.
pub(super) fn timeline(j: &crate::model::Job) -> Markup {
    let span = |a: &crate::model::Timestamp, z: &crate::model::Timestamp| {
        let secs = a.seconds_until(z).max(0.0).round() as u64;
        crate::store::machines::duration_text(secs)
    };
    let q = &j.config.queue_time;
    let mut steps = vec![format!("queued {q}")];
    if let Some(t) = &j.runtime.start_time {
        steps.push(format!("waited {} → started {t}", span(q, t)));
        if let Some(e) = &j.runtime.finish_time {
            steps.push(format!(
                "ran {} → {} {e}",
                span(t, e),
                j.runtime.status.name()
            ));
        }
    }
    html! { p id="timeline" { (steps.join(" · ")) } }
}
