//! The interactive terminal: the read–run loop, local slash commands, Ctrl+C handling, the
//! saved sessions and the terminal's [`Ask`] channel.
//!
//! Ctrl+C once cancels the current input or the running request (what the model had answered
//! so far stays in the history, marked interrupted); twice in a row exits.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Mutex;

use crate::agent::core::accounting::cost_text;
use crate::agent::core::message::{Message, Role};
use crate::agent::core::provider::Provider;
use crate::agent::core::{Agent, CoreError, TurnStop};
use crate::agent::tools::display::visible_line;
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::{Ask, AskAnswer, BoxFuture};
use crate::agent::transport::line_editor::{LineEditor, ReadOutcome, TerminalState};
use crate::agent::transport::render::{TerminalRenderer, session_line, turn_line};
use crate::agent::transport::sessions::{SessionFile, SessionStore};

/// The local commands, handled here and never sent to the model: (usage, what it does).
pub const COMMANDS: &[(&str, &str)] = &[
    ("/help", "this list"),
    (
        "/model [NAME]",
        "show the model, or switch to NAME (a model string) for the rest of the session",
    ),
    (
        "/cost",
        "tokens and cost of the session so far, sub-agents included",
    ),
    (
        "/compact",
        "summarise the conversation through the model into one message, keeping the last turns",
    ),
    (
        "/status",
        "the model, the project, and what the kernel enforces of the command sandbox",
    ),
    (
        "/resume [N|ID]",
        "list this project's saved sessions, or reopen one (by number or id)",
    ),
    ("/clear", "clear the screen"),
    ("/exit, /quit", "end the session"),
];

/// Keys, listed after the commands by `/help`.
const KEYS: &[(&str, &str)] = &[
    (
        "Alt+Enter, \\ Enter",
        "new line in the input (a paste keeps its lines and is sent as one message)",
    ),
    ("Up, Down", "previous inputs (kept across sessions)"),
    (
        "Ctrl+C",
        "cancel the input or the running request; twice in a row: exit",
    ),
    ("Ctrl+D", "exit (on an empty line)"),
];

