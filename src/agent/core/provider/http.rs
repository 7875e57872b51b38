//! The HTTP part shared by both protocols: a POST with retries and backoff, and chunk reads
//! with an idle timeout.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::agent::core::provider::sse::SseParser;
use crate::agent::core::provider::{ModelResponse, ProviderError, ProviderSettings, StreamEvent};

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The client for https endpoints (reqwest with native-tls; no reqwest total timeout: the
/// per-request deadline and the idle timeout are applied around it).
pub fn tls_client() -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| ProviderError::Client(e.to_string()))
}

type PlainClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<hyper::body::Bytes>,
>;

/// The client for plain-http endpoints (a local model, a gateway): hyper without any TLS
/// connector. Building a native-tls connector opens and parses the system CA bundle (twice),
/// which was most of a short `agentshell exec`'s CPU even when no TLS was ever used.
fn plain_client() -> PlainClient {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector)
}

/// The process-wide clients, one per scheme, built on first use: the CA bundle is loaded once
/// per process and only when an https endpoint is used (sub-agents share the clients).
static PLAIN: std::sync::OnceLock<PlainClient> = std::sync::OnceLock::new();
static TLS: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();

/// Hands out the shared client for a URL's scheme.
#[derive(Debug, Default)]
pub struct LazyClient;

