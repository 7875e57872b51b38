//! Telegram: allow-listed chats drive agents through a bot (`agentshell telegram`), one session
//! (agent, history, `/stop`) per chat, a bounded number of them, idle ones dropped.
//!
//! Long-polls the Bot API (`getUpdates`); the bot's token comes from the secret broker and is
//! never logged (errors are stripped of the URL that carries it). Messages from chats not on
//! the allow list are ignored and logged. Streamed text goes out per model call, split at
//! Telegram's 4096-character limit; each tool call is shown before it runs; long outputs go as
//! documents (`sendDocument`). `ask()` questions come as inline-keyboard buttons (a question
//! without options is answered by the chat's next message); a press
//! (`callback_query`) is acknowledged (`answerCallbackQuery`) and the question edited to show
//! the answer (`editMessageText`); a question too long for one message (a long command) is
//! first sent whole as a document. Only the people in `telegram.allowed_users` (by default the
//! private chats of `allowed_chats`) are heard: in a group, other members can neither send
//! requests nor answer. `/stop` is the Ctrl+C equivalent. A 429 answer is retried
//! after the `retry_after` Telegram names.
//!
//! [`api`] is the Bot API client; [`hub`] what the poller, the sessions and the sender share
//! (and each chat's `ask()` and events); this file the options, the poller and dispatcher
//! ([`Telegram::run`]) and one chat's session.

mod api;
mod hub;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::agent::core::{Agent, CoreEvents, TurnStop};
use crate::agent::tools::Ask;

use api::{Body, BotApi};
use hub::{ChatState, Hub, Out, TelegramAsk, TelegramEvents};

/// Telegram's limit for one message, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;
/// A question longer than this (characters) is sent whole as a document before it is asked.
pub const INLINE_QUESTION: usize = 3500;
/// Tool output longer than this (characters) is sent as a document.
pub const INLINE_OUTPUT: usize = 3000;
/// An answer that would take more messages than this is sent as a document.
pub const MAX_PARTS: usize = 4;
/// Bytes of a tool's output sent at all (as a document).
pub const DOCUMENT_BYTES: usize = 256 * 1024;

/// How to reach the bot.
#[derive(Clone)]
pub struct TelegramOptions {
    /// Bot API base URL (`https://api.telegram.org`; tests point it at a fake).
    pub api_url: String,
    /// The bot token (from the secret broker).
    pub token: String,
    /// Chats the bot answers.
    pub allowed_chats: BTreeSet<i64>,
    /// People (Telegram user ids) whose messages and button presses count: a request, an
    /// answer or an approval from anyone else in an allowed chat (a group) is ignored.
    pub allowed_users: BTreeSet<i64>,
    /// Long-poll timeout of `getUpdates`, in seconds.
    pub poll_timeout: u64,
    /// Chats with a session (an agent and its history) at once; a new chat past it takes
    /// the place of the longest idle one.
    pub max_sessions: usize,
    /// A session idle this long is dropped (its history with it).
    pub idle: Duration,
}

/// Default of config `telegram.max_sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 8;
/// Default of config `telegram.idle_seconds`.
pub const DEFAULT_IDLE_SECONDS: u64 = 3600;

impl std::fmt::Debug for TelegramOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramOptions")
            .field("api_url", &self.api_url)
            .field("token", &"<secret>")
            .field("allowed_chats", &self.allowed_chats)
            .field("allowed_users", &self.allowed_users)
            .field("max_sessions", &self.max_sessions)
            .field("idle", &self.idle)
            .finish()
    }
}

/// Whether `token` has the shape of a bot token (`123456:ABC-def_…`): nothing that could
/// change the URL it is put in.
pub fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-'))
}