/// The `/help` text: every command and key.
pub fn help() -> String {
    COMMANDS
        .iter()
        .chain(KEYS)
        .map(|(usage, what)| format!("{usage:<16}{what}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A slash command as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slash {
    /// `/help`
    Help,
    /// `/model [NAME]`
    Model(Option<String>),
    /// `/cost`
    Cost,
    /// `/compact`
    Compact,
    /// `/status`
    Status,
    /// `/resume [N|ID]`
    Resume(Option<String>),
    /// `/clear`
    Clear,
    /// `/exit`, `/quit`
    Exit,
    /// Anything else starting with `/`.
    Unknown(String),
}

/// Parse a one-line input starting with `/`.
pub fn parse_slash(line: &str) -> Slash {
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or("");
    let arg = words.next().map(str::to_string);
    let extra = words.next().is_some();
    match (name, arg, extra) {
        ("/help", None, false) => Slash::Help,
        ("/model", arg, false) => Slash::Model(arg),
        ("/cost", None, false) => Slash::Cost,
        ("/compact", None, false) => Slash::Compact,
        ("/status", None, false) => Slash::Status,
        ("/resume", arg, false) => Slash::Resume(arg),
        ("/clear", None, false) => Slash::Clear,
        ("/exit" | "/quit", None, false) => Slash::Exit,
        _ => Slash::Unknown(line.to_string()),
    }
}

/// Turns kept verbatim by `/compact`.
pub const COMPACT_KEEP_TURNS: usize = 2;

/// Builds the provider for another model string (`/model NAME`), as the wiring would.
pub type ModelSwitch = Box<dyn Fn(&str) -> Result<Box<dyn Provider>, String> + Send + Sync>;

/// What the terminal keeps across sessions, and the session to reopen.
#[derive(Default)]
pub struct TerminalOptions {
    /// Where conversations are saved (`None`: not saved).
    pub sessions: Option<SessionStore>,
    /// The input history file (`None`: history for this session only).
    pub history_file: Option<PathBuf>,
    /// A session to reopen at start (`--resume`, `--continue`).
    pub resume: Option<SessionFile>,
    /// How `/model NAME` builds the new provider (`None`: switching is not offered).
    pub switch_model: Option<ModelSwitch>,
    /// The project and the command sandbox, one line each, for `/status`.
    pub status: Vec<String>,
}

/// The prompt shown for input.
pub const PROMPT: &str = "\x1b[1m›\x1b[0m ";

/// The terminal's `ask()`: questions are asked one at a time on the terminal; Ctrl+C at a
/// question answers [`AskAnswer::Cancelled`], which ends the running turn.
#[derive(Default)]
pub struct TerminalAsk {
    serial: Mutex<()>,
}

/// Match an answer against the options: exact (any case) or a unique prefix (`y` → `yes`).
pub fn match_option(answer: &str, options: &[&str]) -> Option<String> {
    let a = answer.trim().to_lowercase();
    if a.is_empty() {
        return None;
    }
    if let Some(o) = options.iter().find(|o| o.to_lowercase() == a) {
        return Some((*o).to_string());
    }
    let mut prefixed = options.iter().filter(|o| o.to_lowercase().starts_with(&a));
    match (prefixed.next(), prefixed.next()) {
        (Some(o), None) => Some((*o).to_string()),
        _ => None,
    }
}

impl Ask for TerminalAsk {
    fn ask<'a>(&'a self, question: &'a str, options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        Box::pin(async move {
            let _turn = self.serial.lock().await;
            let hint = if options.is_empty() {
                String::new()
            } else {
                format!(" [{}]", options.join("/"))
            };
            let prompt = format!(
                "\x1b[33m? {}{}\x1b[0m ",
                visible_line(question),
                visible_line(&hint)
            );
            loop {
                let p = prompt.clone();
                let read =
                    tokio::task::spawn_blocking(move || LineEditor::new().read_line(&p)).await;
                match read {
                    Ok(Ok(ReadOutcome::Line(answer))) => {
                        if options.is_empty() {
                            return AskAnswer::Answer(answer);
                        }
                        if let Some(choice) = match_option(&answer, options) {
                            return AskAnswer::Answer(choice);
                        }
                    }
                    Ok(Ok(ReadOutcome::Interrupted { .. })) => return AskAnswer::Cancelled,
                    Ok(Ok(ReadOutcome::Eof)) => {
                        return AskAnswer::Unavailable("end of input".to_string());
                    }
                    Ok(Err(e)) => return AskAnswer::Unavailable(format!("terminal: {e}")),
                    Err(e) => return AskAnswer::Unavailable(format!("terminal: {e}")),
                }
            }
        })
    }
}

/// The interactive session.
pub struct Terminal {
    ask: Arc<TerminalAsk>,
    options: TerminalOptions,
}

impl Default for Terminal {
    fn default() -> Self {
        Self::new()
    }
}

impl Terminal {
    /// A terminal transport that keeps nothing across sessions.
    pub fn new() -> Self {
        Self::with_options(TerminalOptions::default())
    }

    /// A terminal transport with saved sessions, input history and `/model`.
    pub fn with_options(options: TerminalOptions) -> Self {
        Self {
            ask: Arc::new(TerminalAsk::default()),
            options,
        }
    }

    /// The `ask()` channel to pass down to L2 and L3.
    pub fn ask_channel(&self) -> Arc<dyn Ask> {
        Arc::clone(&self.ask) as Arc<dyn Ask>
    }

