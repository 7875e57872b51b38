//! `/api/v1/tasks` (issue 30): the task commands over HTTP, each the Orchestrator1 command
//! of the same name for the caller (PRD §10 decided there, as over D-Bus and the CLI):
//!
//! - `GET /api/v1/tasks[?prd=&project=&status=]`: list-tasks;
//! - `GET /api/v1/tasks/{prd}/{task}`: view-task;
//! - `POST /api/v1/tasks/{prd}/{task}` with `{"title", "description", "depends_on"}` (any of
//!   them): set-task;
//! - `POST /api/v1/tasks/{prd}/{task}/retry`: retry-task;
//! - `POST /api/v1/tasks/{prd}/{task}/cancel`: cancel-task, then the task's live job
//!   cancelled by its queue manager, as `orchestrator cancel-task` does it.

use super::App;
use super::api::{cancel, direct, ok, query};
use super::auth::Peer;
use super::error::WebError;
use crate::model::Command;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{Map, Value, json};

/// The actions of `POST /api/v1/tasks/{prd}/{task}/{action}` (path segments, which name
/// the retry-task and cancel-task commands).
const ACTIONS: [&str; 2] = [RETRY, CANCEL];

/// The retry action's path segment (retry-task).
pub const RETRY: &str = "retry";
/// The cancel action's path segment (cancel-task).
pub const CANCEL: &str = "cancel";

/// True for a path segment naming an action on a task.
pub fn is_action(segment: &str) -> bool {
    ACTIONS.contains(&segment)
}

/// Answers `/api/v1/tasks…` (`rest`: the path after `/api/v1/`; the method is checked).
pub async fn route(
    app: &App,
    peer: Peer,
    req: Request<Incoming>,
    rest: &[&str],
    get: bool,
) -> Result<Response<super::Body>, WebError> {
    let name = |prd: &str, task: &str| {
        let mut m = Map::new();
        m.insert("task".into(), json!(format!("{prd}/{task}")));
        m
    };
    match (rest, get) {
        (["tasks"], true) => {
            let q = query(&req, &["as", "prd", "project", "status"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let mut c = Map::new();
            for k in ["prd", "project", "status"] {
                if let Some(v) = q.get(k) {
                    c.insert(k.into(), json!(v));
                }
            }
            Ok(ok(&direct(app, &actor, Command::ListTasks, c).await?))
        }
        (["tasks", prd, task], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(
                &direct(app, &actor, Command::ViewTask, name(prd, task)).await?
            ))
        }
        (["tasks", prd, task], false) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let body = super::read_body(req).await?;
            let mut c = change(&body)?;
            c.extend(name(prd, task));
            Ok(ok(&direct(app, &actor, Command::SetTask, c).await?))
        }
        (["tasks", prd, task, action], false) if is_action(action) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(&act(app, &actor, prd, task, action).await?))
        }
        _ => Err(WebError::no_route(&format!("/api/v1/{}", rest.join("/")))),
    }
}

/// `retry` (retry-task) or `cancel` (cancel-task, then the task's live job cancelled by its
/// queue manager) of task `prd/task` for `actor`: the answer. Also the dashboard's buttons.
pub async fn act(
    app: &App,
    actor: &super::auth::Actor,
    prd: &str,
    task: &str,
    action: &str,
) -> Result<Value, WebError> {
    let mut name = Map::new();
    name.insert("task".into(), json!(format!("{prd}/{task}")));
    match action {
        RETRY => direct(app, actor, Command::RetryTask, name).await,
        CANCEL => {
            let mut r = direct(app, actor, Command::CancelTask, name).await?;
            if let Some(job) = r.get("job").and_then(Value::as_str).map(str::to_string) {
                let note = match cancel(app, actor, &job).await {
                    Ok(_) => format!("its job {job} cancelled"),
                    Err(e) => format!("its job {job} could not be cancelled: {}", e.message),
                };
                r["job_note"] = json!(note);
            }
            Ok(r)
        }
        other => Err(WebError::invalid(format!(
            "{other:?} is not an action on a task (retry or cancel)"
        ))),
    }
}

/// The body of set-task: a JSON object with any of `title`, `description` (strings) and
/// `depends_on` (task ids, `PRD/TASK` for another PRD's); anything else is refused, naming
/// the field.
fn change(body: &[u8]) -> Result<Map<String, Value>, WebError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        WebError::invalid(format!(
            "request body: not a task change {{\"title\", \"description\", \"depends_on\"}}: {e}"
        ))
    })?;
    let Value::Object(m) = v else {
        return Err(WebError::invalid(
            "request body: a task change must be a JSON object",
        ));
    };
    for (k, v) in &m {
        let fits = match k.as_str() {
            "title" | "description" => v.is_string(),
            "depends_on" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            _ => {
                return Err(WebError::invalid(format!(
                    "request body: {k}: unknown field (a task change has title, description, depends_on)"
                )));
            }
        };
        if !fits {
            return Err(WebError::invalid(format!(
                "request body: {k} must be {}",
                if k == "depends_on" {
                    "an array of task ids"
                } else {
                    "a string"
                }
            )));
        }
    }
    if m.is_empty() {
        return Err(WebError::invalid(
            "request body: nothing to change (give title, description or depends_on)",
        ));
    }
    Ok(m)
}
