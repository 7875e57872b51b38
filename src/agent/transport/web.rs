//! Web: one local session served to a browser (`agentshell web`).
//!
//! A small HTTP/1.1 server on tokio, listening on 127.0.0.1 (random port) or a Unix socket,
//! serves one page (no build step, no CDN: [`PAGE`] is compiled in) and a JSON/SSE interface:
//!
//! - `GET /?token=T` — checks the session's token (printed to the terminal), sets it as a
//!   cookie and redirects to `/`; every other request needs the cookie or an
//!   `X-Agentshell-Token` header, else 403. Tokens are compared in constant time.
//! - `GET /events` — Server-Sent Events: first a `reset`, then the session so far, then
//!   everything live. Every tab sees the same session.
//! - `POST /prompt` `{"text": …}` — start a turn (409 while one runs).
//! - `POST /answer` `{"id": N, "answer": …}` — answer an `ask()` question (its buttons).
//! - `POST /stop` — the Ctrl+C equivalent: cancels the running turn and any open question.
//!
//! Requests from other sites are refused first: the `Host` must be loopback, and a `POST`'s
//! `Origin` (when sent) this server's own and its `Sec-Fetch-Site` (when sent) `same-origin`.
//! Requests are bounded (16 KiB of headers, 64 KiB of body, 10 s to send them); one request
//! per connection. Tool calls are published before they run, results bounded.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::agent::core::accounting::RequestStats;
use crate::agent::core::provider::StreamEvent;
use crate::agent::core::{Agent, CoreEvents, TurnStop};
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::{Ask, AskAnswer, BoxFuture, ToolCall, ToolResult};

/// The page (HTML, CSS and script in one file).
pub const PAGE: &str = include_str!("web_page.html");

/// Largest request head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;
/// Bytes of a tool's output published (the model gets more).
pub const WEB_OUTPUT_BYTES: usize = 4000;
/// Events kept for tabs opened later.
const REPLAY_EVENTS: usize = 20_000;
/// Name of the session cookie.
const COOKIE: &str = "agentshell_token";
/// Time a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to take an answer or an event off the connection before it is closed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Open connections one account may hold (its tabs need a few each).
pub const MAX_CONNECTIONS_PER_ACCOUNT: usize = 16;
/// Open connections in all.
pub const MAX_CONNECTIONS: usize = 64;

/// The bounds on open connections: per account (the peer's uid: `SO_PEERCRED` on the Unix
/// socket, the peer socket's owner from the kernel on loopback TCP, [`tcp_peer_uid`]; `None`
/// when it cannot be told) and in all, so one local account's slow or idle connections cannot keep the
/// session's owner out (issue 27). Never waits: a connection over a bound is answered 503.
struct Gate {
    total: Arc<tokio::sync::Semaphore>,
    open: Mutex<BTreeMap<Option<u32>, usize>>,
}

/// An admitted connection's place; dropping it frees the place.
struct Place {
    gate: Arc<Gate>,
    account: Option<u32>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate {
            total: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            open: Mutex::new(BTreeMap::new()),
        })
    }

    fn admit(self: &Arc<Self>, account: Option<u32>) -> Option<Place> {
        let mut open = self.open.lock();
        let n = open.entry(account).or_insert(0);
        if *n >= MAX_CONNECTIONS_PER_ACCOUNT {
            return None;
        }
        let permit = Arc::clone(&self.total).try_acquire_owned().ok()?;
        *n += 1;
        Some(Place {
            gate: Arc::clone(self),
            account,
            _permit: permit,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock();
        if let Some(n) = open.get_mut(&self.account) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.account);
            }
        }
    }
}

