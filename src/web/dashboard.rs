//! The dashboard: pages rendered on the server from the same D-Bus answers as the API
//! (readable with JavaScript off). `/static/live.js` (ours, vendored, no build step) only
//! refreshes a page's `<main data-live>` when the event stream says something changed.

use super::api::{
    MESSAGE_QUERY, direct, list_jobs, message_filter, percent_encode, query, queue_state,
};
use super::auth::{Actor, Peer};
use super::error::WebError;
use super::html::esc;
use super::{App, Body, charts, respond};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The live-update script (served at `/static/live.js`).
pub const LIVE_JS: &str = include_str!("live.js");

/// Jobs the charts are drawn from: the most recent this many.
pub const CHART_JOBS: u32 = 2000;

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}\
header{background:#234;color:#fff;padding:8px 16px}header a{color:#fff;margin-right:16px}\
main{padding:12px 16px}table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}\
.s-failed{color:#b00}tr.stale{background:#fee}.s-finished{color:#070}.s-running{color:#05a}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;max-width:100ch}\
form.filters input,form.filters select{margin-right:8px}.pager a{margin-right:12px}figure{margin:12px 0}";

fn page(title: &str, who: &Actor, live: bool, body: &str) -> Response<Body> {
    let me = who.name.as_str();
    let html = format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{t} · agentstore</title><style>{CSS}</style></head><body><header><a href="/">Queues</a><a href="/jobs">Jobs</a><a href="/prds">PRDs</a><a href="/projects">Projects</a><a href="/users">Users</a><a href="/charts">Charts</a><a href="/approvals">Approvals</a><a href="/machines">Machines</a><a href="/messages">Messages</a><span style="float:right">{me}</span></header><main{live}>{body}</main><script src="/static/live.js" defer></script></body></html>"#,
        t = esc(title),
        me = esc(me),
        live = if live { " data-live" } else { "" },
    );
    respond(200, "text/html; charset=utf-8", html)
}

/// An error as a page.
pub fn error_page(e: &WebError) -> Response<Body> {
    respond(
        e.status,
        "text/html; charset=utf-8",
        format!(
            r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{} · agentstore</title></head><body><h1>{}</h1><p id="error">{}</p><p><a href="/">Back</a></p></body></html>"#,
            e.status,
            esc(&e.name),
            esc(&e.message)
        ),
    )
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// Where a redirect may send the browser, given a `next` the request named (already
/// %-decoded once): a path and query on this server, as a browser reads it, or `None`.
///
/// The one rule for every redirect target a request chooses. A browser strips tabs and
/// newlines from a URL, takes `\` for `/` and `//host` for another host, and a path may be
/// %-decoded again by whatever reads it next; so anything but printable ASCII without spaces
/// and backslashes is refused, and `next` and each of its %-decodings must read, by the URL
/// standard (the `url` crate) against this server, as this server with a path starting with
/// exactly one `/`. What is returned is that reading of `next` itself.
pub fn local_path(next: &str) -> Option<String> {
    let suspicious = |s: &str| {
        !s.starts_with('/')
            || s.starts_with("//")
            || s.chars().any(|c| {
                !c.is_ascii() || c.is_ascii_control() || c.is_ascii_whitespace() || c == '\\'
            })
    };
    let base = url::Url::parse("http://agentstore.invalid/").ok()?;
    let read = |s: &str| -> Option<String> {
        if suspicious(s) {
            return None;
        }
        let u = base.join(s).ok()?;
        if u.origin() != base.origin() || !u.username().is_empty() || u.password().is_some() {
            return None;
        }
        let mut out = u.path().to_string();
        if let Some(q) = u.query() {
            out.push('?');
            out.push_str(q);
        }
        (!suspicious(&out)).then_some(out)
    };
    let answer = read(next)?;
    // Whatever decodes it again must read a local path too.
    let mut level = next.to_string();
    for _ in 0..4 {
        // %-decoding only ('+' is a space in a form, not in a path or a redirect).
        let decoded = super::api::percent_decode(&level.replace('+', "%2B")).ok()?;
        if decoded == level {
            return Some(answer);
        }
        read(&decoded)?;
        level = decoded;
    }
    None
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
        .map(|s| super::api::percent_decode(s).unwrap_or_else(|_| s.to_string()))
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

/// Refuses a form POST another site's page sent (CSRF): a browser says where a request
/// comes from in `Sec-Fetch-Site` and `Origin`; either naming another site is refused. (The
/// token cookie is also `SameSite=Strict`, so a cross-site POST over TCP carries no token.)
pub fn same_origin(headers: &hyper::HeaderMap) -> Result<(), WebError> {
    let refuse = |why: String| {
        Err(WebError::new(
            403,
            "org.agentstore.Error.PermissionDenied",
            format!("cross-site form POST refused ({why})"),
        ))
    };
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" && site != "none" {
            return refuse(format!("Sec-Fetch-Site: {site}"));
        }
    }
    if let Some(origin) = headers.get(hyper::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = headers
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if origin_host.is_empty() || origin_host != host {
            return refuse(format!("Origin {origin} is not this server ({host})"));
        }
    }
    Ok(())
}

