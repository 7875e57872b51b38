//! LiteLLM-style model strings: `deepseek/deepseek-chat`, `anthropic/claude-sonnet-4-5`,
//! `openai/gpt-4o`, `ollama/llama3.1`, `openrouter/meta-llama/llama-3-70b`, `groq/…`,
//! `mistral/…`, `azure/DEPLOYMENT`, `bedrock/MODEL_ID` (Bedrock's OpenAI-compatible endpoint),
//! `vertex_ai/MODEL` (Vertex AI's OpenAI-compatible endpoint), `together_ai/…`,
//! `fireworks_ai/…`, `cerebras/…`, `deepinfra/…`, `perplexity/…`.
//!
//! A default base URL may name settings in braces (`{AWS_REGION}`); they are read from the
//! environment or the user's `.env`, and a missing one is an error naming it (or set
//! `base_url`).

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
    /// The header carrying the key instead of `Authorization: Bearer` (Azure: `api-key`).
    pub key_header: Option<String>,
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
    (
        "azure",
        Protocol::OpenAi,
        "{AZURE_API_BASE}/openai/v1",
        Some("AZURE_API_KEY"),
    ),
    (
        "bedrock",
        Protocol::OpenAi,
        "https://bedrock-runtime.{AWS_REGION}.amazonaws.com/openai/v1",
        Some("AWS_BEARER_TOKEN_BEDROCK"),
    ),
    (
        "vertex_ai",
        Protocol::OpenAi,
        "https://{VERTEXAI_LOCATION}-aiplatform.googleapis.com/v1/projects/{VERTEXAI_PROJECT}/locations/{VERTEXAI_LOCATION}/endpoints/openapi",
        Some("VERTEXAI_ACCESS_TOKEN"),
    ),
    (
        "together_ai",
        Protocol::OpenAi,
        "https://api.together.xyz/v1",
        Some("TOGETHERAI_API_KEY"),
    ),
    (
        "fireworks_ai",
        Protocol::OpenAi,
        "https://api.fireworks.ai/inference/v1",
        Some("FIREWORKS_AI_API_KEY"),
    ),
    (
        "cerebras",
        Protocol::OpenAi,
        "https://api.cerebras.ai/v1",
        Some("CEREBRAS_API_KEY"),
    ),
    (
        "deepinfra",
        Protocol::OpenAi,
        "https://api.deepinfra.com/v1/openai",
        Some("DEEPINFRA_API_KEY"),
    ),
    (
        "perplexity",
        Protocol::OpenAi,
        "https://api.perplexity.ai",
        Some("PERPLEXITYAI_API_KEY"),
    ),
];

/// Fill the `{VAR}` settings of a default base URL with `lookup(VAR)`; the first missing one
/// is returned as the error.
pub fn fill_base_url(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let var = &rest[start + 1..start + len];
        let value = lookup(var).ok_or_else(|| var.to_string())?;
        out.push_str(&rest[..start]);
        out.push_str(value.trim_end_matches('/'));
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

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
        // Vertex AI's OpenAI-compatible endpoint wants the publisher: google/gemini-…
        model: if p.0 == "vertex_ai" && !name.contains('/') {
            format!("google/{name}")
        } else {
            name.to_string()
        },
        protocol: p.1,
        default_base_url: p.2.to_string(),
        key_var: p.3.map(str::to_string),
        key_header: (p.0 == "azure").then(|| "api-key".to_string()),
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
                key_header: None,
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
            key_header: None,
        }),
        None => Err(ProviderError::UnknownProvider(model.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_settings() {
        let s = resolve("bedrock/anthropic.claude-3-haiku", None, false).unwrap();
        let env = |k: &str| (k == "AWS_REGION").then(|| "eu-west-1".to_string());
        assert_eq!(
            fill_base_url(&s.default_base_url, env).unwrap(),
            "https://bedrock-runtime.eu-west-1.amazonaws.com/openai/v1"
        );
        assert_eq!(
            fill_base_url(&s.default_base_url, |_| None),
            Err("AWS_REGION".to_string())
        );
        let s = resolve("vertex_ai/gemini-2.0-flash", None, false).unwrap();
        assert_eq!(
            fill_base_url(&s.default_base_url, |k| Some(k.to_lowercase())).unwrap(),
            "https://vertexai_location-aiplatform.googleapis.com/v1/projects/vertexai_project/locations/vertexai_location/endpoints/openapi"
        );
        assert_eq!(
            fill_base_url("{AZURE_API_BASE}/openai/v1", |_| Some(
                "https://r.openai.azure.com/".into()
            ))
            .unwrap(),
            "https://r.openai.azure.com/openai/v1"
        );
    }

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
                key_header: None,
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
        let s = resolve("azure/my-gpt4o", None, false).unwrap();
        assert_eq!(
            (
                s.key_var.as_deref(),
                s.key_header.as_deref(),
                s.model.as_str()
            ),
            (Some("AZURE_API_KEY"), Some("api-key"), "my-gpt4o")
        );
        let s = resolve("vertex_ai/gemini-2.0-flash", None, false).unwrap();
        assert_eq!(s.model, "google/gemini-2.0-flash");
        for p in [
            "bedrock",
            "groq",
            "mistral",
            "openrouter",
            "together_ai",
            "cerebras",
        ] {
            assert_eq!(resolve(&format!("{p}/m"), None, false).unwrap().provider, p);
        }
        let s = resolve("hosted_vllm/qwen", None, true).unwrap();
        assert_eq!((s.protocol, s.model.as_str()), (Protocol::OpenAi, "qwen"));
    }
}
