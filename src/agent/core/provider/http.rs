//! The HTTP part shared by both protocols: a POST with retries and backoff, and chunk reads
//! with an idle timeout.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::agent::core::provider::sse::SseParser;
use crate::agent::core::provider::{ModelResponse, ProviderError, ProviderSettings, StreamEvent};

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Build an HTTP client (no reqwest total timeout: the per-request deadline and the idle
/// timeout are applied around it). `tls_roots` loads the system CA bundle, which costs most of
/// a short run's CPU; a client for plain-http endpoints is built without it.
pub fn client(tls_roots: bool) -> Result<reqwest::Client, ProviderError> {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(30));
    let builder = if tls_roots {
        builder
    } else {
        // No root is trusted: an https URL on this client fails instead of loading the roots.
        builder.tls_certs_only(Vec::new()).https_only(false)
    };
    builder
        .build()
        .map_err(|e| ProviderError::Client(e.to_string()))
}

/// The process-wide clients, one per scheme, built on first use: the CA bundle is loaded once
/// per process and only when an https endpoint is used (sub-agents share the clients).
static PLAIN: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
static TLS: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();

/// Hands out the shared client for a URL's scheme.
#[derive(Debug, Default)]
pub struct LazyClient;

impl LazyClient {
    /// The client for `url`, built now if this is the first call for its scheme.
    pub fn get(&self, url: &str) -> Result<&'static reqwest::Client, ProviderError> {
        let https = !url
            .get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("http://"));
        let cell = if https { &TLS } else { &PLAIN };
        if let Some(c) = cell.get() {
            return Ok(c);
        }
        let built = client(https)?;
        Ok(cell.get_or_init(|| built))
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

/// POST `body` as JSON and return the response once its status is a success. 429 and 5xx
/// answers and connection failures are retried with exponential backoff.
pub async fn post_with_retries(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: &Value,
    settings: &ProviderSettings,
) -> Result<reqwest::Response, ProviderError> {
    let mut attempt: u32 = 0;
    loop {
        let send = client.post(url).headers(headers.clone()).json(body).send();
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
                    message: error_chain(&e),
                };
                if !(e.is_connect() || e.is_request()) || attempt >= settings.max_retries {
                    return Err(err);
                }
                tracing::warn!(attempt, error = %err, "request failed, retrying");
                None
            }
            Ok(Ok(response)) => {
                let status = response.status();
                if status.is_success() {
                    return Ok(response);
                }
                let retryable = status.as_u16() == 429 || status.is_server_error();
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                let body = tokio::time::timeout(settings.request_timeout, response.text())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
                if !retryable || attempt >= settings.max_retries {
                    return Err(ProviderError::Http {
                        status: status.as_u16(),
                        url: url.to_string(),
                        body: body.chars().take(1000).collect(),
                    });
                }
                tracing::warn!(attempt, status = status.as_u16(), "provider busy, retrying");
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
    mut response: reqwest::Response,
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
    response: &mut reqwest::Response,
    settings: &ProviderSettings,
) -> Result<Option<Vec<u8>>, ProviderError> {
    match tokio::time::timeout(settings.request_timeout, response.chunk()).await {
        Err(_) => Err(ProviderError::Timeout(
            settings.request_timeout,
            "the next stream chunk",
        )),
        Ok(Err(e)) => Err(ProviderError::Network {
            url: response.url().to_string(),
            message: error_chain(&e),
        }),
        Ok(Ok(chunk)) => Ok(chunk.map(|b| b.to_vec())),
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
