//! OpenAI chat-completions with streaming (`POST {base_url}/chat/completions`).

use std::collections::BTreeMap;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::agent::core::message::{Message, Role};
use crate::agent::core::provider::{
    ModelRequest, ModelResponse, Provider, ProviderError, ProviderSettings, StreamEvent, Usage,
    http,
};
use crate::agent::tools::{BoxFuture, ToolCall};

/// An OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    settings: ProviderSettings,
    client: http::LazyClient,
}

impl OpenAiProvider {
    /// A provider for `settings`.
    pub fn new(settings: ProviderSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: http::LazyClient,
            settings,
        })
    }

    fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut messages = vec![json!({"role": "system", "content": request.system})];
        for m in request.messages {
            messages.push(match m.role {
                Role::System => json!({"role": "system", "content": m.content}),
                Role::User => json!({"role": "user", "content": m.content}),
                Role::Tool => json!({
                    "role": "tool",
                    "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                }),
                Role::Assistant => assistant_json(m),
            });
        }
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        let mut body = json!({
            "model": self.settings.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        // OpenAI's own API rejects `max_tokens` for its newer models; the compatible servers
        // (DeepSeek, Ollama, vLLM, …) know only `max_tokens`.
        let key = if self.settings.provider == "openai" {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(self.settings.max_tokens);
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        body
    }
}

fn assistant_json(m: &Message) -> Value {
    let mut v = json!({"role": "assistant", "content": m.content});
    if !m.tool_calls.is_empty() {
        if m.content.is_empty() {
            v["content"] = Value::Null;
        }
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    v
}

/// A tool call being assembled from deltas.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Folds chat-completion chunks into a [`ModelResponse`].
#[derive(Default)]
pub struct ChunkAssembler {
    response: ModelResponse,
    calls: BTreeMap<u64, PartialCall>,
    done: bool,
}

impl http::StreamAssembler for ChunkAssembler {
    /// Apply one `data:` payload. Returns `true` at `[DONE]`.
    fn apply(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<bool, ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::MalformedStream(format!("chunk is not JSON ({e}): {}", preview(data)))
        })?;
        if let Some(err) = chunk.get("error") {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_string);
            return Err(ProviderError::Api(message));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.response.usage = Usage {
                input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
                output_tokens: u
                    .get("completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            };
        }
        let choices = match chunk.get("choices") {
            Some(Value::Array(c)) => c.as_slice(),
            Some(Value::Null) | None => &[],
            Some(other) => {
                return Err(ProviderError::MalformedStream(format!(
                    "`choices` is not an array: {}",
                    preview(&other.to_string())
                )));
            }
        };
        for choice in choices {
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            for key in ["reasoning_content", "reasoning"] {
                if let Some(r) = delta
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                {
                    self.response.reasoning.push_str(r);
                    on_event(StreamEvent::Reasoning(r.to_string()));
                }
            }
            if let Some(t) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                self.response.text.push_str(t);
                on_event(StreamEvent::Text(t.to_string()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (n, call) in calls.iter().enumerate() {
                    let index = call
                        .get("index")
                        .and_then(Value::as_u64)
                        .unwrap_or(n as u64);
                    let partial = self.calls.entry(index).or_default();
                    if let Some(id) = call.get("id").and_then(Value::as_str) {
                        partial.id.push_str(id);
                    }
                    if let Some(f) = call.get("function") {
                        if let Some(name) = f.get("name").and_then(Value::as_str) {
                            partial.name.push_str(name);
                        }
                        if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                            partial.arguments.push_str(args);
                        }
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.response.stop_reason = Some(reason.to_string());
            }
        }
        Ok(false)
    }

    /// The assembled response; an error if the stream ended before it was complete.
    fn finish(mut self) -> Result<ModelResponse, ProviderError> {
        if !self.done && self.response.stop_reason.is_none() {
            return Err(ProviderError::MalformedStream(
                "the stream ended before a finish_reason or [DONE]".to_string(),
            ));
        }
        for (index, call) in std::mem::take(&mut self.calls) {
            if call.name.is_empty() {
                return Err(ProviderError::MalformedStream(format!(
                    "tool call #{index} has no function name"
                )));
            }
            self.response.tool_calls.push(ToolCall {
                id: if call.id.is_empty() {
                    format!("call_{index}")
                } else {
                    call.id
                },
                name: call.name,
                arguments: if call.arguments.is_empty() {
                    "{}".to_string()
                } else {
                    call.arguments
                },
            });
        }
        Ok(self.response)
    }
}

pub(crate) fn preview(text: &str) -> String {
    text.chars().take(200).collect()
}

impl Provider for OpenAiProvider {
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(async move {
            let url = format!(
                "{}/chat/completions",
                self.settings.base_url.trim_end_matches('/')
            );
            let mut headers = HeaderMap::new();
            if let Some(key) = &self.settings.api_key {
                match &self.settings.key_header {
                    Some(name) => {
                        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                            ProviderError::Client(format!("`{name}` is not a header name"))
                        })?;
                        let value = HeaderValue::from_str(key).map_err(|_| {
                            ProviderError::Client("API key is not a valid header".into())
                        })?;
                        headers.insert(name, value);
                    }
                    None => {
                        let value =
                            HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                                ProviderError::Client("API key is not a valid header".into())
                            })?;
                        headers.insert(AUTHORIZATION, value);
                    }
                }
            }
            let body = self.body(&request);
            let client = self.client.get(&url)?;
            http::stream_post(
                client,
                &url,
                headers,
                &body,
                &self.settings,
                ChunkAssembler::default(),
                on_event,
            )
            .await
        })
    }
}
