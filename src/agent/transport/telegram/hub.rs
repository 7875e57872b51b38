//! What the poller, the sessions and the sender share: the outbox, the open questions, the
//! busy chats and each chat's state; the `ask()` channel and core events of one chat.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::agent::core::CoreEvents;
use crate::agent::core::accounting::RequestStats;
use crate::agent::core::provider::StreamEvent;
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::{Ask, AskAnswer, BoxFuture, ToolCall, ToolResult, ToolStatus};

use super::api::{Body, BotApi};
use super::{
    DOCUMENT_BYTES, INLINE_OUTPUT, INLINE_QUESTION, MAX_PARTS, MESSAGE_LIMIT, split_message,
};

/// Something to send, in order.
pub(super) enum Out {
    /// Text (split, or a document when very long).
    Text(i64, String),
    /// A tool's result: a head line and its output.
    Output(i64, String, String),
    /// A question with buttons.
    Ask {
        id: u64,
        chat: i64,
        question: String,
        options: Vec<String>,
        /// The whole question, sent first as a document when it is too long for a message
        /// (a long command is shown whole before anyone is asked to approve it).
        document: Option<String>,
    },
}

/// An open question.
pub(super) struct Question {
    pub(super) chat: i64,
    pub(super) question: String,
    pub(super) options: Vec<String>,
    pub(super) reply: oneshot::Sender<AskAnswer>,
}

pub(super) struct Hub {
    pub(super) api: BotApi,
    pub(super) allowed: BTreeSet<i64>,
    pub(super) users: BTreeSet<i64>,
    pub(super) outbox: mpsc::UnboundedSender<Out>,
    pub(super) prompts: mpsc::Sender<(i64, String)>,
    pub(super) pending: Mutex<BTreeMap<u64, Question>>,
    pub(super) next_question: AtomicU64,
    /// Chats with a request running or on its way to their session.
    pub(super) busy: Mutex<BTreeSet<i64>>,
    /// The sessions alive, by chat.
    pub(super) chats: Mutex<BTreeMap<i64, Arc<ChatState>>>,
}

/// One chat's session, as the poller and the events see it (the agent itself lives in the
/// session's task).
pub(super) struct ChatState {
    pub(super) chat: i64,
    /// `/stop` in this chat.
    pub(super) stop: watch::Sender<u64>,
    /// Streamed answer text not sent yet.
    pub(super) text: Mutex<String>,
    /// The answer text of the model call under way, kept for /stop.
    pub(super) partial: Mutex<(String, bool)>,
    /// When a request last ended (or the session began).
    pub(super) last: Mutex<std::time::Instant>,
}

impl ChatState {
    pub(super) fn new(chat: i64) -> ChatState {
        ChatState {
            chat,
            stop: watch::channel(0).0,
            text: Mutex::new(String::new()),
            partial: Mutex::new((String::new(), false)),
            last: Mutex::new(std::time::Instant::now()),
        }
    }

    /// Send the streamed text gathered so far.
    pub(super) fn flush_text(&self, hub: &Hub) {
        let text = std::mem::take(&mut *self.text.lock());
        if !text.trim().is_empty() {
            hub.send(Out::Text(self.chat, text));
        }
    }
}

pub(super) fn label(option: &str) -> String {
    match option {
        "yes" => "Allow".to_string(),
        "no" => "Deny".to_string(),
        "always" => "Always allow".to_string(),
        other => other.to_string(),
    }
}

impl Hub {
    pub(super) fn send(&self, out: Out) {
        let _ = self.outbox.send(out);
    }

