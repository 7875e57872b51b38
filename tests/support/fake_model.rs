//! The one fake model server of the tests (and of the real-systemd suite, through
//! `examples/fake_anthropic.rs`), speaking both dialects: Anthropic messages
//! (`POST /v1/messages`) and OpenAI chat-completions (`POST …/chat/completions`), each
//! streaming (SSE, when the request has `"stream": true`) or not (one JSON document).
//!
//! It answers from a [`Script`]: a queue of [`Reply`]s taken in order by model requests.
//! Semantic replies (text, a tool call, an API error, no answer) are rendered in the
//! request's dialect; raw replies (a status with a body, SSE chunks written one by one, SSE
//! then silence, a trickle of comments) are written as they are, for tests of a client's
//! stream handling (`oa_*`/`an_*` build such chunks). Claude Code also sends side requests
//! without tools (a session title, for instance); those get `fallback_text` and do not
//! consume the script, unless `answer_toolless_with_fallback` is false. Once the script runs
//! out, every model request gets `fallback_text` (or a 500 "script exhausted" with
//! `fail_when_exhausted`), so a client never waits for a reply that will not come.
//!
//! Several agents at once (jobs running in parallel) each get their own [`Conversation`]:
//! a request whose text holds a conversation's marker is answered by that conversation's
//! turn (the number of assistant messages it carries), whatever the other agents asked
//! meanwhile; a conversation's first answer may wait for gates (another conversation
//! started, or [`FakeModel::open`]), which is how a test sees two agents at work together.
//!
//! Everything else (Claude Code 2.1.x sends `HEAD /` at start-up to warm the connection)
//! gets `200 {}`, and is recorded like any other request, so tests can see which
//! endpoints a client called: [`FakeModel::requests`], [`FakeModel::endpoints`].
//!
//! The server runs on its own thread with its own Tokio runtime, so it works the same
//! from sync tests, from `#[tokio::test]` tests that block on a child process, and from
//! `examples/fake_anthropic.rs`. Dropping the handle stops it.
//!
//! Include it with `#[path = "support/fake_model.rs"] mod fake_model;` (the agentshell tests
//! get it through `tests/agentshell_common`, with their `FakeServer` wrapper).
//! No `unwrap`/`expect` here: the example binary compiles this file outside `cfg(test)`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One scripted answer to a model request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// A final text answer (`end_turn` / `stop`).
    Text(String),
    /// A tool call (`tool_use` / `tool_calls`), optionally preceded by a text block.
    /// The tool-use id is `toolu_fake_<n>`; see [`FakeModel::issued_tool_uses`].
    ToolUse {
        name: String,
        input: Value,
        #[serde(default)]
        text: Option<String>,
    },
    /// An API error: HTTP `status` with the dialect's error body.
    Error {
        status: u16,
        #[serde(default = "default_error_type")]
        error_type: String,
        message: String,
    },
    /// Never answer (the connection stays open until the client or the server goes away).
    #[serde(alias = "hang")]
    Stall,
    /// Raw: HTTP `status` with this body (`retry-after: 0`), whatever the dialect.
    Status(u16, String),
    /// Raw: 200 `text/event-stream`; each string is written (and flushed) separately.
    Sse(Vec<String>),
    /// Raw: the SSE headers and these chunks, then silence without closing.
    SseThenStall(Vec<String>),
    /// Raw: the SSE headers, then an SSE comment line every 100 ms, forever.
    Trickle,
}

fn default_error_type() -> String {
    "api_error".to_owned()
}

impl Reply {
    /// A Bash tool call running `command`.
    pub fn bash(command: &str) -> Self {
        Reply::ToolUse {
            name: "Bash".to_owned(),
            input: json!({ "command": command, "description": "Run a shell command" }),
            text: None,
        }
    }

    pub fn text(text: &str) -> Self {
        Reply::Text(text.to_owned())
    }
}