/// The answer to a connection over a bound (one non-blocking write, then it is closed).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
Content-Length: 51\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\
{\"error\":\"too many connections; try again shortly\"}";

/// The uid owning the TCP socket at `peer` connected to `local` (both on this machine), asked
/// of the kernel for that one socket (`sock_diag`, netlink: a few microseconds whatever the
/// number of sockets); `None` when it cannot be told.
pub fn tcp_peer_uid(peer: std::net::SocketAddr, local: std::net::SocketAddr) -> Option<u32> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
        setsockopt, socket, sockopt,
    };
    use std::os::fd::AsRawFd;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    fn octets(ip: std::net::IpAddr) -> [u8; 16] {
        let mut out = [0u8; 16];
        match ip {
            std::net::IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            std::net::IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
        }
        out
    }
    let family: u8 = if peer.is_ipv4() { 2 } else { 10 };
    // nlmsghdr (16) + inet_diag_req_v2 (56): the socket whose own end is `peer`.
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&[family, 6, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&peer.port().to_be_bytes());
    req.extend_from_slice(&local.port().to_be_bytes());
    req.extend_from_slice(&octets(peer.ip()));
    req.extend_from_slice(&octets(local.ip()));
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .ok()?;
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(1, 0),
    )
    .ok()?;
    sendto(
        fd.as_raw_fd(),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 512];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).ok()?;
    let msg = buf.get(..n)?;
    let kind = u16::from_ne_bytes([*msg.get(4)?, *msg.get(5)?]);
    if kind != SOCK_DIAG_BY_FAMILY || kind == NLMSG_ERROR {
        return None;
    }
    // inet_diag_msg after the header: family, state, timer, retrans, id (48), expires,
    // rqueue, wqueue, then uid.
    let uid = msg.get(16 + 64..16 + 68)?;
    Some(u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]]))
}

/// Whether `a` equals `b`, taking the same time whatever their contents (lengths may leak).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A fresh random session token (256 bits, hex).
pub fn new_token() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{a}{b}")
}

/// An open question waiting for an answer from a tab.
struct Pending {
    options: Vec<String>,
    reply: oneshot::Sender<AskAnswer>,
}

/// The session shared by every connection: its events, its open questions, its inbox.
struct Hub {
    token: String,
    log: Mutex<VecDeque<Arc<str>>>,
    events: broadcast::Sender<Arc<str>>,
    prompts: mpsc::Sender<String>,
    pending: Mutex<BTreeMap<u64, Pending>>,
    next_question: AtomicU64,
    busy: AtomicBool,
    stop: watch::Sender<u64>,
    /// The answer text of the model call under way, kept for Stop (`true`: its call finished).
    partial: Mutex<(String, bool)>,
}

impl Hub {
    fn publish(&self, event: Value) {
        let text: Arc<str> = Arc::from(event.to_string());
        let mut log = self.log.lock();
        if log.len() >= REPLAY_EVENTS {
            log.pop_front();
        }
        log.push_back(Arc::clone(&text));
        // No receiver (no tab open) is fine: the log keeps it.
        let _ = self.events.send(text);
    }

    /// The session so far and a receiver for what follows, with nothing lost in between.
    fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let log = self.log.lock();
        (log.iter().cloned().collect(), self.events.subscribe())
    }

    /// Stop: drop the running turn (the run loop then closes its open questions).
    fn stop(&self) {
        self.stop.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn answer(&self, id: u64, answer: &str) -> Result<(), (u16, String)> {
        let mut pending = self.pending.lock();
        let Some(p) = pending.get(&id) else {
            return Err((404, format!("no open question {id}")));
        };
        if !p.options.is_empty() && !p.options.iter().any(|o| o == answer) {
            return Err((
                400,
                format!(
                    "answer must be one of: {} (got {answer:?})",
                    p.options.join(", ")
                ),
            ));
        }
        if let Some(p) = pending.remove(&id) {
            let _ = p.reply.send(AskAnswer::Answer(answer.to_string()));
        }
        drop(pending);
        self.publish(json!({"type": "answered", "id": id, "answer": answer}));
        Ok(())
    }

    fn take_partial(&self) -> String {
        let mut p = self.partial.lock();
        p.1 = false;
        std::mem::take(&mut p.0)
    }
}

