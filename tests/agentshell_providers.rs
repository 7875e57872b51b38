//! The providers against scripted fake OpenAI and Anthropic servers.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agentshell_common;

use std::time::Duration;

use agentshell_common::*;
use agentstore::agent::core::message::Message;
use agentstore::agent::core::provider::anthropic::AnthropicProvider;
use agentstore::agent::core::provider::openai::OpenAiProvider;
use agentstore::agent::core::provider::{
    ModelRequest, ModelResponse, Provider, ProviderError, ProviderSettings, StreamEvent, Usage,
};
use agentstore::agent::tools::{ToolCall, ToolSchema};
use serde_json::json;

fn settings(url: &str) -> ProviderSettings {
    ProviderSettings {
        provider: "openai".into(),
        model: "test-model".into(),
        base_url: url.to_string(),
        api_key: Some("sk-test".into()),
        key_header: None,
        max_tokens: 1000,
        request_timeout: Duration::from_secs(20), // a hang guard; the timeout tests set their own
        request_deadline: Duration::from_secs(60),
        max_response_bytes: 64 * 1024 * 1024,
        max_retries: 2,
        retry_base: Duration::from_millis(1),
    }
}

fn schemas() -> Vec<ToolSchema> {
    vec![ToolSchema {
        name: "run_command",
        description: "run",
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }]
}

async fn call(
    p: &dyn Provider,
    messages: &[Message],
) -> (Result<ModelResponse, ProviderError>, Vec<StreamEvent>) {
    let tools = schemas();
    let mut events = Vec::new();
    let mut on = |e: StreamEvent| events.push(e);
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        p.complete(
            ModelRequest {
                system: "SYS",
                messages,
                tools: &tools,
            },
            &mut on,
        ),
    )
    .await
    .expect("hang guard");
    (r, events)
}

fn openai(server: &FakeServer) -> OpenAiProvider {
    OpenAiProvider::new(settings(&format!("{}/v1", server.url))).unwrap()
}

#[tokio::test]
async fn openai_streams_text_reasoning_and_usage() {
    let server = FakeServer::start(vec![Reply::Sse(vec![
        oa_chunk(
            json!({"role": "assistant", "reasoning_content": "let me "}),
            None,
        ),
        oa_chunk(json!({"reasoning_content": "think"}), None),
        oa_chunk(json!({"content": "Hel"}), None),
        oa_chunk(json!({"content": "lo"}), None),
        oa_chunk(json!({}), Some("stop")),
        oa_usage(42, 7),
        oa_done(),
    ])]);
    let (r, events) = call(&openai(&server), &[Message::user("hi")]).await;
    assert_eq!(
        r.unwrap(),
        ModelResponse {
            text: "Hello".into(),
            reasoning: "let me think".into(),
            tool_calls: vec![],
            usage: Usage {
                input_tokens: 42,
                output_tokens: 7
            },
            stop_reason: Some("stop".into()),
        }
    );
    assert_eq!(
        events,
        vec![
            StreamEvent::Reasoning("let me ".into()),
            StreamEvent::Reasoning("think".into()),
            StreamEvent::Text("Hel".into()),
            StreamEvent::Text("lo".into()),
        ]
    );
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(req.body["stream"], json!(true));
    assert_eq!(req.body["model"], json!("test-model"));
    assert_eq!(req.body["max_completion_tokens"], json!(1000));
    assert_eq!(
        req.body["messages"],
        json!([
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": "hi"}
        ])
    );
    assert_eq!(
        req.body["tools"][0]["function"]["name"],
        json!("run_command")
    );
}

