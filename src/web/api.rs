//! `/api/…`: the D-Bus API in HTTP/JSON (docs/api.md, docs/openapi.json). Each endpoint
//! makes one D-Bus call (or a few, for cancel) on behalf of the requesting user and answers
//! what the daemon answered.

use super::auth::{Actor, Peer};
use super::error::WebError;
pub use super::percent::{no_nul, percent_decode, percent_encode};
use super::{App, Body, json};
use crate::bus::orchestrator::{again_while_stopping, submit_when_up};
use crate::model::Command;
use crate::model::Job;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The query of a request as a map (empty values left out); a key outside `known` is
/// refused, naming it.
pub fn query(req: &Request<Incoming>, known: &[&str]) -> Result<HashMap<String, String>, WebError> {
    let mut out = HashMap::new();
    for kv in req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|s| !s.is_empty())
    {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let k = percent_decode(k)?;
        if !known.contains(&k.as_str()) {
            return Err(WebError::invalid(format!(
                "unknown query parameter {k:?} (known: {})",
                known.join(", ")
            )));
        }
        let v = percent_decode(v)?;
        // An empty value is a parameter not given (what a form's empty field sends).
        if !v.is_empty() {
            out.insert(k, v);
        }
    }
    Ok(out)
}

fn number(q: &HashMap<String, String>, key: &str) -> Result<u32, WebError> {
    match q.get(key).map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(0),
        Some(v) => v.parse().map_err(|_| {
            WebError::invalid(format!("query parameter {key}={v:?} is not a whole number"))
        }),
    }
}

/// `Submit` of a direct command for `actor`; the answer's `content.result`.
pub async fn direct(
    app: &App,
    actor: &Actor,
    command: Command,
    content: Map<String, Value>,
) -> Result<Value, WebError> {
    let msg = json!({"command": command.name(), "content": content, "user": actor.user});
    let answer = submit_when_up(&app.orchestrator, &msg.to_string()).await?;
    let mut v: Value = serde_json::from_str(&answer)
        .map_err(|e| WebError::new(502, "org.agentstore.Error.Failed", e.to_string()))?;
    Ok(v.get_mut("content")
        .and_then(|c| c.get_mut("result"))
        .map(Value::take)
        .unwrap_or(Value::Null))
}

/// One page of `ListJobs` for `actor`: the daemon's JSON page, total and next offset.
pub async fn list_jobs(
    app: &App,
    actor: &Actor,
    q: &HashMap<String, String>,
) -> Result<(String, u32, u32), WebError> {
    let mut filter: HashMap<&str, &str> = HashMap::new();
    for k in ["status", "project", "queue", "fields", "after"] {
        if let Some(v) = q.get(k) {
            filter.insert(k, v);
        }
    }
    if let Some(u) = &actor.user {
        filter.insert("user", u);
    }
    let (offset, limit) = (number(q, "offset")?, number(q, "limit")?);
    Ok(again_while_stopping(|| app.orchestrator.list_jobs(filter.clone(), offset, limit)).await?)
}

/// The query parameters of a messages listing (API and page).
pub const MESSAGE_QUERY: [&str; 7] = [
    "as",
    "project",
    "user",
    "status",
    "direction",
    "offset",
    "limit",
];

/// The content of `list-messages` for a query's filters (`offset`, `limit` as numbers;
/// empty values left out).
pub fn message_filter(q: &HashMap<String, String>) -> Result<Map<String, Value>, WebError> {
    let mut c = Map::new();
    for k in ["project", "user", "status", "direction"] {
        if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
            c.insert(k.to_string(), json!(v));
        }
    }
    for k in ["offset", "limit"] {
        if q.get(k).is_some_and(|v| !v.trim().is_empty()) {
            c.insert(k.to_string(), json!(number(q, k)?));
        }
    }
    Ok(c)
}

/// The live properties of `queue`'s manager (`running: false` when none serves it).
pub async fn queue_state(app: &App, queue: &str) -> Value {
    match crate::bus::queue::live_state(&app.conn, queue).await {
        Some(s) => json!({
            "queue": queue,
            "running": true,
            "worker_count": s.worker_count,
            "active_jobs": s.active_jobs,
            "queued_jobs": s.queued_jobs,
            "paused": s.paused,
            "last_update": s.last_update,
        }),
        None => json!({"queue": queue, "running": false}),
    }
}

