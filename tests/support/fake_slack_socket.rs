//! Slack's Socket Mode for the fake in `fake_chat.rs`, as Slack speaks it:
//! `apps.connections.open` takes only an app-level token (`xapp-…`; a bot token gets
//! `not_allowed_token_type`) and answers a one-time `wss`-style URL with a ticket; the
//! WebSocket (a real one, tokio-tungstenite) refuses an unknown or used ticket, sends `hello`,
//! then the envelopes a test pushes; every frame the app sends back (its acks) is kept.
//! `disconnect` is sent by [`FakeChat::socket_disconnect`]. Also `chat.update` and
//! `chat.postEphemeral`, the Web API methods the app answers with.

use crate::fake_chat::{ChatState, FakeChat, json_body, slack_auth};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

type Shared = Arc<Mutex<ChatState>>;

/// What the Socket Mode side saw.
#[derive(Debug, Default)]
pub struct SocketState {
    /// The app-level token `apps.connections.open` takes (empty: Socket Mode is off).
    pub app_token: String,
    /// Where the WebSocket listens (`127.0.0.1:port`).
    pub ws_addr: String,
    tickets: HashSet<String>,
    next_ticket: u64,
    /// `apps.connections.open` calls that got a URL.
    pub opens: usize,
    /// Sockets that got `hello`.
    pub connections: usize,
    /// Handshakes refused (unknown or used ticket).
    pub refused: usize,
    tx: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// Every frame the app sent on the socket (acks), in order.
    pub acks: Vec<Value>,
    /// `chat.postEphemeral` bodies, in order.
    pub ephemeral: Vec<Value>,
}

impl FakeChat {
    /// Turns Socket Mode on, with `app_token`: a WebSocket listener on its own port.
    pub fn enable_socket_mode(&self, app_token: &str) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        self.with(|s| {
            s.socket.app_token = app_token.into();
            s.socket.ws_addr = addr;
        });
        let state = Arc::clone(&self.state);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = l.accept().await {
                    tokio::spawn(serve_socket(Arc::clone(&state), tcp));
                }
            });
        });
    }

    /// Pushes `envelope` to the live socket (panics when none is connected).
    pub fn socket_send(&self, envelope: &Value) {
        self.with(|s| {
            s.socket
                .tx
                .as_ref()
                .expect("a Socket Mode connection")
                .send(envelope.to_string())
                .unwrap()
        });
    }

    /// Sends `disconnect` (the app must open a new connection).
    pub fn socket_disconnect(&self, reason: &str) {
        self.socket_send(&json!({"type": "disconnect", "reason": reason,
            "debug_info": {"host": "fake"}}));
    }

    /// Waits until `n` sockets have had `hello`.
    pub fn wait_connections(&self, n: usize) {
        crate::wait::wait_until(
            Duration::from_secs(120),
            &format!("{n} Socket Mode connection(s)"),
            || self.with(|s| s.socket.connections >= n && s.socket.tx.is_some()),
        );
    }

    /// Waits for the ack of `envelope_id` and returns it.
    pub fn wait_ack(&self, envelope_id: &str) -> Value {
        let mut found = Value::Null;
        crate::wait::wait_until(
            Duration::from_secs(120),
            &format!("the ack of envelope {envelope_id}"),
            || {
                self.with(|s| {
                    s.socket
                        .acks
                        .iter()
                        .rev()
                        .find(|a| a["envelope_id"] == envelope_id)
                        .cloned()
                })
                .map(|a| found = a)
                .is_some()
            },
        );
        found
    }

    /// How many acks of `envelope_id` arrived.
    pub fn acks_of(&self, envelope_id: &str) -> usize {
        self.with(|s| {
            s.socket
                .acks
                .iter()
                .filter(|a| a["envelope_id"] == envelope_id)
                .count()
        })
    }

    /// Waits for the `n`th ephemeral reply and returns it.
    pub fn wait_ephemeral(&self, n: usize) -> Value {
        crate::wait::wait_until(
            Duration::from_secs(120),
            &format!("ephemeral reply #{n}"),
            || self.with(|s| s.socket.ephemeral.len() >= n),
        );
        self.with(|s| s.socket.ephemeral[n - 1].clone())
    }
}

/// A `block_actions` envelope: `member` pressed `action` (value `value`) on message `ts` of
/// `channel`, as Slack sends it.
pub fn block_action(
    envelope_id: &str,
    member: &str,
    channel: &str,
    ts: &str,
    action: &str,
    value: &str,
) -> Value {
    json!({
        "envelope_id": envelope_id,
        "type": "interactive",
        "accepts_response_payload": false,
        "payload": {
            "type": "block_actions",
            "user": {"id": member, "username": member.to_lowercase(), "team_id": "T0FAKE"},
            "api_app_id": "A0FAKE",
            "team": {"id": "T0FAKE", "domain": "fake"},
            "container": {"type": "message", "message_ts": ts, "channel_id": channel,
                          "is_ephemeral": false},
            "channel": {"id": channel, "name": "directmessage"},
            "message": {"type": "message", "ts": ts},
            "trigger_id": "1.2.3",
            "response_url": "https://hooks.invalid/actions/T0FAKE/1/x",
            "actions": [{"type": "button", "action_id": action, "block_id": "agentstore_approval",
                         "value": value, "action_ts": "1700000001.000001"}],
        },
    })
}

