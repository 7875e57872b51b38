//! The HTTP side of `agentshell web`, served by hyper (HTTP/1.1, one request per connection):
//! admission, the checks every request passes (bounds, same origin, token) and the routes.
//!
//! hyper reads and frames the requests. It answers a request it cannot parse itself, with its
//! bare status and no body: 400 for a malformed request line or header, 431 for a head over
//! [`MAX_HEAD`] bytes or 100 header lines, 414 for an overlong target. It closes a connection
//! whose head has not arrived within the request timeout, without an answer. The rest are
//! answered here with `{"error": …}`: 411 for a chunked body, 413 for a body over
//! [`MAX_BODY`], 408 for a body not sent within the request timeout of the connection, 403 for
//! another site or a missing token, 404/405 for an unknown path or method.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::gate::{BUSY, Gate, tcp_peer_uid};
use super::hub::Hub;
use super::io::TimedIo;
use super::listener::Listener;
use super::{COOKIE, MAX_BODY, MAX_HEAD, PAGE, constant_time_eq};

type Body = BoxBody<Bytes, Infallible>;

/// How long a client has.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// To send its whole request, from when its connection was accepted.
    pub(super) request: Duration,
    /// To take an answer or an event off the connection before it is closed.
    pub(super) write: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request: Duration::from_secs(10),
            write: Duration::from_secs(30),
        }
    }
}

/// Serves `listener` until the task is aborted (connections already open go on).
pub(super) async fn accept_loop(listener: Listener, hub: Arc<Hub>, limits: Limits) {
    let gate = Gate::new();
    loop {
        // Admitted (with its place) or refused at once, without waiting on the client.
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, peer)| {
                let account = s.local_addr().ok().and_then(|me| tcp_peer_uid(peer, me));
                match gate.admit(account) {
                    Some(place) => serve_connection(s, place, &hub, limits),
                    None => drop(s.try_write(BUSY)),
                }
            }),
            Listener::Unix(l, _) => l.accept().await.map(|(s, _)| {
                let account = s.peer_cred().ok().map(|c| c.uid());
                match gate.admit(account) {
                    Some(place) => serve_connection(s, place, &hub, limits),
                    None => drop(s.try_write(BUSY)),
                }
            }),
        };
        if let Err(e) = accepted {
            tracing::warn!("web accept: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn serve_connection<S>(stream: S, place: super::gate::Place, hub: &Arc<Hub>, limits: Limits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadline = Instant::now() + limits.request;
    let hub = Arc::clone(hub);
    tokio::spawn(async move {
        let io =
            hyper_util::rt::TokioIo::new(TimedIo::new(stream, place, limits.write, 4 * MAX_BODY));
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let hub = Arc::clone(&hub);
            async move { Ok::<_, Infallible>(handle(&hub, req, deadline).await) }
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.request)
            .max_header_size(MAX_HEAD)
            .keep_alive(false)
            .title_case_headers(true)
            .serve_connection(io, svc);
        if let Err(e) = served.await {
            tracing::debug!("web connection: {e}");
        }
    });
}

/// A refusal: its status and what it says.
type Refusal = (u16, String);

async fn handle(hub: &Hub, req: Request<Incoming>, deadline: Instant) -> Response<Body> {
    match route(hub, req, deadline).await {
        Ok(r) => r,
        Err((status, message)) => error(status, &message),
    }
}