/// The `ask()` channel of the web session: the question goes to every tab as buttons.
struct WebAsk {
    hub: Arc<Hub>,
}

impl Ask for WebAsk {
    fn ask<'a>(&'a self, question: &'a str, options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        Box::pin(async move {
            let id = self.hub.next_question.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            self.hub.pending.lock().insert(
                id,
                Pending {
                    options: options.iter().map(|o| (*o).to_string()).collect(),
                    reply: tx,
                },
            );
            tracing::info!(id, %question, "web question");
            self.hub.publish(
                json!({"type": "ask", "id": id, "question": question, "options": options}),
            );
            let answer = rx.await.unwrap_or(AskAnswer::Cancelled);
            tracing::info!(id, ?answer, "web answer");
            answer
        })
    }
}

/// Core events published to every tab.
struct WebEvents {
    hub: Arc<Hub>,
}

fn call_arguments(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| Value::String(bound(&call.arguments, WEB_OUTPUT_BYTES)))
}

impl CoreEvents for WebEvents {
    fn stream(&self, event: &StreamEvent) {
        let event = match event {
            StreamEvent::Text(t) => {
                let mut p = self.hub.partial.lock();
                if p.1 {
                    *p = (String::new(), false);
                }
                p.0.push_str(t);
                json!({"type": "text", "text": t})
            }
            StreamEvent::Reasoning(t) => json!({"type": "reasoning", "text": t}),
        };
        self.hub.publish(event);
    }

    fn request_done(&self, stats: &RequestStats) {
        self.hub.partial.lock().1 = true;
        self.hub.publish(json!({
            "type": "request_done",
            "input_tokens": stats.usage.input_tokens,
            "output_tokens": stats.usage.output_tokens,
        }));
    }

    fn tool_call(&self, call: &ToolCall) {
        let mut args = call_arguments(call);
        if args.to_string().len() > WEB_OUTPUT_BYTES {
            args = Value::String(bound(&args.to_string(), WEB_OUTPUT_BYTES));
        }
        self.hub.publish(json!({
            "type": "tool_call", "id": call.id, "name": call.name, "arguments": args,
        }));
    }

    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        *self.hub.partial.lock() = (String::new(), false);
        self.hub.publish(json!({
            "type": "tool_result",
            "id": call.id,
            "name": call.name,
            "status": result.status,
            "exit_code": result.exit_code,
            "stdout": bound(&result.stdout, WEB_OUTPUT_BYTES),
            "stderr": bound(&result.stderr, WEB_OUTPUT_BYTES),
            "truncated": result.truncated,
        }));
    }
}

/// Where the page is served.
pub enum Listener {
    /// 127.0.0.1 on a port chosen by the kernel.
    Tcp(tokio::net::TcpListener),
    /// A Unix socket (mode 0600), removed when the session ends.
    Unix(tokio::net::UnixListener, PathBuf),
}

