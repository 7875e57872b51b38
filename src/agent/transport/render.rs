//! Rendering for the terminal: streamed text, dim reasoning, every tool call before it runs,
//! its result bounded after, timing and cost per request.

use parking_lot::Mutex;
use std::io::Write;
use std::time::Duration;

use crate::agent::core::CoreEvents;
use crate::agent::core::accounting::{RequestStats, Totals, cost_text};
use crate::agent::core::provider::StreamEvent;
use crate::agent::tools::display::{visible, visible_line};
use crate::agent::tools::subsystems::context::bound;
use crate::agent::tools::{ToolCall, ToolResult, ToolStatus};
use crate::agent::transport::line_editor::{is_tty, terminal_width};
use crate::agent::transport::markdown::Markdown;

/// Bytes of a tool's output shown on screen (the model gets more).
pub const SCREEN_OUTPUT_BYTES: usize = 2000;

const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const CYAN: &str = "\x1b[36m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Streaming {
    #[default]
    Nothing,
    Reasoning,
    Text,
}

/// Renders core events to a writer (stdout in the terminal).
pub struct TerminalRenderer<W: Write + Send> {
    out: Mutex<(W, Streaming, bool)>,
    /// Markdown rendering of answers (`None`: the text as it comes).
    markdown: Mutex<Option<Markdown>>,
    /// The answer text of the model call under way (or of the last one, until its step is
    /// in the history), kept for Ctrl+C; `true` once its call finished.
    partial: Mutex<(String, bool)>,
}

impl<W: Write + Send> TerminalRenderer<W> {
    /// A renderer writing to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out: Mutex::new((out, Streaming::Nothing, true)),
            markdown: Mutex::new(None),
            partial: Mutex::new((String::new(), false)),
        }
    }

    /// A renderer whose answers are rendered as markdown for a `width`-column screen
    /// (`color` off: no escape sequences in them).
    pub fn with_markdown(out: W, width: usize, color: bool) -> Self {
        let r = Self::new(out);
        *r.markdown.lock() = Some(Markdown::new(width, color));
        r
    }

    /// Write what the markdown renderer still holds (before anything else is shown).
    fn flush_markdown(&self) {
        let mut text = String::new();
        let at_start = {
            let mut md = self.markdown.lock();
            let Some(md) = md.as_mut() else { return };
            md.finish(&mut text);
            md.at_line_start()
        };
        if text.is_empty() {
            return;
        }
        self.with(|out, _, line_start| {
            write!(out, "{text}")?;
            *line_start = at_start || text.ends_with('\n');
            Ok(())
        });
    }

    /// The answer text streamed by the model call that a cancelled turn did not get to keep
    /// in its history (empty when every streamed answer is there).
    pub fn take_partial(&self) -> String {
        let mut p = self.partial.lock();
        p.1 = false;
        std::mem::take(&mut p.0)
    }

    /// Give the writer back (tests read what was rendered).
    pub fn into_inner(self) -> W {
        self.out.into_inner().0
    }

    fn with<F: FnOnce(&mut W, &mut Streaming, &mut bool) -> std::io::Result<()>>(&self, f: F) {
        let mut guard = self.out.lock();
        let (out, state, at_line_start) = &mut *guard;
        // A closed terminal is not worth failing the turn over.
        let _ = f(out, state, at_line_start).and_then(|()| out.flush());
    }

    /// Render an error (provider, network, cancelled) as an error.
    pub fn error(&self, message: &str) {
        self.flush_markdown();
        self.with(|out, state, at_start| {
            end_line(out, state, at_start)?;
            writeln!(out, "{RED}error:{RESET} {}", visible(message))
        });
    }

    /// A plain informational line.
    pub fn info(&self, message: &str) {
        self.flush_markdown();
        self.with(|out, state, at_start| {
            end_line(out, state, at_start)?;
            writeln!(out, "{DIM}{}{RESET}", visible(message))
        });
    }
}

impl TerminalRenderer<std::io::Stdout> {
    /// The renderer for the terminal: markdown wrapped to its width when stdout is a
    /// terminal (without colours when `NO_COLOR` is set), the text as it comes otherwise.
    pub fn stdout() -> Self {
        let out = std::io::stdout();
        if !is_tty(&out) {
            return Self::new(out);
        }
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Self::with_markdown(out, terminal_width(), color)
    }
}

fn end_line<W: Write>(
    out: &mut W,
    state: &mut Streaming,
    at_start: &mut bool,
) -> std::io::Result<()> {
    if *state == Streaming::Reasoning {
        write!(out, "{RESET}")?;
    }
    if !*at_start {
        writeln!(out)?;
        *at_start = true;
    }
    *state = Streaming::Nothing;
    Ok(())
}

impl<W: Write + Send> CoreEvents for TerminalRenderer<W> {
    fn stream(&self, event: &StreamEvent) {
        if let StreamEvent::Text(t) = event {
            let mut p = self.partial.lock();
            if p.1 {
                *p = (String::new(), false);
            }
            p.0.push_str(t);
        }
        let rendered = match event {
            StreamEvent::Text(t) => {
                let mut md = self.markdown.lock();
                md.as_mut().map(|md| {
                    let mut out = String::new();
                    md.push(&visible(t), &mut out);
                    (out, md.at_line_start())
                })
            }
            StreamEvent::Reasoning(_) => {
                self.flush_markdown();
                None
            }
        };
        self.with(|out, state, at_start| {
            let (want, text) = match event {
                StreamEvent::Reasoning(t) => (Streaming::Reasoning, t),
                StreamEvent::Text(t) => (Streaming::Text, t),
            };
            if let Some((text, line_start)) = &rendered {
                if *state != want {
                    end_line(out, state, at_start)?;
                    *state = want;
                }
                write!(out, "{text}")?;
                if !text.is_empty() {
                    *at_start = *line_start;
                }
                return Ok(());
            }
            if *state != want {
                end_line(out, state, at_start)?;
                if want == Streaming::Reasoning {
                    write!(out, "{DIM}")?;
                }
                *state = want;
            }
            write!(out, "{}", visible(text))?;
            if !text.is_empty() {
                *at_start = text.ends_with('\n');
            }
            Ok(())
        });
    }

