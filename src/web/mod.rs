//! `agentstore-web`: the HTTP/JSON API and the dashboard, a third front door beside the
//! command line and D-Bus (DESIGN §8; docs/api.md).
//!
//! Every answer comes from the daemons' D-Bus methods (`Orchestrator1.Submit`, `.ListJobs`,
//! `Queue1.CancelJob` and the queue properties) called on behalf of the requesting user; no
//! PRD rule is implemented here a second time. Who the user is comes from the connection:
//! the kernel's peer credentials on the Unix socket (the same uid → user rule as D-Bus), or
//! the per-user token over loopback TCP ([`auth`]). systemd passes the listening sockets
//! ([`activation`]); the server exits after an idle spell and the socket starts it again.

pub mod activation;
pub mod agent_costs;
pub mod api;
pub mod api_tasks;
pub mod args;
pub mod auth;
pub mod charts;
pub mod conn;
pub mod dashboard;
pub mod error;
pub mod events;
pub mod percent;

use crate::bus::Bus;
use crate::bus::orchestrator::Orchestrator1Proxy;
use crate::store::Store;
use activation::Listener;
use auth::{Actor, Peer};
use error::WebError;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The body every answer has.
pub type Body = BoxBody<Bytes, Infallible>;

/// The checked-in OpenAPI document (`docs/openapi.json`), served at `/api/openapi.json`.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

/// How the server runs.
#[derive(Debug, Clone)]
pub struct WebOptions {
    /// The store (to map a uid to its user, as the daemons do).
    pub root: PathBuf,
    /// The bus the daemons are on.
    pub bus: Bus,
    /// Exit after this long without a connection (`None`: never).
    pub idle_exit: Option<Duration>,
    /// The token file for TCP listeners (`None`: TCP refused).
    pub token_file: Option<PathBuf>,
    /// Timeouts and connection bounds.
    pub limits: conn::Limits,
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WebServerError {
    /// No listener, or a bad one.
    #[error("{0}")]
    Listeners(String),
    /// The store cannot be opened.
    #[error("store: {0}")]
    Store(String),
    /// The bus cannot be reached.
    #[error("D-Bus ({bus} bus): {err}")]
    Bus {
        /// Which bus.
        bus: Bus,
        /// Why.
        err: zbus::Error,
    },
    /// The token cannot be read or made.
    #[error("token: {0}")]
    Token(String),
}

/// The server's state, shared by every connection.
pub struct App {
    /// The store.
    pub store: Store,
    /// The bus connection the daemons are called on.
    pub conn: zbus::Connection,
    /// The orchestrator.
    pub orchestrator: Orchestrator1Proxy<'static>,
    /// This process's uid (trusted like root, as the daemons trust their own account).
    pub own_uid: u32,
    token: Option<String>,
    /// Signals, re-sent as server-sent events.
    pub events: events::Hub,
    open: AtomicUsize,
    last: parking_lot::Mutex<Instant>,
    limits: conn::Limits,
    gate: Arc<conn::Gate>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("own_uid", &self.own_uid)
            .finish()
    }
}

impl App {
    /// The actor of a request from `peer` (refusals as the daemons word them).
    pub fn actor(
        &self,
        peer: Peer,
        headers: &hyper::HeaderMap,
        claimed: Option<&str>,
    ) -> Result<Actor, WebError> {
        match peer {
            Peer::Unix(uid) => Actor::for_uid(&self.store, uid, self.own_uid, claimed),
            Peer::Tcp => {
                let Some(want) = &self.token else {
                    return Err(WebError::unauthorized(
                        "TCP requests need a token and this server has none",
                    ));
                };
                let Some(got) = auth::presented_token(headers) else {
                    return Err(WebError::unauthorized(
                        "no token: send Authorization: Bearer <~/.config/agentstore/web-token>",
                    ));
                };
                if !auth::constant_time_eq(got.as_bytes(), want.as_bytes()) {
                    return Err(WebError::unauthorized("wrong token"));
                }
                Actor::for_uid(&self.store, self.own_uid, self.own_uid, claimed)
            }
        }
    }