impl Listener {
    /// Bind 127.0.0.1:0, or `socket` when given (an existing socket file there is replaced;
    /// any other file is an error).
    pub async fn bind(socket: Option<PathBuf>) -> std::io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        match socket {
            None => Ok(Self::Tcp(
                tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            )),
            Some(path) => {
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&path)?,
                    Ok(_) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            format!("{} exists and is not a socket", path.display()),
                        ));
                    }
                    Err(_) => {}
                }
                let listener = tokio::net::UnixListener::bind(&path).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("binding {}: {e}", path.display()))
                })?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                Ok(Self::Unix(listener, path))
            }
        }
    }

    /// Where to point a browser (or `curl --unix-socket`), token included.
    pub fn url(&self, token: &str) -> String {
        match self {
            Self::Tcp(l) => match l.local_addr() {
                Ok(addr) => format!("http://{addr}/?token={token}"),
                Err(_) => format!("/?token={token}"),
            },
            Self::Unix(_, path) => {
                format!(
                    "http://localhost/?token={token} (unix socket {})",
                    path.display()
                )
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Self::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The web transport: build it, pass [`Web::ask_channel`] and [`Web::events`] down, then
/// [`Web::run`].
pub struct Web {
    hub: Arc<Hub>,
    prompts: tokio::sync::Mutex<mpsc::Receiver<String>>,
}

impl Default for Web {
    fn default() -> Self {
        Self::new()
    }
}

impl Web {
    /// A session with a fresh token.
    pub fn new() -> Self {
        Self::with_token(new_token())
    }

    /// A session with a given token.
    pub fn with_token(token: String) -> Self {
        let (events, _) = broadcast::channel(1024);
        let (tx, rx) = mpsc::channel(4);
        let (stop, _) = watch::channel(0);
        Self {
            hub: Arc::new(Hub {
                token,
                log: Mutex::new(VecDeque::new()),
                events,
                prompts: tx,
                pending: Mutex::new(BTreeMap::new()),
                next_question: AtomicU64::new(1),
                busy: AtomicBool::new(false),
                stop,
                partial: Mutex::new((String::new(), false)),
            }),
            prompts: tokio::sync::Mutex::new(rx),
        }
    }

    /// The session's token.
    pub fn token(&self) -> &str {
        &self.hub.token
    }

    /// The `ask()` channel to pass down to L2 and L3.
    pub fn ask_channel(&self) -> Arc<dyn Ask> {
        Arc::new(WebAsk {
            hub: Arc::clone(&self.hub),
        })
    }

    /// The events sink (for sub-agents).
    pub fn events(&self) -> Arc<dyn CoreEvents> {
        Arc::new(WebEvents {
            hub: Arc::clone(&self.hub),
        })
    }

    /// Serve `listener` and run the prompts the tabs send, until `shutdown` resolves (its
    /// value names the reason; the running turn is dropped, killing its commands).
    pub async fn run(
        &self,
        agent: &mut Agent,
        banner: &str,
        listener: Listener,
        shutdown: impl Future<Output = String>,
    ) -> std::io::Result<String> {
        self.hub
            .publish(json!({"type": "info", "text": banner, "model": agent.model()}));
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&self.hub)));
        let events = WebEvents {
            hub: Arc::clone(&self.hub),
        };
        let mut prompts = self.prompts.lock().await;
        let mut shutdown = std::pin::pin!(shutdown);
        let why = loop {
            let prompt = tokio::select! {
                p = prompts.recv() => p,
                why = &mut shutdown => break why,
            };
            let Some(prompt) = prompt else {
                break "the server stopped".to_string();
            };
            tracing::info!(input = %prompt, "web request");
            let mut stop = self.hub.stop.subscribe();
            stop.borrow_and_update();
            let outcome = tokio::select! {
                report = agent.run_turn(&prompt, &events) => Some(report),
                _ = stop.changed() => None,
                why = &mut shutdown => {
                    agent.record_interrupted(&self.hub.take_partial());
                    break why;
                }
            };
            let end = match outcome {
                None => {
                    tracing::info!("request stopped from the page");
                    agent.record_interrupted(&self.hub.take_partial());
                    json!({"type": "turn_end", "outcome": "cancelled",
                           "message": "request stopped; the answer so far stays in the history"})
                }
                Some(report) => {
                    let (outcome, message) = match report.result {
                        Ok(TurnStop::Answered) => ("answered", String::new()),
                        Ok(TurnStop::BudgetDeclined) => {
                            ("budget", "stopped at the iteration budget".to_string())
                        }
                        Ok(TurnStop::Cancelled) => ("cancelled", "request cancelled".to_string()),
                        Ok(TurnStop::Halted) => ("ended", report.text.clone()),
                        Err(e) => ("error", e.to_string()),
                    };
                    json!({"type": "turn_end", "outcome": outcome, "message": message,
                           "model_calls": report.model_calls,
                           "input_tokens": report.totals.usage.input_tokens,
                           "output_tokens": report.totals.usage.output_tokens})
                }
            };
            // Questions of a dropped turn can no longer be answered.
            for (id, p) in std::mem::take(&mut *self.hub.pending.lock()) {
                let _ = p.reply.send(AskAnswer::Cancelled);
                self.hub
                    .publish(json!({"type": "answered", "id": id, "answer": null}));
            }
            self.hub.busy.store(false, Ordering::SeqCst);
            self.hub.publish(end);
        };
        tracing::info!(reason = %why, "web session end");
        self.hub
            .publish(json!({"type": "closed", "reason": why.clone()}));
        // Give the event streams a moment to carry the last events out.
        tokio::time::sleep(Duration::from_millis(100)).await;
        accept.abort();
        Ok(why)
    }
}

