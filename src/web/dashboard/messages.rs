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
    let mut b = String::from(
        "<h1>Messages</h1><form class=\"filters\" method=\"get\" action=\"/messages\">",
    );
    for (k, choices) in [
        ("direction", &["in", "out"][..]),
        ("status", &["queued", "processing", "done", "error"][..]),
    ] {
        let _ = write!(
            b,
            r#"<label>{k} <select name="{k}"><option value="">any</option>"#
        );
        for c in choices {
            let _ = write!(
                b,
                r#"<option{}>{c}</option>"#,
                if get(k) == *c { " selected" } else { "" }
            );
        }
        b.push_str("</select></label>");
    }
    for k in ["project", "user"] {
        let _ = write!(
            b,
            r#"<label>{k} <input name="{k}" value="{}" size="12"></label>"#,
            esc(get(k))
        );
    }
    b.push_str(r#"<button type="submit">Filter</button></form>"#);
    let rows = all["messages"].as_array().cloned().unwrap_or_default();
    let total = all["total"].as_u64().unwrap_or(0);
    let next = all["next_offset"].as_u64().unwrap_or(0);
    let offset: u64 = get("offset").parse().unwrap_or(0);
    let limit: u64 = get("limit").parse().unwrap_or(100);
    let _ = write!(
        b,
        r#"<p id="count">Messages {}–{} of <span id="total">{total}</span></p>"#,
        if rows.is_empty() { 0 } else { offset + 1 },
        offset + rows.len() as u64
    );
    b.push_str("<table id=\"messages\"><thead><tr><th>id</th><th>direction</th><th>status</th><th>answer</th><th>command</th><th>project</th><th>user</th><th>queued</th><th>folder</th></tr></thead><tbody>");
    for m in &rows {
        let id = s(m, "/id");
        let st = s(m, "/status");
        let answer = match (s(m, "/direction"), m["answer"].as_str()) {
            ("in", Some(a)) => a.to_string(),
            ("in", None) => "none yet".to_string(),
            _ => String::new(),
        };
        let _ = write!(
            b,
            r#"<tr data-message="{i}"><td><a href="/messages/{u}">{i}</a></td><td>{}</td><td class="s-{st}">{st}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(s(m, "/direction")),
            esc(&answer),
            esc(s(m, "/command")),
            esc(s(m, "/project")),
            esc(s(m, "/user")),
            esc(s(m, "/queue_time")),
            esc(s(m, "/folder")),
            i = esc(id),
            u = percent_encode(id),
            st = esc(st),
        );
    }
    b.push_str("</tbody></table>");
    if rows.is_empty() {
        b.push_str("<p>No messages.</p>");
    }
    pager(
        &mut b,
        "/messages",
        &q,
        &["direction", "status", "project", "user", "as"],
        (offset, limit),
        (next, total),
    );
    problems_list(&mut b, "Not read", &all["problems"]);
    Ok(page("Messages", who, true, &b))
}

/// One message (`view-message`): the request and its answer, each with its content.
pub(super) async fn message_page(
    app: &App,
    who: &Actor,
    id: &str,
) -> Result<Response<Body>, WebError> {
    let v = direct(app, who, Command::ViewMessage, one("message", id)).await?;
    let mut b = format!(
        r#"<h1>Message {}</h1><p><a href="/messages">← all messages</a></p>"#,
        esc(id)
    );
    for (half, title) in [("request", "Request"), ("answer", "Answer")] {
        let m = &v[half];
        let _ = write!(b, r#"<h2>{title}</h2>"#);
        if m.is_null() {
            b.push_str(if half == "answer" {
                r#"<p id="answer-none">Not answered yet.</p>"#
            } else {
                r#"<p id="request-none">No request file (submitted over D-Bus or the API).</p>"#
            });
            continue;
        }
        let _ = write!(b, r#"<table id="{half}">"#);
        for k in [
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
        ] {
            let cell = s(m, &format!("/{k}"));
            if cell.is_empty() {
                continue;
            }
            let cell = if k == "status" {
                format!(r#"<span class="s-{0}">{0}</span>"#, esc(cell))
            } else {
                esc(cell)
            };
            let _ = write!(
                b,
                r#"<tr><th>{}</th><td id="{half}-{k}">{cell}</td></tr>"#,
                k.replace('_', " ")
            );
        }
        if let Some(job) = m.pointer("/content/job_id").and_then(Value::as_str) {
            let _ = write!(
                b,
                r#"<tr><th>job</th><td id="{half}-job"><a href="/jobs/{}">{}</a></td></tr>"#,
                percent_encode(job),
                esc(job)
            );
        }
        let content = serde_json::to_string_pretty(&m["content"]).unwrap_or_default();
        let _ = write!(
            b,
            r#"</table><pre id="{half}-content">{}</pre>"#,
            esc(&content)
        );
    }
    Ok(page(&format!("Message {id}"), who, true, &b))
}
