//! The Socket Mode connection: `apps.connections.open` → WebSocket → `hello` → envelopes,
//! each acknowledged by its `envelope_id` (an interactive one at once, a slash command with
//! its answer as the ack's payload, within Slack's three seconds) → `disconnect` or a drop →
//! a new URL. A failing `apps.connections.open` (a revoked app token, Slack down) is retried
//! with a doubling backoff up to a minute, and logged without the token.

use super::SlackApp;
use super::commands::Reply;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

/// Longest frame taken from the socket (Slack's envelopes are far smaller).
const MAX_FRAME: usize = 1 << 20;

/// Why one connection ended.
#[derive(Debug)]
enum Ended {
    /// Slack asked us to reconnect (`disconnect`), or closed the socket.
    Reconnect(String),
    /// The link failed.
    Failed(String),
}

/// Runs the app until the task is dropped: connects, handles, reconnects. The work a
/// command leaves after its acknowledgement runs beside the socket (dropped with it).
pub async fn run(app: SlackApp) {
    let app = Arc::new(app);
    let mut work = JoinSet::new();
    let mut backoff = Duration::from_secs(1);
    loop {
        match connect_once(&app, &mut work).await {
            Ended::Reconnect(why) => {
                tracing::info!("slack socket mode: reconnecting ({why})");
                backoff = Duration::from_secs(1);
            }
            Ended::Failed(why) => {
                tracing::warn!("slack socket mode: {why}; trying again in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
}

async fn connect_once(app: &Arc<SlackApp>, work: &mut JoinSet<()>) -> Ended {
    // Each (re)connection, every few hours at most: old thread records go.
    let gone = crate::notify::threads::prune(&app.store, crate::notify::threads::KEEP_SECS);
    if gone > 0 {
        tracing::info!("slack: {gone} old thread record(s) removed");
    }
    let url = match app.app.call("apps.connections.open", json!({})).await {
        Ok(v) => match v["url"].as_str() {
            Some(u) => u.to_string(),
            None => return Ended::Failed("apps.connections.open gave no url".into()),
        },
        Err(e) => return Ended::Failed(e.to_string()),
    };
    if !(url.starts_with("wss://") || url.starts_with("ws://")) {
        return Ended::Failed("apps.connections.open gave a url that is not ws(s)://".into());
    }
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME));
    let (ws, _) =
        match tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), false).await
        {
            Ok(x) => x,
            // The URL holds a ticket: the error is shown without it.
            Err(e) => return Ended::Failed(format!("cannot connect the socket: {e}")),
        };
    let (mut tx, mut rx) = ws.split();
    while let Some(frame) = rx.next().await {
        let text = match frame {
            Ok(Message::Text(t)) => t.to_string(),
            Ok(Message::Ping(p)) => {
                if let Err(e) = tx.send(Message::Pong(p)).await {
                    return Ended::Failed(format!("socket: {e}"));
                }
                continue;
            }
            Ok(Message::Close(c)) => {
                return Ended::Reconnect(format!(
                    "closed by Slack{}",
                    c.map(|c| format!(": {}", c.reason)).unwrap_or_default()
                ));
            }
            Ok(_) => continue,
            Err(e) => return Ended::Failed(format!("socket: {e}")),
        };
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("slack socket mode: a frame that is not JSON ({e}), ignored");
                continue;
            }
        };
        match v["type"].as_str().unwrap_or("") {
            "hello" => {
                tracing::info!(
                    connections = v["num_connections"].as_u64().unwrap_or(0),
                    "slack socket mode: connected"
                );
                continue;
            }
            "disconnect" => {
                return Ended::Reconnect(format!(
                    "disconnect: {}",
                    v["reason"].as_str().unwrap_or("no reason")
                ));
            }
            _ => {}
        }
        let Some(envelope) = v["envelope_id"].as_str().map(str::to_string) else {
            tracing::warn!(
                kind = v["type"].as_str().unwrap_or("?"),
                "slack socket mode: a message without envelope_id, ignored"
            );
            continue;
        };
        let fresh = app.first_sight(&envelope);
        let kind = v["type"].as_str().unwrap_or("").to_string();
        let payload = &v["payload"];
        let mut ack = json!({ "envelope_id": envelope });
        let mut after: Option<Value> = None;
        let mut deferred = None;
        match kind.as_str() {
            "slash_commands" => {
                let reply = if fresh {
                    super::commands::handle(app, payload).await
                } else {
                    Reply::Now(
                        "Refused: this command was already handled (a repeated envelope).".into(),
                    )
                };
                let text = match reply {
                    Reply::Now(t) => t,
                    Reply::Later(t, d) => {
                        deferred = Some(d);
                        t
                    }
                };
                ack["payload"] = json!({ "response_type": "ephemeral", "text": text });
            }
            "interactive" => after = Some(payload.clone()),
            other => tracing::debug!("slack socket mode: envelope of type {other:?} ignored"),
        }
        if let Err(e) = tx.send(Message::Text(ack.to_string().into())).await {
            return Ended::Failed(format!("socket: ack not sent: {e}"));
        }
        if let Some(p) = after {
            super::actions::handle(app, &p, fresh).await;
        }
        while work.try_join_next().is_some() {}
        if let Some(d) = deferred {
            let app = Arc::clone(app);
            work.spawn(async move { super::jobs::run(&app, d).await });
        }
    }
    Ended::Reconnect("the socket ended".into())
}
