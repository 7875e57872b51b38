//! The messages page and one message's page.

use super::*;
use crate::model::Command;

/// The messages (`list-messages`), newest first, with filters and paging.
pub(super) async fn messages_page(
    app: &App,
    who: &Actor,
    mut q: HashMap<String, String>,
) -> Result<Response<Body>, WebError> {
    if q.get("limit").is_none_or(|l| l.is_empty()) {
        q.insert("limit".into(), "100".into());
    }
    let all = direct(app, who, Command::ListMessages, message_filter(&q)?).await?;
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let rows = all["messages"].as_array().cloned().unwrap_or_default();
    let total = all["total"].as_u64().unwrap_or(0);
    let next = all["next_offset"].as_u64().unwrap_or(0);
    let offset: u64 = get("offset").parse().unwrap_or(0);
    let limit: u64 = get("limit").parse().unwrap_or(100);
    let b = html! {
        h1 { "Messages" }
        form class="filters" method="get" action="/messages" {
            @for (k, choices) in [
                ("direction", &["in", "out"][..]),
                ("status", &["queued", "processing", "done", "error"][..]),
            ] {
                label {
                    (k) " "
                    select name=(k) {
                        option value="" { "any" }
                        @for c in choices {
                            option selected[get(k) == *c] { (c) }
                        }
                    }
                }
            }
            @for k in ["project", "user"] {
                label { (k) " " input name=(k) value=(get(k)) size="12"; }
            }
            button type="submit" { "Filter" }
        }
        p id="count" {
            "Messages " (if rows.is_empty() { 0 } else { offset + 1 }) "–" (offset + rows.len() as u64) " of "
            span id="total" { (total) }
        }
        table id="messages" {
            thead { tr { th { "id" } th { "direction" } th { "status" } th { "answer" } th { "command" } th { "project" } th { "user" } th { "queued" } th { "folder" } } }
            tbody {
                @for m in &rows {
                    @let (id, st) = (s(m, "/id"), s(m, "/status"));
                    @let answer = match (s(m, "/direction"), m["answer"].as_str()) {
                        ("in", Some(a)) => a,
                        ("in", None) => "none yet",
                        _ => "",
                    };
                    tr data-message=(id) {
                        td { a href={ "/messages/" (percent_encode(id)) } { (id) } }
                        td { (s(m, "/direction")) }
                        td class={ "s-" (st) } { (st) }
                        td { (answer) }
                        td { (s(m, "/command")) }
                        td { (s(m, "/project")) }
                        td { (s(m, "/user")) }
                        td { (s(m, "/queue_time")) }
                        td { (s(m, "/folder")) }
                    }
                }
            }
        }
        @if rows.is_empty() {
            p { "No messages." }
        }
        (pager(
            "/messages",
            &q,
            &["direction", "status", "project", "user", "as"],
            (offset, limit),
            (next, total),
        ))
        (problems_list("Not read", &all["problems"]))
    };
    Ok(page("Messages", who, true, b))
}

/// The fields of a message's table, in order.
const MESSAGE_FIELDS: [&str; 10] = [
    "folder",
    "status",
    "command",
    "project",
    "user",
    "source",
    "correlation_id",
    "queue_time",
    "processed_time",
    "error",
];

/// One message (`view-message`): the request and its answer, each with its content.
pub(super) async fn message_page(
    app: &App,
    who: &Actor,
    id: &str,
) -> Result<Response<Body>, WebError> {
    let v = direct(app, who, Command::ViewMessage, one("message", id)).await?;
    let b = html! {
        h1 { "Message " (id) }
        p { a href="/messages" { "← all messages" } }
        @for (half, title) in [("request", "Request"), ("answer", "Answer")] {
            @let m = &v[half];
            h2 { (title) }
            @if m.is_null() {
                @if half == "answer" {
                    p id="answer-none" { "Not answered yet." }
                } @else {
                    p id="request-none" { "No request file (submitted over D-Bus or the API)." }
                }
            } @else {
                table id=(half) {
                    @for k in MESSAGE_FIELDS {
                        @let cell = s(m, &format!("/{k}"));
                        @if !cell.is_empty() {
                            tr {
                                th { (k.replace('_', " ")) }
                                td id={ (half) "-" (k) } {
                                    @if k == "status" { span class={ "s-" (cell) } { (cell) } } @else { (cell) }
                                }
                            }
                        }
                    }
                    @if let Some(job) = m.pointer("/content/job_id").and_then(Value::as_str) {
                        tr { th { "job" } td id={ (half) "-job" } { a href={ "/jobs/" (percent_encode(job)) } { (job) } } }
                    }
                }
                pre id={ (half) "-content" } { (serde_json::to_string_pretty(&m["content"]).unwrap_or_default()) }
            }
        }
    };
    Ok(page(&format!("Message {id}"), who, true, b))
}
