//! The fake model's `opening_tool_use` (what the system soak's agent jobs with approvals
//! rely on): every conversation that offers the tool gets the call once, however many run at
//! once, and then the script; conversations that do not offer it never see it. And its
//! conversations (what the parallel task jobs of issue 30 rely on): each agent follows its
//! own script by turn whatever order the requests come in, and a first answer waits for its
//! gates, or says which never opened.

use crate::fake_model::{Answer, Conversation, FakeModel, OpeningToolUse, Reply, Script};
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

#[test]
fn conversations_answer_by_turn_and_wait_for_their_gates() {
    let server = FakeModel::start(Script {
        gate_timeout_secs: 1,
        ..Script::new()
            .conversation(
                Conversation::new("task L", vec![Reply::bash("echo l"), Reply::text("L done")])
                    .wait_for(&["task R"]),
            )
            .conversation(
                Conversation::new("task R", vec![Reply::bash("echo r"), Reply::text("R done")])
                    .wait_for(&["task L"]),
            )
            .conversation(Conversation::new("alone", vec![]).wait_for(&["never"]))
            .text("from the queue")
    });
    let first = |who: &str| json!([{"role": "user", "content": format!("do task {who}")}]);
    let second = |who: &str| {
        json!([{"role": "user", "content": format!("do task {who}")},
               {"role": "assistant", "content": [{"type": "text", "text": "calling"}]},
               {"role": "user", "content": "result"}])
    };
    // L's first answer waits until R has asked too: both start, in either order.
    let s = std::sync::Arc::new(server);
    let left = {
        let s = s.clone();
        std::thread::spawn(move || post(&s, &request("Bash", first("L"))))
    };
    let r0 = post(&s, &request("Bash", first("R")));
    let l0 = left.join().unwrap();
    assert_eq!(first_block(&l0)["input"]["command"], "echo l", "{l0}");
    assert_eq!(first_block(&r0)["input"]["command"], "echo r", "{r0}");
    // The second turn of each, R's first: each conversation's own.
    assert_eq!(
        first_block(&post(&s, &request("Bash", second("R"))))["text"],
        "R done"
    );
    assert_eq!(
        first_block(&post(&s, &request("Bash", second("L"))))["text"],
        "L done"
    );
    // A request of no conversation takes the script's replies.
    let other = post(
        &s,
        &request("Bash", json!([{"role": "user", "content": "hi"}])),
    );
    assert_eq!(first_block(&other)["text"], "from the queue");
    let turns: Vec<usize> = s
        .conversation_requests("task L")
        .iter()
        .map(|r| match r.answer {
            Answer::Conversation { turn, .. } => turn,
            _ => usize::MAX,
        })
        .collect();
    assert_eq!(turns, [0, 1]);
    // A gate that never opens: a 500 naming it, after the timeout.
    let stuck = post(
        &s,
        &request("Bash", json!([{"role": "user", "content": "alone"}])),
    );
    let msg = stuck["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("never"), "{stuck}");
    // Opened by the test, it lets the next first turn through.
    s.open("never");
    let through = post(
        &s,
        &request("Bash", json!([{"role": "user", "content": "alone again"}])),
    );
    assert_eq!(first_block(&through)["text"], "OK", "{through}");
}