    fn request_done(&self, stats: &RequestStats) {
        self.partial.lock().1 = true;
        self.flush_markdown();
        self.with(|out, state, at_start| {
            end_line(out, state, at_start)?;
            writeln!(out, "{DIM}  [{}]{RESET}", request_line(stats))
        });
    }

    fn tool_call(&self, call: &ToolCall) {
        self.flush_markdown();
        self.with(|out, state, at_start| {
            end_line(out, state, at_start)?;
            writeln!(
                out,
                "{CYAN}{BOLD}⏺ {}{RESET} {}",
                visible_line(&call.name),
                describe_call(call)
            )
        });
    }

    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        // The step (its text and calls) goes into the history with its results.
        *self.partial.lock() = (String::new(), false);
        self.flush_markdown();
        self.with(|out, state, at_start| {
            end_line(out, state, at_start)?;
            let head = match (result.status, result.exit_code) {
                (ToolStatus::Ok, Some(0)) | (ToolStatus::Ok, None) => {
                    format!("{DIM}  ⎿ {} ok", call.name)
                }
                (ToolStatus::Ok, Some(code)) => format!("{YELLOW}  ⎿ {} exit {code}", call.name),
                (ToolStatus::Denied, _) => format!("{YELLOW}  ⎿ {} denied", call.name),
                (ToolStatus::Cancelled, _) => format!("{YELLOW}  ⎿ {} cancelled", call.name),
                (ToolStatus::TimedOut, _) => format!("{RED}  ⎿ {} timed out", call.name),
                (ToolStatus::Error, _) => format!("{RED}  ⎿ {} error", call.name),
            };
            let cut = if result.truncated {
                " (output truncated)"
            } else {
                ""
            };
            writeln!(out, "{head}{cut}{RESET}")?;
            for text in [&result.stdout, &result.stderr] {
                let shown = bound(text.trim_end(), SCREEN_OUTPUT_BYTES);
                for line in shown.lines() {
                    writeln!(out, "{DIM}    {}{RESET}", visible(line))?;
                }
            }
            Ok(())
        });
    }
}

/// `run_command` shows the command itself; other tools their arguments.
pub fn describe_call(call: &ToolCall) -> String {
    let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
    if call.name == "run_command"
        && let Some(cmd) = args.get("command").and_then(|c| c.as_str())
    {
        return format!("$ {}", visible_line(cmd));
    }
    visible_line(&bound(&call.arguments, 300))
}

/// "1.23 s · 1200 in · 56 out · $0.0012" (or "cost unknown")
pub fn request_line(stats: &RequestStats) -> String {
    format!(
        "{} · {} in · {} out · {}",
        seconds(stats.duration),
        stats.usage.input_tokens,
        stats.usage.output_tokens,
        stats
            .cost()
            .map_or_else(|| "cost unknown".to_string(), |c| format!("${c:.4}"))
    )
}

/// "2 requests · 1.23 s · 1200 in · 56 out · $0.0012" for a turn.
pub fn turn_line(totals: &Totals, calls: u32) -> String {
    format!(
        "turn: {calls} requests · {} · {} in · {} out · {}",
        seconds(totals.model_time),
        totals.usage.input_tokens,
        totals.usage.output_tokens,
        cost_text(totals)
    )
}

/// The session summary printed at exit.
pub fn session_line(totals: &Totals, wall: Duration) -> String {
    format!(
        "session: {} requests · {} in model calls · {} total · {} in · {} out · {}",
        totals.requests,
        seconds(totals.model_time),
        seconds(wall),
        totals.usage.input_tokens,
        totals.usage.output_tokens,
        cost_text(totals)
    )
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::core::provider::Usage;

    #[test]
    fn renders_calls_results_and_stats() {
        let r = TerminalRenderer::new(Vec::new());
        r.stream(&StreamEvent::Reasoning("thinking".into()));
        r.stream(&StreamEvent::Text("Hello".into()));
        r.request_done(&RequestStats {
            duration: Duration::from_millis(1500),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 2,
            },
            cost_usd: 0.5,
            priced: true,
        });
        let call = ToolCall {
            id: "1".into(),
            name: "run_command".into(),
            arguments: r#"{"command":"ls"}"#.into(),
        };
        r.tool_call(&call);
        r.tool_result(&call, &ToolResult::ok("a\nb"));
        let text = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(
            text,
            "\x1b[2mthinking\x1b[0m\nHello\n\x1b[2m  [1.50 s · 10 in · 2 out · $0.5000]\x1b[0m\n\
             \x1b[36m\x1b[1m⏺ run_command\x1b[0m $ ls\n\x1b[2m  ⎿ run_command ok\x1b[0m\n\
             \x1b[2m    a\x1b[0m\n\x1b[2m    b\x1b[0m\n"
        );
    }
}
