//! The PRDs page and one PRD's page.

use super::*;
use crate::model::Command;

pub(super) async fn prds_page(
    app: &App,
    who: &Actor,
    project: Option<&str>,
) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    if let Some(p) = project {
        c.insert("project".into(), json!(p));
    }
    let prds = direct(app, who, Command::ListPrds, c).await?;
    let mut b = String::from(
        "<h1>PRDs</h1><table id=\"prds\"><thead><tr><th>id</th><th>title</th><th>project</th><th>status</th><th>owner</th><th>jobs</th><th>updated</th></tr></thead><tbody>",
    );
    for p in prds.as_array().into_iter().flatten() {
        let id = s(p, "/id");
        let _ = write!(
            b,
            r#"<tr data-prd="{i}"><td><a href="/prds/{u}">{i}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(s(p, "/title")),
            esc(s(p, "/project")),
            esc(s(p, "/status")),
            esc(s(p, "/owner")),
            p.get("jobs")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0),
            esc(s(p, "/update_time")),
            i = esc(id),
            u = percent_encode(id),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("PRDs", who, false, &b))
}

pub(super) async fn prd_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    c.insert("prd".into(), json!(id));
    let prd = direct(app, who, Command::ViewPrd, c).await?;
    let mut b = format!(
        r#"<h1>{}</h1><table id="prd"><tr><th>id</th><td>{}</td></tr><tr><th>project</th><td>{}</td></tr><tr><th>status</th><td>{}</td></tr><tr><th>version</th><td>{}</td></tr><tr><th>owner</th><td>{}</td></tr><tr><th>created</th><td>{}</td></tr><tr><th>updated</th><td>{}</td></tr></table>"#,
        esc(s(&prd, "/title")),
        esc(id),
        esc(s(&prd, "/project")),
        esc(s(&prd, "/status")),
        esc(s(&prd, "/version")),
        esc(s(&prd, "/owner")),
        esc(s(&prd, "/created_time")),
        esc(s(&prd, "/update_time")),
    );
    b.push_str("<h2>Provenance: the jobs that made it</h2><ul id=\"provenance\">");
    for j in prd
        .get("jobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let j = j.as_str().unwrap_or("");
        let _ = write!(
            b,
            r#"<li><a href="/jobs/{}">{}</a></li>"#,
            percent_encode(j),
            esc(j)
        );
    }
    b.push_str("</ul>");
    task_section(app, who, id, &mut b).await?;
    let content = serde_json::to_string_pretty(prd.get("content").unwrap_or(&Value::Null))
        .unwrap_or_default();
    let _ = write!(
        b,
        r#"<h2>Content</h2><pre id="content">{}</pre>"#,
        esc(&content)
    );
    Ok(page(&format!("PRD {id}"), who, false, &b))
}

/// A task's Retry (failed, cancelled, review) and Cancel (not yet ended) buttons: forms
/// posting to `/prds/{prd}/tasks/{task}/{retry|cancel}`, which the server answers only for
/// a same-site request, as the task's owner may (PRD §10 decided by the orchestrator).
fn task_buttons(prd: &str, task: &str, status: &str) -> String {
    let mut out = String::new();
    let form = |action: &str, label: &str| {
        format!(
            r#"<form method="post" action="/prds/{}/tasks/{}/{action}" class="task-{action}" style="display:inline"><button type="submit" name="{action}" value="{}">{label}</button></form>"#,
            percent_encode(prd),
            percent_encode(task),
            esc(task)
        )
    };
    if matches!(status, "failed" | "cancelled" | "review") {
        out.push_str(&form(crate::web::api_tasks::RETRY, "Retry"));
    }
    if matches!(
        status,
        "pending" | "ready" | "running" | "failed" | "review"
    ) {
        out.push_str(&form(crate::web::api_tasks::CANCEL, "Cancel"));
    }
    out
}

/// The PRD's tasks (issue 30): their graph as SVG and a table, when it has any.
async fn task_section(app: &App, who: &Actor, id: &str, b: &mut String) -> Result<(), WebError> {
    let mut c = Map::new();
    c.insert("prd".into(), json!(id));
    let tasks = direct(app, who, Command::ListTasks, c).await?;
    let tasks: Vec<Value> = tasks.as_array().cloned().unwrap_or_default();
    if tasks.is_empty() {
        return Ok(());
    }
    b.push_str("<h2>Tasks</h2>");
    b.push_str(&super::taskgraph::svg(id, &tasks));
    b.push_str("<table id=\"tasks\"><thead><tr><th>task</th><th>status</th><th>after</th><th>job</th><th>branch</th><th>commit</th><th>title</th><th></th></tr></thead><tbody>");
    for t in &tasks {
        let job = t
            .get("jobs")
            .and_then(Value::as_array)
            .and_then(|j| j.last())
            .and_then(Value::as_str)
            .unwrap_or("");
        let deps: Vec<&str> = t
            .get("depends_on")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let _ = write!(
            b,
            r#"<tr data-task="{}"><td>{}</td><td style="background:{}">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(s(t, "/id")),
            esc(s(t, "/id")),
            super::taskgraph::colour(s(t, "/status")),
            esc(s(t, "/status")),
            esc(&deps.join(", ")),
            if job.is_empty() {
                "-".to_string()
            } else {
                format!(
                    r#"<a href="/jobs/{}">{}</a>"#,
                    percent_encode(job),
                    esc(job)
                )
            },
            esc(s(t, "/branch")),
            esc(s(t, "/commit")),
            esc(s(t, "/title")),
            task_buttons(id, s(t, "/id"), s(t, "/status")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(())
}
