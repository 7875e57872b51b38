//! Fake chat and webhook endpoints for the notification tests (issue 31), one local HTTP
//! server speaking the real protocols: Slack's Web API (`conversations.open`,
//! `chat.postMessage` with message metadata, `conversations.history` as a read method with
//! its arguments in the query, bearer tokens, `{"ok": false, "error": …}` answers), the
//! Telegram Bot API's `sendMessage`, and a webhook receiver that checks the HMAC signature.
//! Tests read what arrived from [`FakeChat::state`]. Slack's Socket Mode (`apps.connections.open`
//! with an app-level token, a real WebSocket with `hello`, envelopes, acks, `disconnect`) is
//! in `fake_slack_socket.rs`, with `chat.update` and `chat.postEphemeral`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A Slack message as the fake keeps it.
#[derive(Debug, Clone)]
pub struct SlackMessage {
    pub channel: String,
    pub text: String,
    pub metadata: Value,
    pub ts: String,
    pub blocks: Value,
    /// The `chat.update`s it had, in order (their texts).
    pub updates: Vec<String>,
    /// The thread it replies in (`None`: a message of its own).
    pub thread_ts: Option<String>,
}

/// A webhook request as the fake received it.
#[derive(Debug, Clone)]
pub struct Hook {
    pub delivery: String,
    pub body: Value,
}

/// What the fake saw, and switches a test flips.
#[derive(Debug, Default)]
pub struct ChatState {
    pub slack_token: String,
    /// Slack answers `token_revoked` to every call.
    pub slack_revoked: bool,
    pub slack: Vec<SlackMessage>,
    pub history_calls: usize,
    /// `conversations.replies` calls.
    pub replies_calls: usize,
    pub webhook_secret: String,
    /// The webhook answers 503 (down).
    pub webhook_down: bool,
    /// Every request that reached the webhook while up, in order (duplicates included).
    pub hooks: Vec<Hook>,
    /// Requests refused while down.
    pub hook_refused: usize,
    /// Requests whose signature was wrong.
    pub bad_signatures: usize,
    pub telegram: Vec<(String, String)>,
    /// Socket Mode: see `fake_slack_socket.rs`.
    pub socket: crate::fake_slack_socket::SocketState,
}

type Shared = Arc<Mutex<ChatState>>;

/// The running fake; stopped on drop.
pub struct FakeChat {
    pub base: String,
    pub state: Shared,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeChat {
    pub fn start(slack_token: &str, webhook_secret: &str) -> FakeChat {
        let state: Shared = Arc::new(Mutex::new(ChatState {
            slack_token: slack_token.into(),
            webhook_secret: webhook_secret.into(),
            ..ChatState::default()
        }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/api/conversations.open", post(slack_open))
            .route("/api/chat.postMessage", post(slack_post))
            .route("/api/conversations.history", get(slack_history))
            .route("/api/conversations.replies", get(slack_replies))
            .route(
                "/api/chat.update",
                post(crate::fake_slack_socket::chat_update),
            )
            .route(
                "/api/chat.postEphemeral",
                post(crate::fake_slack_socket::chat_ephemeral),
            )
            .route(
                "/api/apps.connections.open",
                post(crate::fake_slack_socket::connections_open),
            )
            .route("/hook", post(hook))
            .route("/tg/{bot}/sendMessage", post(telegram))
            .with_state(Arc::clone(&state));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    _ = axum::serve(l, app) => {}
                    _ = rx => {}
                }
            });
        });
        FakeChat {
            base,
            state,
            _stop: tx,
        }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut ChatState) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }

    /// Distinct webhook deliveries.
    pub fn hook_deliveries(&self) -> usize {
        self.with(|s| {
            let mut seen = std::collections::HashSet::new();
            s.hooks
                .iter()
                .filter(|h| seen.insert(h.delivery.clone()))
                .count()
        })
    }
}

pub fn slack_auth(s: &ChatState, h: &HeaderMap) -> Result<(), Value> {
    if s.slack_revoked {
        return Err(json!({"ok": false, "error": "token_revoked"}));
    }
    let want = format!("Bearer {}", s.slack_token);
    match h.get("authorization").and_then(|v| v.to_str().ok()) {
        Some(v) if v == want => Ok(()),
        Some(_) => Err(json!({"ok": false, "error": "invalid_auth"})),
        None => Err(json!({"ok": false, "error": "not_authed"})),
    }
}

pub fn json_body(h: &HeaderMap, body: &[u8]) -> Result<Value, Value> {
    let ct = h
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/json") {
        return Err(json!({"ok": false, "error": "invalid_form_data"}));
    }
    serde_json::from_slice(body).map_err(|_| json!({"ok": false, "error": "invalid_json"}))
}

async fn slack_open(State(st): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let s = st.lock().unwrap();
    if let Err(e) = slack_auth(&s, &h) {
        return axum::Json(e).into_response();
    }
    let v = match json_body(&h, &body) {
        Ok(v) => v,
        Err(e) => return axum::Json(e).into_response(),
    };
    let Some(user) = v["users"].as_str() else {
        return axum::Json(json!({"ok": false, "error": "users_list_not_supplied"}))
            .into_response();
    };
    if !user.starts_with('U') {
        return axum::Json(json!({"ok": false, "error": "user_not_found"})).into_response();
    }
    axum::Json(json!({"ok": true, "channel": {"id": format!("D{}", &user[1..])}})).into_response()
}