/// What the server answers. Deserializes from JSON, e.g.
/// `{"replies":[{"tool_use":{"name":"Bash","input":{"command":"echo hi"}}},{"text":"Done"}]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Script {
    /// Answers for model requests, in order.
    pub replies: Vec<Reply>,
    /// Text for side requests and for every request after the script ran out.
    pub fallback_text: String,
    /// Answer requests that carry no `tools` with `fallback_text`, without consuming a reply.
    pub answer_toolless_with_fallback: bool,
    /// Once the script ran out, answer `500 script exhausted` instead of `fallback_text`.
    pub fail_when_exhausted: bool,
    /// A tool call every conversation gets first, without consuming `replies`: a request
    /// that offers a tool of this name and carries no tool result yet is answered with this
    /// call (a long soak's many concurrent agents each make it once, then get the script).
    pub opening_tool_use: Option<OpeningToolUse>,
    /// Conversations of their own, tried in order before `replies` (see [`Conversation`]).
    pub conversations: Vec<Conversation>,
    /// Longest a conversation's first answer waits for its gates; then it is a 500 saying
    /// which gate never opened.
    pub gate_timeout_secs: u64,
}

/// One agent's conversation, told from the others by a marker in its text: the request
/// carrying `n` assistant messages gets `replies[n]` (past the end: `fallback_text`), so
/// parallel agents each follow their own script in whatever order their requests come.
/// Tool-less side requests are still answered with `fallback_text` (when
/// `answer_toolless_with_fallback`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Text the request's messages contain. The first conversation of the list whose marker
    /// a request holds is the request's (put the more specific markers first).
    pub marker: String,
    /// The answers, by turn.
    pub replies: Vec<Reply>,
    /// Gates the first answer waits for. A gate is open once a request of the conversation
    /// with that marker arrived (its name is the marker), or once the test opened it.
    #[serde(default)]
    pub wait_for: Vec<String>,
}

impl Conversation {
    pub fn new(marker: &str, replies: Vec<Reply>) -> Self {
        Conversation {
            marker: marker.to_owned(),
            replies,
            wait_for: Vec::new(),
        }
    }

    /// The first answer waits until every one of `gates` is open.
    pub fn wait_for(mut self, gates: &[&str]) -> Self {
        self.wait_for = gates.iter().map(|g| (*g).to_owned()).collect();
        self
    }
}

/// See [`Script::opening_tool_use`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpeningToolUse {
    pub name: String,
    pub input: Value,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            replies: Vec::new(),
            fallback_text: "OK".to_owned(),
            answer_toolless_with_fallback: true,
            fail_when_exhausted: false,
            opening_tool_use: None,
            conversations: Vec::new(),
            gate_timeout_secs: 120,
        }
    }
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Exactly `replies`, one per model request (with tools or not), then 500s: the
    /// agentshell tests' script.
    pub fn strict(replies: Vec<Reply>) -> Self {
        Script {
            replies,
            answer_toolless_with_fallback: false,
            fail_when_exhausted: true,
            ..Script::default()
        }
    }

    pub fn reply(mut self, reply: Reply) -> Self {
        self.replies.push(reply);
        self
    }

    pub fn text(self, text: &str) -> Self {
        self.reply(Reply::text(text))
    }

    pub fn bash(self, command: &str) -> Self {
        self.reply(Reply::bash(command))
    }

    pub fn tool_use(self, name: &str, input: Value) -> Self {
        self.reply(Reply::ToolUse {
            name: name.to_owned(),
            input,
            text: None,
        })
    }

    pub fn error(self, status: u16, error_type: &str, message: &str) -> Self {
        self.reply(Reply::Error {
            status,
            error_type: error_type.to_owned(),
            message: message.to_owned(),
        })
    }

    pub fn conversation(mut self, c: Conversation) -> Self {
        self.conversations.push(c);
        self
    }
}

/// How a request was answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Scripted reply number `n` (0-based).
    Script(usize),
    /// A side request (no tools) answered with the fallback text.
    Side,
    /// The script had run out: fallback text (or a 500).
    Exhausted,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// Any other endpoint: `200 {}`.
    Other,
    /// The script's `opening_tool_use` (a conversation's first model request).
    Opening,
    /// The turn of the [`Conversation`] with this marker.
    Conversation { marker: String, turn: usize },
}

