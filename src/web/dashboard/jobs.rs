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
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let mut b =
        String::from("<h1>Jobs</h1><form class=\"filters\" method=\"get\" action=\"/jobs\">");
    let _ = write!(
        b,
        r#"<label>status <select name="status"><option value="">any</option>"#
    );
    for st in ["queued", "running", "finished", "failed"] {
        let _ = write!(
            b,
            r#"<option{}>{st}</option>"#,
            if get("status") == st { " selected" } else { "" }
        );
    }
    b.push_str("</select></label>");
    for k in ["project", "queue", "as"] {
        let label = if k == "as" { "user" } else { k };
        let _ = write!(
            b,
            r#"<label>{label} <input name="{k}" value="{}" size="12"></label>"#,
            esc(get(k))
        );
    }
    b.push_str(r#"<button type="submit">Filter</button></form>"#);
    let offset: u64 = get("offset").parse().unwrap_or(0);
    let limit: u64 = get("limit").parse().unwrap_or(100);
    let shown = rows.as_array().map(Vec::len).unwrap_or(0) as u64;
    let _ = write!(
        b,
        r#"<p id="count">Jobs {}–{} of <span id="total">{total}</span></p>"#,
        if shown == 0 { 0 } else { offset + 1 },
        offset + shown
    );
    b.push_str("<table id=\"jobs\"><thead><tr><th>id</th><th>status</th><th>queue</th><th>project</th><th>user</th><th>queued</th></tr></thead><tbody>");
    for r in rows.as_array().into_iter().flatten() {
        let id = s(r, "/id");
        let st = s(r, "/status");
        let _ = write!(
            b,
            r#"<tr data-job="{i}"><td><a href="/jobs/{u}">{i}</a></td><td class="s-{st}">{st}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(s(r, "/queue")),
            esc(s(r, "/project")),
            esc(s(r, "/user")),
            esc(s(r, "/queue_time")),
            i = esc(id),
            u = percent_encode(id),
            st = esc(st),
        );
    }
    b.push_str("</tbody></table>");
    pager(
        &mut b,
        "/jobs",
        &q,
        &["status", "project", "queue", "as"],
        (offset, limit),
        (u64::from(next), u64::from(total)),
    );
    Ok(page("Jobs", who, true, &b))
}

