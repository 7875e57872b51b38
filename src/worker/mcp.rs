//! `agent-worker mcp-approvals`: the stdio MCP server (JSON-RPC 2.0, one message a line)
//! Claude Code starts for a job (`--mcp-config`), whose one tool `approve` is its
//! `--permission-prompt-tool`. Each call goes to the worker's approval socket
//! ([`super::approval::request`]) and comes back as the text Claude Code expects:
//! `{"behavior":"allow","updatedInput":…}` or `{"behavior":"deny","message":…}`. The server
//! enforces the deadline itself (plus a grace), so a dead worker means a deny, never a hang.

use super::approval::request;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

/// The MCP server's name in the `--mcp-config` the worker gives Claude Code.
pub const SERVER_NAME: &str = "agentstore";
/// The permission tool's name.
pub const TOOL_NAME: &str = "approve";
/// What Claude Code calls it: `--permission-prompt-tool mcp__agentstore__approve`.
pub const PERMISSION_TOOL: &str = "mcp__agentstore__approve";
/// Seconds the server waits beyond the worker's deadline before it denies by itself (the
/// same grace as agentshell's).
pub const GRACE_SECONDS: u64 = crate::agent::transport::job::GRACE_SECONDS;

/// Largest JSON-RPC message read.
const MAX_MESSAGE: usize = 8 << 20;

/// The `--mcp-config` JSON for a worker listening on `socket` with a `deadline`.
pub fn mcp_config(worker: &std::path::Path, socket: &str, deadline: u64) -> String {
    json!({"mcpServers": {SERVER_NAME: {
        "type": "stdio",
        "command": worker.display().to_string(),
        "args": ["mcp-approvals", "--socket", socket, "--deadline", deadline.to_string()],
    }}})
    .to_string()
}

/// Serves MCP on `input`/`output` until `input` ends.
pub fn serve(
    socket: &str,
    deadline: Duration,
    input: impl BufRead,
    output: impl Write + Send + 'static,
) {
    let out = Arc::new(Mutex::new(output));
    let mut calls = Vec::new();
    for line in input.split(b'\n') {
        let Ok(line) = line else { break };
        if line.len() > MAX_MESSAGE || line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let msg: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                send(
                    &out,
                    &json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32700, "message": format!("parse error: {e}")}}),
                );
                continue;
            }
        };
        let Some(id) = msg.get("id").cloned() else {
            continue; // a notification (notifications/initialized, cancelled …)
        };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "tools/call" => {
                let (out, socket) = (out.clone(), socket.to_string());
                let h = std::thread::spawn(move || {
                    let reply = match call(&socket, deadline, &params) {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                        Err(message) => json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": -32602, "message": message}}),
                    };
                    send(&out, &reply);
                });
                calls.push(h);
            }
            other => {
                let reply = match answer(other, &params) {
                    Some(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    None => json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": format!("method not found: {other}")}}),
                };
                send(&out, &reply);
            }
        }
    }
    for h in calls {
        let _ = h.join();
    }
}

fn send(out: &Mutex<impl Write>, v: &Value) {
    let mut o = out.lock();
    let mut bytes = serde_json::to_vec(v).unwrap_or_default();
    bytes.push(b'\n');
    let _ = o.write_all(&bytes);
    let _ = o.flush();
}

/// The answers that need no worker.
fn answer(method: &str, params: &Value) -> Option<Value> {
    match method {
        "initialize" => Some(json!({
            "protocolVersion": params.get("protocolVersion").and_then(Value::as_str)
                .unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "agentstore-approvals", "version": env!("CARGO_PKG_VERSION")},
        })),
        "ping" => Some(json!({})),
        "tools/list" => Some(json!({"tools": [{
            "name": TOOL_NAME,
            "description": "Asks the job's approvers (queue rules, then a person over D-Bus) whether a tool may run.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string"},
                    "input": {"type": "object"},
                    "tool_use_id": {"type": "string"},
                },
                "required": ["tool_name", "input"],
            },
        }]})),
        _ => None,
    }
}

/// One `tools/call` of `approve`.
fn call(socket: &str, deadline: Duration, params: &Value) -> Result<Value, String> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    if name != TOOL_NAME {
        return Err(format!(
            "unknown tool {name:?} (this server has {TOOL_NAME:?})"
        ));
    }
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    let tool = args
        .get("tool_name")
        .and_then(Value::as_str)
        .ok_or("arguments.tool_name: missing or not a string")?;
    let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
    let v = request(
        socket,
        tool,
        &input,
        deadline + Duration::from_secs(GRACE_SECONDS),
    );
    let text = if v.allow {
        json!({"behavior": "allow", "updatedInput": input})
    } else {
        json!({"behavior": "deny", "message": v.message})
    };
    Ok(json!({"content": [{"type": "text", "text": text.to_string()}]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn run(input: &str) -> Vec<Value> {
        let buf = Buf::default();
        serve(
            "agentstore-approvals-none-here",
            Duration::from_millis(10),
            input.as_bytes(),
            buf.clone(),
        );
        let bytes = buf.0.lock().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn speaks_mcp_and_denies_without_a_worker() {
        let out = run(concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n",
            "not json\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"approve","arguments":{"tool_name":"Write","input":{"file_path":"/x"}}}}"#,
            "\n",
        ));
        assert_eq!(out.len(), 5, "{out:?}");
        assert_eq!(out[0]["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(out[1]["result"]["tools"][0]["name"], "approve");
        assert_eq!(out[2]["error"]["code"], -32700);
        assert_eq!(out[3]["error"]["code"], -32601);
        let text: Value =
            serde_json::from_str(out[4]["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text["behavior"], "deny");
        assert!(
            text["message"]
                .as_str()
                .unwrap()
                .contains("approval channel"),
            "{text}"
        );
    }
}