/// `text` cut into pieces of at most `limit` UTF-16 code units (Telegram's measure), at a
/// newline when one is in the second half of a piece. Joined, the pieces are `text`.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut units = 0;
    let mut last_newline: Option<(usize, usize)> = None; // (byte after it, units up to it)
    for c in text.chars() {
        let w = c.len_utf16();
        if units + w > limit && !current.is_empty() {
            match last_newline.filter(|(_, u)| *u >= limit / 2) {
                Some((at, u)) => {
                    let rest = current.split_off(at);
                    parts.push(std::mem::replace(&mut current, rest));
                    units -= u;
                }
                None => {
                    parts.push(std::mem::take(&mut current));
                    units = 0;
                }
            }
            last_newline = None;
        }
        current.push(c);
        units += w;
        if c == '\n' {
            last_newline = Some((current.len(), units));
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// Builds one chat's agent around that chat's `ask()` and events (the wiring's job).
pub type MakeAgent<'a> = dyn FnMut(Arc<dyn Ask>, Arc<dyn CoreEvents>) -> Result<Agent, String> + 'a;

/// The Telegram transport: build it, then [`Telegram::run`] with a way to build an agent for
/// each chat. Each allowed chat gets its own session (agent and history; `/stop` in one chat
/// stops only its own request); at most `max_sessions` live at once, and one idle for
/// `idle` is dropped.
pub struct Telegram {
    hub: Arc<Hub>,
    outbox: tokio::sync::Mutex<mpsc::UnboundedReceiver<Out>>,
    prompts: tokio::sync::Mutex<mpsc::Receiver<(i64, String)>>,
    poll_timeout: u64,
    max_sessions: usize,
    idle: Duration,
}

/// A live session as the dispatcher keeps it.
struct Live {
    st: Arc<ChatState>,
    prompts: mpsc::Sender<String>,
}

impl Telegram {
    /// A bot session.
    pub fn new(options: TelegramOptions) -> Result<Self, String> {
        if !valid_token(&options.token) {
            return Err("the bot token has characters a Telegram token never has".into());
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(options.poll_timeout + 30))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let (outbox, out_rx) = mpsc::unbounded_channel();
        let (prompts, prompt_rx) = mpsc::channel(16);
        Ok(Self {
            hub: Arc::new(Hub {
                api: BotApi {
                    client,
                    base: options.api_url,
                    token: options.token,
                },
                allowed: options.allowed_chats,
                users: options.allowed_users,
                outbox,
                prompts,
                pending: Mutex::new(BTreeMap::new()),
                next_question: AtomicU64::new(1),
                busy: Mutex::new(BTreeSet::new()),
                chats: Mutex::new(BTreeMap::new()),
            }),
            outbox: tokio::sync::Mutex::new(out_rx),
            prompts: tokio::sync::Mutex::new(prompt_rx),
            poll_timeout: options.poll_timeout,
            max_sessions: options.max_sessions.max(1),
            idle: options.idle.max(Duration::from_secs(1)),
        })
    }

    /// Poll for messages and run them, each chat in its own session, until `shutdown`
    /// resolves (its value names why).
    pub async fn run(
        &self,
        make_agent: &mut MakeAgent<'_>,
        shutdown: impl Future<Output = String>,
    ) -> String {
        let me = self
            .hub
            .api
            .call("getMe", &Body::Json(json!({})))
            .await
            .ok()
            .and_then(|v| {
                v.get("username")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        tracing::info!(bot = ?me, chats = ?self.hub.allowed, max_sessions = self.max_sessions,
            idle_secs = self.idle.as_secs(), "telegram session");
        let poller = tokio::spawn(Arc::clone(&self.hub).poll(self.poll_timeout));
        let sender_hub = Arc::clone(&self.hub);
        let mut outbox = self.outbox.lock().await;
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let sender = async move {
            while let Some(out) = outbox.recv().await {
                sender_hub.deliver(out).await;
            }
            let _ = done_tx.send(());
        };
        let mut prompts = self.prompts.lock().await;
        let mut shutdown = std::pin::pin!(shutdown);
        // The sessions' turns run as local tasks of this thread (an agent stays on it).
        let local = tokio::task::LocalSet::new();
        let turns = local.run_until(async {
            let mut live: BTreeMap<i64, Live> = BTreeMap::new();
            let mut sweep = tokio::time::interval(
                (self.idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30)),
            );
            loop {
                let prompt = tokio::select! {
                    p = prompts.recv() => p,
                    _ = sweep.tick() => {
                        self.drop_idle(&mut live);
                        continue;
                    }
                    why = &mut shutdown => break why,
                };
                let Some((chat, prompt)) = prompt else {
                    break "the poller stopped".to_string();
                };
                tracing::info!(chat, input = %prompt, "telegram request");
                if !live.contains_key(&chat) {
                    match self.open_session(chat, &mut live, make_agent) {
                        Ok(session) => {
                            live.insert(chat, session);
                        }
                        Err(why) => {
                            self.hub.send(Out::Text(chat, why));
                            self.hub.busy.lock().remove(&chat);
                            continue;
                        }
                    }
                }
                let sent = match live.get(&chat) {
                    Some(session) => session.prompts.send(prompt).await.is_ok(),
                    None => false,
                };
                if !sent {
                    live.remove(&chat);
                    self.hub.chats.lock().remove(&chat);
                    self.hub.busy.lock().remove(&chat);
                }
            }
        });
        let mut sender = std::pin::pin!(sender);
        let why = tokio::select! {
            why = turns => why,
            () = &mut sender => "the sender stopped".to_string(),
        };
        // The sessions (their agents and running commands) go with the local set.
        drop(local);
        poller.abort();
        // Let what is queued go out (bounded).
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::select! {
                () = &mut sender => {},
                _ = &mut done_rx => {},
            }
        })
        .await;
        tracing::info!(reason = %why, "telegram session end");
        why
    }

    /// Drops the sessions idle for longer than the limit.
    fn drop_idle(&self, live: &mut BTreeMap<i64, Live>) {
        let busy = self.hub.busy.lock().clone();
        let stale: Vec<i64> = live
            .iter()
            .filter(|(chat, s)| !busy.contains(chat) && s.st.last.lock().elapsed() >= self.idle)
            .map(|(chat, _)| *chat)
            .collect();
        for chat in stale {
            self.close(chat, live);
            tracing::info!(chat, "telegram: dropped an idle session");
            self.hub.send(Out::Text(
                chat,
                format!(
                    "session closed after {} s idle; your next message starts a new one",
                    self.idle.as_secs()
                ),
            ));
        }
    }

    /// Ends `chat`'s session: its task ends when its prompt channel closes, the agent and
    /// the history with it.
    fn close(&self, chat: i64, live: &mut BTreeMap<i64, Live>) {
        live.remove(&chat);
        self.hub.chats.lock().remove(&chat);
    }

    /// A new session for `chat`, making room by dropping the longest idle one when the limit
    /// is reached. `Err` is the message for the chat.
    fn open_session(
        &self,
        chat: i64,
        live: &mut BTreeMap<i64, Live>,
        make_agent: &mut MakeAgent<'_>,
    ) -> Result<Live, String> {
        if live.len() >= self.max_sessions {
            let busy = self.hub.busy.lock().clone();
            let oldest = live
                .iter()
                .filter(|(c, _)| !busy.contains(c))
                .min_by_key(|(_, s)| *s.st.last.lock())
                .map(|(c, _)| *c);
            let Some(oldest) = oldest else {
                return Err(format!(
                    "all {} sessions are busy; try again when one is done",
                    self.max_sessions
                ));
            };
            self.close(oldest, live);
            tracing::info!(
                chat = oldest,
                "telegram: dropped the longest idle session for a new chat"
            );
            self.hub.send(Out::Text(
                oldest,
                "session closed to make room for another chat; your next message starts a new one"
                    .into(),
            ));
        }
        let st = Arc::new(ChatState::new(chat));
        let ask: Arc<dyn Ask> = Arc::new(TelegramAsk {
            hub: Arc::clone(&self.hub),
            st: Arc::clone(&st),
        });
        let events: Arc<dyn CoreEvents> = Arc::new(TelegramEvents {
            hub: Arc::clone(&self.hub),
            st: Arc::clone(&st),
        });
        let agent = make_agent(ask, events).map_err(|e| format!("cannot start a session: {e}"))?;
        tracing::info!(chat, "telegram: new session");
        let (tx, rx) = mpsc::channel(4);
        self.hub.chats.lock().insert(chat, Arc::clone(&st));
        tokio::task::spawn_local(session(Arc::clone(&self.hub), Arc::clone(&st), agent, rx));
        Ok(Live { st, prompts: tx })
    }
}

/// One chat's session: its requests, one at a time, until the dispatcher lets it go.
async fn session(
    hub: Arc<Hub>,
    st: Arc<ChatState>,
    mut agent: Agent,
    mut prompts: mpsc::Receiver<String>,
) {
    let chat = st.chat;
    let events = TelegramEvents {
        hub: Arc::clone(&hub),
        st: Arc::clone(&st),
    };
    while let Some(prompt) = prompts.recv().await {
        let mut stop = st.stop.subscribe();
        stop.borrow_and_update();
        let outcome = tokio::select! {
            report = agent.run_turn(&prompt, &events) => Some(report),
            _ = stop.changed() => None,
        };
        hub.cancel_questions(chat);
        let note = match outcome {
            None => {
                agent.record_interrupted(&std::mem::take(&mut st.partial.lock().0));
                st.text.lock().clear();
                Some("request stopped; the answer so far stays in the history".into())
            }
            Some(report) => match report.result {
                Ok(TurnStop::Answered) => None,
                Ok(TurnStop::BudgetDeclined) => Some("stopped at the iteration budget".to_string()),
                Ok(TurnStop::Cancelled) => Some("request cancelled".to_string()),
                Ok(TurnStop::Halted) => Some(report.text.clone()),
                Err(e) => Some(format!("error: {e}")),
            },
        };
        st.flush_text(&hub);
        if let Some(note) = note {
            hub.send(Out::Text(chat, note));
        }
        *st.last.lock() = std::time::Instant::now();
        hub.busy.lock().remove(&chat);
    }
    tracing::info!(chat, "telegram: session ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_everything_within_the_limit() {
        let text = format!("{}\n{}", "a".repeat(3000), "é😀".repeat(1500));
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert!(parts.len() >= 2);
        assert_eq!(parts.concat(), text);
        for p in &parts {
            assert!(p.encode_utf16().count() <= MESSAGE_LIMIT, "{}", p.len());
        }
        assert!(parts[0].ends_with('\n'), "cut at the newline");
        assert_eq!(split_message("short", MESSAGE_LIMIT), vec!["short"]);
        assert!(split_message("", MESSAGE_LIMIT).is_empty());
        let long_line = "x".repeat(10_000);
        let parts = split_message(&long_line, MESSAGE_LIMIT);
        assert_eq!(
            parts.iter().map(String::len).collect::<Vec<_>>(),
            [4096, 4096, 1808]
        );
    }

    #[test]
    fn tokens_that_could_bend_the_url_are_refused() {
        assert!(valid_token("123456:ABC-def_ghi"));
        assert!(!valid_token(""));
        assert!(!valid_token("123/../x"));
        assert!(!valid_token("123?x=1"));
        assert!(!valid_token("12 3"));
    }
}
