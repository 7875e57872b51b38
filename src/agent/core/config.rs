//! The core part of the configuration, and building the provider it names.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::agent::core::accounting::Price;
use crate::agent::core::provider::anthropic::AnthropicProvider;
use crate::agent::core::provider::model_spec::{self, Protocol};
use crate::agent::core::provider::openai::OpenAiProvider;
use crate::agent::core::provider::{Provider, ProviderError, ProviderSettings};

/// The model used when the configuration names none.
pub const DEFAULT_MODEL: &str = "deepseek/deepseek-chat";

/// Core keys of `config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct CoreConfig {
    /// LiteLLM-style model string.
    #[serde(default = "default_model")]
    pub model: String,
    /// Provider for a bare model name that matches no known family.
    #[serde(default)]
    pub default_provider: Option<String>,
    /// Base URL override (see [`ProviderSettings::base_url`]).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model calls per turn before asking whether to continue.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Token budget the history is fitted into before every call.
    #[serde(default = "default_context_budget")]
    pub context_budget_tokens: usize,
    /// Maximum output tokens per call.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Longest wait for response headers or the next stream chunk, seconds.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_secs: u64,
    /// Longest time one model request may take in total (retries and streaming included), s.
    #[serde(default = "default_request_deadline")]
    pub request_deadline_secs: u64,
    /// Largest model response accepted, bytes.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Retries after 429/5xx/connection errors.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// First backoff delay in milliseconds (doubles each retry).
    #[serde(default = "default_retry_base_ms")]
    pub retry_base_ms: u64,
    /// Price table: model string or bare name → USD per million tokens.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// Replaces the built-in base system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
}

fn default_model() -> String {
    DEFAULT_MODEL.to_string()
}
fn default_max_iterations() -> u32 {
    50
}
fn default_context_budget() -> usize {
    100_000
}
fn default_max_tokens() -> u32 {
    8192
}
fn default_request_timeout() -> u64 {
    120
}
fn default_request_deadline() -> u64 {
    900
}
fn default_max_response_bytes() -> usize {
    64 * 1024 * 1024
}
fn default_max_retries() -> u32 {
    3
}
fn default_retry_base_ms() -> u64 {
    500
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            model: default_model(),
            default_provider: None,
            base_url: None,
            max_iterations: default_max_iterations(),
            context_budget_tokens: default_context_budget(),
            max_tokens: default_max_tokens(),
            request_timeout_secs: default_request_timeout(),
            request_deadline_secs: default_request_deadline(),
            max_response_bytes: default_max_response_bytes(),
            max_retries: default_max_retries(),
            retry_base_ms: default_retry_base_ms(),
            prices: BTreeMap::new(),
            system_prompt: None,
        }
    }
}

/// Build the provider the configuration names. `lookup_key(var)` returns an API key variable's
/// value; `key_override` (AGENTSHELL_API_KEY) wins over it.
pub fn build_provider(
    config: &CoreConfig,
    key_override: Option<String>,
    lookup_key: impl Fn(&str) -> Option<String>,
) -> Result<Box<dyn Provider>, ProviderError> {
    let spec = model_spec::resolve(
        &config.model,
        config.default_provider.as_deref(),
        config.base_url.is_some(),
    )?;
    let api_key = key_override.or_else(|| spec.key_var.as_deref().and_then(&lookup_key));
    if api_key.is_none()
        && config.base_url.is_none()
        && let Some(var) = &spec.key_var
    {
        return Err(ProviderError::MissingApiKey(var.clone()));
    }
    let settings =
        ProviderSettings {
            provider: spec.provider.clone(),
            model: spec.model.clone(),
            base_url: match &config.base_url {
                Some(url) => url.clone(),
                None => model_spec::fill_base_url(&spec.default_base_url, &lookup_key).map_err(
                    |var| ProviderError::MissingSetting {
                        model: config.model.clone(),
                        var,
                    },
                )?,
            },
            api_key,
            key_header: spec.key_header.clone(),
            max_tokens: config.max_tokens,
            request_timeout: Duration::from_secs(config.request_timeout_secs.max(1)),
            request_deadline: Duration::from_secs(config.request_deadline_secs.max(1)),
            max_response_bytes: config.max_response_bytes.max(1024),
            max_retries: config.max_retries,
            retry_base: Duration::from_millis(config.retry_base_ms),
        };
    Ok(match spec.protocol {
        Protocol::OpenAi => Box::new(OpenAiProvider::new(settings)?),
        Protocol::Anthropic => Box::new(AnthropicProvider::new(settings)?),
    })
}