    /// Close `chat`'s open questions (its request ended or was stopped).
    pub(super) fn cancel_questions(&self, chat: i64) {
        let closed: Vec<Question> = {
            let mut pending = self.pending.lock();
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, q)| q.chat == chat)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| pending.remove(id)).collect()
        };
        for q in closed {
            let _ = q.reply.send(AskAnswer::Cancelled);
        }
    }

    pub(super) async fn handle_update(&self, update: &Value) {
        if let Some(message) = update.get("message") {
            let chat = message.pointer("/chat/id").and_then(Value::as_i64);
            let Some(chat) = chat.filter(|c| self.allowed.contains(c)) else {
                tracing::warn!(
                    chat = ?chat,
                    "telegram: ignored a message from a chat not in telegram.allowed_chats"
                );
                return;
            };
            let from = message.pointer("/from/id").and_then(Value::as_i64);
            if !from.is_some_and(|f| self.users.contains(&f)) {
                tracing::warn!(
                    chat,
                    from = ?from,
                    "telegram: ignored a message from a user not in telegram.allowed_users"
                );
                return;
            }
            let Some(text) = message.get("text").and_then(Value::as_str) else {
                self.send(Out::Text(chat, "only text messages are understood".into()));
                return;
            };
            let text = text.trim();
            let command = text.split_whitespace().next().unwrap_or_default();
            let command = command.split('@').next().unwrap_or_default();
            match command {
                "/stop" => {
                    tracing::info!(chat, "telegram /stop");
                    // The chat's turn is dropped with its questions; its session closes them.
                    // Other chats' sessions go on.
                    if let Some(st) = self.chats.lock().get(&chat) {
                        st.stop.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
                "/start" | "/help" => self.send(Out::Text(
                    chat,
                    "Send a request as a message. Questions come with buttons (or, without \
                     fixed answers, take your next message); /stop cancels the running request."
                        .into(),
                )),
                _ if text.is_empty() => {}
                _ if self.answer_typed(chat, text) => {}
                _ => {
                    if !self.busy.lock().insert(chat) {
                        self.send(Out::Text(
                            chat,
                            "a request is running; wait for it or send /stop".into(),
                        ));
                        return;
                    }
                    if self.prompts.send((chat, text.to_string())).await.is_err() {
                        self.busy.lock().remove(&chat);
                    }
                }
            }
        } else if let Some(callback) = update.get("callback_query") {
            self.handle_callback(callback).await;
        }
    }

    /// A message from `chat` while the agent waits for a typed answer there answers it.
    pub(super) fn answer_typed(&self, chat: i64, text: &str) -> bool {
        let mut pending = self.pending.lock();
        let open = pending
            .iter()
            .find(|(_, q)| q.chat == chat && q.options.is_empty())
            .map(|(id, _)| *id);
        let Some(question) = open.and_then(|id| pending.remove(&id)) else {
            return false;
        };
        tracing::info!(chat, "telegram: a typed answer");
        let _ = question.reply.send(AskAnswer::Answer(text.to_string()));
        true
    }

    pub(super) async fn handle_callback(&self, callback: &Value) {
        let id = callback
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let chat = callback.pointer("/message/chat/id").and_then(Value::as_i64);
        let from = callback.pointer("/from/id").and_then(Value::as_i64);
        let Some(chat) = chat.filter(|c| self.allowed.contains(c)) else {
            tracing::warn!(chat = ?chat, from = ?from,
                "telegram: ignored a button press from a chat not in telegram.allowed_chats");
            return;
        };
        if !from.is_some_and(|f| self.users.contains(&f)) {
            // Any member of an allowed group sees the buttons; only the listed people answer.
            tracing::warn!(chat, from = ?from,
                "telegram: ignored a button press from a user not in telegram.allowed_users");
            let id = callback
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Err(e) = self
                .api
                .call(
                    "answerCallbackQuery",
                    &Body::Json(json!({"callback_query_id": id,
                                       "text": "you are not allowed to answer here"})),
                )
                .await
            {
                tracing::warn!("telegram: {e}");
            }
            return;
        }
        let message_id = callback
            .pointer("/message/message_id")
            .and_then(Value::as_i64);
        let data = callback
            .get("data")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let parsed = data.strip_prefix("q:").and_then(|rest| {
            let (q, i) = rest.split_once(':')?;
            Some((q.parse::<u64>().ok()?, i.parse::<usize>().ok()?))
        });
        let resolved = parsed.and_then(|(q, i)| {
            let mut pending = self.pending.lock();
            let open = pending.get(&q)?;
            if open.chat != chat {
                return None;
            }
            let option = open.options.get(i)?.clone();
            let question = pending.remove(&q)?;
            let _ = question.reply.send(AskAnswer::Answer(option.clone()));
            Some((question.question, option))
        });
        let note = match &resolved {
            Some((_, option)) => label(option),
            None => "this question is closed".to_string(),
        };
        if let Err(e) = self
            .api
            .call(
                "answerCallbackQuery",
                &Body::Json(json!({"callback_query_id": id, "text": note})),
            )
            .await
        {
            tracing::warn!("telegram: {e}");
        }
        if let (Some((question, option)), Some(message_id)) = (resolved, message_id) {
            tracing::info!(chat, answer = %option, "telegram answer");
            let text = bound_message(&format!("❓ {question}\n→ {}", label(&option)));
            if let Err(e) = self
                .api
                .call(
                    "editMessageText",
                    &Body::Json(json!({"chat_id": chat, "message_id": message_id, "text": text})),
                )
                .await
            {
                tracing::warn!("telegram: {e}");
            }
        }
    }

    pub(super) async fn deliver(&self, out: Out) {
        let result = match out {
            Out::Text(chat, text) => self.send_text(chat, &text).await,
            Out::Output(chat, head, body) => {
                if body.chars().count() <= INLINE_OUTPUT {
                    let text = if body.is_empty() {
                        head
                    } else {
                        format!("{head}\n{body}")
                    };
                    self.send_text(chat, &text).await
                } else {
                    self.send_document(chat, &head, "output.txt", &body).await
                }
            }
            Out::Ask {
                id,
                chat,
                question,
                options,
                document,
            } => {
                if let Some(whole) = document {
                    let sent = self
                        .send_document(
                            chat,
                            "The whole question below (what would run):",
                            "question.txt",
                            &whole,
                        )
                        .await;
                    if let Err(e) = sent {
                        if let Some(q) = self.pending.lock().remove(&id) {
                            let _ = q.reply.send(AskAnswer::Unavailable(format!(
                                "the whole question could not be sent to Telegram: {e}"
                            )));
                        }
                        tracing::warn!("telegram: {e}");
                        return;
                    }
                }
                let body = if options.is_empty() {
                    // A typed answer: the next message in the chat.
                    json!({
                        "chat_id": chat,
                        "text": bound_message(&format!("❓ {question}\n(answer with a message)")),
                        "reply_markup": {"force_reply": true},
                    })
                } else {
                    let buttons: Vec<Value> = options
                        .iter()
                        .enumerate()
                        .map(|(i, o)| json!({"text": label(o), "callback_data": format!("q:{id}:{i}")}))
                        .collect();
                    json!({
                        "chat_id": chat,
                        "text": bound_message(&format!("❓ {question}")),
                        "reply_markup": {"inline_keyboard": [buttons]},
                    })
                };
                let sent = self.api.call("sendMessage", &Body::Json(body)).await;
                if let Err(e) = &sent
                    && let Some(q) = self.pending.lock().remove(&id)
                {
                    let _ = q.reply.send(AskAnswer::Unavailable(format!(
                        "the question could not be sent to Telegram: {e}"
                    )));
                }
                sent.map(|_| ())
            }
        };
        if let Err(e) = result {
            tracing::warn!("telegram: {e}");
        }
    }

    pub(super) async fn send_text(&self, chat: i64, text: &str) -> Result<(), String> {
        let parts = split_message(text, MESSAGE_LIMIT);
        if parts.len() > MAX_PARTS {
            let head: String = text.chars().take(200).collect();
            return self
                .send_document(chat, &format!("{head}…"), "reply.txt", text)
                .await;
        }
        for part in parts {
            self.api
                .call(
                    "sendMessage",
                    &Body::Json(json!({"chat_id": chat, "text": part})),
                )
                .await?;
        }
        Ok(())
    }

    pub(super) async fn send_document(
        &self,
        chat: i64,
        caption: &str,
        name: &str,
        contents: &str,
    ) -> Result<(), String> {
        let caption: String = caption.chars().take(1000).collect();
        self.api
            .call(
                "sendDocument",
                &Body::Document {
                    chat_id: chat,
                    caption,
                    name: name.to_string(),
                    contents: bound(contents, DOCUMENT_BYTES).into_bytes(),
                },
            )
            .await
            .map(|_| ())
    }

    pub(super) async fn poll(self: Arc<Self>, timeout: u64) {
        let mut offset: i64 = 0;
        loop {
            let updates = self
                .api
                .call(
                    "getUpdates",
                    &Body::Json(json!({
                        "offset": offset,
                        "timeout": timeout,
                        "allowed_updates": ["message", "callback_query"],
                    })),
                )
                .await;
            let updates = match updates {
                Ok(Value::Array(u)) => u,
                Ok(other) => {
                    tracing::warn!("telegram: getUpdates answered {other}");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!("telegram: {e}");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
            };
            for update in updates {
                if let Some(id) = update.get("update_id").and_then(Value::as_i64) {
                    offset = offset.max(id + 1);
                }
                self.handle_update(&update).await;
            }
        }
    }
}

/// A text cut to fit one message.
pub(super) fn bound_message(text: &str) -> String {
    split_message(text, MESSAGE_LIMIT - 1)
        .into_iter()
        .next()
        .unwrap_or_default()
}

pub(super) struct TelegramAsk {
    pub(super) hub: Arc<Hub>,
    pub(super) st: Arc<ChatState>,
}

impl Ask for TelegramAsk {
    fn ask<'a>(&'a self, question: &'a str, options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        Box::pin(async move {
            let chat = self.st.chat;
            self.st.flush_text(&self.hub);
            let id = self.hub.next_question.fetch_add(1, Ordering::Relaxed);
            if question.len() > DOCUMENT_BYTES {
                return AskAnswer::Unavailable(
                    "the question is too long to show whole in Telegram".to_string(),
                );
            }
            // A question that does not fit one message goes whole as a document first; the
            // message with the buttons says so (never a head and tail that hide the middle).
            let (shown, document) = if question.chars().count() > INLINE_QUESTION {
                let head: String = question.chars().take(300).collect();
                (
                    format!(
                        "{head}… ({} characters: read the whole question in question.txt above before answering)",
                        question.chars().count()
                    ),
                    Some(question.to_string()),
                )
            } else {
                (question.to_string(), None)
            };
            let (tx, rx) = oneshot::channel();
            self.hub.pending.lock().insert(
                id,
                Question {
                    chat,
                    question: shown.clone(),
                    options: options.iter().map(|o| (*o).to_string()).collect(),
                    reply: tx,
                },
            );
            self.hub.send(Out::Ask {
                id,
                chat,
                question: shown,
                options: options.iter().map(|o| (*o).to_string()).collect(),
                document,
            });
            rx.await.unwrap_or(AskAnswer::Cancelled)
        })
    }
}