#[tokio::test]
async fn openai_tool_calls_split_across_chunks() {
    let server = FakeServer::start(vec![oa_tool_calls(
        &[
            ("call_a", "run_command", r#"{"command":"ls -la"}"#),
            ("call_b", "run_command", r#"{"command":"git status"}"#),
        ],
        5,
        3,
    )]);
    let history = vec![
        Message::user("look"),
        Message::assistant(
            "",
            vec![ToolCall {
                id: "c0".into(),
                name: "run_command".into(),
                arguments: "{}".into(),
            }],
        ),
        Message::tool("c0", "{\"status\":\"ok\"}"),
    ];
    let (r, events) = call(&openai(&server), &history).await;
    let r = r.unwrap();
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "run_command".into(),
                arguments: r#"{"command":"ls -la"}"#.into()
            },
            ToolCall {
                id: "call_b".into(),
                name: "run_command".into(),
                arguments: r#"{"command":"git status"}"#.into()
            },
        ]
    );
    assert_eq!(r.stop_reason.as_deref(), Some("tool_calls"));
    assert!(events.is_empty());
    // the earlier call and its result went out in OpenAI's shape
    let sent = &server.requests()[0].body["messages"];
    assert_eq!(
        sent[2],
        json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "run_command", "arguments": "{}"}}]})
    );
    assert_eq!(
        sent[3],
        json!({"role": "tool", "tool_call_id": "c0", "content": "{\"status\":\"ok\"}"})
    );
}

#[tokio::test]
async fn anthropic_streams_text_thinking_tool_use_and_usage() {
    let mut chunks = vec![
        an_start(30),
        an_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        an_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        ),
        an_event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        an_event("ping", json!({"type": "ping"})),
        an_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        ),
        an_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "Checking"}}),
        ),
        an_event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        an_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "run_command", "input": {}}}),
        ),
    ];
    for part in split3(r#"{"command": "ls"}"#) {
        chunks.push(an_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": part}}),
        ));
    }
    chunks.push(an_event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 2}),
    ));
    chunks.extend(an_stop("tool_use", 12));
    let server = FakeServer::start(vec![Reply::Sse(chunks)]);
    let p = AnthropicProvider::new(settings(&server.url)).unwrap();
    let history = vec![
        Message::user("first"),
        Message::assistant(
            "",
            vec![ToolCall {
                id: "toolu_0".into(),
                name: "run_command".into(),
                arguments: "{\"command\":\"pwd\"}".into(),
            }],
        ),
        Message::tool("toolu_0", "{\"status\":\"denied\"}"),
        Message::user("second"),
    ];
    let (r, events) = call(&p, &history).await;
    assert_eq!(
        r.unwrap(),
        ModelResponse {
            text: "Checking".into(),
            reasoning: "hmm".into(),
            tool_calls: vec![ToolCall {
                id: "toolu_1".into(),
                name: "run_command".into(),
                arguments: r#"{"command": "ls"}"#.into()
            }],
            usage: Usage {
                input_tokens: 30,
                output_tokens: 12
            },
            stop_reason: Some("tool_use".into()),
        }
    );
    assert_eq!(
        events,
        vec![
            StreamEvent::Reasoning("hmm".into()),
            StreamEvent::Text("Checking".into())
        ]
    );
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some("sk-test"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.body["system"], json!("SYS"));
    assert_eq!(
        req.body["tools"][0]["input_schema"]["type"],
        json!("object")
    );
    // tool results and the next request are merged into one user turn
    assert_eq!(
        req.body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": "run_command", "input": {"command": "pwd"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_0", "content": "{\"status\":\"denied\"}", "is_error": true},
                {"type": "text", "text": "second"}
            ]}
        ])
    );
}

