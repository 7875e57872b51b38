//! Telegram: allow-listed chats drive agents through a bot (`agentshell telegram`), one session
//! (agent, history, `/stop`) per chat, a bounded number of them, idle ones dropped.
//!
//! Long-polls the Bot API (`getUpdates`); the bot's token comes from the secret broker and is
//! never logged (errors are stripped of the URL that carries it). Messages from chats not on
//! the allow list are ignored and logged. Streamed text goes out per model call, split at
//! Telegram's 4096-character limit; each tool call is shown before it runs; long outputs go as
//! documents (`sendDocument`). `ask()` questions come as inline-keyboard buttons (a question
//! without options is answered by the chat's next message); a press
//! (`callback_query`) is acknowledged (`answerCallbackQuery`) and the question edited to show
//! the answer (`editMessageText`); a question too long for one message (a long command) is
//! first sent whole as a document. Only the people in `telegram.allowed_users` (by default the
//! private chats of `allowed_chats`) are heard: in a group, other members can neither send
//! requests nor answer. `/stop` is the Ctrl+C equivalent. A 429 answer is retried
//! after the `retry_after` Telegram names.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::agent::core::accounting::RequestStats;
use crate::agent::core::provider::StreamEvent;
use crate::agent::core::{Agent, CoreEvents, TurnStop};
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::{Ask, AskAnswer, BoxFuture, ToolCall, ToolResult, ToolStatus};

/// Telegram's limit for one message, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;
/// A question longer than this (characters) is sent whole as a document before it is asked.
pub const INLINE_QUESTION: usize = 3500;
/// Tool output longer than this (characters) is sent as a document.
pub const INLINE_OUTPUT: usize = 3000;
/// An answer that would take more messages than this is sent as a document.
pub const MAX_PARTS: usize = 4;
/// Bytes of a tool's output sent at all (as a document).
pub const DOCUMENT_BYTES: usize = 256 * 1024;
/// Attempts of one Bot API call that Telegram throttles (429).
const RATE_LIMIT_ATTEMPTS: u32 = 6;
/// Longest `retry_after` honoured in one wait.
const MAX_RETRY_AFTER: u64 = 300;

/// How to reach the bot.
#[derive(Clone)]
pub struct TelegramOptions {
    /// Bot API base URL (`https://api.telegram.org`; tests point it at a fake).
    pub api_url: String,
    /// The bot token (from the secret broker).
    pub token: String,
    /// Chats the bot answers.
    pub allowed_chats: BTreeSet<i64>,
    /// People (Telegram user ids) whose messages and button presses count: a request, an
    /// answer or an approval from anyone else in an allowed chat (a group) is ignored.
    pub allowed_users: BTreeSet<i64>,
    /// Long-poll timeout of `getUpdates`, in seconds.
    pub poll_timeout: u64,
    /// Chats with a session (an agent and its history) at once; a new chat past it takes
    /// the place of the longest idle one.
    pub max_sessions: usize,
    /// A session idle this long is dropped (its history with it).
    pub idle: Duration,
}

/// Default of config `telegram.max_sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 8;
/// Default of config `telegram.idle_seconds`.
pub const DEFAULT_IDLE_SECONDS: u64 = 3600;

impl std::fmt::Debug for TelegramOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramOptions")
            .field("api_url", &self.api_url)
            .field("token", &"<secret>")
            .field("allowed_chats", &self.allowed_chats)
            .field("allowed_users", &self.allowed_users)
            .field("max_sessions", &self.max_sessions)
            .field("idle", &self.idle)
            .finish()
    }
}

/// Whether `token` has the shape of a bot token (`123456:ABC-def_…`): nothing that could
/// change the URL it is put in.
pub fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-'))
}

