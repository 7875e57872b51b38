//! Headless: one prompt, one turn, one result — printed like `claude -p --output-format json`.
//!
//! Unattended, every ASK is denied with its reason recorded in `permission_denials` (unless the
//! configuration allows the command, in which case the policy never asks); nothing waits.

use parking_lot::Mutex;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::agent::core::accounting::RequestStats;
use crate::agent::core::provider::StreamEvent;
use crate::agent::core::{Agent, CoreEvents, TurnStop};
use crate::agent::tools::{ToolCall, ToolResult, ToolStatus};

/// The JSON result of `agentshell exec --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecResult {
    /// Always `"result"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `success`, `error_max_turns` or `error_during_execution`.
    pub subtype: &'static str,
    /// Whether the run failed.
    pub is_error: bool,
    /// The model's final text, or the error message when `is_error`.
    pub result: String,
    /// Model calls made.
    pub num_turns: u32,
    /// Wall time of the run.
    pub duration_ms: u64,
    /// Time spent in model calls.
    pub duration_api_ms: u64,
    /// Tokens.
    pub usage: ExecUsage,
    /// Cost from the price table (built-in list prices, config `prices` on top); `null` when a
    /// model used has no price (unknown, never a false 0).
    pub total_cost_usd: Option<f64>,
    /// A fresh UUID per run.
    pub session_id: String,
    /// The model string used.
    pub model: String,
    /// Tool calls refused by policy or for want of a human, with the reasons.
    pub permission_denials: Vec<PermissionDenial>,
    /// What the kernel enforced of the command sandbox: `level` (`enforced`, `partial`,
    /// `none`), the Landlock `abi`, and whether read-only subpaths had a mount namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::agent::tools::sandbox::Support>,
}

/// Token counts in the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExecUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// One refused tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionDenial {
    /// The tool.
    pub tool_name: String,
    /// The call id.
    pub tool_use_id: String,
    /// The arguments (as JSON when they parse).
    pub tool_input: Value,
    /// Why it was refused.
    pub reason: String,
}

/// Collects denials; renders nothing (optionally streams text to stderr for humans watching).
#[derive(Default)]
struct HeadlessEvents {
    denials: Mutex<Vec<PermissionDenial>>,
}

impl CoreEvents for HeadlessEvents {
    fn stream(&self, _event: &StreamEvent) {}
    fn request_done(&self, _stats: &RequestStats) {}
    fn tool_call(&self, call: &ToolCall) {
        tracing::info!(tool = %call.name, "headless tool call");
    }
    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        if matches!(result.status, ToolStatus::Denied | ToolStatus::Cancelled) {
            let denial = PermissionDenial {
                tool_name: call.name.clone(),
                tool_use_id: call.id.clone(),
                tool_input: serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone())),
                reason: result.stderr.clone(),
            };
            self.denials.lock().push(denial);
        }
    }
}

/// Run one prompt to completion and build the result. When `shutdown` resolves first (the
/// wiring passes SIGTERM/SIGINT/SIGHUP; the value names it), the turn is dropped — which kills
/// the process groups of running commands — and the result is an error naming the reason.
pub async fn exec(
    agent: &mut Agent,
    prompt: &str,
    shutdown: impl Future<Output = String>,
) -> ExecResult {
    let started = Instant::now();
    let session_id = uuid::Uuid::new_v4().to_string();
    tracing::info!(%session_id, "headless exec");
    let events = HeadlessEvents::default();
    let outcome = tokio::select! {
        report = agent.run_turn(prompt, &events) => Ok(report),
        why = shutdown => Err(why),
    };
    let (subtype, is_error, result, num_turns, totals) = match outcome {
        Ok(report) => {
            let (subtype, is_error, result) = match report.result {
                Ok(TurnStop::Answered) => ("success", false, report.text),
                Ok(TurnStop::BudgetDeclined) => (
                    "error_max_turns",
                    true,
                    format!(
                        "stopped after {} model calls: the iteration budget ran out and nobody \
                         could confirm continuing",
                        report.model_calls
                    ),
                ),
                Ok(TurnStop::Cancelled) => (
                    "error_during_execution",
                    true,
                    "cancelled at a question".to_string(),
                ),
                Ok(TurnStop::Halted) => ("error_session_ended", true, report.text),
                Err(e) => ("error_during_execution", true, e.to_string()),
            };
            (subtype, is_error, result, report.model_calls, report.totals)
        }
        Err(why) => {
            // The turn is gone; the session totals were kept up to date call by call.
            let totals = agent.session_totals();
            (
                "error_during_execution",
                true,
                format!("interrupted by {why}"),
                u32::try_from(totals.requests).unwrap_or(u32::MAX),
                totals,
            )
        }
    };
    if is_error {
        tracing::error!(%subtype, %result, "headless exec failed");
    }
    // The sub-agents' calls, tokens, cost and refusals belong to this run too.
    let mut totals = totals;
    let mut num_turns = num_turns;
    let mut denials = events.denials.into_inner();
    if let Some(sub) = agent.subagent_ledger() {
        totals.merge(&sub.totals);
        num_turns =
            num_turns.saturating_add(u32::try_from(sub.totals.requests).unwrap_or(u32::MAX));
        denials.extend(sub.denials.into_iter().map(|(call, reason)| {
            PermissionDenial {
                tool_name: call.name.clone(),
                tool_use_id: call.id.clone(),
                tool_input: serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone())),
                reason,
            }
        }));
    }
    ExecResult {
        kind: "result",
        subtype,
        is_error,
        result,
        num_turns,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        duration_api_ms: u64::try_from(totals.model_time.as_millis()).unwrap_or(u64::MAX),
        usage: ExecUsage {
            input_tokens: totals.usage.input_tokens,
            output_tokens: totals.usage.output_tokens,
        },
        total_cost_usd: totals.cost(),
        session_id,
        model: agent.model().to_string(),
        permission_denials: denials,
        sandbox: None,
    }
}
