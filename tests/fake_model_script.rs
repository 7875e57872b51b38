//! The fake model's `opening_tool_use` (what the system soak's agent jobs with approvals
//! rely on): every conversation that offers the tool gets the call once, however many run at
//! once, and then the script; conversations that do not offer it never see it.

use crate::fake_model::{FakeModel, OpeningToolUse, Script};
use serde_json::{Value, json};
use std::io::{Read, Write};

/// POSTs `body` to `/v1/messages` and returns the JSON answer.
fn post(server: &FakeModel, body: &Value) -> Value {
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    let text = body.to_string();
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn request(tool: &str, messages: Value) -> Value {
    json!({"model": "m", "max_tokens": 10, "messages": messages,
           "tools": [{"name": tool, "input_schema": {"type": "object"}}]})
}

fn first_block(answer: &Value) -> Value {
    answer["content"][0].clone()
}

#[test]
fn each_conversation_offering_the_tool_gets_the_opening_call_once() {
    let script = Script {
        opening_tool_use: Some(OpeningToolUse {
            name: "run_command".into(),
            input: json!({"command": "touch x"}),
        }),
        fallback_text: "Done.".into(),
        ..Script::default()
    };
    let server = FakeModel::start(script);
    let ask = json!([{"role": "user", "content": "go"}]);
    // Two conversations at their start: both get the call (the script is not consumed).
    for _ in 0..2 {
        let b = first_block(&post(&server, &request("run_command", ask.clone())));
        assert_eq!(b["type"], "tool_use", "{b}");
        assert_eq!(b["name"], "run_command");
        assert_eq!(b["input"]["command"], "touch x");
    }
    // A conversation that already carries the result gets the script (here its fallback).
    let after = json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "run_command", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
    ]);
    let b = first_block(&post(&server, &request("run_command", after)));
    assert_eq!(b["type"], "text", "{b}");
    assert_eq!(b["text"], "Done.");
    // One that does not offer the tool (Claude Code's Bash) never sees it.
    let b = first_block(&post(&server, &request("Bash", ask)));
    assert_eq!(b["type"], "text", "{b}");
}
