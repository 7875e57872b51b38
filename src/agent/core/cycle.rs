//! The cycle: append the request, fit the history, call the model, run the tool calls, repeat
//! until the model answers with text only. L2 owns the loop; L3 only returns values.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use thiserror::Error;

use crate::agent::core::accounting::{
    LedgerEntries, PriceTable, RequestStats, SubagentLedger, Totals,
};
use crate::agent::core::config::CoreConfig;
use crate::agent::core::message::{Message, Role};
use crate::agent::core::provider::{ModelRequest, Provider, ProviderError, StreamEvent, Usage};
use crate::agent::tools::subsystems::context::{bound, fit};
use crate::agent::tools::{Ask, AskAnswer, ToolCall, ToolResult, ToolStatus, Toolbox};

/// What L2 reports upward while a turn runs; L1 implements it (L2 never prints).
pub trait CoreEvents: Send + Sync {
    /// Streamed text or reasoning.
    fn stream(&self, event: &StreamEvent);
    /// A model call finished.
    fn request_done(&self, stats: &RequestStats);
    /// A tool call is about to run (rendered before it runs).
    fn tool_call(&self, call: &ToolCall);
    /// A tool call finished.
    fn tool_result(&self, call: &ToolCall, result: &ToolResult);
}

/// A turn failed. Rendered as an error, never as model text.
#[derive(Debug, Error)]
pub enum CoreError {
    /// The model call failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// How a turn ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStop {
    /// The model answered with text only.
    Answered,
    /// The iteration budget ran out and continuing was declined (or nobody could confirm).
    BudgetDeclined,
    /// The human cancelled at a question; the history keeps what was completed.
    Cancelled,
    /// The session was ended because a tool call carried a secret (a probe of the
    /// redaction); the report's text is the notice for the user. No later turn runs.
    Halted,
}

/// The head of the message `/compact` leaves in place of the older conversation.
pub const COMPACTED: &str =
    "[Summary of the earlier conversation, written by the model at /compact]";

/// The older conversation as plain text for the summary request (tool calls and results
/// included, each bounded).
fn transcript(messages: &[Message]) -> String {
    let mut text = String::new();
    for m in messages {
        let who = match m.role {
            Role::System => continue,
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool result",
        };
        if !m.content.trim().is_empty() {
            text.push_str(&format!("{who}: {}\n\n", bound(m.content.trim(), 4000)));
        }
        for c in &m.tool_calls {
            text.push_str(&format!(
                "Assistant called {} with {}\n\n",
                c.name,
                bound(&c.arguments, 2000)
            ));
        }
    }
    text
}

/// The mark on an answer the user interrupted (Ctrl+C) before it was complete.
pub const INTERRUPTED: &str = "[answer interrupted by the user]";

/// The outcome of one turn.
#[derive(Debug)]
pub struct TurnReport {
    /// How it ended.
    pub result: Result<TurnStop, CoreError>,
    /// The last text the model produced in this turn.
    pub text: String,
    /// Model calls made in this turn.
    pub model_calls: u32,
    /// Tokens, cost and model time of this turn.
    pub totals: Totals,
}

/// The agent core: the conversation, the system prompt and the loop.
pub struct Agent {
    provider: Box<dyn Provider>,
    tools: Arc<Toolbox>,
    ask: Arc<dyn Ask>,
    config: CoreConfig,
    prices: PriceTable,
    project_rules: String,
    history: Vec<Message>,
    session: Totals,
    subagents: Option<Arc<SubagentLedger>>,
}

impl Agent {
    /// An agent over `provider` and `tools`; `project_rules` is the project's CLAUDE.md text.
    pub fn new(
        provider: Box<dyn Provider>,
        tools: Arc<Toolbox>,
        ask: Arc<dyn Ask>,
        config: CoreConfig,
        project_rules: String,
    ) -> Self {
        let prices = PriceTable::builtin_with(&config.prices);
        Self {
            provider,
            tools,
            ask,
            config,
            prices,
            project_rules,
            history: Vec::new(),
            session: Totals::default(),
            subagents: None,
        }
    }

    /// Attach the ledger the sub-agents of this agent report into.
    pub fn set_subagent_ledger(&mut self, ledger: Arc<SubagentLedger>) {
        self.subagents = Some(ledger);
    }

    /// What this agent's sub-agents used and were refused so far.
    pub fn subagent_ledger(&self) -> Option<LedgerEntries> {
        self.subagents.as_ref().map(|l| l.snapshot())
    }

