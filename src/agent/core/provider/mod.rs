//! Model providers over plain HTTP with SSE streaming.
//!
//! Two wire protocols cover the providers: OpenAI chat-completions ([`openai`]: OpenAI,
//! DeepSeek, xAI, Gemini's OpenAI endpoint, Ollama, OpenRouter, Groq, Mistral, any base URL) and
//! Anthropic messages ([`anthropic`]). [`model_spec`] turns a LiteLLM-style model string into a
//! protocol, a base URL and the name of the API-key variable.

pub mod anthropic;
pub mod http;
pub mod model_spec;
pub mod openai;
pub mod sse;

use std::time::Duration;

use thiserror::Error;

use crate::agent::core::message::Message;
use crate::agent::tools::{BoxFuture, ToolCall, ToolSchema};

/// Everything one model call needs.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The system prompt (kept apart: the protocols place it differently).
    pub system: &'a str,
    /// The fitted conversation, without the system prompt.
    pub messages: &'a [Message],
    /// The tool schemas from L3.
    pub tools: &'a [ToolSchema],
}

/// A piece of streamed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// Answer text.
    Text(String),
    /// Reasoning text (`reasoning_content`, `reasoning`, Anthropic `thinking`).
    Reasoning(String),
}

/// Tokens used by one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (cache reads and writes included).
    pub input_tokens: u64,
    /// Completion tokens (reasoning included).
    pub output_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens += rhs.input_tokens;
        self.output_tokens += rhs.output_tokens;
    }
}

/// A complete model reply, assembled from the stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelResponse {
    /// Answer text.
    pub text: String,
    /// Reasoning text, when the provider sent any.
    pub reasoning: String,
    /// Tool calls, with their arguments reassembled from the chunks.
    pub tool_calls: Vec<ToolCall>,
    /// Token usage as the provider reported it.
    pub usage: Usage,
    /// Why the model stopped (`stop`, `tool_calls`, `end_turn`, `tool_use`, `length`, …).
    pub stop_reason: Option<String>,
}

/// A model call failed. Rendered as an error, never turned into model text.
#[derive(Debug, Error)]
pub enum ProviderError {
    /// The provider answered with an HTTP error (after retries for 429 and 5xx).
    #[error("HTTP {status} from {url}: {body}")]
    Http {
        /// HTTP status code.
        status: u16,
        /// Request URL.
        url: String,
        /// The start of the response body.
        body: String,
    },
    /// No byte arrived within the request timeout.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
    /// Connecting or reading failed.
    #[error("network error talking to {url}: {message}")]
    Network {
        /// Request URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The stream was not what the protocol promises.
    #[error("malformed stream: {0}")]
    MalformedStream(String),
    /// The provider reported an error inside the stream.
    #[error("provider error: {0}")]
    Api(String),
    /// No API key for a provider that needs one.
    #[error("no API key: set {0} (or AGENTSHELL_API_KEY), or run `agentshell setup-keys`")]
    MissingApiKey(String),
    /// The model string names no known provider and no base URL was given.
    #[error(
        "unknown provider in model `{0}`; use provider/model (openai, anthropic, deepseek, xai, gemini, ollama, openrouter, groq, mistral, azure, bedrock, vertex_ai, together_ai, fireworks_ai, cerebras, deepinfra, perplexity) or set base_url"
    )]
    UnknownProvider(String),
    /// The model needs a setting that is not set.
    #[error(
        "model `{model}` needs {var}: set it in the environment or in ~/.agentshell/.env, or set base_url in config"
    )]
    MissingSetting {
        /// The model string.
        model: String,
        /// The variable to set.
        var: String,
    },
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
}

/// How to reach a model: filled from the configuration by the wiring.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// Provider name from the model string (`openai`, `deepseek`, …).
    pub provider: String,
    /// Model name as the provider knows it (after the `provider/` prefix).
    pub model: String,
    /// Base URL: for OpenAI-style providers it ends before `/chat/completions`; for Anthropic
    /// before `/v1/messages`.
    pub base_url: String,
    /// API key, if the provider needs one.
    pub api_key: Option<String>,
    /// The header carrying the key, when not `Authorization: Bearer` (Azure: `api-key`).
    pub key_header: Option<String>,
    /// Maximum output tokens per call.
    pub max_tokens: u32,
    /// Longest wait for the response headers or for the next stream chunk.
    pub request_timeout: Duration,
    /// Longest time one whole request may take, retries and streaming included.
    pub request_deadline: Duration,
    /// Largest response body accepted, in bytes.
    pub max_response_bytes: usize,
    /// Retries after a 429, a 5xx or a connection error.
    pub max_retries: u32,
    /// First backoff delay; doubles every retry (a `Retry-After` header wins, capped at 60 s).
    pub retry_base: Duration,
}

/// A model endpoint.
pub trait Provider: Send + Sync {
    /// Stream one completion, reporting text and reasoning through `on_event` as it arrives.
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>>;
}
