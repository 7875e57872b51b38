//! `ask_user`: the model asks the human a question through the injected [`Ask`] channel.
//!
//! [`Ask`]: crate::agent::tools::Ask

use serde_json::{Value, json};

use crate::agent::tools::registry::{Tool, ToolEnv, ToolSchema, str_arg};
use crate::agent::tools::subsystems::policy::{Decision, Policy};
use crate::agent::tools::{AskAnswer, BoxFuture, ToolResult};

/// The `ask_user` tool.
pub struct AskUser;

impl Tool for AskUser {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "ask_user",
            description: "Ask the user a question and wait for the answer. Use only when you \
                cannot proceed without a decision or information from the user.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "options": {"type": "array", "items": {"type": "string"},
                        "description": "Allowed answers; omit for free text."}
                },
                "required": ["question"]
            }),
        }
    }

    fn classify(&self, _args: &Value, _policy: &Policy) -> Decision {
        Decision::allow("asking the user changes nothing")
    }

    fn describe(&self, args: &Value) -> String {
        format!("Ask the user: {}", str_arg(args, "question").unwrap_or(""))
    }

    fn execute<'a>(&'a self, args: Value, env: &'a ToolEnv) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let Some(question) = str_arg(&args, "question") else {
                return ToolResult::error("missing `question`");
            };
            let options: Vec<&str> = args
                .get("options")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match env.ask.ask(question, &options).await {
                AskAnswer::Answer(a) => ToolResult::ok(a),
                AskAnswer::Unavailable(why) | AskAnswer::Denied(why) => {
                    ToolResult::error(format!("no answer: {why}"))
                }
                AskAnswer::Cancelled => ToolResult::cancelled(),
            }
        })
    }
}
