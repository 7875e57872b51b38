//! The interactive terminal: the read–run loop, local slash commands, Ctrl+C handling and the
//! terminal's [`Ask`] channel.
//!
//! Ctrl+C once cancels the current input or the running request; twice in a row exits.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Mutex;

use crate::agent::core::{Agent, CoreError, TurnStop};
use crate::agent::tools::display::visible_line;
use crate::agent::tools::{Ask, AskAnswer, BoxFuture};
use crate::agent::transport::line_editor::{LineEditor, ReadOutcome, TerminalState};
use crate::agent::transport::render::{TerminalRenderer, request_line, session_line};

/// The local commands, handled here and never sent to the model.
pub const HELP: &str = "/help          this list\n\
/clear         clear the screen\n\
/exit, /quit   end the session\n\
Ctrl+C         cancel the input or the running request; twice in a row: exit\n\
Ctrl+D         exit (on an empty line)";

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
}

impl Default for Terminal {
    fn default() -> Self {
        Self::new()
    }
}

impl Terminal {
    /// A terminal transport.
    pub fn new() -> Self {
        Self {
            ask: Arc::new(TerminalAsk::default()),
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
        let screen = TerminalRenderer::new(std::io::stdout());
        println!("{banner}");
        println!("\x1b[2mType /help for commands, /exit to quit.\x1b[0m");
        let mut editor = Some(LineEditor::new());
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
            if line.starts_with('/') {
                match line {
                    "/help" => println!("{HELP}"),
                    "/clear" => {
                        print!("\x1b[2J\x1b[H");
                        let _ = std::io::stdout().flush();
                    }
                    "/exit" | "/quit" => break,
                    other => screen.error(&format!("unknown command {other}; try /help")),
                }
                continue;
            }
            tracing::info!(input = %line, "user request");
            // A SIGINT that arrived while no request ran must not cancel this one.
            while let Some(Some(())) = sigint.recv().now_or_never() {}
            let started = Instant::now();
            let renderer = TerminalRenderer::new(std::io::stdout());
            let report = tokio::select! {
                report = agent.run_turn(line, &renderer) => Ok(Some(report)),
                _ = sigint.recv() => Ok(None),
                name = termination(&mut sigterm, &mut sighup) => Err(name),
            };
            let report = match report {
                Ok(r) => r,
                Err(signal) => {
                    return Ok(end_by_signal(signal, saved.as_ref(), agent, session_start));
                }
            };
            match report {
                None => {
                    tracing::info!("request cancelled by the user");
                    renderer.error("request cancelled (Ctrl+C again to exit)");
                    armed = true;
                }
                Some(report) => {
                    match report.result {
                        Ok(TurnStop::Answered) => {}
                        Ok(TurnStop::BudgetDeclined) => {
                            renderer.info("stopped at the iteration budget")
                        }
                        Ok(TurnStop::Cancelled) => {
                            renderer.error("request cancelled (Ctrl+C again to exit)");
                            armed = true;
                        }
                        Err(CoreError::Provider(e)) => renderer.error(&e.to_string()),
                    }
                    renderer.info(&format!(
                        "turn: {} requests · {}",
                        report.model_calls,
                        request_line(&crate::agent::core::accounting::RequestStats {
                            duration: started.elapsed(),
                            usage: report.totals.usage,
                            cost_usd: report.totals.cost_usd,
                        })
                    ));
                }
            }
        }
        let summary = session_line(&agent.session_totals(), session_start.elapsed());
        tracing::info!(%summary, "session end");
        screen.info(&summary);
        Ok(SessionEnd::Exit)
    }
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
    let screen = TerminalRenderer::new(std::io::stdout());
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
    }
}