/// A client for one scheme.
#[derive(Debug, Clone, Copy)]
pub enum HttpClient {
    /// https: reqwest with native-tls.
    Tls(&'static reqwest::Client),
    /// http: hyper, no TLS.
    Plain(&'static PlainClient),
}

impl LazyClient {
    /// The client for `url`, built now if this is the first call for its scheme.
    pub fn get(&self, url: &str) -> Result<HttpClient, ProviderError> {
        let plain = url
            .get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("http://"));
        if plain {
            return Ok(HttpClient::Plain(PLAIN.get_or_init(plain_client)));
        }
        if let Some(c) = TLS.get() {
            return Ok(HttpClient::Tls(c));
        }
        let built = tls_client()?;
        Ok(HttpClient::Tls(TLS.get_or_init(|| built)))
    }
}

/// A response from either client.
pub enum HttpResponse {
    /// From reqwest.
    Tls(reqwest::Response),
    /// From hyper.
    Plain {
        /// The request URL.
        url: String,
        /// Status and headers.
        head: hyper::http::response::Parts,
        /// The body.
        body: hyper::body::Incoming,
    },
}

impl HttpResponse {
    fn status(&self) -> u16 {
        match self {
            Self::Tls(r) => r.status().as_u16(),
            Self::Plain { head, .. } => head.status.as_u16(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        let headers = match self {
            Self::Tls(r) => r.headers(),
            Self::Plain { head, .. } => &head.headers,
        };
        headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn url(&self) -> String {
        match self {
            Self::Tls(r) => r.url().to_string(),
            Self::Plain { url, .. } => url.clone(),
        }
    }

    /// The next piece of the body, `None` at its end.
    async fn chunk(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self {
            Self::Tls(r) => r
                .chunk()
                .await
                .map(|c| c.map(|b| b.to_vec()))
                .map_err(|e| error_chain(&e)),
            Self::Plain { body, .. } => {
                use http_body_util::BodyExt;
                loop {
                    match body.frame().await {
                        None => return Ok(None),
                        Some(Err(e)) => return Err(error_chain(&e)),
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                return Ok(Some(data.to_vec()));
                            }
                            // trailers: keep reading
                        }
                    }
                }
            }
        }
    }

    /// The body as text (for error answers), at most `limit` bytes kept.
    async fn text(mut self, limit: usize) -> String {
        let mut out = Vec::new();
        while let Ok(Some(c)) = self.chunk().await {
            out.extend_from_slice(&c[..c.len().min(limit.saturating_sub(out.len()))]);
            if out.len() >= limit {
                break;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Sending failed: the message, and whether a retry may help (connection failures).
struct SendError {
    message: String,
    retryable: bool,
}

impl HttpClient {
    async fn send(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<HttpResponse, SendError> {
        match self {
            Self::Tls(client) => client
                .post(url)
                .headers(headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_vec())
                .send()
                .await
                .map(HttpResponse::Tls)
                .map_err(|e| SendError {
                    retryable: e.is_connect() || e.is_request(),
                    message: error_chain(&e),
                }),
            Self::Plain(client) => {
                let mut builder = hyper::Request::post(url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json");
                for (k, v) in headers {
                    builder = builder.header(k, v);
                }
                let request = builder
                    .body(http_body_util::Full::new(
                        hyper::body::Bytes::copy_from_slice(body),
                    ))
                    .map_err(|e| SendError {
                        retryable: false,
                        message: e.to_string(),
                    })?;
                match client.request(request).await {
                    Ok(response) => {
                        let (head, body) = response.into_parts();
                        Ok(HttpResponse::Plain {
                            url: url.to_string(),
                            head,
                            body,
                        })
                    }
                    Err(e) => Err(SendError {
                        retryable: e.is_connect(),
                        message: error_chain(&e),
                    }),
                }
            }
        }
    }
}

/// Runs one whole model request (sending, retries, streaming) within the configured total
/// deadline: a server that trickles bytes forever still ends.
pub async fn within_deadline<T>(
    settings: &ProviderSettings,
    work: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    match tokio::time::timeout(settings.request_deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(ProviderError::Timeout(
            settings.request_deadline,
            "the whole response (request_deadline_secs)",
        )),
    }
}

/// One streamed model request, the tail both protocols share: POST `body` with retries, then
/// read the SSE answer through `assembler`, all within the total deadline.
pub async fn stream_post<A: StreamAssembler>(
    client: HttpClient,
    url: &str,
    headers: HeaderMap,
    body: &Value,
    settings: &ProviderSettings,
    assembler: A,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<ModelResponse, ProviderError> {
    within_deadline(settings, async {
        let response = post_with_retries(client, url, headers, body, settings).await?;
        read_sse(response, settings, assembler, on_event).await
    })
    .await
}

/// POST `body` as JSON and return the response once its status is a success. 429 and 5xx
/// answers and connection failures are retried with exponential backoff.
pub async fn post_with_retries(
    client: HttpClient,
    url: &str,
    headers: HeaderMap,
    body: &Value,
    settings: &ProviderSettings,
) -> Result<HttpResponse, ProviderError> {
    let bytes = serde_json::to_vec(body).map_err(|e| ProviderError::Client(e.to_string()))?;
    let mut attempt: u32 = 0;
    loop {
        let send = client.send(url, &headers, &bytes);
        let outcome = tokio::time::timeout(settings.request_timeout, send).await;
        let retry_after = match outcome {
            Err(_) => {
                return Err(ProviderError::Timeout(
                    settings.request_timeout,
                    "the response",
                ));
            }
            Ok(Err(e)) => {
                let err = ProviderError::Network {
                    url: url.to_string(),
                    message: e.message,
                };
                if !e.retryable || attempt >= settings.max_retries {
                    return Err(err);
                }
                tracing::warn!(attempt, error = %err, "request failed, retrying");
                None
            }
            Ok(Ok(response)) => {
                let status = response.status();
                if (200..300).contains(&status) {
                    return Ok(response);
                }
                let retryable = status == 429 || (500..600).contains(&status);
                let retry_after = response
                    .header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                let body = tokio::time::timeout(settings.request_timeout, response.text(64 * 1024))
                    .await
                    .unwrap_or_default();
                if !retryable || attempt >= settings.max_retries {
                    return Err(ProviderError::Http {
                        status,
                        url: url.to_string(),
                        body: body.chars().take(1000).collect(),
                    });
                }
                tracing::warn!(attempt, status, "provider busy, retrying");
                retry_after
            }
        };
        let backoff = settings
            .retry_base
            .saturating_mul(2u32.saturating_pow(attempt));
        tokio::time::sleep(retry_after.unwrap_or(backoff)).await;
        attempt += 1;
    }
}

/// Turns a provider's SSE event payloads into a [`ModelResponse`]: one per wire format.
pub trait StreamAssembler {
    /// Applies one event's `data`; `true` when the provider signalled the end of the stream.
    fn apply(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<bool, ProviderError>;
    /// The whole response, once the stream has ended.
    fn finish(self) -> Result<ModelResponse, ProviderError>;
}

/// Reads an SSE response to its end (or the provider's end marker) through `assembler`,
/// with the idle timeout of [`next_chunk`] between chunks.
pub async fn read_sse<A: StreamAssembler>(
    mut response: HttpResponse,
    settings: &ProviderSettings,
    mut assembler: A,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<ModelResponse, ProviderError> {
    let mut parser = SseParser::default();
    let mut received = 0usize;
    'stream: while let Some(chunk) = next_chunk(&mut response, settings).await? {
        received = received.saturating_add(chunk.len());
        if received > settings.max_response_bytes {
            return Err(ProviderError::MalformedStream(format!(
                "the response is larger than {} bytes (max_response_bytes)",
                settings.max_response_bytes
            )));
        }
        for event in parser.feed(&chunk)? {
            if assembler.apply(&event.data, on_event)? {
                break 'stream;
            }
        }
    }
    if let Some(event) = parser.finish() {
        assembler.apply(&event.data, on_event)?;
    }
    assembler.finish()
}

/// The next chunk of the body, or `None` at its end; times out when the stream goes idle.
pub async fn next_chunk(
    response: &mut HttpResponse,
    settings: &ProviderSettings,
) -> Result<Option<Vec<u8>>, ProviderError> {
    match tokio::time::timeout(settings.request_timeout, response.chunk()).await {
        Err(_) => Err(ProviderError::Timeout(
            settings.request_timeout,
            "the next stream chunk",
        )),
        Ok(Err(message)) => Err(ProviderError::Network {
            url: response.url(),
            message,
        }),
        Ok(Ok(chunk)) => Ok(chunk),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
