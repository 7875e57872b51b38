//! `delegate`: hand a self-contained task to a fresh sub-agent and get its final answer back.
//! The sub-agent has its own conversation (it sees only the task) and no `delegate` tool.

use serde_json::{Value, json};

use crate::agent::tools::registry::{Tool, ToolEnv, ToolSchema, str_arg};
use crate::agent::tools::subsystems::policy::{Decision, Policy};
use crate::agent::tools::{BoxFuture, ToolResult};

/// The `delegate` tool.
pub struct DelegateTool;

impl Tool for DelegateTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "delegate",
            description: "Give a self-contained task to a sub-agent with a fresh context and \
                the same tools (except delegate). It sees only `task`, so include everything it \
                needs. Returns the sub-agent's final answer. Useful to keep long explorations \
                out of your own context.",
            parameters: json!({
                "type": "object",
                "properties": {"task": {"type": "string", "description": "complete instructions"}},
                "required": ["task"]
            }),
        }
    }

    fn classify(&self, _args: &Value, _policy: &Policy) -> Decision {
        Decision::allow("the sub-agent's own calls are each checked by the policy")
    }

    fn describe(&self, args: &Value) -> String {
        let task: String = str_arg(args, "task")
            .unwrap_or("")
            .chars()
            .take(120)
            .collect();
        format!("Delegate to a sub-agent: {task}")
    }

    fn execute<'a>(&'a self, args: Value, env: &'a ToolEnv) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let Some(task) = str_arg(&args, "task") else {
                return ToolResult::error("missing `task`");
            };
            let Some(delegate) = &env.delegate else {
                return ToolResult::error("sub-agents are not available here");
            };
            match delegate.run(task).await {
                Ok(answer) => ToolResult::ok(answer),
                Err(e) => ToolResult::error(format!("sub-agent failed: {e}")),
            }
        })
    }
}