    /// Run the read–run loop until `/exit`, Ctrl+D, Ctrl+C twice, SIGTERM or SIGHUP. On a
    /// signal the running request is dropped (its commands' process groups are killed), the
    /// terminal restored, and [`SessionEnd::Signal`] returned: the caller should exit at once,
    /// since a reader thread may still be blocked on the terminal.
    pub async fn run(&self, agent: &mut Agent, banner: &str) -> std::io::Result<SessionEnd> {
        let session_start = Instant::now();
        let saved = TerminalState::save();
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sighup = signal(SignalKind::hangup())?;
        let screen = TerminalRenderer::stdout();
        println!("{banner}");
        println!("\x1b[2mType /help for commands, /exit to quit.\x1b[0m");
        let mut session = Session {
            store: self.options.sessions.clone(),
            id: SessionStore::new_id(),
        };
        if let Some(file) = &self.options.resume {
            session.reopen(agent, file, &screen);
        }
        let mut editor = Some(match &self.options.history_file {
            Some(path) => {
                let (editor, warning) = LineEditor::with_history_file(path);
                if let Some(w) = warning {
                    screen.error(&w);
                }
                editor
            }
            None => LineEditor::new(),
        });
        let mut armed = false;
        loop {
            let mut ed = editor.take().unwrap_or_default();
            let read = tokio::task::spawn_blocking(move || {
                let r = ed.read_line(PROMPT);
                (ed, r)
            });
            let read = tokio::select! {
                r = read => Ok(r),
                name = termination(&mut sigterm, &mut sighup) => Err(name),
            };
            let (ed, outcome) = match read {
                Ok(joined) => joined.map_err(std::io::Error::other)?,
                Err(signal) => {
                    session.save(agent, &screen);
                    return Ok(end_by_signal(signal, saved.as_ref(), agent, session_start));
                }
            };
            editor = Some(ed);
            let line = match outcome? {
                ReadOutcome::Eof => break,
                ReadOutcome::Interrupted { had_input: true } => {
                    armed = false;
                    continue;
                }
                ReadOutcome::Interrupted { had_input: false } => {
                    if armed {
                        break;
                    }
                    screen.info("(press Ctrl+C again to exit)");
                    armed = true;
                    continue;
                }
                ReadOutcome::Line(l) => l,
            };
            armed = false;
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            // A pasted text that happens to start with `/` (a path) is a message, not a command.
            if line.starts_with('/') && !line.contains('\n') {
                match parse_slash(line) {
                    Slash::Help => println!("{}", help()),
                    Slash::Clear => {
                        print!("\x1b[2J\x1b[H");
                        let _ = std::io::stdout().flush();
                    }
                    Slash::Exit => break,
                    Slash::Model(name) => self.model(agent, name.as_deref(), &screen),
                    Slash::Cost => screen.info(&cost_report(agent)),
                    Slash::Status => {
                        let mut lines = vec![format!("model    {}", agent.model())];
                        lines.extend(self.options.status.iter().cloned());
                        screen.info(&lines.join("\n"));
                    }
                    Slash::Resume(key) => session.resume(agent, key.as_deref(), &screen),
                    Slash::Compact => {
                        while let Some(Some(())) = sigint.recv().now_or_never() {}
                        let renderer = TerminalRenderer::stdout();
                        renderer.info("compacting the conversation…");
                        let done = tokio::select! {
                            r = agent.compact(COMPACT_KEEP_TURNS, &renderer) => Some(r),
                            _ = sigint.recv() => None,
                        };
                        match done {
                            None => renderer.error("compaction cancelled; nothing changed"),
                            Some(Ok(None)) => renderer.info(&format!(
                                "nothing to compact: the conversation has at most {COMPACT_KEEP_TURNS} requests"
                            )),
                            Some(Ok(Some((before, after)))) => {
                                session.save(agent, &renderer);
                                renderer.info(&format!(
                                    "compacted: {before} messages → {after} (a summary and the last {COMPACT_KEEP_TURNS} turns)"
                                ));
                            }
                            Some(Err(CoreError::Provider(e))) => {
                                renderer.error(&format!("compaction failed, nothing changed: {e}"))
                            }
                        }
                    }
                    Slash::Unknown(other) => {
                        screen.error(&format!("unknown command {other}; try /help"))
                    }
                }
                continue;
            }
            tracing::info!(input = %line, "user request");
            // A SIGINT that arrived while no request ran must not cancel this one.
            while let Some(Some(())) = sigint.recv().now_or_never() {}
            let renderer = TerminalRenderer::stdout();
            let report = tokio::select! {
                report = agent.run_turn(line, &renderer) => Ok(Some(report)),
                _ = sigint.recv() => Ok(None),
                name = termination(&mut sigterm, &mut sighup) => Err(name),
            };
            let mut ended = false;
            let report = match report {
                Ok(r) => r,
                Err(signal) => {
                    agent.record_interrupted(&renderer.take_partial());
                    session.save(agent, &renderer);
                    return Ok(end_by_signal(signal, saved.as_ref(), agent, session_start));
                }
            };
            match report {
                None => {
                    tracing::info!("request cancelled by the user");
                    agent.record_interrupted(&renderer.take_partial());
                    renderer.error(
                        "request cancelled; the answer so far stays in the history (Ctrl+C again to exit)",
                    );
                    armed = true;
                }
                Some(report) => {
                    ended = matches!(report.result, Ok(TurnStop::Halted));
                    match report.result {
                        Ok(TurnStop::Answered) => {}
                        Ok(TurnStop::BudgetDeclined) => {
                            renderer.info("stopped at the iteration budget")
                        }
                        Ok(TurnStop::Cancelled) => {
                            renderer.error("request cancelled (Ctrl+C again to exit)");
                            armed = true;
                        }
                        Ok(TurnStop::Halted) => renderer.error(&report.text),
                        Err(CoreError::Provider(e)) => renderer.error(&e.to_string()),
                    }
                    renderer.info(&turn_line(&report.totals, report.model_calls));
                }
            }
            session.save(agent, &renderer);
            if ended {
                break;
            }
        }
        session.save(agent, &screen);
        let summary = session_line(&agent.session_totals(), session_start.elapsed());
        tracing::info!(%summary, "session end");
        screen.info(&summary);
        if session.saved() {
            screen.info(&format!(
                "session {} saved; reopen it with agentshell --resume {}",
                session.id, session.id
            ));
        }
        Ok(SessionEnd::Exit)
    }