/// Cancels job `id` for `actor`: the job must be visible to them (`view-job`), the queue
/// manager's cancel rule must allow it, then `Queue1.CancelJob` on its queue.
pub async fn cancel(app: &App, actor: &Actor, id: &str) -> Result<Value, WebError> {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let doc = direct(app, actor, Command::ViewJob, c).await?;
    let loc = app
        .store
        .find_job(id)
        .map_err(|e| WebError::from(crate::bus::BusError::from(e)))?;
    let job: Option<Job> = serde_json::from_value(doc).ok();
    let project = job
        .as_ref()
        .and_then(|j| app.store.project(&j.config.project).ok());
    if !actor.caller.can_cancel_job(job.as_ref(), project.as_ref()) {
        return Err(crate::bus::BusError::permission_denied(
            crate::permissions::Denied::CancelJob(id.to_string()).to_string(),
        )
        .into());
    }
    crate::bus::queue::queue_proxy(&app.conn, &loc.queue)
        .await?
        .cancel_job(id)
        .await?;
    Ok(json!({"job_id": id, "queue": loc.queue, "cancelled": true}))
}

/// True when a manager serves `queue` now (asked without starting one).
async fn manager_runs(app: &App, queue: &str) -> bool {
    let Ok(dbus) = zbus::fdo::DBusProxy::new(&app.conn).await else {
        return false;
    };
    let Ok(name) = zbus::names::BusName::try_from(crate::bus::queue_bus_name(queue)) else {
        return false;
    };
    dbus.name_has_owner(name).await.unwrap_or(false)
}

/// Every running queue manager's `ListApprovals` that `actor` may see (the jobs
/// `view-job` shows them), oldest first within each queue.
pub async fn approvals(app: &App, actor: &Actor) -> Result<Value, WebError> {
    let queues = direct(app, actor, Command::ListQueues, Map::new()).await?;
    let mut out = Vec::new();
    for q in queues.as_array().into_iter().flatten() {
        let Some(queue) = q.pointer("/config/id").and_then(Value::as_str) else {
            continue;
        };
        if !manager_runs(app, queue).await {
            continue;
        }
        let rows = match crate::bus::queue::queue_proxy(&app.conn, queue).await {
            Ok(p) => p
                .list_approvals()
                .await
                .inspect_err(|e| tracing::warn!(queue, "ListApprovals: {e}"))
                .unwrap_or_default(),
            Err(_) => continue,
        };
        for (job_id, request_id, tool, summary, input_json, deadline) in rows {
            let mut c = Map::new();
            c.insert("job".into(), json!(job_id));
            // The orchestrator's §10 rule decides; a job the caller may not see is left out.
            if direct(app, actor, Command::ViewJob, c).await.is_err() {
                continue;
            }
            let input: Value = serde_json::from_str(&input_json).unwrap_or(json!(input_json));
            out.push(json!({
                "queue": queue, "job_id": job_id, "request_id": request_id, "tool": tool,
                "summary": summary, "input": input, "deadline": deadline,
            }));
        }
    }
    Ok(Value::Array(out))
}

/// An answer to an approval request (the body of `POST …/answer`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// Allow (true) or deny.
    pub allow: bool,
    /// The same tool is answered this way for the rest of the job.
    #[serde(default)]
    pub always: bool,
    /// The reason the agent sees.
    #[serde(default)]
    pub message: String,
}