    /// True when `headers` carry this server's TCP token (a connection showing it counts in
    /// the token's account's share, [`conn::Admission::promote`]).
    fn shows_token(&self, headers: &hyper::HeaderMap) -> bool {
        match (&self.token, auth::presented_token(headers)) {
            (Some(want), Some(got)) => auth::constant_time_eq(got.as_bytes(), want.as_bytes()),
            _ => false,
        }
    }

    fn touch(&self) {
        *self.last.lock() = Instant::now();
    }
}

/// A JSON answer.
pub fn json(status: u16, text: String) -> Response<Body> {
    respond(status, "application/json", text)
}

/// An answer with `content_type`.
pub fn respond(status: u16, content_type: &str, text: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

async fn handle(app: Arc<App>, peer: Peer, mut req: Request<Incoming>) -> Response<Body> {
    app.touch();
    req.extensions_mut().insert(conn::BodyDeadline(
        tokio::time::Instant::now() + app.limits.body_timeout,
    ));
    let path = req.uri().path().to_string();
    let wants_html = !path.starts_with("/api/");
    let answer = if wants_html {
        dashboard::route(&app, peer, req).await
    } else {
        api::route(&app, peer, req).await
    };
    app.touch();
    match answer {
        Ok(r) => r,
        Err(e) if wants_html => e.with_headers(dashboard::error_page(&e)),
        Err(e) => e.with_headers(json(e.status, e.body())),
    }
}

struct OpenGuard(Arc<App>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A place for a connection of `key`, or `None` after answering it 503 with `try_write` (one
/// non-blocking write: the accept loop never waits on a client) — the caller then drops it.
/// A token-less TCP peer (`evicting`) takes the place of the oldest token-less connection
/// when their share is full ([`conn::Gate::admit_evicting`]).
fn admit(
    app: &App,
    key: conn::CallerKey,
    evicting: bool,
    try_write: impl FnOnce(&[u8]) -> std::io::Result<usize>,
) -> Option<conn::Admission> {
    let admitted = if evicting {
        app.gate.admit_evicting(key)
    } else {
        app.gate.admit(key)
    };
    match admitted {
        Ok(a) => Some(a),
        Err(why) => {
            tracing::debug!("connection refused: {why}");
            let _ = try_write(&conn::refusal_response(&why));
            None
        }
    }
}

fn serve_connection<S>(app: Arc<App>, peer: Peer, admission: conn::Admission, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    app.open.fetch_add(1, Ordering::Relaxed);
    app.touch();
    tokio::spawn(async move {
        let guard = OpenGuard(app.clone());
        let limits = app.limits;
        let admission = Arc::new(admission);
        let place = admission.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let app = app.clone();
            // A TCP connection showing the token leaves the token-less share for its
            // account's, where no token-less connection can take its place.
            if matches!(peer, Peer::Tcp) && app.shows_token(req.headers()) {
                place.promote(conn::CallerKey::TcpAccount(app.own_uid));
            }
            async move { Ok::<_, Infallible>(handle(app, peer, req).await) }
        });
        let io = hyper_util::rt::TokioIo::new(
            conn::IdleIo::new(stream, limits.idle_timeout).releasing(admission.clone()),
        );
        let served = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(true)
            .serve_connection(io, svc);
        tokio::select! {
            r = served => if let Err(e) = r {
                tracing::debug!("connection: {e}");
            },
            _ = admission.evicted() => tracing::debug!("connection closed: its place was taken over (token-less TCP share full)"),
        }
        drop(guard);
        drop(admission);
    });
}

/// Serves `listeners` until `shutdown` or the idle limit; tells systemd it is ready and what
/// it is doing.
pub async fn run(
    opts: WebOptions,
    listeners: Vec<(String, Listener)>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), WebServerError> {
    if listeners.is_empty() {
        return Err(WebServerError::Listeners(
            "no listening socket: start agentstore-web through its .socket unit (LISTEN_FDS), or pass --listen PATH".into(),
        ));
    }
    let store = Store::open(&opts.root).map_err(|e| WebServerError::Store(e.to_string()))?;
    let limits = within_descriptors(opts.limits);
    let has_tcp = listeners.iter().any(|(_, l)| matches!(l, Listener::Tcp(_)));
    let token = match (&opts.token_file, has_tcp) {
        (Some(p), true) => Some(auth::load_or_create_token(p).map_err(WebServerError::Token)?),
        _ => None,
    };
    let conn = opts
        .bus
        .builder()
        .build()
        .await
        .map_err(|err| WebServerError::Bus {
            bus: opts.bus.clone(),
            err,
        })?;
    let orchestrator = Orchestrator1Proxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|err| WebServerError::Bus {
            bus: opts.bus.clone(),
            err,
        })?;
    let events = events::Hub::start(&conn)
        .await
        .map_err(|err| WebServerError::Bus {
            bus: opts.bus.clone(),
            err,
        })?;
    let app = Arc::new(App {
        store,
        conn,
        orchestrator,
        own_uid: nix::unistd::geteuid().as_raw(),
        token,
        events,
        open: AtomicUsize::new(0),
        last: parking_lot::Mutex::new(Instant::now()),
        limits,
        gate: conn::Gate::new(&limits),
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut names = Vec::new();
    for (name, l) in listeners {
        let app = app.clone();
        match l {
            Listener::Unix(l) => {
                names.push(format!("{name}: {}", unix_name(&l)));
                l.set_nonblocking(true)
                    .map_err(|e| WebServerError::Listeners(e.to_string()))?;
                let l = tokio::net::UnixListener::from_std(l)
                    .map_err(|e| WebServerError::Listeners(e.to_string()))?;
                tasks.spawn(async move {
                    loop {
                        match l.accept().await {
                            Ok((s, _)) => match s.peer_cred() {
                                Ok(c) => {
                                    let key = conn::CallerKey::Uid(c.uid());
                                    if let Some(a) = admit(&app, key, false, |b| s.try_write(b)) {
                                        serve_connection(app.clone(), Peer::Unix(c.uid()), a, s)
                                    }
                                }
                                Err(e) => tracing::warn!("peer credentials: {e}"),
                            },
                            Err(e) => {
                                tracing::warn!("accept: {e}");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                    }
                });
            }
            Listener::Tcp(l) => {
                let addr = l
                    .local_addr()
                    .map_err(|e| WebServerError::Listeners(e.to_string()))?;
                if !addr.ip().is_loopback() {
                    return Err(WebServerError::Listeners(format!(
                        "TCP listener {name} on {addr} is not on a loopback address; only 127.0.0.1 or [::1] are served (put a reverse proxy in front of the Unix socket for remote use)"
                    )));
                }
                names.push(format!("{name}: http://{addr}"));
                l.set_nonblocking(true)
                    .map_err(|e| WebServerError::Listeners(e.to_string()))?;
                let l = tokio::net::TcpListener::from_std(l)
                    .map_err(|e| WebServerError::Listeners(e.to_string()))?;
                tasks.spawn(async move {
                    loop {
                        match l.accept().await {
                            Ok((s, a)) if a.ip().is_loopback() => {
                                let key = conn::CallerKey::Loopback;
                                if let Some(a) = admit(&app, key, true, |b| s.try_write(b)) {
                                    serve_connection(app.clone(), Peer::Tcp, a, s);
                                    // The new connection's task reads its request before
                                    // the next accept can take its place (a flood of
                                    // token-less connects is otherwise accepted in a burst).
                                    tokio::task::yield_now().await;
                                }
                            }
                            Ok((_, a)) => tracing::warn!("refused non-loopback peer {a}"),
                            Err(e) => {
                                tracing::warn!("accept: {e}");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                    }
                });
            }
        }
    }
    let listening = names.join(", ");
    tracing::info!("serving {listening}");
    crate::systemd::notify_ready(&format!("Serving {listening}"));
    let idle = async {
        let Some(limit) = opts.idle_exit else {
            return std::future::pending::<()>().await;
        };
        loop {
            tokio::time::sleep(Duration::from_millis(250).min(limit)).await;
            let quiet = app.last.lock().elapsed();
            if app.open.load(Ordering::Relaxed) == 0 && quiet >= limit {
                return;
            }
        }
    };
    let why = tokio::select! {
        _ = shutdown => "signal",
        _ = idle => "idle",
    };
    let text = match why {
        "idle" => format!(
            "Idle for {}s: exiting (the socket starts it again)",
            opts.idle_exit.map(|d| d.as_secs()).unwrap_or(0)
        ),
        _ => "Stopping on a signal".to_string(),
    };
    tracing::info!("{text}");
    crate::systemd::notify_stopping(&text);
    tasks.abort_all();
    Ok(())
}

/// `limits` with the total bound cut to what the process's descriptor limit leaves room for
/// (64 kept for the bus, the store and the listeners): the bound, not `EMFILE`, must be what
/// refuses a connection, or accept would fail for everyone.
fn within_descriptors(mut limits: conn::Limits) -> conn::Limits {
    use nix::sys::resource::{Resource, getrlimit};
    if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let room = usize::try_from(soft)
            .unwrap_or(usize::MAX)
            .saturating_sub(64)
            .max(8);
        if limits.total > room {
            tracing::warn!(
                "--max-connections {} is more than the descriptor limit ({soft}) leaves room for: {room}",
                limits.total
            );
            limits.total = room;
        }
    }
    limits.per_caller = limits.per_caller.min(limits.total);
    limits
}

fn unix_name(l: &std::os::unix::net::UnixListener) -> String {
    l.local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
        .unwrap_or_else(|| "unix socket".into())
}

/// What `Allow` says for a path answering GET (HEAD is GET without the body).
pub const GET_ONLY: &str = "GET, HEAD";
/// What `Allow` says for a path answering POST only.
pub const POST_ONLY: &str = "POST";
/// What `Allow` says for a path answering GET and POST.
pub const GET_AND_POST: &str = "GET, HEAD, POST";

/// Refuses `method` on a path that answers `allow` (one of the constants above): 405 naming
/// them in `Allow`. TRACE, OPTIONS, PUT, … are never answered.
pub fn check_method(
    method: &hyper::Method,
    path: &str,
    allow: &'static str,
) -> Result<(), WebError> {
    let ok = match *method {
        hyper::Method::GET | hyper::Method::HEAD => allow.contains("GET"),
        hyper::Method::POST => allow.contains("POST"),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(WebError::method_not_allowed(method, path, allow))
    }
}

/// The largest request body read (a message).
pub fn body_limit() -> usize {
    1 << 20
}

/// Reads a request body of at most [`body_limit`] bytes, by the request's body deadline
/// ([`conn::BodyDeadline`]; 408 after it).
pub async fn read_body(req: Request<Incoming>) -> Result<Bytes, WebError> {
    let deadline = req
        .extensions()
        .get::<conn::BodyDeadline>()
        .map(|d| d.0)
        .unwrap_or_else(|| tokio::time::Instant::now() + conn::Limits::default().body_timeout);
    let limited = http_body_util::Limited::new(req.into_body(), body_limit());
    match tokio::time::timeout_at(deadline, limited.collect()).await {
        Err(_) => Err(WebError::new(
            408,
            "RequestTimeout",
            "request body: not sent in time",
        )),
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(WebError::new(
            413,
            "PayloadTooLarge",
            format!("request body: {e}"),
        )),
        Ok(Err(e)) => Err(WebError::invalid(format!("request body: {e}"))),
    }
}