    fn model<W: Write + Send>(
        &self,
        agent: &mut Agent,
        name: Option<&str>,
        screen: &TerminalRenderer<W>,
    ) {
        let Some(name) = name else {
            screen.info(&format!("model: {}", agent.model()));
            return;
        };
        let Some(switch) = &self.options.switch_model else {
            screen.error("switching models is not available here");
            return;
        };
        match switch(name) {
            Ok(provider) => {
                agent.set_model(name.to_string(), provider);
                screen.info(&format!(
                    "model: {} (from the next request on)",
                    agent.model()
                ));
            }
            Err(e) => screen.error(&format!("cannot switch to {name}: {e}")),
        }
    }
}

/// The session being saved, and how it is saved.
struct Session {
    store: Option<SessionStore>,
    id: String,
}

impl Session {
    fn saved(&self) -> bool {
        self.store
            .as_ref()
            .is_some_and(|s| s.load(&self.id).is_ok())
    }

    fn save<W: Write + Send>(&self, agent: &Agent, screen: &TerminalRenderer<W>) {
        let Some(store) = &self.store else { return };
        if agent.history().is_empty() {
            return;
        }
        if let Err(e) = store.save(&self.id, agent.model(), agent.history()) {
            screen.error(&format!("session not saved: {e}"));
        }
    }

    fn reopen<W: Write + Send>(
        &mut self,
        agent: &mut Agent,
        file: &SessionFile,
        screen: &TerminalRenderer<W>,
    ) {
        agent.set_history(file.messages.clone());
        self.id = file.id.clone();
        screen.info(&format!(
            "resumed session {} ({} requests, last used {}): {}",
            file.id,
            file.requests(),
            short_time(&file.updated),
            file.title()
        ));
        // The last exchanges, so the user sees where the conversation stands.
        let shown: Vec<&Message> = agent
            .history()
            .iter()
            .filter(|m| {
                (m.role == Role::User && !m.is_marker)
                    || (m.role == Role::Assistant && !m.content.trim().is_empty())
            })
            .collect();
        for m in shown.iter().skip(shown.len().saturating_sub(4)) {
            let who = if m.role == Role::User { "›" } else { " " };
            let text = bound(m.content.trim(), 600);
            screen.info(&format!("{who} {text}"));
        }
    }

    fn resume<W: Write + Send>(
        &mut self,
        agent: &mut Agent,
        key: Option<&str>,
        screen: &TerminalRenderer<W>,
    ) {
        let Some(store) = self.store.clone() else {
            screen.error("sessions are not saved here");
            return;
        };
        let Some(key) = key else {
            screen.info(&session_list(&store));
            return;
        };
        match store.find(key) {
            Ok(file) => {
                self.save(agent, screen);
                self.reopen(agent, &file, screen);
            }
            Err(e) => screen.error(&e.to_string()),
        }
    }
}