pub(super) async fn job_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let job = direct(app, who, Command::ViewJob, c).await?;
    let st = s(&job, "/runtime/status");
    let mut b = format!(r#"<h1>Job {}</h1><table id="job">"#, esc(id));
    for (label, ptr) in [
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
    ] {
        let v = s(&job, ptr);
        if v.is_empty() {
            continue;
        }
        let cell = match label {
            "PRD" => format!(r#"<a href="/prds/{}">{}</a>"#, percent_encode(v), esc(v)),
            "status" => format!(r#"<span class="s-{0}">{0}</span>"#, esc(v)),
            _ => esc(v),
        };
        let _ = write!(
            b,
            r#"<tr><th>{label}</th><td id="f-{}">{cell}</td></tr>"#,
            label.replace(' ', "-")
        );
    }
    if let Some(cost) = job.pointer("/runtime/cost_usd").and_then(Value::as_f64) {
        let _ = write!(
            b,
            r#"<tr><th>cost</th><td id="f-cost">${cost:.4}</td></tr>"#
        );
    }
    let tokens = |k: &str| {
        job.pointer(&format!("/runtime/usage/{k}"))
            .and_then(Value::as_u64)
    };
    if let (Some(i), Some(o)) = (tokens("input_tokens"), tokens("output_tokens")) {
        let _ = write!(
            b,
            r#"<tr><th>tokens</th><td id="f-tokens">{i} in, {o} out</td></tr>"#
        );
    }
    if let Some(turns) = job.pointer("/runtime/num_turns").and_then(Value::as_u64) {
        let _ = write!(b, r#"<tr><th>turns</th><td id="f-turns">{turns}</td></tr>"#);
    }
    b.push_str("</table>");
    if matches!(st, "queued" | "running") {
        let _ = write!(
            b,
            r#"<form method="post" action="/jobs/{}/cancel"><button type="submit">Cancel job</button></form>"#,
            percent_encode(id)
        );
    }
    let _ = write!(
        b,
        r#"<h2>Task</h2><pre id="task">{}</pre>"#,
        esc(s(&job, "/config/task_description"))
    );
    let parsed: Option<crate::model::Job> = serde_json::from_value(job.clone()).ok();
    if let Some(j) = &parsed {
        timeline(&mut b, j);
    }
    // A request of this job waiting for a person, answered here.
    if matches!(st, "running")
        && let Ok(rows) = crate::web::api::approvals(app, who).await
    {
        let mine: Vec<&Value> = rows
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| s(r, "/job_id") == id)
            .collect();
        if !mine.is_empty() {
            b.push_str(r#"<h2>Waiting for an answer</h2><table id="pending"><tbody>"#);
            for r in mine {
                let (queue, req) = (s(r, "/queue"), s(r, "/request_id"));
                let _ = write!(
                    b,
                    r#"<tr data-request="{req}"><td>{tool}</td><td>{summary}</td><td>denied at {deadline}</td><td><form method="post" action="/approvals/{qu}/{ru}/answer"><input name="message" placeholder="reason (optional)" size="16"><label><input type="checkbox" name="always"> always</label><button name="decision" value="allow" class="allow">Allow</button><button name="decision" value="deny" class="deny">Deny</button></form></td></tr>"#,
                    req = esc(req),
                    tool = esc(s(r, "/tool")),
                    summary = esc(s(r, "/summary")),
                    deadline = esc(s(r, "/deadline")),
                    qu = percent_encode(queue),
                    ru = percent_encode(req),
                );
            }
            b.push_str("</tbody></table>");
        }
    }
    if let Some(j) = parsed.as_ref().filter(|j| !j.runtime.approvals.is_empty()) {
        b.push_str(r#"<h2>Approvals decided</h2><table id="decided"><thead><tr><th>request</th><th>tool</th><th>summary</th><th>answer</th><th>by</th><th>at</th><th>reason</th></tr></thead><tbody>"#);
        for a in &j.runtime.approvals {
            let _ = write!(
                b,
                r#"<tr><td>{}</td><td>{}</td><td>{}</td><td class="{cls}">{ans}{always}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(&a.request_id),
                esc(&a.tool),
                esc(&a.summary),
                esc(&a.by),
                esc(&a.at.to_string()),
                esc(a.message.as_deref().unwrap_or("")),
                cls = if a.allow { "s-finished" } else { "s-failed" },
                ans = if a.allow { "allowed" } else { "denied" },
                always = if a.always { " (always)" } else { "" },
            );
        }
        b.push_str("</tbody></table>");
    }
    if let Some(j) = parsed.as_ref().filter(|j| !j.runtime.warnings.is_empty()) {
        b.push_str(r#"<h2>Warnings</h2><ul id="warnings">"#);
        for w in &j.runtime.warnings {
            let _ = write!(b, "<li>{}</li>", esc(w));
        }
        b.push_str("</ul>");
    }
    if let Some(j) = parsed.as_ref().filter(|j| j.runtime.sandbox.is_some()) {
        let _ = write!(
            b,
            r#"<h2>Sandbox</h2><p id="sandbox">{}</p>"#,
            esc(j.runtime.sandbox.as_deref().unwrap_or(""))
        );
        if !j.runtime.sandbox_refused.is_empty() {
            b.push_str(r#"<ul id="sandbox-refused">"#);
            for l in &j.runtime.sandbox_refused {
                let _ = write!(b, "<li>refused: {}</li>", esc(l));
            }
            b.push_str("</ul>");
        }
    }
    let text = parsed.as_ref().map(|j| j.result_text()).unwrap_or_default();
    let empty = match st {
        "queued" => "(not started yet)",
        "running" => "(none yet: the job is running)",
        _ => "(the job left no output)",
    };
    let _ = write!(
        b,
        r#"<h2>Output</h2><pre id="output">{}</pre>"#,
        if text.is_empty() {
            empty.to_string()
        } else {
            esc(&text)
        },
    );
    super::joblog::section(app, who, id, &mut b).await;
    Ok(page(&format!("Job {id}"), who, true, &b))
}

/// Queued → started → ended, with the time between each.
pub(super) fn timeline(b: &mut String, j: &crate::model::Job) {
    let span = |a: &crate::model::Timestamp, z: &crate::model::Timestamp| {
        let secs = a.seconds_until(z).max(0.0).round() as u64;
        crate::store::machines::duration_text(secs)
    };
    let q = &j.config.queue_time;
    let mut steps = vec![format!("queued {}", esc(&q.to_string()))];
    if let Some(t) = &j.runtime.start_time {
        steps.push(format!(
            "waited {} → started {}",
            span(q, t),
            esc(&t.to_string())
        ));
        if let Some(e) = &j.runtime.finish_time {
            steps.push(format!(
                "ran {} → {} {}",
                span(t, e),
                esc(j.runtime.status.name()),
                esc(&e.to_string())
            ));
        }
    }
    let _ = write!(b, r#"<p id="timeline">{}</p>"#, steps.join(" · "));
}