/// The fields of an `application/x-www-form-urlencoded` body.
fn form_fields(body: &[u8]) -> Result<HashMap<String, String>, WebError> {
    let text =
        std::str::from_utf8(body).map_err(|_| WebError::invalid("form body is not UTF-8"))?;
    let mut out = HashMap::new();
    for kv in text.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        out.insert(
            super::api::percent_decode(k)?,
            super::api::percent_decode(v)?,
        );
    }
    Ok(out)
}

async fn approvals_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let rows = super::api::approvals(app, who).await?;
    let rows = rows.as_array().cloned().unwrap_or_default();
    let mut b = format!(
        r#"<h1>Approvals</h1><p id="waiting">{} waiting</p><table id="approvals"><thead><tr><th>queue</th><th>job</th><th>request</th><th>tool</th><th>summary</th><th>deadline</th><th>answer</th></tr></thead><tbody>"#,
        rows.len()
    );
    for r in &rows {
        let (queue, job, req) = (s(r, "/queue"), s(r, "/job_id"), s(r, "/request_id"));
        let _ = write!(
            b,
            r#"<tr data-request="{req}"><td>{queue}</td><td><a href="/jobs/{ju}">{job}</a></td><td>{req}</td><td>{tool}</td><td>{summary}</td><td>{deadline}</td><td><form method="post" action="/approvals/{qu}/{ru}/answer"><input name="message" placeholder="reason (optional)" size="16"><label><input type="checkbox" name="always"> always</label><button name="decision" value="allow" class="allow">Allow</button><button name="decision" value="deny" class="deny">Deny</button></form></td></tr>"#,
            queue = esc(queue),
            job = esc(job),
            ju = percent_encode(job),
            req = esc(req),
            qu = percent_encode(queue),
            ru = percent_encode(req),
            tool = esc(s(r, "/tool")),
            summary = esc(s(r, "/summary")),
            deadline = esc(s(r, "/deadline")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("Approvals", who, true, &b))
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
fn problems_list(b: &mut String, title: &str, problems: &Value) {
    let problems = problems.as_array().cloned().unwrap_or_default();
    if problems.is_empty() {
        return;
    }
    let _ = write!(b, r#"<h2>{title}</h2><ul id="problems">"#);
    for p in &problems {
        let _ = write!(b, "<li>{}</li>", esc(p.as_str().unwrap_or("")));
    }
    b.push_str("</ul>");
}

/// Previous/next links of a paged list at `path`, keeping the filters `keys` of `q`;
/// `(offset, limit)` of this page, `(next, total)` from its answer.
fn pager(
    b: &mut String,
    path: &str,
    q: &HashMap<String, String>,
    keys: &[&str],
    (offset, limit): (u64, u64),
    (next, total): (u64, u64),
) {
    let link = |off: u64| {
        let mut parts = vec![format!("offset={off}"), format!("limit={limit}")];
        for k in keys {
            if let Some(v) = q.get(*k).filter(|v| !v.is_empty()) {
                parts.push(format!("{k}={}", percent_encode(v)));
            }
        }
        format!("{path}?{}", parts.join("&amp;"))
    };
    b.push_str("<p class=\"pager\">");
    if offset > 0 {
        let _ = write!(
            b,
            r#"<a id="prev" href="{}">← previous</a>"#,
            link(offset.saturating_sub(limit))
        );
    }
    if next < total {
        let _ = write!(b, r#"<a id="next" href="{}">next →</a>"#, link(next));
    }
    b.push_str("</p>");
}

async fn machines_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, "list-machines", Map::new()).await?;
    let rows = all["machines"].as_array().cloned().unwrap_or_default();
    let stale = rows.iter().filter(|m| m["stale"] == json!(true)).count();
    let mut b = format!(
        r#"<h1>Machines</h1><p id="summary">{} machines, {stale} stale</p><table id="machines"><thead><tr><th>host</th><th>state</th><th>last seen</th><th>daemons</th><th>queues</th><th>version</th></tr></thead><tbody>"#,
        rows.len()
    );
    for m in &rows {
        let is_stale = m["stale"] == json!(true);
        let _ = write!(
            b,
            r#"<tr data-machine="{h}"{cls}><td><a href="/machines/{hu}">{h}</a></td><td class="state">{st}</td><td>{seen}</td><td>{d}</td><td>{q}</td><td>{v}</td></tr>"#,
            h = esc(s(m, "/host")),
            hu = percent_encode(s(m, "/host")),
            cls = if is_stale { r#" class="stale""# } else { "" },
            st = if is_stale {
                format!("<strong>⚠ {}</strong>", esc(s(m, "/state")))
            } else {
                esc(s(m, "/state"))
            },
            seen = esc(s(m, "/last_seen")),
            d = esc(&joined(&m["daemons"])),
            q = esc(&joined(&m["queues"])),
            v = esc(&joined(&m["versions"])),
        );
    }
    b.push_str("</tbody></table>");
    if rows.is_empty() {
        b.push_str("<p>No machine has reported yet (no heartbeats under machines/).</p>");
    }
    problems_list(&mut b, "Skipped", &all["problems"]);
    Ok(page("Machines", who, true, &b))
}

/// The projects the caller may see (`list-projects`), each linked to its jobs, PRDs and
/// messages.
async fn projects_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, "list-projects", Map::new()).await?;
    let rows = all.as_array().cloned().unwrap_or_default();
    let mut b = String::from(
        "<h1>Projects</h1><table id=\"projects\"><thead><tr><th>project</th><th>owner</th><th>collaborators</th><th>default queue</th><th>directory</th><th>description</th><th>see</th></tr></thead><tbody>",
    );
    for p in &rows {
        let id = s(p, "/id");
        let u = percent_encode(id);
        let _ = write!(
            b,
            r#"<tr data-project="{i}"><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href="/jobs?project={u}">jobs</a> <a href="/prds?project={u}">PRDs</a> <a href="/messages?project={u}">messages</a></td></tr>"#,
            esc(s(p, "/owner")),
            esc(&joined(&p["collaborators"])),
            esc(s(p, "/default_queue")),
            esc(s(p, "/directory")),
            esc(s(p, "/description")),
            i = esc(id),
        );
    }
    b.push_str("</tbody></table>");
    if rows.is_empty() {
        b.push_str("<p>No project you may see.</p>");
    }
    Ok(page("Projects", who, false, &b))
}

/// The users (`list-users`: admins only; anyone else gets the daemon's refusal).
async fn users_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, "list-users", Map::new()).await?;
    let mut b = String::from(
        "<h1>Users</h1><table id=\"users\"><thead><tr><th>user</th><th>name</th><th>email</th><th>permissions</th><th>Unix user</th></tr></thead><tbody>",
    );
    for u in all.as_array().into_iter().flatten() {
        let _ = write!(
            b,
            r#"<tr data-user="{i}"><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(s(u, "/name")),
            esc(s(u, "/email")),
            esc(s(u, "/permissions")),
            esc(s(u, "/unix_user")),
            i = esc(s(u, "/id")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("Users", who, false, &b))
}

/// One machine (`view-machine`): its row, and each daemon's heartbeat with its age.
async fn machine_page(app: &App, who: &Actor, host: &str) -> Result<Response<Body>, WebError> {
    let m = direct(app, who, "view-machine", one("host", host)).await?;
    let stale = m["stale"] == json!(true);
    let mut b = format!(
        r#"<h1>Machine {h}</h1><p><a href="/machines">← all machines</a></p><table id="machine">"#,
        h = esc(host)
    );
    let state = if stale {
        format!("<strong>⚠ {}</strong>", esc(s(&m, "/state")))
    } else {
        esc(s(&m, "/state"))
    };
    let rows = [
        ("state", state),
        ("last-seen", esc(s(&m, "/last_seen"))),
        ("daemons", esc(&joined(&m["daemons"]))),
        ("queues", esc(&joined(&m["queues"]))),
        ("versions", esc(&joined(&m["versions"]))),
        ("orchestrator", esc(s(&m, "/orchestrator_role"))),
        ("boot-id", esc(s(&m, "/boot_id"))),
    ];
    for (label, cell) in rows {
        if cell.is_empty() {
            continue;
        }
        let _ = write!(
            b,
            r#"<tr{cls}><th>{}</th><td id="f-{label}">{cell}</td></tr>"#,
            label.replace('-', " "),
            cls = if stale && label == "state" {
                r#" class="stale""#
            } else {
                ""
            },
        );
    }
    b.push_str("</table><h2>Heartbeats</h2><table id=\"heartbeats\"><thead><tr><th>daemon</th><th>queue</th><th>pid</th><th>version</th><th>started</th><th>last seen</th><th>age</th><th>every</th><th>stopped</th></tr></thead><tbody>");
    let now = crate::model::Timestamp::now();
    for d in m["heartbeats"].as_array().into_iter().flatten() {
        let seen = s(d, "/last_seen");
        let age = seen
            .parse::<crate::model::Timestamp>()
            .ok()
            .map(|t| {
                let secs = u64::try_from((now.0 - t.0).num_seconds()).unwrap_or(0);
                crate::store::machines::duration_text(secs)
            })
            .unwrap_or_default();
        let _ = write!(
            b,
            r#"<tr data-daemon="{daemon}"><td>{daemon}</td><td>{queue}</td><td>{pid}</td><td>{version}</td><td>{started}</td><td>{seen}</td><td class="age">{age}</td><td>{every}</td><td>{stopped}</td></tr>"#,
            daemon = esc(s(d, "/daemon")),
            queue = esc(s(d, "/queue")),
            pid = d["pid"],
            version = esc(s(d, "/version")),
            started = esc(s(d, "/started")),
            seen = esc(seen),
            age = esc(&age),
            every = d["interval_seconds"]
                .as_u64()
                .map(|n| format!("{n} s"))
                .unwrap_or_default(),
            stopped = if d["stopped"] == json!(true) {
                "yes"
            } else {
                ""
            },
        );
    }
    b.push_str("</tbody></table>");
    Ok(page(&format!("Machine {host}"), who, true, &b))
}

fn one(k: &str, v: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(k.to_string(), json!(v));
    m
}

/// The messages (`list-messages`), newest first, with filters and paging.
async fn messages_page(
    app: &App,
    who: &Actor,
    mut q: HashMap<String, String>,
) -> Result<Response<Body>, WebError> {
    if q.get("limit").is_none_or(|l| l.is_empty()) {
        q.insert("limit".into(), "100".into());
    }
    let all = direct(app, who, "list-messages", message_filter(&q)?).await?;
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
async fn message_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let v = direct(app, who, "view-message", one("message", id)).await?;
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

async fn queues_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let queues = direct(app, who, "list-queues", Map::new()).await?;
    let mut b = String::from(
        "<h1>Queues</h1><table id=\"queues\"><thead><tr><th>queue</th><th>manager</th><th>running</th><th>queued</th><th>workers</th><th>paused</th><th>last update</th></tr></thead><tbody>",
    );
    for q in queues.as_array().into_iter().flatten() {
        let name = s(q, "/config/id");
        let st = queue_state(app, name).await;
        let live = st["running"].as_bool().unwrap_or(false);
        // Counts: the manager's when it runs, else the store's (ListJobs totals).
        let count = |status: &'static str| {
            let q = HashMap::from([
                ("queue".to_string(), name.to_string()),
                ("status".to_string(), status.to_string()),
                ("fields".to_string(), "summary".to_string()),
                ("limit".to_string(), "1".to_string()),
            ]);
            async move { list_jobs(app, who, &q).await.map(|(_, total, _)| total) }
        };
        let (active, queued) = if live {
            (
                st["active_jobs"].as_u64().unwrap_or(0),
                st["queued_jobs"].as_u64().unwrap_or(0),
            )
        } else {
            (
                u64::from(count("running").await?),
                u64::from(count("queued").await?),
            )
        };
        let num = |k: &str| {
            st.get(k)
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into())
        };
        let _ = write!(
            b,
            r#"<tr data-queue="{n}"><td><a href="/jobs?queue={u}">{n}</a></td><td>{m}</td><td class="active">{active}</td><td class="queued">{queued}</td><td>{w}</td><td>{p}</td><td>{l}</td></tr>"#,
            n = esc(name),
            u = percent_encode(name),
            m = if live {
                "running"
            } else {
                "stopped (starts on demand)"
            },
            w = st
                .get("worker_count")
                .or_else(|| q.pointer("/config/worker_count"))
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into()),
            p = num("paused"),
            l = esc(st.get("last_update").and_then(Value::as_str).unwrap_or("")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("Queues", who, true, &b))
}