/// A `slash_commands` envelope: `member` typed `/agentstore <text>` in `channel`.
pub fn slash(envelope_id: &str, member: &str, channel: &str, text: &str) -> Value {
    json!({
        "envelope_id": envelope_id,
        "type": "slash_commands",
        "accepts_response_payload": true,
        "payload": {
            "token": "deprecated-verification-token",
            "team_id": "T0FAKE", "team_domain": "fake",
            "channel_id": channel, "channel_name": "directmessage",
            "user_id": member, "user_name": member.to_lowercase(),
            "command": "/agentstore", "text": text, "api_app_id": "A0FAKE",
            "response_url": "https://hooks.invalid/commands/T0FAKE/1/x",
            "trigger_id": "1.2.4",
        },
    })
}

async fn serve_socket(state: Shared, tcp: tokio::net::TcpStream) {
    let st = Arc::clone(&state);
    #[allow(clippy::result_large_err)]
    let check =
        move |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
              resp: tokio_tungstenite::tungstenite::handshake::server::Response| {
            let query = req.uri().query().unwrap_or("").to_string();
            let ticket: Option<String> = url::form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "ticket")
                .map(|(_, v)| v.into_owned());
            let mut s = st.lock().unwrap();
            match ticket {
                Some(t) if s.socket.tickets.remove(&t) => Ok(resp),
                _ => {
                    s.socket.refused += 1;
                    let mut r =
                        tokio_tungstenite::tungstenite::handshake::server::ErrorResponse::new(
                            Some("invalid ticket".into()),
                        );
                    *r.status_mut() = axum::http::StatusCode::UNAUTHORIZED;
                    Err(r)
                }
            }
        };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, check).await else {
        return;
    };
    let (mut tx, mut rx) = ws.split();
    let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "fake", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A0FAKE"}});
    if tx
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    {
        let mut s = state.lock().unwrap();
        s.socket.connections += 1;
        s.socket.tx = Some(etx);
    }
    loop {
        tokio::select! {
            out = erx.recv() => {
                let Some(out) = out else { break };
                let disconnect = out.contains("\"disconnect\"");
                if tx.send(Message::Text(out.into())).await.is_err() {
                    break;
                }
                if disconnect {
                    // Slack closes the link shortly after `disconnect`: this one is done.
                    let _ = tx.send(Message::Close(None)).await;
                    break;
                }
            }
            frame = rx.next() => match frame {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).unwrap_or(json!({"unparsed": t.to_string()}));
                    state.lock().unwrap().socket.acks.push(v);
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    }
}

pub async fn connections_open(State(st): State<Shared>, h: HeaderMap) -> Response {
    let mut s = st.lock().unwrap();
    let auth = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if s.slack_revoked {
        return axum::Json(json!({"ok": false, "error": "token_revoked"})).into_response();
    }
    if s.socket.app_token.is_empty() || auth != format!("Bearer {}", s.socket.app_token) {
        let error = if auth.starts_with("Bearer xoxb-") {
            "not_allowed_token_type"
        } else {
            "invalid_auth"
        };
        return axum::Json(json!({"ok": false, "error": error})).into_response();
    }
    s.socket.next_ticket += 1;
    let ticket = format!("t{:08}", s.socket.next_ticket);
    s.socket.tickets.insert(ticket.clone());
    s.socket.opens += 1;
    let url = format!(
        "ws://{}/link/?ticket={ticket}&app_id=A0FAKE",
        s.socket.ws_addr
    );
    axum::Json(json!({"ok": true, "url": url})).into_response()
}

pub async fn chat_update(State(st): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let mut s = st.lock().unwrap();
    if let Err(e) = slack_auth(&s, &h) {
        return axum::Json(e).into_response();
    }
    let v = match json_body(&h, &body) {
        Ok(v) => v,
        Err(e) => return axum::Json(e).into_response(),
    };
    let (Some(channel), Some(ts)) = (v["channel"].as_str(), v["ts"].as_str()) else {
        return axum::Json(json!({"ok": false, "error": "message_not_found"})).into_response();
    };
    let Some(m) = s
        .slack
        .iter_mut()
        .find(|m| m.channel == channel && m.ts == ts)
    else {
        return axum::Json(json!({"ok": false, "error": "message_not_found"})).into_response();
    };
    let text = v["text"].as_str().unwrap_or("").to_string();
    m.text = text.clone();
    m.blocks = v["blocks"].clone();
    m.updates.push(text.clone());
    axum::Json(json!({"ok": true, "channel": channel, "ts": ts, "text": text})).into_response()
}

pub async fn chat_ephemeral(State(st): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let mut s = st.lock().unwrap();
    if let Err(e) = slack_auth(&s, &h) {
        return axum::Json(e).into_response();
    }
    let v = match json_body(&h, &body) {
        Ok(v) => v,
        Err(e) => return axum::Json(e).into_response(),
    };
    if v["user"].as_str().is_none() || v["channel"].as_str().is_none() {
        return axum::Json(json!({"ok": false, "error": "user_not_in_channel"})).into_response();
    }
    s.socket.ephemeral.push(v);
    axum::Json(json!({"ok": true, "message_ts": "1700000002.000001"})).into_response()
}