/// `text` cut into pieces of at most `limit` UTF-16 code units (Telegram's measure), at a
/// newline when one is in the second half of a piece. Joined, the pieces are `text`.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut units = 0;
    let mut last_newline: Option<(usize, usize)> = None; // (byte after it, units up to it)
    for c in text.chars() {
        let w = c.len_utf16();
        if units + w > limit && !current.is_empty() {
            match last_newline.filter(|(_, u)| *u >= limit / 2) {
                Some((at, u)) => {
                    let rest = current.split_off(at);
                    parts.push(std::mem::replace(&mut current, rest));
                    units -= u;
                }
                None => {
                    parts.push(std::mem::take(&mut current));
                    units = 0;
                }
            }
            last_newline = None;
        }
        current.push(c);
        units += w;
        if c == '\n' {
            last_newline = Some((current.len(), units));
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// The Bot API over HTTP. Errors never carry the URL (it holds the token).
struct BotApi {
    client: reqwest::Client,
    base: String,
    token: String,
}

/// What a method is called with.
enum Body {
    Json(Value),
    /// `sendDocument`: the chat, a caption, a file name and its contents.
    Document {
        chat_id: i64,
        caption: String,
        name: String,
        contents: Vec<u8>,
    },
}

impl BotApi {
    fn redact(&self, text: &str) -> String {
        text.replace(&self.token, "<token>")
    }

    async fn call(&self, method: &str, body: &Body) -> Result<Value, String> {
        let url = format!(
            "{}/bot{}/{method}",
            self.base.trim_end_matches('/'),
            self.token
        );
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = match body {
                Body::Json(v) => self.client.post(&url).json(v),
                Body::Document {
                    chat_id,
                    caption,
                    name,
                    contents,
                } => self.client.post(&url).multipart(
                    document_form(*chat_id, caption, name, contents)
                        .map_err(|e| format!("{method}: {e}"))?,
                ),
            };
            let response = request
                .send()
                .await
                .map_err(|e| format!("{method}: {}", self.redact(&e.without_url().to_string())))?;
            let status = response.status().as_u16();
            let answer: Value = response.json().await.map_err(|e| {
                format!(
                    "{method}: HTTP {status}, unreadable answer: {}",
                    self.redact(&e.without_url().to_string())
                )
            })?;
            if answer.get("ok") == Some(&Value::Bool(true)) {
                return Ok(answer.get("result").cloned().unwrap_or(Value::Null));
            }
            let code = answer
                .get("error_code")
                .and_then(Value::as_u64)
                .unwrap_or(u64::from(status));
            let description = answer
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("no description");
            if code == 429 && attempt < RATE_LIMIT_ATTEMPTS {
                let wait = answer
                    .pointer("/parameters/retry_after")
                    .and_then(Value::as_u64)
                    .unwrap_or(1)
                    .clamp(1, MAX_RETRY_AFTER);
                tracing::warn!(method, wait, "telegram rate limit: retrying after {wait} s");
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            return Err(format!(
                "{method}: error {code}: {}",
                self.redact(description)
            ));
        }
    }
}

/// The `sendDocument` form: the chat, the caption and the file (its name cut to characters
/// any client shows as they are).
fn document_form(
    chat_id: i64,
    caption: &str,
    name: &str,
    contents: &[u8],
) -> reqwest::Result<Form> {
    let clean_name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let document = Part::bytes(contents.to_vec())
        .file_name(clean_name)
        .mime_str("text/plain; charset=utf-8")?;
    Ok(Form::new()
        .text("chat_id", chat_id.to_string())
        .text("caption", caption.to_string())
        .part("document", document))
}

/// Something to send, in order.
enum Out {
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
struct Question {
    chat: i64,
    question: String,
    options: Vec<String>,
    reply: oneshot::Sender<AskAnswer>,
}

struct Hub {
    api: BotApi,
    allowed: BTreeSet<i64>,
    users: BTreeSet<i64>,
    outbox: mpsc::UnboundedSender<Out>,
    prompts: mpsc::Sender<(i64, String)>,
    pending: Mutex<BTreeMap<u64, Question>>,
    next_question: AtomicU64,
    /// Chats with a request running or on its way to their session.
    busy: Mutex<BTreeSet<i64>>,
    /// The sessions alive, by chat.
    chats: Mutex<BTreeMap<i64, Arc<ChatState>>>,
}

/// One chat's session, as the poller and the events see it (the agent itself lives in the
/// session's task).
struct ChatState {
    chat: i64,
    /// `/stop` in this chat.
    stop: watch::Sender<u64>,
    /// Streamed answer text not sent yet.
    text: Mutex<String>,
    /// The answer text of the model call under way, kept for /stop.
    partial: Mutex<(String, bool)>,
    /// When a request last ended (or the session began).
    last: Mutex<std::time::Instant>,
}

impl ChatState {
    fn new(chat: i64) -> ChatState {
        ChatState {
            chat,
            stop: watch::channel(0).0,
            text: Mutex::new(String::new()),
            partial: Mutex::new((String::new(), false)),
            last: Mutex::new(std::time::Instant::now()),
        }
    }

    /// Send the streamed text gathered so far.
    fn flush_text(&self, hub: &Hub) {
        let text = std::mem::take(&mut *self.text.lock());
        if !text.trim().is_empty() {
            hub.send(Out::Text(self.chat, text));
        }
    }
}

fn label(option: &str) -> String {
    match option {
        "yes" => "Allow".to_string(),
        "no" => "Deny".to_string(),
        "always" => "Always allow".to_string(),
        other => other.to_string(),
    }
}

impl Hub {
    fn send(&self, out: Out) {
        let _ = self.outbox.send(out);
    }

    /// Close `chat`'s open questions (its request ended or was stopped).
    fn cancel_questions(&self, chat: i64) {
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

    async fn handle_update(&self, update: &Value) {
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
    fn answer_typed(&self, chat: i64, text: &str) -> bool {
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

    async fn handle_callback(&self, callback: &Value) {
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

    async fn deliver(&self, out: Out) {
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

    async fn send_text(&self, chat: i64, text: &str) -> Result<(), String> {
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

    async fn send_document(
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

    async fn poll(self: Arc<Self>, timeout: u64) {
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
fn bound_message(text: &str) -> String {
    split_message(text, MESSAGE_LIMIT - 1)
        .into_iter()
        .next()
        .unwrap_or_default()
}

struct TelegramAsk {
    hub: Arc<Hub>,
    st: Arc<ChatState>,
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

struct TelegramEvents {
    hub: Arc<Hub>,
    st: Arc<ChatState>,
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

/// Builds one chat's agent around that chat's `ask()` and events (the wiring's job).
pub type MakeAgent<'a> = dyn FnMut(Arc<dyn Ask>, Arc<dyn CoreEvents>) -> Result<Agent, String> + 'a;

/// The Telegram transport: build it, then [`Telegram::run`] with a way to build an agent for
/// each chat. Each allowed chat gets its own session (agent and history; `/stop` in one chat
/// stops only its own request); at most `max_sessions` live at once, and one idle for
/// `idle` is dropped.
pub struct Telegram {
    hub: Arc<Hub>,
    outbox: tokio::sync::Mutex<mpsc::UnboundedReceiver<Out>>,
    prompts: tokio::sync::Mutex<mpsc::Receiver<(i64, String)>>,
    poll_timeout: u64,
    max_sessions: usize,
    idle: Duration,
}

/// A live session as the dispatcher keeps it.
struct Live {
    st: Arc<ChatState>,
    prompts: mpsc::Sender<String>,
}

impl Telegram {
    /// A bot session.
    pub fn new(options: TelegramOptions) -> Result<Self, String> {
        if !valid_token(&options.token) {
            return Err("the bot token has characters a Telegram token never has".into());
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(options.poll_timeout + 30))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let (outbox, out_rx) = mpsc::unbounded_channel();
        let (prompts, prompt_rx) = mpsc::channel(16);
        Ok(Self {
            hub: Arc::new(Hub {
                api: BotApi {
                    client,
                    base: options.api_url,
                    token: options.token,
                },
                allowed: options.allowed_chats,
                users: options.allowed_users,
                outbox,
                prompts,
                pending: Mutex::new(BTreeMap::new()),
                next_question: AtomicU64::new(1),
                busy: Mutex::new(BTreeSet::new()),
                chats: Mutex::new(BTreeMap::new()),
            }),
            outbox: tokio::sync::Mutex::new(out_rx),
            prompts: tokio::sync::Mutex::new(prompt_rx),
            poll_timeout: options.poll_timeout,
            max_sessions: options.max_sessions.max(1),
            idle: options.idle.max(Duration::from_secs(1)),
        })
    }

    /// Poll for messages and run them, each chat in its own session, until `shutdown`
    /// resolves (its value names why).
    pub async fn run(
        &self,
        make_agent: &mut MakeAgent<'_>,
        shutdown: impl Future<Output = String>,
    ) -> String {
        let me = self
            .hub
            .api
            .call("getMe", &Body::Json(json!({})))
            .await
            .ok()
            .and_then(|v| {
                v.get("username")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        tracing::info!(bot = ?me, chats = ?self.hub.allowed, max_sessions = self.max_sessions,
            idle_secs = self.idle.as_secs(), "telegram session");
        let poller = tokio::spawn(Arc::clone(&self.hub).poll(self.poll_timeout));
        let sender_hub = Arc::clone(&self.hub);
        let mut outbox = self.outbox.lock().await;
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let sender = async move {
            while let Some(out) = outbox.recv().await {
                sender_hub.deliver(out).await;
            }
            let _ = done_tx.send(());
        };
        let mut prompts = self.prompts.lock().await;
        let mut shutdown = std::pin::pin!(shutdown);
        // The sessions' turns run as local tasks of this thread (an agent stays on it).
        let local = tokio::task::LocalSet::new();
        let turns = local.run_until(async {
            let mut live: BTreeMap<i64, Live> = BTreeMap::new();
            let mut sweep = tokio::time::interval(
                (self.idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30)),
            );
            loop {
                let prompt = tokio::select! {
                    p = prompts.recv() => p,
                    _ = sweep.tick() => {
                        self.drop_idle(&mut live);
                        continue;
                    }
                    why = &mut shutdown => break why,
                };
                let Some((chat, prompt)) = prompt else {
                    break "the poller stopped".to_string();
                };
                tracing::info!(chat, input = %prompt, "telegram request");
                if !live.contains_key(&chat) {
                    match self.open_session(chat, &mut live, make_agent) {
                        Ok(session) => {
                            live.insert(chat, session);
                        }
                        Err(why) => {
                            self.hub.send(Out::Text(chat, why));
                            self.hub.busy.lock().remove(&chat);
                            continue;
                        }
                    }
                }
                let sent = match live.get(&chat) {
                    Some(session) => session.prompts.send(prompt).await.is_ok(),
                    None => false,
                };
                if !sent {
                    live.remove(&chat);
                    self.hub.chats.lock().remove(&chat);
                    self.hub.busy.lock().remove(&chat);
                }
            }
        });
        let mut sender = std::pin::pin!(sender);
        let why = tokio::select! {
            why = turns => why,
            () = &mut sender => "the sender stopped".to_string(),
        };
        // The sessions (their agents and running commands) go with the local set.
        drop(local);
        poller.abort();
        // Let what is queued go out (bounded).
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::select! {
                () = &mut sender => {},
                _ = &mut done_rx => {},
            }
        })
        .await;
        tracing::info!(reason = %why, "telegram session end");
        why
    }

    /// Drops the sessions idle for longer than the limit.
    fn drop_idle(&self, live: &mut BTreeMap<i64, Live>) {
        let busy = self.hub.busy.lock().clone();
        let stale: Vec<i64> = live
            .iter()
            .filter(|(chat, s)| !busy.contains(chat) && s.st.last.lock().elapsed() >= self.idle)
            .map(|(chat, _)| *chat)
            .collect();
        for chat in stale {
            self.close(chat, live);
            tracing::info!(chat, "telegram: dropped an idle session");
            self.hub.send(Out::Text(
                chat,
                format!(
                    "session closed after {} s idle; your next message starts a new one",
                    self.idle.as_secs()
                ),
            ));
        }
    }

    /// Ends `chat`'s session: its task ends when its prompt channel closes, the agent and
    /// the history with it.
    fn close(&self, chat: i64, live: &mut BTreeMap<i64, Live>) {
        live.remove(&chat);
        self.hub.chats.lock().remove(&chat);
    }

    /// A new session for `chat`, making room by dropping the longest idle one when the limit
    /// is reached. `Err` is the message for the chat.
    fn open_session(
        &self,
        chat: i64,
        live: &mut BTreeMap<i64, Live>,
        make_agent: &mut MakeAgent<'_>,
    ) -> Result<Live, String> {
        if live.len() >= self.max_sessions {
            let busy = self.hub.busy.lock().clone();
            let oldest = live
                .iter()
                .filter(|(c, _)| !busy.contains(c))
                .min_by_key(|(_, s)| *s.st.last.lock())
                .map(|(c, _)| *c);
            let Some(oldest) = oldest else {
                return Err(format!(
                    "all {} sessions are busy; try again when one is done",
                    self.max_sessions
                ));
            };
            self.close(oldest, live);
            tracing::info!(
                chat = oldest,
                "telegram: dropped the longest idle session for a new chat"
            );
            self.hub.send(Out::Text(
                oldest,
                "session closed to make room for another chat; your next message starts a new one"
                    .into(),
            ));
        }
        let st = Arc::new(ChatState::new(chat));
        let ask: Arc<dyn Ask> = Arc::new(TelegramAsk {
            hub: Arc::clone(&self.hub),
            st: Arc::clone(&st),
        });
        let events: Arc<dyn CoreEvents> = Arc::new(TelegramEvents {
            hub: Arc::clone(&self.hub),
            st: Arc::clone(&st),
        });
        let agent = make_agent(ask, events).map_err(|e| format!("cannot start a session: {e}"))?;
        tracing::info!(chat, "telegram: new session");
        let (tx, rx) = mpsc::channel(4);
        self.hub.chats.lock().insert(chat, Arc::clone(&st));
        tokio::task::spawn_local(session(Arc::clone(&self.hub), Arc::clone(&st), agent, rx));
        Ok(Live { st, prompts: tx })
    }
}

/// One chat's session: its requests, one at a time, until the dispatcher lets it go.
async fn session(
    hub: Arc<Hub>,
    st: Arc<ChatState>,
    mut agent: Agent,
    mut prompts: mpsc::Receiver<String>,
) {
    let chat = st.chat;
    let events = TelegramEvents {
        hub: Arc::clone(&hub),
        st: Arc::clone(&st),
    };
    while let Some(prompt) = prompts.recv().await {
        let mut stop = st.stop.subscribe();
        stop.borrow_and_update();
        let outcome = tokio::select! {
            report = agent.run_turn(&prompt, &events) => Some(report),
            _ = stop.changed() => None,
        };
        hub.cancel_questions(chat);
        let note = match outcome {
            None => {
                agent.record_interrupted(&std::mem::take(&mut st.partial.lock().0));
                st.text.lock().clear();
                Some("request stopped; the answer so far stays in the history".into())
            }
            Some(report) => match report.result {
                Ok(TurnStop::Answered) => None,
                Ok(TurnStop::BudgetDeclined) => Some("stopped at the iteration budget".to_string()),
                Ok(TurnStop::Cancelled) => Some("request cancelled".to_string()),
                Ok(TurnStop::Halted) => Some(report.text.clone()),
                Err(e) => Some(format!("error: {e}")),
            },
        };
        st.flush_text(&hub);
        if let Some(note) = note {
            hub.send(Out::Text(chat, note));
        }
        *st.last.lock() = std::time::Instant::now();
        hub.busy.lock().remove(&chat);
    }
    tracing::info!(chat, "telegram: session ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_everything_within_the_limit() {
        let text = format!("{}\n{}", "a".repeat(3000), "é😀".repeat(1500));
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert!(parts.len() >= 2);
        assert_eq!(parts.concat(), text);
        for p in &parts {
            assert!(p.encode_utf16().count() <= MESSAGE_LIMIT, "{}", p.len());
        }
        assert!(parts[0].ends_with('\n'), "cut at the newline");
        assert_eq!(split_message("short", MESSAGE_LIMIT), vec!["short"]);
        assert!(split_message("", MESSAGE_LIMIT).is_empty());
        let long_line = "x".repeat(10_000);
        let parts = split_message(&long_line, MESSAGE_LIMIT);
        assert_eq!(
            parts.iter().map(String::len).collect::<Vec<_>>(),
            [4096, 4096, 1808]
        );
    }

    #[test]
    fn tokens_that_could_bend_the_url_are_refused() {
        assert!(valid_token("123456:ABC-def_ghi"));
        assert!(!valid_token(""));
        assert!(!valid_token("123/../x"));
        assert!(!valid_token("123?x=1"));
        assert!(!valid_token("12 3"));
    }
}