type Halves = (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
);

async fn accept_loop(listener: Listener, hub: Arc<Hub>) {
    let gate = Gate::new();
    loop {
        // Admitted (with its place) or refused at once, without waiting on the client.
        let accepted: std::io::Result<Option<(Halves, Place)>> = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, peer)| {
                let account = s.local_addr().ok().and_then(|me| tcp_peer_uid(peer, me));
                let Some(place) = gate.admit(account) else {
                    let _ = s.try_write(BUSY);
                    return None;
                };
                let (r, w) = s.into_split();
                Some(((Box::new(r) as _, Box::new(w) as _), place))
            }),
            Listener::Unix(l, _) => l.accept().await.map(|(s, _)| {
                let account = s.peer_cred().ok().map(|c| c.uid());
                let Some(place) = gate.admit(account) else {
                    let _ = s.try_write(BUSY);
                    return None;
                };
                let (r, w) = s.into_split();
                Some(((Box::new(r) as _, Box::new(w) as _), place))
            }),
        };
        match accepted {
            Ok(None) => tracing::debug!("web connection refused: too many open"),
            Ok(Some(((r, w), place))) => {
                let hub = Arc::clone(&hub);
                tokio::spawn(async move {
                    let w = Box::new(TimedWrite::new(w));
                    if let Err(e) = serve(r, w, hub).await {
                        tracing::debug!("web connection: {e}");
                    }
                    drop(place);
                });
            }
            Err(e) => {
                tracing::warn!("web accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A writer that fails with `TimedOut` when a write makes no progress for
/// [`WRITE_TIMEOUT`] (a client that does not read its answer or its events).
struct TimedWrite {
    inner: Box<dyn AsyncWrite + Send + Unpin>,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    waiting: bool,
}

impl TimedWrite {
    fn new(inner: Box<dyn AsyncWrite + Send + Unpin>) -> Self {
        Self {
            inner,
            timer: Box::pin(tokio::time::sleep(WRITE_TIMEOUT)),
            waiting: false,
        }
    }

    /// `Pending` from the writer: arms the timer on the first, fails once it has run out.
    fn stalled<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<T>> {
        if !self.waiting {
            self.waiting = true;
            let at = tokio::time::Instant::now() + WRITE_TIMEOUT;
            self.timer.as_mut().reset(at);
        }
        match self.timer.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took nothing off the connection in time",
            ))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

impl AsyncWrite for TimedWrite {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match std::pin::Pin::new(&mut self.inner).poll_write(cx, buf) {
            std::task::Poll::Pending => self.stalled(cx),
            done => {
                self.waiting = false;
                done
            }
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match std::pin::Pin::new(&mut self.inner).poll_flush(cx) {
            std::task::Poll::Pending => self.stalled(cx),
            done => {
                self.waiting = false;
                done
            }
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match std::pin::Pin::new(&mut self.inner).poll_shutdown(cx) {
            std::task::Poll::Pending => self.stalled(cx),
            done => {
                self.waiting = false;
                done
            }
        }
    }
}

/// One parsed request.
#[derive(Debug, Default)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query string (after `?`), if any.
    pub query: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn query_param(&self, name: &str) -> Option<&str> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    }

    fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .find_map(|c| {
                let (k, v) = c.trim().split_once('=')?;
                (k == name).then_some(v)
            })
    }
}

/// Why a request was refused before it was understood.
#[derive(Debug)]
pub struct BadRequest(pub u16, pub String);

/// Read one request: the head up to [`MAX_HEAD`] bytes, a body of `Content-Length` up to
/// [`MAX_BODY`] (no chunked bodies).
pub async fn read_request(r: &mut (dyn AsyncRead + Send + Unpin)) -> Result<Request, BadRequest> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD {
            return Err(BadRequest(431, "request head too large".into()));
        }
        let n = r
            .read(&mut chunk)
            .await
            .map_err(|e| BadRequest(400, e.to_string()))?;
        if n == 0 {
            return Err(BadRequest(400, "connection closed mid-request".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEAD {
        return Err(BadRequest(431, "request head too large".into()));
    }
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| BadRequest(400, "request head is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest(400, format!("bad request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(BadRequest(505, format!("unsupported version {version}")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        ..Request::default()
    };
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Err(BadRequest(400, format!("bad header line {l:?}")));
        };
        req.headers
            .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    if req.header("transfer-encoding").is_some() {
        return Err(BadRequest(411, "chunked bodies are not accepted".into()));
    }
    let length = match req.header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| BadRequest(400, format!("bad Content-Length {v:?}")))?,
    };
    if length > MAX_BODY {
        return Err(BadRequest(413, format!("body over {MAX_BODY} bytes")));
    }
    let mut body = buf.split_off(head_end + 4);
    if body.len() > length {
        return Err(BadRequest(400, "more bytes than Content-Length".into()));
    }
    while body.len() < length {
        let n = r
            .read(&mut chunk)
            .await
            .map_err(|e| BadRequest(400, e.to_string()))?;
        if n == 0 {
            return Err(BadRequest(400, "connection closed mid-body".into()));
        }
        body.extend_from_slice(&chunk[..n]);
        if body.len() > length {
            return Err(BadRequest(400, "more bytes than Content-Length".into()));
        }
    }
    req.body = body;
    Ok(req)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        303 => "See Other",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

const SECURITY_HEADERS: &str = "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
    X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n";

async fn respond(
    w: &mut (dyn AsyncWrite + Send + Unpin),
    status: u16,
    content_type: &str,
    extra: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {SECURITY_HEADERS}{extra}Connection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    w.write_all(head.as_bytes()).await?;
    w.write_all(body).await?;
    w.flush().await
}

async fn error(
    w: &mut (dyn AsyncWrite + Send + Unpin),
    status: u16,
    message: &str,
) -> std::io::Result<()> {
    let body = json!({"error": message}).to_string();
    respond(w, status, "application/json", "", body.as_bytes()).await
}

async fn serve(
    mut r: Box<dyn AsyncRead + Send + Unpin>,
    mut w: Box<dyn AsyncWrite + Send + Unpin>,
    hub: Arc<Hub>,
) -> std::io::Result<()> {
    let req = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(r.as_mut())).await {
        Err(_) => return error(w.as_mut(), 408, "request not sent in time").await,
        Ok(Err(BadRequest(status, message))) => {
            error(w.as_mut(), status, &message).await?;
            return linger(r.as_mut(), w.as_mut()).await;
        }
        Ok(Ok(req)) => req,
    };
    if let Err(why) = same_origin(&req) {
        tracing::warn!(path = %req.path, %why, "web request from another site refused");
        return error(w.as_mut(), 403, &why).await;
    }
    let token = hub.token.as_bytes();
    let presented = req
        .header("x-agentshell-token")
        .or_else(|| req.cookie(COOKIE));
    let authorised = presented.is_some_and(|t| constant_time_eq(t.as_bytes(), token));
    // The printed URL: trade the token for a cookie and drop it from the address bar.
    if req.method == "GET" && req.path == "/" && !authorised {
        let from_url = req.query_param("token");
        if from_url.is_some_and(|t| constant_time_eq(t.as_bytes(), token)) {
            let extra = format!(
                "Set-Cookie: {COOKIE}={}; Path=/; HttpOnly; SameSite=Strict\r\nLocation: /\r\n",
                hub.token
            );
            return respond(w.as_mut(), 303, "text/plain", &extra, b"").await;
        }
    }
    if !authorised {
        tracing::warn!(path = %req.path, "web request without a valid token refused");
        return error(
            w.as_mut(),
            403,
            "missing or wrong token: open the URL printed by agentshell web",
        )
        .await;
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") => {
            let csp = "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
                       style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; \
                       frame-ancestors 'none'; form-action 'none'\r\n";
            respond(
                w.as_mut(),
                200,
                "text/html; charset=utf-8",
                csp,
                PAGE.as_bytes(),
            )
            .await
        }
        ("GET", "/events") => events(w.as_mut(), &hub).await,
        ("POST", "/prompt") => {
            let body: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return error(w.as_mut(), 400, &format!("body: {e}")).await,
            };
            let Some(text) = body.get("text").and_then(Value::as_str) else {
                return error(
                    w.as_mut(),
                    400,
                    "body: field \"text\" (a string) is missing",
                )
                .await;
            };
            let text = text.trim();
            if text.is_empty() {
                return error(w.as_mut(), 400, "empty prompt").await;
            }
            if hub.busy.swap(true, Ordering::SeqCst) {
                return error(w.as_mut(), 409, "a request is running; stop it or wait").await;
            }
            hub.publish(json!({"type": "user", "text": text}));
            if hub.prompts.send(text.to_string()).await.is_err() {
                hub.busy.store(false, Ordering::SeqCst);
                return error(w.as_mut(), 409, "the session has ended").await;
            }
            respond(w.as_mut(), 202, "application/json", "", b"{}").await
        }
        ("POST", "/answer") => {
            let body: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return error(w.as_mut(), 400, &format!("body: {e}")).await,
            };
            let (Some(id), Some(answer)) = (
                body.get("id").and_then(Value::as_u64),
                body.get("answer").and_then(Value::as_str),
            ) else {
                return error(
                    w.as_mut(),
                    400,
                    "body: fields \"id\" (a number) and \"answer\" (a string) are required",
                )
                .await;
            };
            match hub.answer(id, answer) {
                Ok(()) => respond(w.as_mut(), 200, "application/json", "", b"{}").await,
                Err((status, message)) => error(w.as_mut(), status, &message).await,
            }
        }
        ("POST", "/stop") => {
            hub.stop();
            respond(w.as_mut(), 200, "application/json", "", b"{}").await
        }
        (_, "/" | "/events" | "/prompt" | "/answer" | "/stop") => {
            error(w.as_mut(), 405, "method not allowed").await
        }
        _ => error(w.as_mut(), 404, "not found").await,
    }
}

