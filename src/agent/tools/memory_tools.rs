//! `memory_search`, `memory_read`, `memory_write`: the model's access to the notes.
//! Reading is allowed; writing goes through the policy like any other state change.

use serde_json::{Value, json};

use crate::agent::tools::registry::{Tool, ToolEnv, ToolSchema, str_arg};
use crate::agent::tools::subsystems::policy::{Decision, Policy};
use crate::agent::tools::{BoxFuture, ToolResult};

/// Hits returned by one search.
const MAX_HITS: usize = 50;

/// `memory_search`: case-insensitive search over the notes.
pub struct MemorySearch;
/// `memory_read`: read one note.
pub struct MemoryRead;
/// `memory_write`: create or replace a note and its index line.
pub struct MemoryWrite;

impl Tool for MemorySearch {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "memory_search",
            description: "Search the project's long-form notes (case-insensitive substring). \
                Returns note:line: text for each hit.",
            parameters: json!({
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"]
            }),
        }
    }
    fn classify(&self, _args: &Value, _policy: &Policy) -> Decision {
        Decision::allow("reads notes only")
    }
    fn describe(&self, args: &Value) -> String {
        format!(
            "Search notes for `{}`",
            str_arg(args, "query").unwrap_or("")
        )
    }
    fn execute<'a>(&'a self, args: Value, env: &'a ToolEnv) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let Some(query) = str_arg(&args, "query") else {
                return ToolResult::error("missing `query`");
            };
            match env.memory.search(query, MAX_HITS) {
                Ok(hits) if hits.is_empty() => ToolResult::ok("no matches"),
                Ok(hits) => ToolResult::ok(
                    hits.iter()
                        .map(|h| format!("{}:{}: {}", h.note, h.line, h.text))
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                Err(e) => ToolResult::error(e.to_string()),
            }
        })
    }
}

impl Tool for MemoryRead {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "memory_read",
            description: "Read one note listed in the memory index.",
            parameters: json!({
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"]
            }),
        }
    }
    fn classify(&self, _args: &Value, _policy: &Policy) -> Decision {
        Decision::allow("reads notes only")
    }
    fn describe(&self, args: &Value) -> String {
        format!("Read note `{}`", str_arg(args, "name").unwrap_or(""))
    }
    fn execute<'a>(&'a self, args: Value, env: &'a ToolEnv) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let Some(name) = str_arg(&args, "name") else {
                return ToolResult::error("missing `name`");
            };
            match env.memory.read(name) {
                Ok(text) => ToolResult::ok(text),
                Err(e) => ToolResult::error(e.to_string()),
            }
        })
    }
}

impl Tool for MemoryWrite {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "memory_write",
            description: "Create or replace a long-form note and its one-line summary in the \
                memory index (the index is always in your system prompt).",
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "letters, digits, '.', '_', '-'"},
                    "summary": {"type": "string", "description": "one line for the index"},
                    "content": {"type": "string"}
                },
                "required": ["name", "summary", "content"]
            }),
        }
    }
    fn classify(&self, args: &Value, policy: &Policy) -> Decision {
        let name = str_arg(args, "name").unwrap_or("");
        policy.classify_tool(
            "memory_write",
            &format!(
                "writes note `{name}` into .agentshell/ (its MEMORY.md index steers the agent: it is in every later system prompt)"
            ),
        )
    }
    fn describe(&self, args: &Value) -> String {
        format!("Write note `{}`", str_arg(args, "name").unwrap_or(""))
    }
    fn execute<'a>(&'a self, args: Value, env: &'a ToolEnv) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let (Some(name), Some(content)) = (str_arg(&args, "name"), str_arg(&args, "content"))
            else {
                return ToolResult::error("missing `name` or `content`");
            };
            let summary = str_arg(&args, "summary").unwrap_or(name);
            match env.memory.write(name, summary, content) {
                Ok(_) => ToolResult::ok(format!("note `{name}` written")),
                Err(e) => ToolResult::error(e.to_string()),
            }
        })
    }
}