async fn route(
    hub: &Hub,
    req: Request<Incoming>,
    deadline: Instant,
) -> Result<Response<Body>, Refusal> {
    let headers = req.headers();
    if headers.contains_key(hyper::header::TRANSFER_ENCODING) {
        return Err((411, "chunked bodies are not accepted".into()));
    }
    if let Some(v) = header(headers, "content-length")
        && v.parse::<usize>().map_or(true, |n| n > MAX_BODY)
    {
        return Err((413, format!("body over {MAX_BODY} bytes")));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    if let Err(why) = same_origin(&method, headers) {
        tracing::warn!(path = %path, %why, "web request from another site refused");
        return Err((403, why));
    }
    let token = hub.token.as_bytes();
    let presented = header(headers, "x-agentshell-token").or_else(|| cookie(headers, COOKIE));
    let authorised = presented.is_some_and(|t| constant_time_eq(t.as_bytes(), token));
    // The printed URL: trade the token for a cookie and drop it from the address bar.
    if method == Method::GET && path == "/" && !authorised {
        let from_url = query_param(req.uri().query().unwrap_or(""), "token");
        if from_url.is_some_and(|t| constant_time_eq(t.as_bytes(), token)) {
            let cookie = format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", hub.token);
            return Ok(respond(
                303,
                "text/plain",
                &[("set-cookie", &cookie), ("location", "/")],
                Bytes::new(),
            ));
        }
    }
    if !authorised {
        tracing::warn!(path = %path, "web request without a valid token refused");
        return Err((
            403,
            "missing or wrong token: open the URL printed by agentshell web".into(),
        ));
    }
    match (method.as_str(), path.as_str()) {
        ("GET", "/") => {
            let csp = "default-src 'none'; script-src 'unsafe-inline'; \
                       style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; \
                       frame-ancestors 'none'; form-action 'none'";
            Ok(respond(
                200,
                "text/html; charset=utf-8",
                &[("content-security-policy", csp)],
                Bytes::from_static(PAGE.as_bytes()),
            ))
        }
        ("GET", "/events") => Ok(events(hub)),
        ("POST", "/prompt") => {
            let body = json_body(req, deadline).await?;
            let Some(text) = body.get("text").and_then(Value::as_str) else {
                return Err((400, "body: field \"text\" (a string) is missing".into()));
            };
            let text = text.trim();
            if text.is_empty() {
                return Err((400, "empty prompt".into()));
            }
            if hub.busy.swap(true, Ordering::SeqCst) {
                return Err((409, "a request is running; stop it or wait".into()));
            }
            hub.publish(json!({"type": "user", "text": text}));
            if hub.prompts.send(text.to_string()).await.is_err() {
                hub.busy.store(false, Ordering::SeqCst);
                return Err((409, "the session has ended".into()));
            }
            Ok(ok_json(202))
        }
        ("POST", "/answer") => {
            let body = json_body(req, deadline).await?;
            let (Some(id), Some(answer)) = (
                body.get("id").and_then(Value::as_u64),
                body.get("answer").and_then(Value::as_str),
            ) else {
                return Err((
                    400,
                    "body: fields \"id\" (a number) and \"answer\" (a string) are required".into(),
                ));
            };
            hub.answer(id, answer)?;
            Ok(ok_json(200))
        }
        ("POST", "/stop") => {
            hub.stop();
            Ok(ok_json(200))
        }
        (_, "/" | "/events" | "/prompt" | "/answer" | "/stop") => {
            Err((405, "method not allowed".into()))
        }
        _ => Err((404, "not found".into())),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// The body as JSON: all of it within the request's deadline, at most [`MAX_BODY`] bytes.
async fn json_body(req: Request<Incoming>, deadline: Instant) -> Result<Value, Refusal> {
    let limited = Limited::new(req.into_body(), MAX_BODY);
    let bytes = match tokio::time::timeout_at(deadline, limited.collect()).await {
        Err(_) => return Err((408, "request not sent in time".into())),
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err((413, format!("body over {MAX_BODY} bytes")));
        }
        Ok(Err(_)) => return Err((400, "connection closed mid-body".into())),
    };
    serde_json::from_slice(&bytes).map_err(|e| (400, format!("body: {e}")))
}

/// Requests from other sites are refused before the token is looked at: the `Host` must name
/// this machine's loopback (a DNS-rebound name is not), and a request that changes state
/// (anything but `GET`/`HEAD`) must not come from another origin — its `Origin`, when sent,
/// is this server's own, and its `Sec-Fetch-Site`, when sent, is `same-origin` or `none`
/// (another localhost port is same-site, and a same-site cookie is sent to it).
fn same_origin(method: &Method, headers: &HeaderMap) -> Result<(), String> {
    let Some(host) = header(headers, "host") else {
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
    if matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    if let Some(site) = header(headers, "sec-fetch-site")
        && !matches!(site.trim(), "same-origin" | "none")
    {
        return Err(format!(
            "a request from another site (Sec-Fetch-Site: {site})"
        ));
    }
    if let Some(origin) = header(headers, "origin")
        && origin.trim().to_ascii_lowercase() != format!("http://{host}")
    {
        return Err(format!("a request from another origin ({origin})"));
    }
    Ok(())
}

/// Headers on every answer.
const SECURITY_HEADERS: &[(&str, &str)] = &[
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("connection", "close"),
];

fn with_headers(
    mut r: Response<Body>,
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
) -> Response<Body> {
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    let content = [("content-type", content_type)];
    for (k, v) in content.iter().chain(SECURITY_HEADERS).chain(extra) {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(*k), HeaderValue::from_str(v)) {
            h.append(k, v);
        }
    }
    r
}

fn respond(status: u16, content_type: &str, extra: &[(&str, &str)], body: Bytes) -> Response<Body> {
    with_headers(
        Response::new(Full::new(body).boxed()),
        status,
        content_type,
        extra,
    )
}

fn ok_json(status: u16) -> Response<Body> {
    respond(status, "application/json", &[], Bytes::from_static(b"{}"))
}

fn error(status: u16, message: &str) -> Response<Body> {
    let body = json!({"error": message}).to_string();
    respond(status, "application/json", &[], Bytes::from(body))
}

/// `GET /events`: a `reset`, the session so far, then every event as it comes (a comment every
/// 15 s keeps the stream alive). A reader too slow to keep up is ended; the page reconnects
/// and gets a reset.
fn events(hub: &Hub) -> Response<Body> {
    let (replay, rx) = hub.subscribe();
    let mut first = String::from("data: {\"type\":\"reset\"}\n\n");
    for e in replay {
        first.push_str("data: ");
        first.push_str(&e);
        first.push_str("\n\n");
    }
    let stream = futures_util::stream::unfold((Some(first), rx), |(first, mut rx)| async move {
        if let Some(first) = first {
            return Some((Ok(Frame::data(Bytes::from(first))), (None, rx)));
        }
        let text = match tokio::time::timeout(Duration::from_secs(15), rx.recv()).await {
            Err(_) => ": keep-alive\n\n".to_string(),
            Ok(Ok(e)) => format!("data: {e}\n\n"),
            Ok(Err(
                broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed,
            )) => {
                return None;
            }
        };
        Some((
            Ok::<_, Infallible>(Frame::data(Bytes::from(text))),
            (None, rx),
        ))
    });
    with_headers(
        Response::new(StreamBody::new(stream).boxed()),
        200,
        "text/event-stream",
        &[],
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::mpsc;

    const TOKEN: &str = "0123456789abcdef";

    /// A server on loopback TCP for one session with [`TOKEN`]; its prompts arrive on the
    /// receiver.
    async fn server(limits: Limits) -> (std::net::SocketAddr, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(4);
        let hub = Arc::new(Hub::new(TOKEN.into(), tx));
        let listener = Listener::bind(None).await.unwrap();
        let Listener::Tcp(l) = &listener else {
            panic!("not TCP")
        };
        let addr = l.local_addr().unwrap();
        tokio::spawn(accept_loop(listener, hub, limits));
        (addr, rx)
    }

    /// What came back on `s` until the server closed it: (status, head, body); status 0 when
    /// nothing came.
    async fn answer(mut s: TcpStream) -> (u16, String, String) {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&out).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, head.to_string(), body.to_string())
    }

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        answer(s).await
    }

    fn with_token(method: &str, path: &str, headers: &str, body: &str) -> String {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nX-Agentshell-Token: {TOKEN}\r\n\
             {headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// The page answers, with its headers: the server is serving.
    async fn serving(addr: std::net::SocketAddr) {
        let (status, head, page) = exchange(addr, with_token("GET", "/", "", "").as_bytes()).await;
        assert_eq!(status, 200, "{head}");
        assert_eq!(page, PAGE);
        for h in [
            "Content-Type: text/html; charset=utf-8",
            "X-Frame-Options: DENY",
            "X-Content-Type-Options: nosniff",
            "Cache-Control: no-store",
            "Referrer-Policy: no-referrer",
            "Connection: close",
            "frame-ancestors 'none'",
        ] {
            assert!(head.contains(h), "{h} in {head}");
        }
    }

    #[tokio::test]
    async fn bad_requests_get_a_clear_4xx_and_the_server_goes_on() {
        let (addr, mut prompts) = server(Limits::default()).await;
        serving(addr).await;
        // What hyper cannot parse: its bare status.
        for (request, status) in [
            ("NONSENSE\r\n\r\n".to_string(), 400),
            (
                "GET / HTTP/1.1\r\nHost: localhost\r\nno colon here\r\n\r\n".into(),
                400,
            ),
            (
                format!(
                    "GET / HTTP/1.1\r\nHost: localhost\r\nX-Pad: {}\r\n\r\n",
                    "a".repeat(MAX_HEAD + 10)
                ),
                431,
            ),
            (
                "POST /prompt HTTP/1.1\r\nHost: localhost\r\nContent-Length: x\r\n\r\n".into(),
                400,
            ),
        ] {
            let (got, head, _) = exchange(addr, request.as_bytes()).await;
            assert_eq!(got, status, "{request:.60}: {head}");
            serving(addr).await;
        }
        // Bodies: too large (sent whole: the answer still arrives), chunked, cut short. Each
        // refusal says why, and nothing reaches the session.
        let big = "x".repeat(MAX_BODY + 1);
        for (request, status, says) in [
            (
                with_token("POST", "/prompt", "", &big),
                413,
                "body over 65536 bytes",
            ),
            (
                format!(
                    "POST /prompt HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{big}",
                    big.len()
                ),
                413,
                "body over 65536 bytes",
            ),
            (
                format!(
                    "POST /prompt HTTP/1.1\r\nHost: localhost\r\nX-Agentshell-Token: {TOKEN}\r\n\
                     Transfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
                ),
                411,
                "chunked bodies are not accepted",
            ),
            (
                with_token("POST", "/prompt", "", "{\"text\": 1}"),
                400,
                "field \\\"text\\\"",
            ),
            (
                with_token("PUT", "/prompt", "", ""),
                405,
                "method not allowed",
            ),
            (with_token("GET", "/elsewhere", "", ""), 404, "not found"),
        ] {
            let (got, head, body) = exchange(addr, request.as_bytes()).await;
            assert_eq!(got, status, "{request:.80}: {head}");
            assert!(body.contains(says), "{body}");
            assert!(head.contains("Content-Type: application/json"), "{head}");
            serving(addr).await;
        }
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = with_token("POST", "/prompt", "", "{\"text\": \"hello\"}");
        s.write_all(&head.as_bytes()[..head.len() - 5])
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        let (got, _, body) = answer(s).await;
        assert_eq!((got, body.contains("mid-body")), (400, true), "{body}");
        assert!(prompts.try_recv().is_err(), "no prompt got through");
        // A whole request still does.
        let (got, _, _) = exchange(
            addr,
            with_token("POST", "/prompt", "", "{\"text\": \"hi\"}").as_bytes(),
        )
        .await;
        assert_eq!(got, 202);
        assert_eq!(prompts.recv().await.as_deref(), Some("hi"));
    }

    /// Slowloris: a head or a body sent slower than the request timeout holds its connection
    /// only that long, and others are served meanwhile.
    #[tokio::test]
    async fn a_slow_client_is_cut_off_and_others_are_served_meanwhile() {
        let limits = Limits {
            request: Duration::from_millis(700),
            write: Duration::from_secs(30),
        };
        let (addr, mut prompts) = server(limits).await;
        let started = std::time::Instant::now();
        let mut slow_head = TcpStream::connect(addr).await.unwrap();
        slow_head
            .write_all(b"GET / HTTP/1.1\r\nHost: localho")
            .await
            .unwrap();
        let mut slow_body = TcpStream::connect(addr).await.unwrap();
        let request = with_token("POST", "/prompt", "", "{\"text\": \"slow\"}");
        slow_body
            .write_all(&request.as_bytes()[..request.len() - 8])
            .await
            .unwrap();
        serving(addr).await;
        // The head never came: closed without an answer.
        let (status, head, _) = answer(slow_head).await;
        assert_eq!((status, head.as_str()), (0, ""));
        // The body never came: 408, saying so.
        let (status, _, body) = answer(slow_body).await;
        assert_eq!(status, 408, "{body}");
        assert!(body.contains("request not sent in time"), "{body}");
        assert!(started.elapsed() >= limits.request);
        assert!(prompts.try_recv().is_err(), "no prompt got through");
        serving(addr).await;
    }
}