/// Answers request `request` of `queue` for `actor`: `Queue1.AnswerFor` (the manager applies
/// PRD §10 to the user and records them), or `Answer` for a trusted caller acting for no one.
pub async fn answer(
    app: &App,
    actor: &Actor,
    queue: &str,
    request: &str,
    a: &AnswerBody,
) -> Result<Value, WebError> {
    no_nul(&a.message)?;
    if !manager_runs(app, queue).await {
        return Err(WebError::new(
            404,
            "org.agentstore.Error.NotFound",
            format!("no queue manager serves queue {queue:?}, so none of its requests is waiting"),
        ));
    }
    let p = crate::bus::queue::queue_proxy(&app.conn, queue).await?;
    match &actor.user {
        Some(u) => {
            p.answer_for(request, a.allow, a.always, &a.message, u)
                .await?
        }
        None => p.answer(request, a.allow, a.always, &a.message).await?,
    }
    Ok(
        json!({"queue": queue, "request_id": request, "allow": a.allow, "always": a.always,
              "by": actor.user}),
    )
}

/// Refuses a request whose body is not declared `application/json` (a body-less POST may
/// declare nothing).
fn json_body_declared(headers: &hyper::HeaderMap) -> Result<(), WebError> {
    let declared = headers
        .get(hyper::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let has_body = headers
        .get(hyper::header::CONTENT_LENGTH)
        .is_some_and(|v| v.to_str().map(|n| n.trim() != "0").unwrap_or(true))
        || headers.contains_key(hyper::header::TRANSFER_ENCODING);
    match declared {
        None if !has_body => Ok(()),
        Some(t)
            if t.split(';')
                .next()
                .map(str::trim)
                .is_some_and(|m| m.eq_ignore_ascii_case("application/json")) =>
        {
            Ok(())
        }
        other => Err(WebError::new(
            415,
            "org.agentstore.Error.InvalidMessage",
            format!(
                "request body: Content-Type is {}, not application/json",
                other.map_or("missing".to_string(), |t| format!("{t:?}"))
            ),
        )),
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode(s).unwrap_or_else(|_| s.to_string()))
        .collect()
}

pub(super) fn ok(v: &Value) -> Response<Body> {
    json(200, v.to_string())
}

/// The methods `/api/v1/<rest>` answers (`None`: no such path). The one table the router
/// below and docs/openapi.json agree with.
fn methods(rest: &[&str]) -> Option<&'static str> {
    use super::{GET_AND_POST, GET_ONLY, POST_ONLY};
    Some(match rest {
        ["messages"] => GET_AND_POST,
        ["jobs", _, "cancel"] | ["approvals", _, _, "answer"] => POST_ONLY,
        ["tasks", _, _, a] if super::api_tasks::is_action(a) => POST_ONLY,
        ["tasks", _, _] => GET_AND_POST,
        ["jobs", _, "log"] | ["tasks"] => GET_ONLY,
        [
            "whoami" | "users" | "projects" | "prds" | "queues" | "machines" | "jobs" | "approvals"
            | "events",
        ]
        | [
            "users" | "projects" | "prds" | "queues" | "jobs" | "machines" | "messages",
            _,
        ]
        | ["queues", _, "state"] => GET_ONLY,
        _ => return None,
    })
}

