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
    let b = html! {
        h1 { "PRDs" }
        table id="prds" {
            thead { tr { th { "id" } th { "title" } th { "project" } th { "status" } th { "owner" } th { "jobs" } th { "updated" } } }
            tbody {
                @for p in prds.as_array().into_iter().flatten() {
                    @let id = s(p, "/id");
                    tr data-prd=(id) {
                        td { a href={ "/prds/" (percent_encode(id)) } { (id) } }
                        td { (s(p, "/title")) }
                        td { (s(p, "/project")) }
                        td { (s(p, "/status")) }
                        td { (s(p, "/owner")) }
                        td { (p.get("jobs").and_then(Value::as_array).map(Vec::len).unwrap_or(0)) }
                        td { (s(p, "/update_time")) }
                    }
                }
            }
        }
    };
    Ok(page("PRDs", who, false, b))
}

pub(super) async fn prd_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    c.insert("prd".into(), json!(id));
    let prd = direct(app, who, Command::ViewPrd, c).await?;
    let tasks = task_section(app, who, id).await?;
    let content = serde_json::to_string_pretty(prd.get("content").unwrap_or(&Value::Null))
        .unwrap_or_default();
    let b = html! {
        h1 { (s(&prd, "/title")) }
        table id="prd" {
            tr { th { "id" } td { (id) } }
            tr { th { "project" } td { (s(&prd, "/project")) } }
            tr { th { "status" } td { (s(&prd, "/status")) } }
            tr { th { "version" } td { (s(&prd, "/version")) } }
            tr { th { "owner" } td { (s(&prd, "/owner")) } }
            tr { th { "created" } td { (s(&prd, "/created_time")) } }
            tr { th { "updated" } td { (s(&prd, "/update_time")) } }
        }
        h2 { "Provenance: the jobs that made it" }
        ul id="provenance" {
            @for j in prd.get("jobs").and_then(Value::as_array).into_iter().flatten() {
                @let j = j.as_str().unwrap_or("");
                li { a href={ "/jobs/" (percent_encode(j)) } { (j) } }
            }
        }
        (tasks)
        h2 { "Content" }
        pre id="content" { (content) }
    };
    Ok(page(&format!("PRD {id}"), who, false, b))
}

/// A task's Retry (failed, cancelled, review) and Cancel (not yet ended) buttons: forms
/// posting to `/prds/{prd}/tasks/{task}/{retry|cancel}`, which the server answers only for
/// a same-site request, as the task's owner may (PRD §10 decided by the orchestrator).
fn task_buttons(prd: &str, task: &str, status: &str) -> Markup {
    let form = |action: &str, label: &str| {
        html! {
            form method="post" action={ "/prds/" (percent_encode(prd)) "/tasks/" (percent_encode(task)) "/" (action) }
                class={ "task-" (action) } style="display:inline" {
                button type="submit" name=(action) value=(task) { (label) }
            }
        }
    };
    html! {
        @if matches!(status, "failed" | "cancelled" | "review") {
            (form(crate::web::api_tasks::RETRY, "Retry"))
        }
        @if matches!(status, "pending" | "ready" | "running" | "failed" | "review") {
            (form(crate::web::api_tasks::CANCEL, "Cancel"))
        }
    }
}

/// The PRD's tasks (issue 30): their graph as SVG and a table, when it has any.
async fn task_section(app: &App, who: &Actor, id: &str) -> Result<Markup, WebError> {
    let mut c = Map::new();
    c.insert("prd".into(), json!(id));
    let tasks = direct(app, who, Command::ListTasks, c).await?;
    let tasks: Vec<Value> = tasks.as_array().cloned().unwrap_or_default();
    Ok(html! {
        @if !tasks.is_empty() {
            h2 { "Tasks" }
            (super::taskgraph::svg(id, &tasks))
            table id="tasks" {
                thead { tr { th { "task" } th { "status" } th { "after" } th { "job" } th { "branch" } th { "commit" } th { "title" } th {} } }
                tbody {
                    @for t in &tasks {
                        @let job = t
                            .get("jobs")
                            .and_then(Value::as_array)
                            .and_then(|j| j.last())
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        @let deps: Vec<&str> = t
                            .get("depends_on")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect();
                        tr data-task=(s(t, "/id")) {
                            td { (s(t, "/id")) }
                            td style={ "background:" (super::taskgraph::colour(s(t, "/status"))) } { (s(t, "/status")) }
                            td { (deps.join(", ")) }
                            td {
                                @if job.is_empty() { "-" } @else { a href={ "/jobs/" (percent_encode(job)) } { (job) } }
                            }
                            td { (s(t, "/branch")) }
                            td { (s(t, "/commit")) }
                            td { (s(t, "/title")) }
                            td { (task_buttons(id, s(t, "/id"), s(t, "/status"))) }
                        }
                    }
                }
            }
        }
    })
}