/// Requests from other sites are refused before the token is looked at: the `Host` must name
/// this machine's loopback (a DNS-rebound name is not), and a request that changes state
/// (anything but `GET`/`HEAD`) must not come from another origin — its `Origin`, when sent,
/// is this server's own, and its `Sec-Fetch-Site`, when sent, is `same-origin` or `none`
/// (another localhost port is same-site, and a same-site cookie is sent to it).
fn same_origin(req: &Request) -> Result<(), String> {
    let Some(host) = req.header("host") else {
        return Err("the Host header is missing".to_string());
    };
    let host = host.trim().to_ascii_lowercase();
    let name = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    if !matches!(name, "localhost" | "127.0.0.1" | "[::1]") {
        return Err(format!("Host `{host}` is not this machine's loopback"));
    }
    if matches!(req.method.as_str(), "GET" | "HEAD") {
        return Ok(());
    }
    if let Some(site) = req.header("sec-fetch-site")
        && !matches!(site.trim(), "same-origin" | "none")
    {
        return Err(format!(
            "a request from another site (Sec-Fetch-Site: {site})"
        ));
    }
    if let Some(origin) = req.header("origin")
        && origin.trim().to_ascii_lowercase() != format!("http://{host}")
    {
        return Err(format!("a request from another origin ({origin})"));
    }
    Ok(())
}