    /// The conversation so far (without the system prompt).
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// Totals of the whole session.
    pub fn session_totals(&self) -> Totals {
        self.session
    }

    /// The configured model string.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// The system prompt for the next call: base instructions, project rules, and what L3
    /// says must always be present (the memory index, the secret names).
    pub fn system_prompt(&self) -> String {
        let mut prompt = self.config.system_prompt.clone().unwrap_or_else(|| {
            format!(
                "You are agentshell, a coding agent working in the project at {}. Use the \
                 run_command tool to inspect and change the project; commands run in the \
                 project root. Every call is checked by a policy and may need the user's \
                 approval; if a call is denied, do not try to get around the denial. When the \
                 task is done, answer with plain text.",
                self.tools.root().display()
            )
        });
        if !self.project_rules.trim().is_empty() {
            prompt.push_str("\n\n# Project rules (CLAUDE.md)\n\n");
            prompt.push_str(self.project_rules.trim());
        }
        let context = self.tools.prompt_context();
        if !context.trim().is_empty() {
            prompt.push_str("\n\n");
            prompt.push_str(context.trim());
        }
        prompt
    }

    /// Run one turn for `input`. Cancel it by dropping the future: the history then holds the
    /// request and every completed model-call-plus-results step, never a call without results.
    pub async fn run_turn(&mut self, input: &str, events: &dyn CoreEvents) -> TurnReport {
        let mut report = TurnReport {
            result: Ok(TurnStop::Answered),
            text: String::new(),
            model_calls: 0,
            totals: Totals::default(),
        };
        if let Some(notice) = self.tools.halted() {
            report.result = Ok(TurnStop::Halted);
            report.text = notice;
            return report;
        }
        self.history.push(Message::user(input));
        let mut iterations: u32 = 0;
        loop {
            if iterations >= self.config.max_iterations {
                let question = format!("{iterations} iterations. Continue?");
                match self.ask.ask(&question, &["yes", "no"]).await {
                    AskAnswer::Answer(a) if a == "yes" => iterations = 0,
                    AskAnswer::Cancelled => {
                        report.result = Ok(TurnStop::Cancelled);
                        return report;
                    }
                    answer => {
                        tracing::info!(?answer, "iteration budget: not continuing");
                        report.result = Ok(TurnStop::BudgetDeclined);
                        return report;
                    }
                }
            }
            iterations += 1;

            let system = Message::system(self.system_prompt());
            let mut full = Vec::with_capacity(self.history.len() + 1);
            full.push(system);
            full.extend(self.history.iter().cloned());
            let fitted = fit(&full, self.config.context_budget_tokens);
            let (system, messages) = fitted.split_at(1);
            let schemas = self.tools.schemas();
            let request = ModelRequest {
                system: &system[0].content,
                messages,
                tools: &schemas,
            };
            let started = Instant::now();
            let mut on_event = |e: StreamEvent| events.stream(&e);
            let response = self.provider.complete(request, &mut on_event).await;
            report.model_calls += 1;
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "model call failed");
                    let stats = RequestStats {
                        duration: started.elapsed(),
                        ..RequestStats::default()
                    };
                    events.request_done(&stats);
                    report.result = Err(e.into());
                    return report;
                }
            };
            let stats = self.stats(started, response.usage);
            report.totals.add(&stats);
            self.session.add(&stats);
            events.request_done(&stats);
            tracing::info!(
                input_tokens = stats.usage.input_tokens,
                output_tokens = stats.usage.output_tokens,
                tool_calls = response.tool_calls.len(),
                stop = ?response.stop_reason,
                "model call"
            );
            if !response.text.is_empty() {
                report.text = response.text.clone();
            }
            if response.tool_calls.is_empty() {
                self.history
                    .push(Message::assistant(response.text, Vec::new()));
                return report;
            }
            for call in &response.tool_calls {
                events.tool_call(call);
            }
            let tools = Arc::clone(&self.tools);
            let results: Vec<ToolResult> =
                join_all(response.tool_calls.iter().map(|c| tools.execute(c))).await;
            let mut step = vec![Message::assistant(
                response.text,
                response.tool_calls.clone(),
            )];
            for (call, result) in response.tool_calls.iter().zip(&results) {
                events.tool_result(call, result);
                step.push(Message::tool(call.id.clone(), result.to_model_text()));
            }
            self.history.extend(step);
            if let Some(notice) = self.tools.halted() {
                tracing::warn!("session ended: a tool call carried a secret");
                report.result = Ok(TurnStop::Halted);
                report.text = notice;
                return report;
            }
            if results.iter().any(|r| r.status == ToolStatus::Cancelled) {
                tracing::info!("turn cancelled at a question");
                report.result = Ok(TurnStop::Cancelled);
                return report;
            }
        }
    }

    /// Replace the conversation (a resumed session). A trailing assistant message with tool
    /// calls whose results are missing is dropped, so the history never asks the model to
    /// continue from a call without its result.
    pub fn set_history(&mut self, mut messages: Vec<Message>) {
        messages.retain(|m| m.role != Role::System);
        while let Some(last) = messages.last() {
            let answered = last.tool_calls.iter().all(|c| {
                messages
                    .iter()
                    .any(|m| m.tool_call_id.as_deref() == Some(c.id.as_str()))
            });
            if answered {
                break;
            }
            messages.pop();
        }
        self.history = messages;
    }

    /// Keep what the model had streamed of an answer the user interrupted, marked as such, so
    /// the next turn (and a resumed session) sees it.
    pub fn record_interrupted(&mut self, partial: &str) {
        let text = if partial.trim().is_empty() {
            INTERRUPTED.to_string()
        } else {
            format!("{}\n\n{INTERRUPTED}", partial.trim_end())
        };
        self.history.push(Message::assistant(text, Vec::new()));
    }

    /// The figures of one model call that started at `started` and used `usage`.
    fn stats(&self, started: Instant, usage: Usage) -> RequestStats {
        RequestStats {
            duration: started.elapsed(),
            usage,
            cost_usd: self.prices.cost(&self.config.model, usage).unwrap_or(0.0),
            priced: self.prices.knows(&self.config.model),
        }
    }

    /// Talk to another model from the next call on (`/model`); the conversation stays.
    pub fn set_model(&mut self, model: String, provider: Box<dyn Provider>) {
        tracing::info!(from = %self.config.model, to = %model, "model switched");
        self.config.model = model;
        self.provider = provider;
    }

    /// Replace everything but the last `keep_turns` (at least one) requests (and what followed them) by one
    /// summary written by the model (`/compact`). The summary call is accounted like any
    /// other. Returns the number of messages before and after; `Ok(None)` when there is
    /// nothing older than the kept turns.
    pub async fn compact(
        &mut self,
        keep_turns: usize,
        events: &dyn CoreEvents,
    ) -> Result<Option<(usize, usize)>, CoreError> {
        let requests: Vec<usize> = self
            .history
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::User && !m.is_marker)
            .map(|(i, _)| i)
            .collect();
        let keep = keep_turns.max(1);
        if requests.len() <= keep {
            return Ok(None);
        }
        let split = requests[requests.len() - keep];
        let budget_chars = self
            .config
            .context_budget_tokens
            .saturating_mul(3)
            .max(4000);
        let transcript = bound(
            &transcript(&self.history[..split]),
            budget_chars.saturating_sub(2000),
        );
        let ask = Message::user(format!(
            "Summarise the conversation below for your own later use: the user's goals and \
             requests, decisions made, files and commands that matter, results, and what is \
             still open. Be complete but brief; answer with the summary only.\n\n<conversation>\n\
             {transcript}\n</conversation>"
        ));
        let system = "You write faithful, compact summaries of coding-agent conversations.";
        let request = ModelRequest {
            system,
            messages: std::slice::from_ref(&ask),
            tools: &[],
        };
        let started = Instant::now();
        let mut on_event = |_e: StreamEvent| {};
        let response = self.provider.complete(request, &mut on_event).await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                events.request_done(&RequestStats {
                    duration: started.elapsed(),
                    ..RequestStats::default()
                });
                return Err(e.into());
            }
        };
        let stats = self.stats(started, response.usage);
        self.session.add(&stats);
        events.request_done(&stats);
        let before = self.history.len();
        let kept = self.history.split_off(split);
        self.history = vec![
            Message::user(format!("{COMPACTED}\n\n{}", response.text.trim())),
            Message::assistant("Understood; I continue from this summary.", Vec::new()),
        ];
        self.history.extend(kept);
        tracing::info!(before, after = self.history.len(), "conversation compacted");
        Ok(Some((before, self.history.len())))
    }

    /// Forget the conversation (the system prompt is rebuilt for every call anyway).
    pub fn clear(&mut self) {
        self.history.clear();
    }
}