/// The project's saved sessions, numbered newest first, for `/resume` and `--resume`.
pub fn session_list(store: &SessionStore) -> String {
    let (list, problems) = store.list();
    let mut text = String::new();
    if list.is_empty() {
        text.push_str("no saved sessions for this project");
    } else {
        text.push_str("saved sessions (newest first; /resume N or /resume ID):");
        for (i, s) in list.iter().enumerate().take(30) {
            text.push_str(&format!(
                "\n{:>3}  {}  {}  {:>3} requests  {}",
                i + 1,
                s.id,
                short_time(&s.updated),
                s.requests(),
                s.title()
            ));
        }
    }
    for p in problems {
        text.push_str(&format!("\nskipped: {p}"));
    }
    text
}

fn short_time(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M")
                .to_string()
        })
        .unwrap_or_else(|_| visible_line(rfc3339))
}

/// `/cost`: the session's requests, tokens and cost, sub-agents included.
pub fn cost_report(agent: &Agent) -> String {
    let own = agent.session_totals();
    let mut all = own;
    let mut text = String::new();
    if let Some(sub) = agent.subagent_ledger() {
        all.merge(&sub.totals);
        if sub.started > 0 {
            text = format!(
                "\n  sub-agents: {} started · {} requests · {} in · {} out · {}",
                sub.started,
                sub.totals.requests,
                sub.totals.usage.input_tokens,
                sub.totals.usage.output_tokens,
                cost_text(&sub.totals)
            );
        }
    }
    format!(
        "cost so far ({}): {} requests · {} in · {} out · {}{text}",
        agent.model(),
        all.requests,
        all.usage.input_tokens,
        all.usage.output_tokens,
        cost_text(&all)
    )
}

/// How an interactive session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// `/exit`, Ctrl+D, Ctrl+C twice.
    Exit,
    /// A termination signal; exit with `128 + number`.
    Signal(&'static str, i32),
}

async fn termination(
    term: &mut tokio::signal::unix::Signal,
    hup: &mut tokio::signal::unix::Signal,
) -> (&'static str, i32) {
    tokio::select! {
        _ = term.recv() => ("SIGTERM", libc::SIGTERM),
        _ = hup.recv() => ("SIGHUP", libc::SIGHUP),
    }
}

fn end_by_signal(
    (name, number): (&'static str, i32),
    saved: Option<&TerminalState>,
    agent: &Agent,
    session_start: Instant,
) -> SessionEnd {
    if let Some(state) = saved {
        state.restore();
    }
    let summary = session_line(&agent.session_totals(), session_start.elapsed());
    tracing::info!(signal = name, %summary, "session ended by a signal");
    let screen = TerminalRenderer::stdout();
    screen.error(&format!("terminated by {name}"));
    screen.info(&summary);
    SessionEnd::Signal(name, number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_match_exactly_or_by_unique_prefix() {
        let yn = ["yes", "no"];
        assert_eq!(match_option("y", &yn), Some("yes".into()));
        assert_eq!(match_option("NO", &yn), Some("no".into()));
        assert_eq!(match_option("maybe", &yn), None);
        assert_eq!(match_option("", &yn), None);
        assert_eq!(match_option("a", &["apple", "apricot"]), None);
        assert_eq!(
            match_option("a", &["yes", "no", "always"]),
            Some("always".into())
        );
    }

    #[test]
    fn help_lists_every_command_and_every_listed_command_is_handled() {
        let text = help();
        for (usage, _) in COMMANDS {
            assert!(text.contains(usage), "{usage}");
            for name in usage.split(", ") {
                let name = name.split_whitespace().next().unwrap();
                assert_ne!(
                    parse_slash(name),
                    Slash::Unknown(name.to_string()),
                    "{name} is listed but not handled"
                );
            }
        }
        // and every command handled is listed
        for (line, slash) in [
            ("/help", Slash::Help),
            ("/model x", Slash::Model(Some("x".into()))),
            ("/cost", Slash::Cost),
            ("/compact", Slash::Compact),
            ("/status", Slash::Status),
            ("/resume 2", Slash::Resume(Some("2".into()))),
            ("/clear", Slash::Clear),
            ("/quit", Slash::Exit),
        ] {
            assert_eq!(parse_slash(line), slash);
            let name = line.split_whitespace().next().unwrap();
            assert!(text.contains(name), "{name} handled but not in /help");
        }
        assert!(matches!(parse_slash("/cost now"), Slash::Unknown(_)));
        assert!(text.contains("Alt+Enter"));
    }
}
