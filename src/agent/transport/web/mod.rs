//! Web: one local session served to a browser (`agentshell web`).
//!
//! An HTTP/1.1 server (hyper on tokio, [`http`]), listening on 127.0.0.1 (random port) or a
//! Unix socket ([`Listener`]), serves one page (no build step, no CDN: [`PAGE`] is compiled in)
//! and a JSON/SSE interface:
//!
//! - `GET /?token=T` — checks the session's token (printed to the terminal), sets it as a
//!   cookie and redirects to `/`; every other request needs the cookie or an
//!   `X-Agentshell-Token` header, else 403. Tokens are compared in constant time.
//! - `GET /events` — Server-Sent Events: first a `reset`, then the session so far, then
//!   everything live. Every tab sees the same session ([`hub`]).
//! - `POST /prompt` `{"text": …}` — start a turn (409 while one runs).
//! - `POST /answer` `{"id": N, "answer": …}` — answer an `ask()` question (its buttons).
//! - `POST /stop` — the Ctrl+C equivalent: cancels the running turn and any open question.
//!
//! Requests from other sites are refused first: the `Host` must be loopback, and a `POST`'s
//! `Origin` (when sent) this server's own and its `Sec-Fetch-Site` (when sent) `same-origin`.
//! Requests are bounded (16 KiB of headers, 64 KiB of body, 10 s to send them); one request
//! per connection; open connections per account and in all ([`gate`]). Tool calls are
//! published before they run, results bounded.

mod gate;
mod http;
mod hub;
mod io;
mod listener;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use crate::agent::core::{Agent, CoreEvents, TurnStop};
use crate::agent::tools::Ask;

pub use gate::tcp_peer_uid;
use hub::{Hub, WebAsk, WebEvents};
pub use listener::Listener;

/// The page (HTML, CSS and script in one file).
pub const PAGE: &str = include_str!("page.html");

/// Largest request head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;
/// Bytes of a tool's output published (the model gets more).
pub const WEB_OUTPUT_BYTES: usize = 4000;
/// Name of the session cookie.
const COOKIE: &str = "agentshell_token";
/// Open connections one account may hold (its tabs need a few each).
pub const MAX_CONNECTIONS_PER_ACCOUNT: usize = 16;
/// Open connections in all.
pub const MAX_CONNECTIONS: usize = 64;

/// Whether `a` equals `b`, taking the same time whatever their contents (lengths may leak).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A fresh random session token (256 bits, hex).
pub fn new_token() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{a}{b}")
}

/// The web transport: build it, pass [`Web::ask_channel`] and [`Web::events`] down, then
/// [`Web::run`].
pub struct Web {
    hub: Arc<Hub>,
    prompts: tokio::sync::Mutex<mpsc::Receiver<String>>,
}

impl Default for Web {
    fn default() -> Self {
        Self::new()
    }
}

impl Web {
    /// A session with a fresh token.
    pub fn new() -> Self {
        Self::with_token(new_token())
    }

    /// A session with a given token.
    pub fn with_token(token: String) -> Self {
        let (tx, rx) = mpsc::channel(4);
        Self {
            hub: Arc::new(Hub::new(token, tx)),
            prompts: tokio::sync::Mutex::new(rx),
        }
    }

    /// The session's token.
    pub fn token(&self) -> &str {
        &self.hub.token
    }

    /// The `ask()` channel to pass down to L2 and L3.
    pub fn ask_channel(&self) -> Arc<dyn Ask> {
        Arc::new(WebAsk {
            hub: Arc::clone(&self.hub),
        })
    }

    /// The events sink (for sub-agents).
    pub fn events(&self) -> Arc<dyn CoreEvents> {
        Arc::new(WebEvents {
            hub: Arc::clone(&self.hub),
        })
    }

    /// Serve `listener` and run the prompts the tabs send, until `shutdown` resolves (its
    /// value names the reason; the running turn is dropped, killing its commands).
    pub async fn run(
        &self,
        agent: &mut Agent,
        banner: &str,
        listener: Listener,
        shutdown: impl Future<Output = String>,
    ) -> std::io::Result<String> {
        self.hub
            .publish(json!({"type": "info", "text": banner, "model": agent.model()}));
        let accept = tokio::spawn(http::accept_loop(
            listener,
            Arc::clone(&self.hub),
            http::Limits::default(),
        ));
        let events = WebEvents {
            hub: Arc::clone(&self.hub),
        };
        let mut prompts = self.prompts.lock().await;
        let mut shutdown = std::pin::pin!(shutdown);
        let why = loop {
            let prompt = tokio::select! {
                p = prompts.recv() => p,
                why = &mut shutdown => break why,
            };
            let Some(prompt) = prompt else {
                break "the server stopped".to_string();
            };
            tracing::info!(input = %prompt, "web request");
            let mut stop = self.hub.stop.subscribe();
            stop.borrow_and_update();
            let outcome = tokio::select! {
                report = agent.run_turn(&prompt, &events) => Some(report),
                _ = stop.changed() => None,
                why = &mut shutdown => {
                    agent.record_interrupted(&self.hub.take_partial());
                    break why;
                }
            };
            let end = match outcome {
                None => {
                    tracing::info!("request stopped from the page");
                    agent.record_interrupted(&self.hub.take_partial());
                    json!({"type": "turn_end", "outcome": "cancelled",
                           "message": "request stopped; the answer so far stays in the history"})
                }
                Some(report) => {
                    let (outcome, message) = match report.result {
                        Ok(TurnStop::Answered) => ("answered", String::new()),
                        Ok(TurnStop::BudgetDeclined) => {
                            ("budget", "stopped at the iteration budget".to_string())
                        }
                        Ok(TurnStop::Cancelled) => ("cancelled", "request cancelled".to_string()),
                        Ok(TurnStop::Halted) => ("ended", report.text.clone()),
                        Err(e) => ("error", e.to_string()),
                    };
                    json!({"type": "turn_end", "outcome": outcome, "message": message,
                           "model_calls": report.model_calls,
                           "input_tokens": report.totals.usage.input_tokens,
                           "output_tokens": report.totals.usage.output_tokens})
                }
            };
            self.hub.turn_over(end);
        };
        tracing::info!(reason = %why, "web session end");
        self.hub
            .publish(json!({"type": "closed", "reason": why.clone()}));
        // Give the event streams a moment to carry the last events out.
        tokio::time::sleep(Duration::from_millis(100)).await;
        accept.abort();
        Ok(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