/// The API a model request speaks, told by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// `POST …/v1/messages`.
    Anthropic,
    /// `POST …/chat/completions`.
    OpenAi,
    /// `POST …/responses`: OpenAI's Responses API, what the Codex CLI speaks.
    Responses,
}

/// A request the server saw.
#[derive(Clone, Debug, Serialize)]
pub struct RecordedRequest {
    pub seq: usize,
    pub method: String,
    /// Path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when it was not JSON).
    pub body: Value,
    pub body_len: usize,
    pub answer: Answer,
}

impl RecordedRequest {
    /// `METHOD /path` without the query.
    pub fn endpoint(&self) -> String {
        let path = self.path.split('?').next().unwrap_or("");
        format!("{} {}", self.method, path)
    }

    /// The dialect of a model request; `None` for anything else.
    pub fn dialect(&self) -> Option<Dialect> {
        if self.method != "POST" {
            return None;
        }
        let path = self.path.split('?').next().unwrap_or("");
        if path.ends_with("/v1/messages") {
            Some(Dialect::Anthropic)
        } else if path.ends_with("/chat/completions") {
            Some(Dialect::OpenAi)
        } else if path.ends_with("/responses") {
            Some(Dialect::Responses)
        } else {
            None
        }
    }

    pub fn is_messages(&self) -> bool {
        self.dialect() == Some(Dialect::Anthropic)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// True when the request offers a tool named `name` (either dialect).
    pub fn offers_tool(&self, name: &str) -> bool {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| {
                tools.iter().any(|t| {
                    t.get("name")
                        .or_else(|| t.get("function").and_then(|f| f.get("name")))
                        .and_then(Value::as_str)
                        == Some(name)
                })
            })
    }

    /// True when the conversation already carries a tool's result (either dialect).
    pub fn has_tool_result(&self) -> bool {
        !self.tool_results().is_empty()
            || self
                .messages()
                .iter()
                .any(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
    }

    pub fn has_tools(&self) -> bool {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
    }

    pub fn messages(&self) -> Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// Every content block of every message (string contents become a text block).
    pub fn content_blocks(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for m in self.messages() {
            match m.get("content") {
                Some(Value::Array(blocks)) => out.extend(blocks.iter().cloned()),
                Some(Value::String(s)) => out.push(json!({ "type": "text", "text": s })),
                _ => {}
            }
        }
        out
    }

    /// The `tool_result` blocks sent back to the model.
    pub fn tool_results(&self) -> Vec<Value> {
        self.content_blocks()
            .into_iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .collect()
    }

    /// The `tool_result` for `tool_use_id`, if this request carries it.
    pub fn tool_result_for(&self, tool_use_id: &str) -> Option<Value> {
        self.tool_results()
            .into_iter()
            .find(|b| b.get("tool_use_id").and_then(Value::as_str) == Some(tool_use_id))
    }

    /// All text of the messages (user and assistant), joined by newlines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in self.content_blocks() {
            if let Some(t) = b.get("text").and_then(Value::as_str) {
                out.push_str(t);
                out.push('\n');
            }
        }
        out
    }
}