#[tokio::test]
async fn retries_429_then_succeeds() {
    let server = FakeServer::start(vec![
        Reply::Status(429, r#"{"error":{"message":"slow down"}}"#.into()),
        Reply::Status(503, "busy".into()),
        oa_text(&["ok"], 1, 1),
    ]);
    let (r, _) = call(&openai(&server), &[Message::user("hi")]).await;
    assert_eq!(r.unwrap().text, "ok");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn anthropic_retries_overloaded_then_succeeds() {
    let server = FakeServer::start(vec![
        Reply::Status(529, "overloaded".into()),
        an_text(&["fine"], 3, 1),
    ]);
    let p = AnthropicProvider::new(settings(&server.url)).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert_eq!(r.unwrap().text, "fine");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn persistent_500_is_a_typed_error_after_the_retries() {
    let server = FakeServer::start(vec![
        Reply::Status(500, "boom".into()),
        Reply::Status(500, "boom".into()),
        Reply::Status(500, "boom".into()),
    ]);
    let (r, events) = call(&openai(&server), &[Message::user("hi")]).await;
    match r {
        Err(ProviderError::Http {
            status: 500, body, ..
        }) => assert_eq!(body, "boom"),
        other => panic!("expected HTTP 500, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 3, "1 try + 2 retries");
    assert!(events.is_empty(), "no fake text on errors");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = FakeServer::start(vec![Reply::Status(400, r#"{"error":"bad"}"#.into())]);
    let (r, _) = call(&openai(&server), &[Message::user("hi")]).await;
    assert!(
        matches!(r, Err(ProviderError::Http { status: 400, .. })),
        "{r:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn timeout_waiting_for_the_response() {
    let server = FakeServer::start(vec![Reply::Stall]);
    let mut s = settings(&format!("{}/v1", server.url));
    s.request_timeout = Duration::from_millis(300);
    let p = OpenAiProvider::new(s).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(
        matches!(r, Err(ProviderError::Timeout(_, "the response"))),
        "{r:?}"
    );
}

#[tokio::test]
async fn timeout_when_the_stream_goes_idle() {
    let server = FakeServer::start(vec![Reply::SseThenStall(vec![oa_chunk(
        json!({"content": "par"}),
        None,
    )])]);
    let mut s = settings(&format!("{}/v1", server.url));
    s.request_timeout = Duration::from_millis(300);
    let p = OpenAiProvider::new(s).unwrap();
    let (r, events) = call(&p, &[Message::user("hi")]).await;
    assert!(
        matches!(r, Err(ProviderError::Timeout(_, "the next stream chunk"))),
        "{r:?}"
    );
    assert_eq!(events, vec![StreamEvent::Text("par".into())]);
}

#[tokio::test]
async fn malformed_streams_are_typed_errors() {
    let cases = vec![
        Reply::Sse(vec!["data: {not json\n\n".into()]),
        Reply::Sse(vec![oa_chunk(json!({"content": "cut off"}), None)]),
        Reply::Sse(vec!["data: {\"choices\": 7}\n\n".into()]),
        Reply::Sse(vec![
            oa_chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                Some("tool_calls"),
            ),
            oa_done(),
        ]),
    ];
    for reply in cases {
        let server = FakeServer::start(vec![reply.clone()]);
        let (r, _) = call(&openai(&server), &[Message::user("hi")]).await;
        assert!(
            matches!(r, Err(ProviderError::MalformedStream(_))),
            "{reply:?} gave {r:?}"
        );
    }
    let server = FakeServer::start(vec![Reply::Sse(vec![an_start(1)])]);
    let p = AnthropicProvider::new(settings(&server.url)).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(matches!(r, Err(ProviderError::MalformedStream(_))), "{r:?}");
}

#[tokio::test]
async fn errors_inside_the_stream_are_api_errors() {
    let server = FakeServer::start(vec![Reply::Sse(vec![
        an_start(1),
        an_event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ])]);
    let p = AnthropicProvider::new(settings(&server.url)).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(
        matches!(&r, Err(ProviderError::Api(m)) if m == "Overloaded"),
        "{r:?}"
    );

    let server = FakeServer::start(vec![Reply::Sse(vec![
        "data: {\"error\": {\"message\": \"quota exceeded\"}}\n\n".into(),
    ])]);
    let (r, _) = call(&openai(&server), &[Message::user("hi")]).await;
    assert!(
        matches!(&r, Err(ProviderError::Api(m)) if m == "quota exceeded"),
        "{r:?}"
    );
}

#[tokio::test]
async fn connection_refused_is_a_network_error() {
    let server = FakeServer::start(vec![]);
    let url = {
        // a port with nothing listening: bind, read the port, drop
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    drop(server);
    let p = OpenAiProvider::new(settings(&url)).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(matches!(r, Err(ProviderError::Network { .. })), "{r:?}");
}

#[tokio::test]
async fn a_trickling_response_ends_at_the_total_deadline() {
    let server = FakeServer::start(vec![Reply::Trickle]);
    let mut s = settings(&format!("{}/v1", server.url));
    s.request_timeout = Duration::from_secs(20); // never idle: a byte every 100 ms
    s.request_deadline = Duration::from_millis(800);
    let p = OpenAiProvider::new(s).unwrap();
    let started = std::time::Instant::now();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(
        matches!(r, Err(ProviderError::Timeout(d, _)) if d == Duration::from_millis(800)),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_response_over_the_size_cap_is_an_error() {
    let big = "y".repeat(200_000);
    let server = FakeServer::start(vec![Reply::Sse(vec![
        oa_chunk(json!({"content": big}), None),
        oa_done(),
    ])]);
    let mut s = settings(&format!("{}/v1", server.url));
    s.max_response_bytes = 100_000;
    let p = OpenAiProvider::new(s).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    match r {
        Err(ProviderError::MalformedStream(m)) => {
            assert!(m.contains("max_response_bytes"), "{m}")
        }
        other => panic!("expected the size cap, got {other:?}"),
    }
}

#[tokio::test]
async fn an_https_endpoint_still_works_after_a_plain_http_one() {
    // The plain client is built without TLS roots; an https URL must get the other client
    // (here it fails to connect: nothing listens — a network error, not a TLS setup error).
    let server = FakeServer::start(vec![oa_text(&["ok"], 1, 1)]);
    let p = OpenAiProvider::new(settings(&format!("{}/v1", server.url))).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(r.is_ok(), "{r:?}");
    let mut s = settings("https://127.0.0.1:9/v1");
    s.max_retries = 0;
    let p = OpenAiProvider::new(s).unwrap();
    let (r, _) = call(&p, &[Message::user("hi")]).await;
    assert!(matches!(r, Err(ProviderError::Network { .. })), "{r:?}");
}

#[tokio::test]
async fn azure_uses_its_base_setting_and_the_api_key_header() {
    use agentstore::agent::core::{CoreConfig, build_provider};
    let server = FakeServer::start(vec![oa_text(&["hi"], 1, 1)]);
    let config = CoreConfig {
        model: "azure/my-deployment".into(),
        ..CoreConfig::default()
    };
    let url = server.url.clone();
    let p = build_provider(&config, None, move |var| match var {
        "AZURE_API_BASE" => Some(format!("{url}/")),
        "AZURE_API_KEY" => Some("azure-key-123".into()),
        _ => None,
    })
    .unwrap();
    let (r, _) = call(p.as_ref(), &[Message::user("hi")]).await;
    assert_eq!(r.unwrap().text, "hi");
    let req = &server.requests()[0];
    assert_eq!(req.path, "/openai/v1/chat/completions");
    assert_eq!(req.header("api-key"), Some("azure-key-123"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.body["model"], "my-deployment");
}

#[test]
fn missing_provider_settings_are_named() {
    use agentstore::agent::core::{CoreConfig, build_provider};
    for (model, var) in [
        ("bedrock/anthropic.claude-3-haiku", "AWS_REGION"),
        ("azure/gpt", "AZURE_API_BASE"),
        ("vertex_ai/gemini-2.0-flash", "VERTEXAI_LOCATION"),
        ("vertex_ai/gemini-2.0-flash", "VERTEXAI_ACCESS_TOKEN"),
        ("groq/llama", "GROQ_API_KEY"),
    ] {
        let config = CoreConfig {
            model: model.into(),
            ..CoreConfig::default()
        };
        // every variable but the one under test is set
        let err = build_provider(&config, None, |k| (k != var).then(|| "x".to_string()))
            .err()
            .unwrap_or_else(|| panic!("{model} without {var} must fail"));
        assert!(err.to_string().contains(var), "{model}: {err}");
    }
}