/// Answers one `/api/…` request.
pub async fn route(
    app: &App,
    peer: Peer,
    req: Request<Incoming>,
) -> Result<Response<Body>, WebError> {
    let path = req.uri().path().to_string();
    let seg = segments(&path);
    let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
    let method = req.method().clone();
    if seg == ["api", "openapi.json"] {
        super::check_method(&method, &path, super::GET_ONLY)?;
        return Ok(json(200, super::OPENAPI.to_string()));
    }
    let ["api", "v1", rest @ ..] = seg.as_slice() else {
        return Err(WebError::no_route(&path));
    };
    let Some(allow) = methods(rest) else {
        return Err(WebError::no_route(&path));
    };
    super::check_method(&method, &path, allow)?;
    let get = method == Method::GET || method == Method::HEAD;
    if !get {
        // A browser page of another site may POST here (through a reverse proxy on the Unix
        // socket, the proxy's account is the caller): refused by where it comes from, and a
        // body must be declared JSON, which no cross-site form or "simple" fetch can send
        // without a preflight this server never grants.
        super::auth::same_origin(req.headers())?;
        json_body_declared(req.headers())?;
    }
    let one = |k: &str, v: &str| {
        let mut m = Map::new();
        m.insert(k.to_string(), json!(v));
        m
    };
    match (rest, get) {
        (["whoami"], true) => {
            let actor = app.actor(peer, req.headers(), None)?;
            let uid = match peer {
                Peer::Unix(u) => u,
                Peer::Tcp => app.own_uid,
            };
            Ok(ok(&json!({
                "uid": uid,
                "user": actor.user,
                "trusted": matches!(actor.caller, crate::permissions::Caller::Trusted),
                "admin": actor.caller.is_admin(),
            })))
        }
        (["users"], true) | (["projects"], true) | (["queues"], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let command = match rest[0] {
                "users" => Command::ListUsers,
                "projects" => Command::ListProjects,
                _ => Command::ListQueues,
            };
            Ok(ok(&direct(app, &actor, command, Map::new()).await?))
        }
        (["prds"], true) => {
            let q = query(&req, &["as", "project"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let c = q
                .get("project")
                .map(|p| one("project", p))
                .unwrap_or_default();
            Ok(ok(&direct(app, &actor, Command::ListPrds, c).await?))
        }
        (
            [
                kind @ ("users" | "projects" | "prds" | "queues" | "jobs"),
                id,
            ],
            true,
        ) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let (command, key) = match *kind {
                "users" => (Command::ViewUser, "user"),
                "projects" => (Command::ViewProject, "project"),
                "prds" => (Command::ViewPrd, "prd"),
                "queues" => (Command::ViewQueue, "queue"),
                _ => (Command::ViewJob, "job"),
            };
            Ok(ok(&direct(app, &actor, command, one(key, id)).await?))
        }
        (["tasks", ..], _) => super::api_tasks::route(app, peer, req, rest, get).await,
        (["machines"], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(
                &direct(app, &actor, Command::ListMachines, Map::new()).await?
            ))
        }
        (["machines", host], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(&direct(
                app,
                &actor,
                Command::ViewMachine,
                one("host", host),
            )
            .await?))
        }
        (["messages"], true) => {
            let q = query(&req, &MESSAGE_QUERY)?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(&direct(
                app,
                &actor,
                Command::ListMessages,
                message_filter(&q)?,
            )
            .await?))
        }
        (["messages", id], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(&direct(
                app,
                &actor,
                Command::ViewMessage,
                one("message", id),
            )
            .await?))
        }
        (["queues", name, "state"], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            direct(app, &actor, Command::ViewQueue, one("queue", name)).await?;
            Ok(ok(&queue_state(app, name).await))
        }
        (["jobs"], true) => {
            let q = query(
                &req,
                &[
                    "as", "status", "project", "queue", "fields", "after", "offset", "limit",
                ],
            )?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let (page, total, next) = list_jobs(app, &actor, &q).await?;
            let after = match crate::bus::listing::next_after(&page) {
                Some(a) if next < total => Value::String(a).to_string(),
                _ => "null".into(),
            };
            Ok(json(
                200,
                format!(
                    r#"{{"jobs":{page},"total":{total},"next_offset":{next},"next_after":{after}}}"#
                ),
            ))
        }
        (["jobs", id, "log"], true) => {
            let q = query(&req, &["as", "after", "limit"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let mut c = one("job", id);
            if let Some(a) = q.get("after") {
                c.insert("after".into(), json!(a));
            }
            if q.get("limit").is_some_and(|v| !v.trim().is_empty()) {
                c.insert("limit".into(), json!(number(&q, "limit")?));
            }
            Ok(ok(&direct(app, &actor, Command::JobLog, c).await?))
        }
        (["jobs", id, "cancel"], false) if method == Method::POST => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(&cancel(app, &actor, id).await?))
        }
        (["messages"], false) if method == Method::POST => {
            let headers = req.headers().clone();
            let body = super::read_body(req).await?;
            let mut msg: Value = serde_json::from_slice(&body)
                .map_err(|e| WebError::invalid(format!("request body: not a JSON message: {e}")))?;
            let Some(obj) = msg.as_object_mut() else {
                return Err(WebError::invalid(
                    "request body: a message must be a JSON object",
                ));
            };
            let claimed = match obj.get("user") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(WebError::invalid("request body: user must be a string")),
            };
            let actor = app.actor(peer, &headers, claimed.as_deref())?;
            obj.insert("user".into(), json!(actor.user));
            let answer = submit_when_up(&app.orchestrator, &msg.to_string()).await?;
            Ok(json(200, answer))
        }
        (["approvals"], true) => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            Ok(ok(&approvals(app, &actor).await?))
        }
        (["approvals", queue, request, "answer"], false) if method == Method::POST => {
            let q = query(&req, &["as"])?;
            let actor = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            let body = super::read_body(req).await?;
            let a: AnswerBody = serde_json::from_slice(&body).map_err(|e| {
                WebError::invalid(format!(
                    "request body: not an answer {{\"allow\": bool, \"always\": bool, \"message\": string}}: {e}"
                ))
            })?;
            Ok(ok(&answer(app, &actor, queue, request, &a).await?))
        }
        (["events"], true) => {
            let actor = app.actor(peer, req.headers(), None)?;
            Ok(event_stream(app, actor))
        }
        _ => Err(WebError::no_route(&path)),
    }
}

