//! Approval buttons (`block_actions`): checked, answered through `Queue1.AnswerFor`, the
//! message updated with who answered; or refused with a reply only the clicker sees.

use super::SlackApp;
use crate::notify::sinks::slack::{ACTION_ALLOW, ACTION_ALWAYS, ACTION_DENY, EVENT_TYPE};
use serde_json::{Value, json};

/// What a click asks.
struct Click {
    member: String,
    channel: String,
    ts: String,
    action: String,
    value: String,
}

fn click(p: &Value) -> Option<Click> {
    let a = p["actions"].as_array()?.first()?;
    let s = |v: &Value| v.as_str().map(str::to_string);
    Some(Click {
        member: s(&p["user"]["id"])?,
        channel: s(&p["container"]["channel_id"]).or_else(|| s(&p["channel"]["id"]))?,
        ts: s(&p["container"]["message_ts"]).or_else(|| s(&p["message"]["ts"]))?,
        action: s(&a["action_id"])?,
        value: s(&a["value"]).unwrap_or_default(),
    })
}

/// Handles the payload of an `interactive` envelope (`fresh`: its envelope was not seen
/// before).
pub async fn handle(app: &SlackApp, p: &Value, fresh: bool) {
    if p["type"] != "block_actions" {
        tracing::debug!("slack: interactive payload of type {} ignored", p["type"]);
        return;
    }
    let Some(c) = click(p) else {
        tracing::warn!("slack: a block_actions payload without user, message or action, ignored");
        return;
    };
    let reply = if fresh {
        match answer(app, &c).await {
            Ok(()) => return,
            Err(why) => why,
        }
    } else {
        "Refused: this click was already handled (a repeated envelope); nothing was answered again."
            .to_string()
    };
    tracing::info!(member = %c.member, "slack: click refused: {reply}");
    let r = app
        .bot
        .call(
            "chat.postEphemeral",
            json!({ "channel": c.channel, "user": c.member, "thread_ts": c.ts, "text": reply }),
        )
        .await;
    if let Err(e) = r {
        tracing::warn!("slack: reply to {} not sent: {e}", c.member);
    }
}

/// Answers the click, or says why not (the reply to the clicker).
async fn answer(app: &SlackApp, c: &Click) -> Result<(), String> {
    let (allow, always, verb) = match c.action.as_str() {
        ACTION_ALLOW => (true, false, "Allowed"),
        ACTION_ALWAYS => (true, true, "Always allowed"),
        ACTION_DENY => (false, false, "Denied"),
        other => return Err(format!("Refused: unknown action {other:?}.")),
    };
    let user = app.user_for(&c.member)?;
    // What the button answers: Slack's own copy of the message our bot posted.
    let msg = app
        .bot
        .message(&c.channel, &c.ts)
        .await
        .map_err(|e| format!("Not answered: the message cannot be read from Slack ({e})."))?
        .ok_or("Refused: the message this button is on is not there.")?;
    let meta = &msg["metadata"];
    let p = &meta["event_payload"];
    let (Some(queue), Some(request)) = (p["queue"].as_str(), p["request"].as_str()) else {
        return Err("Refused: this message is not an agentstore approval.".into());
    };
    if meta["event_type"] != EVENT_TYPE || p["kind"] != "approval_waiting" {
        return Err("Refused: this message is not an agentstore approval.".into());
    }
    if c.value != format!("{queue}/{request}") {
        return Err(format!(
            "Refused: the click names {:?}, but the message is about request {request} of queue {queue}; nothing was answered.",
            c.value
        ));
    }
    if app.was_answered(&c.channel, &c.ts) {
        return Err(format!(
            "Refused: request {request} was already answered; nothing was answered again."
        ));
    }
    let by = format!("answered in Slack by {} ({})", user.id, c.member);
    let proxy = crate::bus::queue::queue_proxy(&app.conn, queue)
        .await
        .map_err(|e| format!("Not answered: {}", super::bus_error_text(queue, &e)))?;
    proxy
        .answer_for(request, allow, always, &by, &user.id)
        .await
        .map_err(|e| {
            format!(
                "Refused for {}: {}",
                user.id,
                super::bus_error_text(queue, &e)
            )
        })?;
    app.mark_answered(&c.channel, &c.ts);
    tracing::info!(queue, request, user = %user.id, allow, "slack: approval answered");
    let original = msg["text"].as_str().unwrap_or("");
    let text = format!("{original}\n\n{verb} by {} (<@{}>)", user.id, c.member);
    let r = app
        .bot
        .call(
            "chat.update",
            json!({
                "channel": c.channel, "ts": c.ts, "text": text,
                "blocks": [{ "type": "section", "text": { "type": "mrkdwn", "text": escape(&text) } }],
            }),
        )
        .await;
    if let Err(e) = r {
        tracing::warn!("slack: message of request {request} not updated: {e}");
    }
    Ok(())
}

/// `s` with Slack's three control characters escaped, except the one mention we add.
fn escape(s: &str) -> String {
    // The mention is the last line's `<@U…>`: keep it, escape everything else.
    let (body, mention) = match s.rfind("(<@") {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    format!("{}{mention}", crate::notify::sinks::slack::escape(body))
}