pub(super) struct TelegramEvents {
    pub(super) hub: Arc<Hub>,
    pub(super) st: Arc<ChatState>,
}

impl CoreEvents for TelegramEvents {
    fn stream(&self, event: &StreamEvent) {
        if let StreamEvent::Text(t) = event {
            let mut p = self.st.partial.lock();
            if p.1 {
                *p = (String::new(), false);
            }
            p.0.push_str(t);
            self.st.text.lock().push_str(t);
        }
    }

    fn request_done(&self, _stats: &RequestStats) {
        self.st.partial.lock().1 = true;
        self.st.flush_text(&self.hub);
    }

    fn tool_call(&self, call: &ToolCall) {
        self.st.flush_text(&self.hub);
        let chat = self.st.chat;
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let shown = match args.get("command").and_then(Value::as_str) {
            Some(command) => command.to_string(),
            None => call.arguments.clone(),
        };
        self.hub.send(Out::Text(
            chat,
            bound_message(&format!("▶ {} {}", call.name, bound(&shown, 1500))),
        ));
    }

    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        *self.st.partial.lock() = (String::new(), false);
        let chat = self.st.chat;
        let status = match (result.status, result.exit_code) {
            (ToolStatus::Ok, None | Some(0)) => "ok".to_string(),
            (ToolStatus::Ok, Some(code)) => format!("exit {code}"),
            (other, _) => serde_json::to_value(other)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        let mut body = result.stdout.clone();
        if !result.stderr.is_empty() {
            if !body.is_empty() {
                body.push('\n');
            }
            body.push_str(&result.stderr);
        }
        self.hub
            .send(Out::Output(chat, format!("↳ {} {status}", call.name), body));
    }
}
