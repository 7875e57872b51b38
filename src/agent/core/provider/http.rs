//! The HTTP part shared by both protocols: a POST with retries and backoff, and chunk reads
//! with an idle timeout.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::agent::core::provider::sse::SseParser;
use crate::agent::core::provider::{ModelResponse, ProviderError, ProviderSettings, StreamEvent};

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Build the HTTP client (no total timeout: a stream may legitimately run for minutes; the
/// idle timeout is applied per read instead).
pub fn client() -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| ProviderError::Client(e.to_string()))
}

/// An HTTP client built on first use: loading the TLS roots is the most expensive part of
/// start-up, and the prompt should not wait for it.
#[derive(Debug, Default)]
pub struct LazyClient(std::sync::OnceLock<reqwest::Client>);

impl LazyClient {
    /// The client, built now if this is the first call.
    pub fn get(&self) -> Result<&reqwest::Client, ProviderError> {
        if let Some(c) = self.0.get() {
            return Ok(c);
        }
        let built = client()?;
        Ok(self.0.get_or_init(|| built))
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
    'stream: while let Some(chunk) = next_chunk(&mut response, settings).await? {
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
