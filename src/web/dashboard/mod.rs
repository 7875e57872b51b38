//! The dashboard: pages rendered on the server from the same D-Bus answers as the API
//! (readable with JavaScript off). `/static/live.js` (ours, vendored, no build step) only
//! refreshes a page's `<main data-live>` when the event stream says something changed.

mod approvals;
mod charts_page;
mod joblog;
mod jobs;
mod machines;
mod messages;
mod prds;
mod projects;
mod queues;
mod taskgraph;
#[cfg(test)]
mod tests;

use self::{
    approvals::*, charts_page::*, jobs::*, machines::*, messages::*, prds::*, projects::*,
    queues::*,
};
use super::api::{
    MESSAGE_QUERY, direct, list_jobs, message_filter, percent_encode, query, queue_state,
};
use super::auth::{Actor, Peer};
use super::auth::{local_path, same_origin};
use super::error::WebError;
use super::{App, Body, charts, respond};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use maud::{DOCTYPE, Markup, PreEscaped, display, html};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The live-update script (served at `/static/live.js`).
pub const LIVE_JS: &str = include_str!("../live.js");

/// Jobs the charts are drawn from: the most recent this many.
pub const CHART_JOBS: u32 = 2000;

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}\
header{background:#234;color:#fff;padding:8px 16px}header a{color:#fff;margin-right:16px}\
main{padding:12px 16px}table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}\
.s-failed{color:#b00}tr.stale{background:#fee}.s-finished{color:#070}.s-running{color:#05a}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;max-width:100ch}\
form.filters input,form.filters select{margin-right:8px}.pager a{margin-right:12px}figure{margin:12px 0}";

/// A page: the header's links, who is looking, and `body` in `<main>` (`live`: refreshed by
/// `/static/live.js` when the event stream says something changed).
fn page(title: &str, who: &Actor, live: bool, body: Markup) -> Response<Body> {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · agentstore" }
                // A constant of this file.
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    a href="/" { "Queues" }
                    a href="/jobs" { "Jobs" }
                    a href="/prds" { "PRDs" }
                    a href="/projects" { "Projects" }
                    a href="/users" { "Users" }
                    a href="/charts" { "Charts" }
                    a href="/approvals" { "Approvals" }
                    a href="/machines" { "Machines" }
                    a href="/messages" { "Messages" }
                    span style="float:right" { (who.name) }
                }
                main data-live[live] { (body) }
                script src="/static/live.js" defer {}
            }
        }
    };
    respond(200, "text/html; charset=utf-8", html.into_string())
}

/// An error as a page.
pub fn error_page(e: &WebError) -> Response<Body> {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (e.status) " · agentstore" }
            }
            body {
                h1 { (e.name) }
                p id="error" { (e.message) }
                p { a href="/" { "Back" } }
            }
        }
    };
    respond(e.status, "text/html; charset=utf-8", html.into_string())
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn redirect(to: &str, cookie: Option<String>) -> Response<Body> {
    let mut r = respond(303, "text/plain", String::new());
    if let Ok(v) = hyper::header::HeaderValue::from_str(to) {
        r.headers_mut().insert(hyper::header::LOCATION, v);
    }
    if let Some(c) = cookie.and_then(|c| hyper::header::HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(hyper::header::SET_COOKIE, c);
    }
    r
}

/// The methods a page path answers (`None`: no such page).
fn methods(path: &str, seg: &[&str]) -> Option<&'static str> {
    use super::{GET_ONLY, POST_ONLY};
    if path == "/static/live.js" || path == "/login" {
        return Some(GET_ONLY);
    }
    Some(match seg {
        ["jobs", _, "cancel"] | ["approvals", _, _, "answer"] => POST_ONLY,
        ["prds", _, "tasks", _, a] if super::api_tasks::is_action(a) => POST_ONLY,
        []
        | [
            "jobs" | "prds" | "approvals" | "machines" | "projects" | "users" | "messages"
            | "charts",
        ]
        | ["jobs" | "prds" | "machines" | "messages", _] => GET_ONLY,
        _ => return None,
    })
}

