//! LiteLLM-style model strings: `deepseek/deepseek-chat`, `anthropic/claude-sonnet-4-5`,
//! `openai/gpt-4o`, `ollama/llama3.1`, `openrouter/meta-llama/llama-3-70b`.

use crate::agent::core::provider::ProviderError;

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI chat-completions.
    OpenAi,
    /// Anthropic messages.
    Anthropic,
}

/// A resolved model string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Provider name (`openai`, `deepseek`, …).
    pub provider: String,
    /// The model name sent to the provider.
    pub model: String,
    /// The protocol.
    pub protocol: Protocol,
    /// The provider's default base URL.
    pub default_base_url: String,
    /// The environment variable holding the key; `None` for keyless providers (Ollama).
    pub key_var: Option<String>,
}

/// (name, protocol, default base URL, key variable)
const PROVIDERS: &[(&str, Protocol, &str, Option<&str>)] = &[
    (
        "openai",
        Protocol::OpenAi,
        "https://api.openai.com/v1",
        Some("OPENAI_API_KEY"),
    ),
    (
        "anthropic",
        Protocol::Anthropic,
        "https://api.anthropic.com",
        Some("ANTHROPIC_API_KEY"),
    ),
    (
        "deepseek",
        Protocol::OpenAi,
        "https://api.deepseek.com",
        Some("DEEPSEEK_API_KEY"),
    ),
    (
        "xai",
        Protocol::OpenAi,
        "https://api.x.ai/v1",
        Some("XAI_API_KEY"),
    ),
    (
        "gemini",
        Protocol::OpenAi,
        "https://generativelanguage.googleapis.com/v1beta/openai",
        Some("GEMINI_API_KEY"),
    ),
    (
        "ollama",
        Protocol::OpenAi,
        "http://localhost:11434/v1",
        None,
    ),
    (
        "openrouter",
        Protocol::OpenAi,
        "https://openrouter.ai/api/v1",
        Some("OPENROUTER_API_KEY"),
    ),
    (
        "groq",
        Protocol::OpenAi,
        "https://api.groq.com/openai/v1",
        Some("GROQ_API_KEY"),
    ),
    (
        "mistral",
        Protocol::OpenAi,
        "https://api.mistral.ai/v1",
        Some("MISTRAL_API_KEY"),
    ),
];

/// The key variables of all known providers (for `setup-keys` and redaction).
pub fn known_key_vars() -> Vec<&'static str> {
    PROVIDERS.iter().filter_map(|p| p.3).collect()
}

/// Resolve `model`. A bare name is matched by its family (`claude-*`, `gpt-*`, `o1…`,
/// `deepseek-*`, `grok-*`, `gemini-*`), then by `default_provider`. An unknown prefix is an
/// OpenAI-compatible endpoint when `has_base_url`, and an error otherwise.
pub fn resolve(
    model: &str,
    default_provider: Option<&str>,
    has_base_url: bool,
) -> Result<ModelSpec, ProviderError> {
    let spec = |p: &(&str, Protocol, &str, Option<&str>), name: &str| ModelSpec {
        provider: p.0.to_string(),
        model: name.to_string(),
        protocol: p.1,
        default_base_url: p.2.to_string(),
        key_var: p.3.map(str::to_string),
    };
    let find = |name: &str| PROVIDERS.iter().find(|p| p.0 == name);
    if let Some((prefix, name)) = model.split_once('/') {
        if let Some(p) = find(prefix) {
            return Ok(spec(p, name));
        }
        if has_base_url {
            return Ok(ModelSpec {
                provider: prefix.to_string(),
                model: name.to_string(),
                protocol: Protocol::OpenAi,
                default_base_url: String::new(),
                key_var: None,
            });
        }
        return Err(ProviderError::UnknownProvider(model.to_string()));
    }
    let family = if model.starts_with("claude") {
        Some("anthropic")
    } else if model.starts_with("gpt-")
        || model.starts_with("o1")
        || model.starts_with("o3")
        || model.starts_with("o4")
    {
        Some("openai")
    } else if model.starts_with("deepseek") {
        Some("deepseek")
    } else if model.starts_with("grok") {
        Some("xai")
    } else if model.starts_with("gemini") {
        Some("gemini")
    } else {
        default_provider
    };
    match family.and_then(find) {
        Some(p) => Ok(spec(p, model)),
        None if has_base_url => Ok(ModelSpec {
            provider: "openai-compatible".to_string(),
            model: model.to_string(),
            protocol: Protocol::OpenAi,
            default_base_url: String::new(),
            key_var: None,
        }),
        None => Err(ProviderError::UnknownProvider(model.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_strings() {
        let s = resolve("deepseek/deepseek-chat", None, false).unwrap();
        assert_eq!(
            s,
            ModelSpec {
                provider: "deepseek".into(),
                model: "deepseek-chat".into(),
                protocol: Protocol::OpenAi,
                default_base_url: "https://api.deepseek.com".into(),
                key_var: Some("DEEPSEEK_API_KEY".into()),
            }
        );
        let s = resolve("anthropic/claude-sonnet-4-5", None, false).unwrap();
        assert_eq!(
            (s.protocol, s.model.as_str()),
            (Protocol::Anthropic, "claude-sonnet-4-5")
        );
        let s = resolve("openrouter/meta-llama/llama-3-70b", None, false).unwrap();
        assert_eq!(s.model, "meta-llama/llama-3-70b");
        assert_eq!(resolve("ollama/llama3", None, false).unwrap().key_var, None);
        assert_eq!(
            resolve("claude-3-haiku", None, false).unwrap().provider,
            "anthropic"
        );
        assert_eq!(resolve("gpt-4o", None, false).unwrap().provider, "openai");
        assert_eq!(
            resolve("my-model", Some("deepseek"), false)
                .unwrap()
                .provider,
            "deepseek"
        );
        assert!(matches!(
            resolve("acme/x", None, false),
            Err(ProviderError::UnknownProvider(_))
        ));
        let s = resolve("hosted_vllm/qwen", None, true).unwrap();
        assert_eq!((s.protocol, s.model.as_str()), (Protocol::OpenAi, "qwen"));
    }
}
