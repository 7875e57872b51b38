//! Shared test support for the agentshell tests: a scripted fake model server (plain tokio TCP,
//! HTTP/1.1, close-delimited SSE bodies) and SSE builders for both protocols.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

#[path = "../support/harness.rs"]
pub mod harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An HTTP error status with a body.
    Status(u16, String),
    /// 200 with `text/event-stream`; each string is written (and flushed) separately.
    Sse(Vec<String>),
    /// Accept the request and never answer.
    Stall,
    /// Send the headers and these chunks, then go silent without closing.
    SseThenStall(Vec<String>),
    /// Send the headers, then an SSE comment line every 100 ms, forever.
    Trickle,
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A scripted fake model endpoint on 127.0.0.1, served from its own thread and runtime so
/// both sync and async tests (and child processes) can use it.
pub struct FakeServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeServer {
    pub fn start(script: Vec<Reply>) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let (tx, rx) = std::sync::mpsc::channel();
        let recorded = Arc::clone(&requests);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let script = Arc::clone(&script);
                    let recorded = Arc::clone(&recorded);
                    tokio::spawn(async move {
                        let _ = serve(stream, script, recorded).await;
                    });
                }
            });
        });
        let addr = rx.recv().unwrap();
        Self {
            url: format!("http://{addr}"),
            requests,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Wait (hang guard: 30 s) until `n` requests have arrived.
    pub fn wait_for_requests(&self, n: usize) {
        wait_until("fake server requests", || self.requests().len() >= n);
    }
}

/// Pids whose command line is exactly `argv`.
pub fn pids_running(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Poll `cond` until true; panics after a generous hang guard (the shared
/// `tests/support/harness.rs` one).
pub fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    harness::wait_until(Duration::from_secs(30), what, cond)
}

async fn serve(
    mut stream: TcpStream,
    script: Arc<Mutex<VecDeque<Reply>>>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("").to_string();
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[header_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    recorded.lock().unwrap().push(Recorded {
        path,
        headers,
        body,
    });
    let reply = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Status(500, "script exhausted".into()));
    match reply {
        Reply::Status(code, text) => {
            let reason = match code {
                429 => "Too Many Requests",
                500 => "Internal Server Error",
                529 => "Overloaded",
                400 => "Bad Request",
                _ => "Error",
            };
            let resp = format!(
                "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 0\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            stream.write_all(resp.as_bytes()).await?;
        }
        Reply::Sse(chunks) => {
            sse_head(&mut stream).await?;
            for c in chunks {
                stream.write_all(c.as_bytes()).await?;
                stream.flush().await?;
                tokio::task::yield_now().await;
            }
        }
        Reply::Stall => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Reply::Trickle => {
            sse_head(&mut stream).await?;
            loop {
                stream.write_all(b": still here\n").await?;
                stream.flush().await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Reply::SseThenStall(chunks) => {
            sse_head(&mut stream).await?;
            for c in chunks {
                stream.write_all(c.as_bytes()).await?;
                stream.flush().await?;
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
    stream.shutdown().await?;
    Ok(())
}

async fn sse_head(stream: &mut TcpStream) -> std::io::Result<()> {
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
        )
        .await
}

// ---- OpenAI chat-completions SSE ----

pub fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    let v = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {v}\n\n")
}

pub fn oa_usage(input: u64, output: u64) -> String {
    let v = json!({"id": "chatcmpl-1", "choices": [],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}});
    format!("data: {v}\n\n")
}

pub fn oa_done() -> String {
    "data: [DONE]\n\n".to_string()
}

/// A complete text answer, one chunk per piece.
pub fn oa_text(pieces: &[&str], input: u64, output: u64) -> Reply {
    let mut chunks = vec![oa_chunk(json!({"role": "assistant", "content": ""}), None)];
    for p in pieces {
        chunks.push(oa_chunk(json!({"content": p}), None));
    }
    chunks.push(oa_chunk(json!({}), Some("stop")));
    chunks.push(oa_usage(input, output));
    chunks.push(oa_done());
    Reply::Sse(chunks)
}

/// Tool calls (id, name, arguments JSON); the arguments are split into 3 pieces each and the
/// calls' chunks interleave.
pub fn oa_tool_calls(calls: &[(&str, &str, &str)], input: u64, output: u64) -> Reply {
    let mut chunks = vec![oa_chunk(
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (i, (id, name, _)) in calls.iter().enumerate() {
        chunks.push(oa_chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
    }
    let pieces: Vec<Vec<String>> = calls.iter().map(|(_, _, a)| split3(a)).collect();
    for k in 0..3 {
        for (i, p) in pieces.iter().enumerate() {
            chunks.push(oa_chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": p[k]}}]}),
                None,
            ));
        }
    }
    chunks.push(oa_chunk(json!({}), Some("tool_calls")));
    chunks.push(oa_usage(input, output));
    chunks.push(oa_done());
    Reply::Sse(chunks)
}

pub fn split3(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let a = chars.len() / 3;
    let b = 2 * chars.len() / 3;
    vec![
        chars[..a].iter().collect(),
        chars[a..b].iter().collect(),
        chars[b..].iter().collect(),
    ]
}

/// A run_command tool call answer.
pub fn oa_command(id: &str, command: &str) -> Reply {
    let args = json!({"command": command}).to_string();
    oa_tool_calls(&[(id, "run_command", &args)], 10, 5)
}

// ---- Anthropic messages SSE ----

pub fn an_event(kind: &str, data: Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

pub fn an_start(input: u64) -> String {
    an_event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-test", "stop_reason": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )
}

pub fn an_stop(reason: &str, output: u64) -> Vec<String> {
    vec![
        an_event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                "usage": {"output_tokens": output}}),
        ),
        an_event("message_stop", json!({"type": "message_stop"})),
    ]
}

pub fn an_text(pieces: &[&str], input: u64, output: u64) -> Reply {
    let mut chunks = vec![
        an_start(input),
        an_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for p in pieces {
        chunks.push(an_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    chunks.push(an_event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    chunks.extend(an_stop("end_turn", output));
    Reply::Sse(chunks)
}
