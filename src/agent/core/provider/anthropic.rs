//! Anthropic messages with streaming (`POST {base_url}/v1/messages`).

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::agent::core::message::{Message, Role};
use crate::agent::core::provider::openai::preview;
use crate::agent::core::provider::{
    ModelRequest, ModelResponse, Provider, ProviderError, ProviderSettings, StreamEvent, http,
};
use crate::agent::tools::{BoxFuture, ToolCall};

/// The API version header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An Anthropic messages endpoint.
pub struct AnthropicProvider {
    settings: ProviderSettings,
    client: http::LazyClient,
}

impl AnthropicProvider {
    /// A provider for `settings`.
    pub fn new(settings: ProviderSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: http::LazyClient,
            settings,
        })
    }

    fn body(&self, request: &ModelRequest<'_>) -> Value {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        let mut body = json!({
            "model": self.settings.model,
            "max_tokens": self.settings.max_tokens,
            "system": request.system,
            "messages": messages_json(request.messages),
            "stream": true,
        });
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        body
    }
}

/// Convert the conversation: tool results become `tool_result` blocks in a user turn, and
/// consecutive turns of one role are merged (the API wants them alternating).
pub fn messages_json(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System | Role::User => (
                "user",
                text_block(&m.content).into_iter().collect::<Vec<_>>(),
            ),
            Role::Tool => {
                let is_error = serde_json::from_str::<Value>(&m.content)
                    .ok()
                    .and_then(|v| v.get("status").and_then(Value::as_str).map(|s| s != "ok"))
                    .unwrap_or(false);
                (
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                        "content": m.content,
                        "is_error": is_error,
                    })],
                )
            }
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                for c in &m.tool_calls {
                    let input: Value = serde_json::from_str(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((r, existing)) if r == role => existing.extend(blocks),
            _ => out.push((role.to_string(), blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// Folds Anthropic stream events into a [`ModelResponse`].
#[derive(Default)]
pub struct EventAssembler {
    response: ModelResponse,
    /// index → (id, name, partial JSON) for `tool_use` blocks.
    tools: BTreeMap<u64, (String, String, String)>,
    started: bool,
    stopped: bool,
}

impl http::StreamAssembler for EventAssembler {
    /// Apply one event's data. Returns `true` at `message_stop`.
    fn apply(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<bool, ProviderError> {
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::MalformedStream(format!("event is not JSON ({e}): {}", preview(data)))
        })?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(u) = v.pointer("/message/usage") {
                    self.response.usage.input_tokens = input_tokens(u);
                    self.response.usage.output_tokens =
                        u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
                }
            }
            "content_block_start" => {
                let block = v.get("content_block").unwrap_or(&Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let id = block
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string();
                        let name = block
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string();
                        self.tools.insert(index, (id, name, String::new()));
                    }
                    Some("text") => {
                        if let Some(t) = block
                            .get("text")
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                        {
                            self.response.text.push_str(t);
                            on_event(StreamEvent::Text(t.to_string()));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        self.response.text.push_str(t);
                        on_event(StreamEvent::Text(t.to_string()));
                    }
                    Some("thinking_delta") => {
                        let t = delta.get("thinking").and_then(Value::as_str).unwrap_or("");
                        self.response.reasoning.push_str(t);
                        on_event(StreamEvent::Reasoning(t.to_string()));
                    }
                    Some("input_json_delta") => {
                        let part = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        match self.tools.get_mut(&index) {
                            Some(tool) => tool.2.push_str(part),
                            None => {
                                return Err(ProviderError::MalformedStream(format!(
                                    "input_json_delta for block {index}, which is not a tool_use"
                                )));
                            }
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.response.stop_reason = Some(r.to_string());
                }
                if let Some(u) = v.get("usage") {
                    if let Some(o) = u.get("output_tokens").and_then(Value::as_u64) {
                        self.response.usage.output_tokens = o;
                    }
                    let input = input_tokens(u);
                    if input > 0 {
                        self.response.usage.input_tokens = input;
                    }
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let message = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map_or_else(|| v.to_string(), str::to_string);
                return Err(ProviderError::Api(message));
            }
            _ => {}
        }
        Ok(false)
    }

    /// The assembled response; an error if the stream ended before `message_stop`.
    fn finish(mut self) -> Result<ModelResponse, ProviderError> {
        if !self.started || !(self.stopped || self.response.stop_reason.is_some()) {
            return Err(ProviderError::MalformedStream(
                "the stream ended before message_stop".to_string(),
            ));
        }
        for (_, (id, name, json)) in std::mem::take(&mut self.tools) {
            let arguments = if json.trim().is_empty() {
                "{}".to_string()
            } else {
                json
            };
            self.response.tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
        Ok(self.response)
    }
}

fn input_tokens(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| usage.get(*k).and_then(Value::as_u64))
    .sum()
}

impl Provider for AnthropicProvider {
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(async move {
            let url = format!(
                "{}/v1/messages",
                self.settings.base_url.trim_end_matches('/')
            );
            let mut headers = HeaderMap::new();
            headers.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
            if let Some(key) = &self.settings.api_key {
                let value = HeaderValue::from_str(key)
                    .map_err(|_| ProviderError::Client("API key is not a valid header".into()))?;
                headers.insert(HeaderName::from_static("x-api-key"), value);
            }
            let body = self.body(&request);
            let client = self.client.get(&url)?;
            http::stream_post(
                client,
                &url,
                headers,
                &body,
                &self.settings,
                EventAssembler::default(),
                on_event,
            )
            .await
        })
    }
}