async fn jobs_page(
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

async fn job_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let job = direct(app, who, "view-job", c).await?;
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
        && let Ok(rows) = super::api::approvals(app, who).await
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
        r#"<h2>Output</h2><pre id="output">{}</pre><p>Its log: <code>orchestrator logs {} --follow 600</code> (the journal, <code>JOB_ID={}</code>)</p>"#,
        if text.is_empty() {
            empty.to_string()
        } else {
            esc(&text)
        },
        esc(id),
        esc(id)
    );
    Ok(page(&format!("Job {id}"), who, true, &b))
}

/// Queued → started → ended, with the time between each.
fn timeline(b: &mut String, j: &crate::model::Job) {
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

async fn prds_page(
    app: &App,
    who: &Actor,
    project: Option<&str>,
) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    if let Some(p) = project {
        c.insert("project".into(), json!(p));
    }
    let prds = direct(app, who, "list-prds", c).await?;
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

async fn prd_page(app: &App, who: &Actor, id: &str) -> Result<Response<Body>, WebError> {
    let mut c = Map::new();
    c.insert("prd".into(), json!(id));
    let prd = direct(app, who, "view-prd", c).await?;
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
    let content = serde_json::to_string_pretty(prd.get("content").unwrap_or(&Value::Null))
        .unwrap_or_default();
    let _ = write!(
        b,
        r#"<h2>Content</h2><pre id="content">{}</pre>"#,
        esc(&content)
    );
    Ok(page(&format!("PRD {id}"), who, false, &b))
}

async fn charts_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    // The most recent CHART_JOBS jobs: one page to learn the total, one from the end.
    let mut q = HashMap::from([
        ("limit".to_string(), "1".to_string()),
        ("fields".into(), "summary".into()),
    ]);
    let (_, total, _) = list_jobs(app, who, &q).await?;
    q.remove("fields");
    q.insert(
        "offset".into(),
        total.saturating_sub(CHART_JOBS).to_string(),
    );
    q.insert("limit".into(), CHART_JOBS.to_string());
    let (page_text, _, _) = list_jobs(app, who, &q).await?;
    let jobs: Vec<Value> = serde_json::from_str(&page_text)
        .map_err(|e| WebError::new(502, "org.agentstore.Error.Failed", e.to_string()))?;
    let b = format!(
        "<h1>Charts</h1><p>From the {} most recent of {total} jobs.</p>{}{}{}",
        jobs.len(),
        charts::jobs_per_hour(&jobs),
        charts::durations_per_command(&jobs),
        charts::cost_per_project(&jobs)
    );
    Ok(page("Charts", who, false, &b))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_redirect_only_ever_stays_on_this_server() {
        for ok in [
            "/",
            "/jobs",
            "/jobs/job-1?as=alice",
            "/approvals",
            "/a/./b/../c",
        ] {
            let to = local_path(ok).unwrap_or_else(|| panic!("{ok:?} refused"));
            assert!(
                to.starts_with('/') && !to.starts_with("//"),
                "{ok:?} → {to:?}"
            );
        }
        assert_eq!(local_path("/a/./b/../c").as_deref(), Some("/a/c"));
        assert_eq!(
            local_path("/jobs?project=a+b&status=failed").as_deref(),
            Some("/jobs?project=a+b&status=failed")
        );
        // What `query` hands over is decoded once: `/%09/evil.example/` arrives as "/\t/…".
        for bad in [
            "//evil.example/",
            "/\\evil.example/",
            "\\\\evil.example",
            "/\t/evil.example/",
            "/\n/evil.example/",
            "/\r/evil.example/",
            "\t//evil.example/",
            " //evil.example/",
            "/ /evil.example/",
            "/%2F/evil.example/",
            "/%2f%2fevil.example/",
            "/%252F%252Fevil.example/",
            "/%5Cevil.example/",
            "/%5cevil.example/",
            "/%09/evil.example/",
            "/%0A/evil.example/",
            "/%00/evil.example/",
            "/.//evil.example/",
            "/..//evil.example/",
            "/a/..//evil.example/",
            "/./%2F/evil.example",
            "https://evil.example/",
            "http:evil.example",
            "javascript:alert(1)",
            "evil.example",
            "",
            "/\u{3000}/evil.example/",
            "/\u{feff}/evil.example/",
            "/%zz",
        ] {
            assert_eq!(local_path(bad), None, "{bad:?} was let through");
        }
    }
}
