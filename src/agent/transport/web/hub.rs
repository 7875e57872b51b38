//! The session every tab shares: its events (kept for tabs opened later and broadcast live),
//! its open questions, its inbox of prompts and its Stop; and the `ask()` channel and core
//! events sink that feed it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::agent::core::CoreEvents;
use crate::agent::core::accounting::RequestStats;
use crate::agent::core::provider::StreamEvent;
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::{Ask, AskAnswer, BoxFuture, ToolCall, ToolResult};

use super::WEB_OUTPUT_BYTES;

/// Events kept for tabs opened later.
const REPLAY_EVENTS: usize = 20_000;

/// An open question waiting for an answer from a tab.
pub(super) struct Pending {
    options: Vec<String>,
    pub(super) reply: oneshot::Sender<AskAnswer>,
}

/// The session shared by every connection: its events, its open questions, its inbox.
pub(super) struct Hub {
    pub(super) token: String,
    log: Mutex<VecDeque<Arc<str>>>,
    events: broadcast::Sender<Arc<str>>,
    pub(super) prompts: mpsc::Sender<String>,
    pub(super) pending: Mutex<BTreeMap<u64, Pending>>,
    next_question: AtomicU64,
    pub(super) busy: AtomicBool,
    pub(super) stop: watch::Sender<u64>,
    /// The answer text of the model call under way, kept for Stop (`true`: its call finished).
    partial: Mutex<(String, bool)>,
}

impl Hub {
    /// A session with `token` whose prompts go to `prompts`.
    pub(super) fn new(token: String, prompts: mpsc::Sender<String>) -> Hub {
        let (events, _) = broadcast::channel(1024);
        let (stop, _) = watch::channel(0);
        Hub {
            token,
            log: Mutex::new(VecDeque::new()),
            events,
            prompts,
            pending: Mutex::new(BTreeMap::new()),
            next_question: AtomicU64::new(1),
            busy: AtomicBool::new(false),
            stop,
            partial: Mutex::new((String::new(), false)),
        }
    }

    pub(super) fn publish(&self, event: Value) {
        let text: Arc<str> = Arc::from(event.to_string());
        let mut log = self.log.lock();
        if log.len() >= REPLAY_EVENTS {
            log.pop_front();
        }
        log.push_back(Arc::clone(&text));
        // No receiver (no tab open) is fine: the log keeps it.
        let _ = self.events.send(text);
    }

    /// The session so far and a receiver for what follows, with nothing lost in between.
    pub(super) fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let log = self.log.lock();
        (log.iter().cloned().collect(), self.events.subscribe())
    }

    /// Stop: drop the running turn (the run loop then closes its open questions).
    pub(super) fn stop(&self) {
        self.stop.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn answer(&self, id: u64, answer: &str) -> Result<(), (u16, String)> {
        let mut pending = self.pending.lock();
        let Some(p) = pending.get(&id) else {
            return Err((404, format!("no open question {id}")));
        };
        if !p.options.is_empty() && !p.options.iter().any(|o| o == answer) {
            return Err((
                400,
                format!(
                    "answer must be one of: {} (got {answer:?})",
                    p.options.join(", ")
                ),
            ));
        }
        if let Some(p) = pending.remove(&id) {
            let _ = p.reply.send(AskAnswer::Answer(answer.to_string()));
        }
        drop(pending);
        self.publish(json!({"type": "answered", "id": id, "answer": answer}));
        Ok(())
    }

    pub(super) fn take_partial(&self) -> String {
        let mut p = self.partial.lock();
        p.1 = false;
        std::mem::take(&mut p.0)
    }

    /// A turn ended: the questions of a dropped turn can no longer be answered, and a new
    /// prompt may start.
    pub(super) fn turn_over(&self, end: Value) {
        for (id, p) in std::mem::take(&mut *self.pending.lock()) {
            let _ = p.reply.send(AskAnswer::Cancelled);
            self.publish(json!({"type": "answered", "id": id, "answer": null}));
        }
        self.busy.store(false, Ordering::SeqCst);
        self.publish(end);
    }
}

/// The `ask()` channel of the web session: the question goes to every tab as buttons.
pub(super) struct WebAsk {
    pub(super) hub: Arc<Hub>,
}

impl Ask for WebAsk {
    fn ask<'a>(&'a self, question: &'a str, options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        Box::pin(async move {
            let id = self.hub.next_question.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            self.hub.pending.lock().insert(
                id,
                Pending {
                    options: options.iter().map(|o| (*o).to_string()).collect(),
                    reply: tx,
                },
            );
            tracing::info!(id, %question, "web question");
            self.hub.publish(
                json!({"type": "ask", "id": id, "question": question, "options": options}),
            );
            let answer = rx.await.unwrap_or(AskAnswer::Cancelled);
            tracing::info!(id, ?answer, "web answer");
            answer
        })
    }
}

/// Core events published to every tab.
pub(super) struct WebEvents {
    pub(super) hub: Arc<Hub>,
}

fn call_arguments(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| Value::String(bound(&call.arguments, WEB_OUTPUT_BYTES)))
}

impl CoreEvents for WebEvents {
    fn stream(&self, event: &StreamEvent) {
        let event = match event {
            StreamEvent::Text(t) => {
                let mut p = self.hub.partial.lock();
                if p.1 {
                    *p = (String::new(), false);
                }
                p.0.push_str(t);
                json!({"type": "text", "text": t})
            }
            StreamEvent::Reasoning(t) => json!({"type": "reasoning", "text": t}),
        };
        self.hub.publish(event);
    }

    fn request_done(&self, stats: &RequestStats) {
        self.hub.partial.lock().1 = true;
        self.hub.publish(json!({
            "type": "request_done",
            "input_tokens": stats.usage.input_tokens,
            "output_tokens": stats.usage.output_tokens,
        }));
    }

    fn tool_call(&self, call: &ToolCall) {
        let mut args = call_arguments(call);
        if args.to_string().len() > WEB_OUTPUT_BYTES {
            args = Value::String(bound(&args.to_string(), WEB_OUTPUT_BYTES));
        }
        self.hub.publish(json!({
            "type": "tool_call", "id": call.id, "name": call.name, "arguments": args,
        }));
    }

    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        *self.hub.partial.lock() = (String::new(), false);
        self.hub.publish(json!({
            "type": "tool_result",
            "id": call.id,
            "name": call.name,
            "status": result.status,
            "exit_code": result.exit_code,
            "stdout": bound(&result.stdout, WEB_OUTPUT_BYTES),
            "stderr": bound(&result.stderr, WEB_OUTPUT_BYTES),
            "truncated": result.truncated,
        }));
    }
}