/// Answers one page request.
pub async fn route(
    app: &App,
    peer: Peer,
    req: Request<Incoming>,
) -> Result<Response<Body>, WebError> {
    let path = req.uri().path().to_string();
    let seg: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| super::percent::percent_decode(s).unwrap_or_else(|_| s.to_string()))
        .collect();
    let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
    let Some(allow) = methods(&path, &seg) else {
        return Err(WebError::no_route(&path));
    };
    super::check_method(req.method(), &path, allow)?;
    if path == "/static/live.js" {
        return Ok(respond(
            200,
            "text/javascript; charset=utf-8",
            LIVE_JS.to_string(),
        ));
    }
    if path == "/login" {
        // TCP: the token once in the URL (what `orchestrator web` prints), then a cookie.
        let q = query(&req, &["token", "next"])?;
        let token = q.get("token").cloned().unwrap_or_default();
        let mut headers = hyper::HeaderMap::new();
        if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("Bearer {token}")) {
            headers.insert(hyper::header::AUTHORIZATION, v);
        }
        app.actor(peer, &headers, None)?;
        let next = q
            .get("next")
            .and_then(|n| local_path(n))
            .unwrap_or_else(|| "/".to_string());
        return Ok(redirect(
            &next,
            Some(format!(
                "agentstore_token={token}; HttpOnly; SameSite=Strict; Path=/"
            )),
        ));
    }
    let post = req.method() == Method::POST;
    match (seg.as_slice(), post) {
        ([], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            queues_page(app, &who).await
        }
        (["jobs"], false) => {
            let q = query(
                &req,
                &["as", "status", "project", "queue", "offset", "limit"],
            )?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            jobs_page(app, &who, q).await
        }
        (["jobs", id], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            job_page(app, &who, id).await
        }
        (["jobs", id, "cancel"], true) => {
            same_origin(req.headers())?;
            let who = app.actor(peer, req.headers(), None)?;
            super::api::cancel(app, &who, id).await?;
            Ok(redirect(&format!("/jobs/{}", percent_encode(id)), None))
        }
        (["prds", prd, "tasks", task, action], true) => {
            // A task's Retry or Cancel button (issue 30): the API's action, same-site only.
            same_origin(req.headers())?;
            let who = app.actor(peer, req.headers(), None)?;
            super::api_tasks::act(app, &who, prd, task, action).await?;
            Ok(redirect(&format!("/prds/{}", percent_encode(prd)), None))
        }
        (["prds"], false) => {
            let q = query(&req, &["as", "project"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            prds_page(app, &who, q.get("project").map(String::as_str)).await
        }
        (["prds", id], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            prd_page(app, &who, id).await
        }
        (["approvals"], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            approvals_page(app, &who).await
        }
        (["approvals", queue, request, "answer"], true) => {
            same_origin(req.headers())?;
            let who = app.actor(peer, req.headers(), None)?;
            let body = super::read_body(req).await?;
            let form = form_fields(&body)?;
            let allow = match form.get("decision").map(String::as_str) {
                Some("allow") => true,
                Some("deny") => false,
                other => {
                    return Err(WebError::invalid(format!(
                        "form field decision is {other:?}, not allow or deny"
                    )));
                }
            };
            let a = super::api::AnswerBody {
                allow,
                always: form.get("always").is_some_and(|v| v == "on" || v == "true"),
                message: form.get("message").cloned().unwrap_or_default(),
            };
            super::api::answer(app, &who, queue, request, &a).await?;
            Ok(redirect("/approvals", None))
        }
        (["machines"], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            machines_page(app, &who).await
        }
        (["projects"], false) | (["users"], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            if seg[0] == "projects" {
                projects_page(app, &who).await
            } else {
                users_page(app, &who).await
            }
        }
        (["machines", host], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            machine_page(app, &who, host).await
        }
        (["messages"], false) => {
            let q = query(&req, &MESSAGE_QUERY)?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            messages_page(app, &who, q).await
        }
        (["messages", id], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            message_page(app, &who, id).await
        }
        (["charts"], false) => {
            let q = query(&req, &["as"])?;
            let who = app.actor(peer, req.headers(), q.get("as").map(String::as_str))?;
            charts_page(app, &who).await
        }
        _ => Err(WebError::no_route(&path)),
    }
}

/// The fields of an `application/x-www-form-urlencoded` body.
fn form_fields(body: &[u8]) -> Result<HashMap<String, String>, WebError> {
    let text =
        std::str::from_utf8(body).map_err(|_| WebError::invalid("form body is not UTF-8"))?;
    let mut out = HashMap::new();
    for kv in text.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        out.insert(
            super::percent::percent_decode(k)?,
            super::percent::percent_decode(v)?,
        );
    }
    Ok(out)
}

/// The strings of a JSON array, joined with commas.
fn joined(v: &Value) -> String {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A list of what a listing could not read (`problems`), under `title`; nothing when none.
fn problems_list(title: &str, problems: &Value) -> Markup {
    let problems = problems.as_array().cloned().unwrap_or_default();
    html! {
        @if !problems.is_empty() {
            h2 { (title) }
            ul id="problems" {
                @for p in &problems {
                    li { (p.as_str().unwrap_or("")) }
                }
            }
        }
    }
}

/// Previous/next links of a paged list at `path`, keeping the filters `keys` of `q`;
/// `(offset, limit)` of this page, `(next, total)` from its answer.
fn pager(
    path: &str,
    q: &HashMap<String, String>,
    keys: &[&str],
    (offset, limit): (u64, u64),
    (next, total): (u64, u64),
) -> Markup {
    let link = |off: u64| {
        let mut parts = vec![format!("offset={off}"), format!("limit={limit}")];
        for k in keys {
            if let Some(v) = q.get(*k).filter(|v| !v.is_empty()) {
                parts.push(format!("{k}={}", percent_encode(v)));
            }
        }
        format!("{path}?{}", parts.join("&"))
    };
    html! {
        p class="pager" {
            @if offset > 0 {
                a id="prev" href=(link(offset.saturating_sub(limit))) { "← previous" }
            }
            @if next < total {
                a id="next" href=(link(next)) { "next →" }
            }
        }
    }
}

fn one(k: &str, v: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(k.to_string(), json!(v));
    m
}