/// `text/event-stream` of the bus's signals until the client goes, each event about a job
/// only to a caller who may see that job (PRD §10, DESIGN §9: every reader is authorized;
/// the orchestrator's `view-job` decides, once per job and stream).
pub fn event_stream(app: &App, actor: Actor) -> Response<Body> {
    let rx = app.events.subscribe();
    let first = Bytes::from_static(b"retry: 1000\n: subscribed\n\n");
    let reader = EventReader {
        orchestrator: app.orchestrator.clone(),
        actor,
        seen: HashMap::new(),
    };
    let stream = futures_util::stream::unfold(
        (Some(first), rx, reader),
        |(first, mut rx, mut reader)| async move {
            if let Some(f) = first {
                return Some((
                    Ok::<_, std::convert::Infallible>(Frame::data(f)),
                    (None, rx, reader),
                ));
            }
            let text = loop {
                let ev = tokio::select! {
                    ev = rx.recv() => ev,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(15)) => {
                        break ": keepalive\n\n".to_string();
                    }
                };
                match ev {
                    Ok((name, data)) => {
                        if reader.may_read(&data).await {
                            break format!("event: {name}\ndata: {data}\n\n");
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        break format!("event: Lagged\ndata: {{\"missed\":{n}}}\n\n");
                    }
                    Err(_) => return None,
                }
            };
            Some((Ok(Frame::data(Bytes::from(text))), (None, rx, reader)))
        },
    );
    let mut r = Response::new(http_body_util::StreamBody::new(stream).boxed());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

/// Who reads one event stream, and the jobs already decided for them.
struct EventReader {
    orchestrator: crate::bus::orchestrator::Orchestrator1Proxy<'static>,
    actor: Actor,
    seen: HashMap<String, bool>,
}

impl EventReader {
    /// Most job decisions kept per stream (then forgotten and asked again).
    const MAX_SEEN: usize = 4096;

    /// True when the event whose JSON data is `data` may go to this reader: one about no
    /// job, or about a job `view-job` shows them.
    async fn may_read(&mut self, data: &str) -> bool {
        if self.actor.caller.is_admin() {
            return true;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        let Some(job) = v
            .get("job_id")
            .or_else(|| v.get("id"))
            .and_then(Value::as_str)
        else {
            return true;
        };
        if let Some(ok) = self.seen.get(job) {
            return *ok;
        }
        let msg = json!({"command": Command::ViewJob.name(), "content": {"job": job}, "user": self.actor.user});
        // A refusal and an unknown job are both errors: neither is shown.
        // Asked on a task of its own: the proxy's future is not `Sync`, a body must be.
        let orchestrator = self.orchestrator.clone();
        let ok = tokio::spawn(async move {
            submit_when_up(&orchestrator, &msg.to_string())
                .await
                .is_ok()
        })
        .await
        .unwrap_or(false);
        if self.seen.len() >= Self::MAX_SEEN {
            self.seen.clear();
        }
        self.seen.insert(job.to_string(), ok);
        ok
    }
}