async fn slack_post(State(st): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let mut s = st.lock().unwrap();
    if let Err(e) = slack_auth(&s, &h) {
        return axum::Json(e).into_response();
    }
    let v = match json_body(&h, &body) {
        Ok(v) => v,
        Err(e) => return axum::Json(e).into_response(),
    };
    let (Some(channel), Some(text)) = (v["channel"].as_str(), v["text"].as_str()) else {
        return axum::Json(json!({"ok": false, "error": "no_text"})).into_response();
    };
    if !channel.starts_with('D') && !channel.starts_with('C') {
        return axum::Json(json!({"ok": false, "error": "channel_not_found"})).into_response();
    }
    // Slack refuses text over 40,000 characters.
    if text.chars().count() > 40_000 {
        return axum::Json(json!({"ok": false, "error": "msg_too_long"})).into_response();
    }
    // A reply names a message of its own in the same channel, as Slack checks.
    let thread_ts = v["thread_ts"].as_str().map(str::to_string);
    if let Some(t) = &thread_ts
        && !s
            .slack
            .iter()
            .any(|m| m.channel == channel && &m.ts == t && m.thread_ts.is_none())
    {
        return axum::Json(json!({"ok": false, "error": "thread_not_found"})).into_response();
    }
    let ts = format!("1700000000.{:06}", s.slack.len() + 1);
    s.slack.push(SlackMessage {
        channel: channel.into(),
        text: text.into(),
        metadata: v["metadata"].clone(),
        ts: ts.clone(),
        blocks: v["blocks"].clone(),
        updates: Vec::new(),
        thread_ts,
    });
    axum::Json(json!({"ok": true, "channel": channel, "ts": ts})).into_response()
}

async fn slack_history(State(st): State<Shared>, h: HeaderMap, uri: Uri) -> Response {
    let q: HashMap<String, String> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let mut s = st.lock().unwrap();
    if let Err(e) = slack_auth(&s, &h) {
        return axum::Json(e).into_response();
    }
    s.history_calls += 1;
    let Some(channel) = q.get("channel") else {
        return axum::Json(json!({"ok": false, "error": "channel_not_found"})).into_response();
    };
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(100);
    let meta = q.get("include_all_metadata").is_some_and(|v| v == "true");
    // `latest` (with `inclusive`): only messages up to that ts. Slack's ts compare as numbers;
    // the fake's have one width, so as strings.
    let latest = q.get("latest").cloned();
    let inclusive = q.get("inclusive").is_some_and(|v| v == "true" || v == "1");
    // Newest first, as Slack answers.
    let msgs: Vec<Value> = s
        .slack
        .iter()
        .rev()
        .filter(|m| &m.channel == channel)
        // A thread's replies are not in the channel's history (conversations.replies).
        .filter(|m| m.thread_ts.is_none())
        .filter(|m| match &latest {
            Some(l) if inclusive => m.ts.as_str() <= l.as_str(),
            Some(l) => m.ts.as_str() < l.as_str(),
            None => true,
        })
        .take(limit)
        .map(|m| {
            let mut v = json!({"type": "message", "text": m.text, "ts": m.ts});
            if meta && !m.metadata.is_null() {
                v["metadata"] = m.metadata.clone();
            }
            v
        })
        .collect();
    axum::Json(json!({"ok": true, "messages": msgs, "has_more": false})).into_response()
}

async fn hook(State(st): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let mut s = st.lock().unwrap();
    if s.webhook_down {
        s.hook_refused += 1;
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let header = |n: &str| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let ts: i64 = header("x-agentstore-timestamp").parse().unwrap_or(0);
    let want =
        agentstore::notify::sinks::webhook::signature(s.webhook_secret.as_bytes(), ts, &body);
    if want.as_deref() != Some(header("x-agentstore-signature").as_str()) {
        s.bad_signatures += 1;
        return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.hooks.push(Hook {
        delivery: header("x-agentstore-delivery"),
        body,
    });
    StatusCode::NO_CONTENT.into_response()
}

async fn telegram(
    State(st): State<Shared>,
    Path(bot): Path<String>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = st.lock().unwrap();
    let v = match json_body(&h, &body) {
        Ok(v) => v,
        Err(_) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"ok": false, "error_code": 400, "description": "Bad Request: bad body"}),
                ),
            )
                .into_response();
        }
    };
    let chat = v["chat_id"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v["chat_id"].to_string());
    s.telegram
        .push((bot, format!("{chat}:{}", v["text"].as_str().unwrap_or(""))));
    axum::Json(json!({"ok": true, "result": {"message_id": s.telegram.len()}})).into_response()
}

/// `conversations.replies`: the thread `ts` of `channel`, its first message first.
async fn slack_replies(State(st): State<Shared>, h: HeaderMap, uri: Uri) -> Response {
    let q: HashMap<String, String> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let mut s = st.lock().unwrap();
    if let Err(e) = slack_auth(&s, &h) {
        return axum::Json(e).into_response();
    }
    s.replies_calls += 1;
    let (Some(channel), Some(ts)) = (q.get("channel"), q.get("ts")) else {
        return axum::Json(json!({"ok": false, "error": "thread_not_found"})).into_response();
    };
    let meta = q.get("include_all_metadata").is_some_and(|v| v == "true");
    let msgs: Vec<Value> = s
        .slack
        .iter()
        .filter(|m| &m.channel == channel)
        .filter(|m| &m.ts == ts || m.thread_ts.as_ref() == Some(ts))
        .map(|m| {
            let mut v = json!({"type": "message", "text": m.text, "ts": m.ts, "thread_ts": ts});
            if meta && !m.metadata.is_null() {
                v["metadata"] = m.metadata.clone();
            }
            v
        })
        .collect();
    if msgs.is_empty() {
        return axum::Json(json!({"ok": false, "error": "thread_not_found"})).into_response();
    }
    axum::Json(json!({"ok": true, "messages": msgs, "has_more": false})).into_response()
}