/// After refusing a request that was not read to its end: stop writing and read (and drop) a
/// bounded amount of what the client still sends, so closing does not reset the connection
/// before the client has read the answer.
async fn linger(
    r: &mut (dyn AsyncRead + Send + Unpin),
    w: &mut (dyn AsyncWrite + Send + Unpin),
) -> std::io::Result<()> {
    w.shutdown().await?;
    let mut chunk = [0u8; 8192];
    let mut left = 4 * MAX_BODY;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while left > 0 {
            match r.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    Ok(())
}

async fn events(w: &mut (dyn AsyncWrite + Send + Unpin), hub: &Hub) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{SECURITY_HEADERS}\
         Connection: close\r\n\r\n"
    );
    w.write_all(head.as_bytes()).await?;
    let (replay, mut rx) = hub.subscribe();
    let mut out = String::from("data: {\"type\":\"reset\"}\n\n");
    for e in replay {
        out.push_str("data: ");
        out.push_str(&e);
        out.push_str("\n\n");
    }
    w.write_all(out.as_bytes()).await?;
    w.flush().await?;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), rx.recv()).await;
        match next {
            Err(_) => w.write_all(b": keep-alive\n\n").await?,
            Ok(Ok(e)) => {
                w.write_all(format!("data: {e}\n\n").as_bytes()).await?;
            }
            // Too slow to keep up: end the stream; the page reconnects and gets a reset.
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => return Ok(()),
            Ok(Err(broadcast::error::RecvError::Closed)) => return Ok(()),
        }
        w.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn connections_are_bounded_per_account_and_in_all() {
        let gate = Gate::new();
        let mine: Vec<Place> = (0..MAX_CONNECTIONS_PER_ACCOUNT)
            .map(|_| gate.admit(Some(1000)).unwrap_or_else(|| panic!("refused")))
            .collect();
        assert!(gate.admit(Some(1000)).is_none());
        // Another account still gets in, up to the total.
        let mut others = Vec::new();
        for uid in 0.. {
            match gate.admit(Some(2000 + uid / 16)) {
                Some(p) => others.push(p),
                None => break,
            }
        }
        assert_eq!(mine.len() + others.len(), MAX_CONNECTIONS);
        drop(mine);
        assert!(gate.admit(Some(1000)).is_some());
        let text = String::from_utf8_lossy(BUSY).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_loopback_peer_is_known_by_its_account() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let _c = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (_s, peer) = l.accept().await.unwrap_or_else(|e| panic!("{e}"));
        if std::path::Path::new("/proc/net/tcp").exists() {
            let me =
                std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
            assert_eq!(tcp_peer_uid(peer, addr), me.ok());
        }
    }

    #[tokio::test]
    async fn request_limits_are_enforced() {
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD + 10));
        let mut r: &[u8] = big.as_bytes();
        let e = read_request(&mut r).await.err().map(|e| e.0);
        assert_eq!(e, Some(431));
        let body = format!(
            "POST /prompt HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        let mut r: &[u8] = body.as_bytes();
        assert_eq!(read_request(&mut r).await.err().map(|e| e.0), Some(413));
        let chunked = "POST /prompt HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut r: &[u8] = chunked.as_bytes();
        assert_eq!(read_request(&mut r).await.err().map(|e| e.0), Some(411));
        let ok = "POST /prompt?a=1 HTTP/1.1\r\nContent-Length: 2\r\nCookie: x=1; agentshell_token=t\r\n\r\n{}";
        let mut r: &[u8] = ok.as_bytes();
        let req = read_request(&mut r)
            .await
            .map_err(|e| e.1)
            .unwrap_or_default();
        assert_eq!(req.path, "/prompt");
        assert_eq!(req.query_param("a"), Some("1"));
        assert_eq!(req.cookie(COOKIE), Some("t"));
        assert_eq!(req.body, b"{}");
    }
}