/// Text of a `tool_result` block's content (a string, or a list of text blocks).
pub fn tool_result_text(block: &Value) -> String {
    match block.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A tool call the server made the client do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IssuedToolUse {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// Called for every request as it is recorded (the example binary logs with it).
pub type Observer = Box<dyn Fn(&RecordedRequest) + Send + Sync>;

struct Inner {
    replies: VecDeque<(usize, Reply)>,
    requests: Vec<RecordedRequest>,
    tool_uses: Vec<IssuedToolUse>,
}

struct Shared {
    inner: Mutex<Inner>,
    fallback_text: String,
    answer_toolless_with_fallback: bool,
    fail_when_exhausted: bool,
    opening_tool_use: Option<OpeningToolUse>,
    conversations: Vec<Conversation>,
    gate_timeout: Duration,
    /// The open gates.
    gates: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    observer: Option<Observer>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake server. Dropping it stops the server.
pub struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeModel {
    /// Start on an ephemeral port of 127.0.0.1. Panics if that fails (test support).
    pub fn start(script: Script) -> Self {
        match Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), script, None) {
            Ok(server) => server,
            Err(e) => panic!("fake model server: cannot start: {e}"),
        }
    }

    /// Start on `addr`, calling `observer` for each request.
    pub fn start_on(
        addr: SocketAddr,
        script: Script,
        observer: Option<Observer>,
    ) -> std::io::Result<Self> {
        let listener = StdTcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                replies: script.replies.into_iter().enumerate().collect(),
                requests: Vec::new(),
                tool_uses: Vec::new(),
            }),
            fallback_text: script.fallback_text,
            answer_toolless_with_fallback: script.answer_toolless_with_fallback,
            fail_when_exhausted: script.fail_when_exhausted,
            opening_tool_use: script.opening_tool_use,
            conversations: script.conversations,
            gate_timeout: Duration::from_secs(script.gate_timeout_secs),
            gates: tokio::sync::watch::Sender::new(Default::default()),
            observer,
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(256 * 1024 * 1024))
            .with_state(Arc::clone(&shared));
        let thread = std::thread::Builder::new()
            .name("fake-model".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("fake model server: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        r = axum::serve(listener, app) => {
                            if let Err(e) = r {
                                eprintln!("fake model server: {e}");
                            }
                        }
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime drops open connections, hung ones included.
                runtime.shutdown_background();
            })?;
        Ok(FakeModel {
            addr,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL` (and, with `/v1` after it, for an
    /// OpenAI-style base URL).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The `POST /v1/messages` requests so far.
    pub fn message_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(RecordedRequest::is_messages)
            .collect()
    }

    /// Distinct `METHOD /path` endpoints called, in order of first call.
    pub fn endpoints(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.requests() {
            let e = r.endpoint();
            if !out.contains(&e) {
                out.push(e);
            }
        }
        out
    }

    /// Tool calls the server has sent, in order.
    pub fn issued_tool_uses(&self) -> Vec<IssuedToolUse> {
        self.shared.lock().tool_uses.clone()
    }

    /// The first `tool_result` any request carried for `tool_use_id`.
    pub fn tool_result_for(&self, tool_use_id: &str) -> Option<Value> {
        self.requests()
            .iter()
            .find_map(|r| r.tool_result_for(tool_use_id))
    }

    /// Opens gate `name` (see [`Conversation::wait_for`]).
    pub fn open(&self, name: &str) {
        self.shared.gates.send_modify(|g| {
            g.insert(name.to_owned());
        });
    }

    /// The requests answered by the conversation with `marker`, in arrival order.
    pub fn conversation_requests(&self, marker: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| matches!(&r.answer, Answer::Conversation { marker: m, .. } if m == marker))
            .collect()
    }

    /// Scripted replies not used yet.
    pub fn remaining_replies(&self) -> usize {
        self.shared.lock().replies.len()
    }

    /// Block until the server thread ends (for the example binary; it never stops by itself).
    #[allow(dead_code)] // examples/fake_anthropic.rs only
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the handler decided under the lock.
/// The reply number of the script's opening tool call (not one of `replies`).
const OPENING: usize = usize::MAX;

enum Plan {
    /// Reply number, reply, and the tool-use id when the reply is a tool call.
    Scripted(usize, Reply, String),
    Fallback(Answer),
    CountTokens,
    Other,
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header_list: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut record = RecordedRequest {
        seq: 0,
        method: method.as_str().to_owned(),
        path,
        headers: header_list,
        body: json_body,
        body_len: body.len(),
        answer: Answer::Other,
    };
    let dialect = record.dialect();
    let is_count = record.endpoint() == "POST /v1/messages/count_tokens";
    // A conversation's request: its gate opens; its first turn waits for its own gates.
    let side = shared.answer_toolless_with_fallback && !record.has_tools();
    let conversation = match dialect {
        Some(_) if !side => {
            let text = record.text();
            shared
                .conversations
                .iter()
                .find(|c| text.contains(&c.marker))
                .map(|c| {
                    let turn = record
                        .messages()
                        .iter()
                        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                        .count();
                    (c, turn)
                })
        }
        _ => None,
    };
    let mut gate_error = None;
    if let Some((c, turn)) = conversation {
        shared.gates.send_modify(|g| {
            g.insert(c.marker.clone());
        });
        if turn == 0 && !c.wait_for.is_empty() {
            let mut rx = shared.gates.subscribe();
            let all_open =
                |g: &std::collections::BTreeSet<String>| c.wait_for.iter().all(|w| g.contains(w));
            if tokio::time::timeout(shared.gate_timeout, rx.wait_for(all_open))
                .await
                .is_err()
            {
                let open = shared.gates.borrow().clone();
                let missing: Vec<&String> =
                    c.wait_for.iter().filter(|w| !open.contains(*w)).collect();
                gate_error = Some(Reply::Error {
                    status: 500,
                    error_type: "api_error".to_owned(),
                    message: format!(
                        "fake model: conversation {:?} waited {} s for {missing:?}, which never came",
                        c.marker,
                        shared.gate_timeout.as_secs()
                    ),
                });
            }
        }
    }

    let plan = {
        let mut inner = shared.lock();
        let mut plan = if dialect.is_some() {
            let opening = shared
                .opening_tool_use
                .as_ref()
                .filter(|o| record.offers_tool(&o.name) && !record.has_tool_result());
            if let Some(o) = opening {
                let call = Reply::ToolUse {
                    name: o.name.clone(),
                    input: o.input.clone(),
                    text: None,
                };
                Plan::Scripted(OPENING, call, String::new())
            } else if side {
                Plan::Fallback(Answer::Side)
            } else if let Some((c, turn)) = conversation {
                let reply = gate_error.clone().unwrap_or_else(|| {
                    c.replies
                        .get(turn)
                        .cloned()
                        .unwrap_or_else(|| Reply::Text(shared.fallback_text.clone()))
                });
                Plan::Scripted(turn, reply, String::new())
            } else {
                match inner.replies.pop_front() {
                    Some((n, reply)) => Plan::Scripted(n, reply, String::new()),
                    None => Plan::Fallback(Answer::Exhausted),
                }
            }
        } else if is_count {
            Plan::CountTokens
        } else {
            Plan::Other
        };
        if let Plan::Scripted(_, Reply::ToolUse { name, input, .. }, tool_id) = &mut plan {
            *tool_id = format!("toolu_fake_{}", inner.tool_uses.len() + 1);
            inner.tool_uses.push(IssuedToolUse {
                id: tool_id.clone(),
                name: name.clone(),
                input: input.clone(),
            });
        }
        record.seq = inner.requests.len();
        record.answer = match &plan {
            Plan::Scripted(OPENING, _, _) => Answer::Opening,
            Plan::Scripted(turn, _, _) if conversation.is_some() => Answer::Conversation {
                marker: conversation
                    .map(|(c, _)| c.marker.clone())
                    .unwrap_or_default(),
                turn: *turn,
            },
            Plan::Scripted(n, _, _) => Answer::Script(*n),
            Plan::Fallback(a) => a.clone(),
            Plan::CountTokens => Answer::CountTokens,
            Plan::Other => Answer::Other,
        };
        inner.requests.push(record.clone());
        plan
    };
    if let Some(observer) = &shared.observer {
        observer(&record);
    }

    let input_tokens = (record.body_len / 4).max(1);
    let model = record
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-fake")
        .to_owned();
    let stream = record
        .body
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let msg = Message {
        dialect: dialect.unwrap_or(Dialect::Anthropic),
        id: format!("msg_fake_{}", record.seq),
        model,
        input_tokens,
        stream,
    };

    match plan {
        Plan::Other => {
            if method == Method::HEAD {
                respond(StatusCode::OK, "application/json", Body::empty())
            } else {
                respond(StatusCode::OK, "application/json", Body::from("{}"))
            }
        }
        Plan::CountTokens => {
            json_response(StatusCode::OK, &json!({ "input_tokens": input_tokens }))
        }
        Plan::Fallback(Answer::Exhausted) if shared.fail_when_exhausted => raw_status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "script exhausted".to_owned(),
        ),
        Plan::Fallback(_) => msg.render(
            vec![json!({ "type": "text", "text": shared.fallback_text })],
            "end_turn",
        ),
        Plan::Scripted(_, Reply::Text(text), _) => {
            msg.render(vec![json!({ "type": "text", "text": text })], "end_turn")
        }
        Plan::Scripted(_, Reply::ToolUse { name, input, text }, id) => {
            let mut content = Vec::new();
            if let Some(t) = text {
                content.push(json!({ "type": "text", "text": t }));
            }
            content.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
            msg.render(content, "tool_use")
        }
        Plan::Scripted(
            _,
            Reply::Error {
                status,
                error_type,
                message,
            },
            _,
        ) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = match msg.dialect {
                Dialect::Anthropic => {
                    json!({ "type": "error", "error": { "type": error_type, "message": message } })
                }
                Dialect::OpenAi | Dialect::Responses => {
                    json!({ "error": { "type": error_type, "message": message, "code": null } })
                }
            };
            json_response(status, &body)
        }
        Plan::Scripted(_, Reply::Stall, _) => {
            std::future::pending::<()>().await;
            respond(StatusCode::OK, "application/json", Body::empty())
        }
        Plan::Scripted(_, Reply::Status(code, text), _) => raw_status(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            text,
        ),
        Plan::Scripted(_, Reply::Sse(chunks), _) => sse_response(Body::from_stream(
            futures_util::stream::iter(chunks).then(|c| async move {
                tokio::task::yield_now().await;
                Ok::<_, Infallible>(Bytes::from(c))
            }),
        )),
        Plan::Scripted(_, Reply::SseThenStall(chunks), _) => sse_response(Body::from_stream(
            futures_util::stream::iter(chunks)
                .map(|c| Ok::<_, Infallible>(Bytes::from(c)))
                .chain(futures_util::stream::pending()),
        )),
        Plan::Scripted(_, Reply::Trickle, _) => sse_response(Body::from_stream(
            futures_util::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some((
                    Ok::<_, Infallible>(Bytes::from_static(b": still here\n")),
                    (),
                ))
            }),
        )),
    }
}

fn respond(status: StatusCode, content_type: &str, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = "req_fake".parse() {
        resp.headers_mut().insert("request-id", v);
    }
    resp
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    respond(status, "application/json", Body::from(value.to_string()))
}

/// A raw status reply: `text` as the body, `retry-after: 0` (a client retrying a 429/5xx
/// does so at once).
fn raw_status(status: StatusCode, text: String) -> Response {
    let mut resp = respond(status, "application/json", Body::from(text));
    if let Ok(v) = "0".parse() {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn sse_response(body: Body) -> Response {
    let mut resp = respond(StatusCode::OK, "text/event-stream", body);
    if let Ok(v) = "no-cache".parse() {
        resp.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    resp
}

/// The frame of one answer to a model request.
struct Message {
    dialect: Dialect,
    id: String,
    model: String,
    input_tokens: usize,
    stream: bool,
}

impl Message {
    /// `content` (Anthropic-style blocks: text, tool_use) with `stop_reason` (`end_turn` or
    /// `tool_use`), in the request's dialect, as JSON or as SSE.
    fn render(&self, content: Vec<Value>, stop_reason: &str) -> Response {
        match self.dialect {
            Dialect::Anthropic => self.anthropic(content, stop_reason),
            Dialect::OpenAi => self.openai(content, stop_reason),
            Dialect::Responses => self.responses(content),
        }
    }

    /// The Responses API (`POST /v1/responses`): a `response` object, or as SSE the
    /// `response.created`, `response.output_item.added`/`.done` (text deltas between) and
    /// `response.completed` events with the usage. A text block becomes a `message` item, a
    /// tool_use block a `function_call` item whose `call_id` is the tool-use id.
    fn responses(&self, content: Vec<Value>) -> Response {
        let output_tokens = 5 * content.len();
        let items: Vec<Value> = content
            .iter()
            .enumerate()
            .map(|(i, b)| match b.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    let args = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    json!({ "type": "function_call", "id": format!("fc_{}_{i}", self.id),
                        "status": "completed", "call_id": b.get("id"), "name": b.get("name"),
                        "arguments": args.to_string() })
                }
                _ => json!({ "type": "message", "id": format!("msg_{}_{i}", self.id),
                    "status": "completed", "role": "assistant",
                    "content": [{ "type": "output_text", "text": b.get("text"),
                        "annotations": [] }] }),
            })
            .collect();
        let usage = json!({ "input_tokens": self.input_tokens,
            "input_tokens_details": { "cached_tokens": 0 },
            "output_tokens": output_tokens,
            "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": self.input_tokens + output_tokens });
        let response = |status: &str, output: &[Value], usage: Value| {
            json!({ "id": self.id, "object": "response", "created_at": 0, "status": status,
                "model": self.model, "output": output, "usage": usage })
        };
        if !self.stream {
            return json_response(StatusCode::OK, &response("completed", &items, usage));
        }
        let mut sse = String::new();
        let mut event = |name: &str, data: Value| sse.push_str(&an_event(name, data));
        event(
            "response.created",
            json!({ "type": "response.created", "response": response("in_progress", &[], Value::Null) }),
        );
        for (index, item) in items.iter().enumerate() {
            let mut added = item.clone();
            if item["type"] == "message" {
                added["content"] = json!([]);
                added["status"] = json!("in_progress");
            }
            event(
                "response.output_item.added",
                json!({ "type": "response.output_item.added", "output_index": index, "item": added }),
            );
            if item["type"] == "message" {
                event(
                    "response.output_text.delta",
                    json!({ "type": "response.output_text.delta", "item_id": item["id"],
                        "output_index": index, "content_index": 0,
                        "delta": item["content"][0]["text"] }),
                );
            }
            event(
                "response.output_item.done",
                json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
            );
        }
        event(
            "response.completed",
            json!({ "type": "response.completed", "response": response("completed", &items, usage) }),
        );
        sse_response(Body::from(sse))
    }

    fn anthropic(&self, content: Vec<Value>, stop_reason: &str) -> Response {
        let (id, model, input_tokens) = (&self.id, &self.model, self.input_tokens);
        let output_tokens = 5 * content.len();
        if !self.stream {
            let msg = json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                "usage": { "input_tokens": input_tokens, "output_tokens": output_tokens },
            });
            return json_response(StatusCode::OK, &msg);
        }
        let mut sse = String::new();
        let mut event = |name: &str, data: Value| sse.push_str(&an_event(name, data));
        event(
            "message_start",
            json!({ "type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": { "input_tokens": input_tokens, "output_tokens": 1 },
            }}),
        );
        event("ping", json!({ "type": "ping" }));
        for (index, block) in content.iter().enumerate() {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                    event(
                        "content_block_start",
                        json!({ "type": "content_block_start", "index": index, "content_block": {
                            "type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {},
                        }}),
                    );
                    event(
                        "content_block_delta",
                        json!({ "type": "content_block_delta", "index": index,
                            "delta": { "type": "input_json_delta", "partial_json": input.to_string() } }),
                    );
                }
                _ => {
                    event(
                        "content_block_start",
                        json!({ "type": "content_block_start", "index": index,
                            "content_block": { "type": "text", "text": "" } }),
                    );
                    event(
                        "content_block_delta",
                        json!({ "type": "content_block_delta", "index": index,
                            "delta": { "type": "text_delta", "text": block.get("text") } }),
                    );
                }
            }
            event(
                "content_block_stop",
                json!({ "type": "content_block_stop", "index": index }),
            );
        }
        event(
            "message_delta",
            json!({ "type": "message_delta",
                "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": output_tokens } }),
        );
        event("message_stop", json!({ "type": "message_stop" }));
        sse_response(Body::from(sse))
    }

    fn openai(&self, content: Vec<Value>, stop_reason: &str) -> Response {
        let output_tokens = 5 * content.len();
        let finish = if stop_reason == "tool_use" {
            "tool_calls"
        } else {
            "stop"
        };
        let text: String = content
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let calls: Vec<Value> = content
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .map(|b| {
                let args = b.get("input").cloned().unwrap_or_else(|| json!({}));
                json!({ "id": b.get("id"), "type": "function",
                    "function": { "name": b.get("name"), "arguments": args.to_string() } })
            })
            .collect();
        if !self.stream {
            let mut message = json!({ "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { json!(text) } });
            if !calls.is_empty() {
                message["tool_calls"] = json!(calls);
            }
            let msg = json!({
                "id": self.id, "object": "chat.completion", "model": self.model,
                "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
                "usage": { "prompt_tokens": self.input_tokens, "completion_tokens": output_tokens,
                    "total_tokens": self.input_tokens + output_tokens },
            });
            return json_response(StatusCode::OK, &msg);
        }
        let mut sse = oa_chunk(json!({ "role": "assistant", "content": "" }), None);
        if !text.is_empty() {
            sse.push_str(&oa_chunk(json!({ "content": text }), None));
        }
        for (i, c) in calls.iter().enumerate() {
            sse.push_str(&oa_chunk(
                json!({ "tool_calls": [{ "index": i, "id": c["id"],
                "type": "function", "function": c["function"] }] }),
                None,
            ));
        }
        sse.push_str(&oa_chunk(json!({}), Some(finish)));
        sse.push_str(&oa_usage(self.input_tokens as u64, output_tokens as u64));
        sse.push_str(&oa_done());
        sse_response(Body::from(sse))
    }
}

// ---- raw SSE chunks, for `Reply::Sse` (tests of a client's stream handling) ----

// OpenAI chat-completions.

pub fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    let v = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {v}\n\n")
}

pub fn oa_usage(input: u64, output: u64) -> String {
    let v = json!({"id": "chatcmpl-1", "choices": [],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}});
    format!("data: {v}\n\n")
}

pub fn oa_done() -> String {
    "data: [DONE]\n\n".to_string()
}

/// A complete text answer, one chunk per piece.
pub fn oa_text(pieces: &[&str], input: u64, output: u64) -> Reply {
    let mut chunks = vec![oa_chunk(json!({"role": "assistant", "content": ""}), None)];
    for p in pieces {
        chunks.push(oa_chunk(json!({"content": p}), None));
    }
    chunks.push(oa_chunk(json!({}), Some("stop")));
    chunks.push(oa_usage(input, output));
    chunks.push(oa_done());
    Reply::Sse(chunks)
}

/// Tool calls (id, name, arguments JSON); the arguments are split into 3 pieces each and the
/// calls' chunks interleave.
pub fn oa_tool_calls(calls: &[(&str, &str, &str)], input: u64, output: u64) -> Reply {
    let mut chunks = vec![oa_chunk(
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (i, (id, name, _)) in calls.iter().enumerate() {
        chunks.push(oa_chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
    }
    let pieces: Vec<Vec<String>> = calls.iter().map(|(_, _, a)| split3(a)).collect();
    for k in 0..3 {
        for (i, p) in pieces.iter().enumerate() {
            chunks.push(oa_chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": p[k]}}]}),
                None,
            ));
        }
    }
    chunks.push(oa_chunk(json!({}), Some("tool_calls")));
    chunks.push(oa_usage(input, output));
    chunks.push(oa_done());
    Reply::Sse(chunks)
}

/// `s` in three pieces of about equal length (in characters).
pub fn split3(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let a = chars.len() / 3;
    let b = 2 * chars.len() / 3;
    vec![
        chars[..a].iter().collect(),
        chars[a..b].iter().collect(),
        chars[b..].iter().collect(),
    ]
}

/// A run_command tool call answer.
pub fn oa_command(id: &str, command: &str) -> Reply {
    let args = json!({"command": command}).to_string();
    oa_tool_calls(&[(id, "run_command", &args)], 10, 5)
}

// Anthropic messages.

pub fn an_event(kind: &str, data: Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

pub fn an_start(input: u64) -> String {
    an_event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-test", "stop_reason": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )
}

pub fn an_stop(reason: &str, output: u64) -> Vec<String> {
    vec![
        an_event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                "usage": {"output_tokens": output}}),
        ),
        an_event("message_stop", json!({"type": "message_stop"})),
    ]
}

pub fn an_text(pieces: &[&str], input: u64, output: u64) -> Reply {
    let mut chunks = vec![
        an_start(input),
        an_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for p in pieces {
        chunks.push(an_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    chunks.push(an_event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    chunks.extend(an_stop("end_turn", output));
    Reply::Sse(chunks)
}
