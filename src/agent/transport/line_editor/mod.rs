//! A small raw-mode line editor over termios: history (optionally kept in a private file),
//! cursor movement, editing keys, Ctrl+C, multi-line input and bracketed paste.
//!
//! Multi-line input: Alt+Enter (ESC CR) or a trailing backslash before Enter inserts a newline;
//! Enter alone submits. Bracketed paste (`ESC[?2004h`, switched on only while a line is read
//! and off again before anything else runs, on Ctrl+Z and on exit) makes a paste arrive as one
//! piece between `ESC[200~` and `ESC[201~`: its newlines are kept and nothing is submitted
//! until Enter is pressed.
//!
//! Written here rather than pulled in (rustyline, reedline) because the agent needs a prompt,
//! history and Ctrl+C — a few hundred lines — not a crate that brings its own terminal stack.
//! When stdin is not a terminal it reads plain lines, so pipes and tests work too.

use nix::sys::termios::{self, InputFlags, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

mod buffer;
mod keys;
mod screen;

pub use buffer::LineBuffer;
pub use keys::{Key, read_key};
use screen::{Drawn, RawMode, read_byte};
pub use screen::{TerminalState, display_width, is_tty, read_hidden, terminal_width};

/// Switches bracketed paste on.
pub const PASTE_ON: &str = "\x1b[?2004h";
/// Switches bracketed paste off.
pub const PASTE_OFF: &str = "\x1b[?2004l";
/// Largest paste kept (characters beyond it are read and dropped).
pub const MAX_PASTE_CHARS: usize = 1 << 20;
/// The prompt of continuation lines (as wide as the main prompt).
const CONTINUATION: &str = "\x1b[2m…\x1b[0m ";

/// What reading a line produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Enter was pressed.
    Line(String),
    /// Ctrl+C; `had_input` tells whether there was text on the line (which is discarded).
    Interrupted {
        /// Whether the line had text when Ctrl+C came.
        had_input: bool,
    },
    /// Ctrl+D on an empty line, or end of input.
    Eof,
}

/// The line editor: a history (kept in a private file when one is given) and the terminal it
/// reads from.
#[derive(Debug, Default)]
pub struct LineEditor {
    history: Vec<String>,
    file: Option<PathBuf>,
}

/// Most entries kept in the history (and its file).
pub const MAX_HISTORY: usize = 1000;
/// Largest history file read (a bigger one is read up to here).
const MAX_HISTORY_FILE: u64 = 8 << 20;

impl LineEditor {
    /// An editor with an empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// An editor whose history is loaded from and saved to `path` (one JSON string per line,
    /// so multi-line entries survive; mode 0600, replaced atomically, the last
    /// [`MAX_HISTORY`] entries). A missing file is an empty history; an unreadable one is
    /// reported and replaced by the next save.
    pub fn with_history_file(path: &Path) -> (Self, Option<String>) {
        let mut warning = None;
        let history = match read_bounded(path, MAX_HISTORY_FILE) {
            Ok(text) => {
                let mut entries = Vec::new();
                for (n, line) in text.lines().enumerate() {
                    match serde_json::from_str::<String>(line) {
                        Ok(entry) => entries.push(entry),
                        Err(e) => {
                            warning = Some(format!(
                                "{}: line {}: {e}; that line is skipped",
                                path.display(),
                                n + 1
                            ));
                        }
                    }
                }
                let skip = entries.len().saturating_sub(MAX_HISTORY);
                entries.split_off(skip)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                warning = Some(format!("{}: {e}", path.display()));
                Vec::new()
            }
        };
        (
            Self {
                history,
                file: Some(path.to_path_buf()),
            },
            warning,
        )
    }

    /// The history, oldest first.
    pub fn history(&self) -> &[String] {
        &self.history
    }

    fn remember(&mut self, text: &str) {
        if text.trim().is_empty() || self.history.last().is_some_and(|l| l == text) {
            return;
        }
        self.history.push(text.to_string());
        if self.history.len() > MAX_HISTORY {
            self.history.remove(0);
        }
        if let Some(path) = &self.file {
            let mut body = String::new();
            for entry in &self.history {
                body.push_str(&serde_json::Value::String(entry.clone()).to_string());
                body.push('\n');
            }
            if let Err(e) = crate::agent::private_file::write_private(path, &body) {
                tracing::warn!(error = %e, "input history not saved");
            }
        }
    }

    /// Show `prompt` and read one entry from stdin (several lines when the user inserts
    /// newlines or pastes them).
    pub fn read_line(&mut self, prompt: &str) -> io::Result<ReadOutcome> {
        let mut out = io::stdout();
        if !is_tty(&io::stdin()) {
            write!(out, "{prompt}")?;
            out.flush()?;
            let mut line = String::new();
            return Ok(match io::stdin().lock().read_line(&mut line)? {
                0 => ReadOutcome::Eof,
                _ => ReadOutcome::Line(line.trim_end_matches(['\n', '\r']).to_string()),
            });
        }
        let raw = RawMode::enable()?;
        let width = terminal_width();
        let outcome = self.edit_with(prompt, width, &mut read_byte, &mut out, &mut || {
            raw.suspend()
        });
        drop(raw);
        outcome
    }

    /// The editing loop, over any byte source and output (testable without a terminal), for
    /// an 80-column screen.
    pub fn edit(
        &mut self,
        prompt: &str,
        next_byte: &mut dyn FnMut() -> Option<u8>,
        out: &mut dyn Write,
    ) -> io::Result<ReadOutcome> {
        self.edit_with(prompt, 80, next_byte, out, &mut || {})
    }

    fn edit_with(
        &mut self,
        prompt: &str,
        width: usize,
        next_byte: &mut dyn FnMut() -> Option<u8>,
        out: &mut dyn Write,
        suspend: &mut dyn FnMut(),
    ) -> io::Result<ReadOutcome> {
        let mut line = LineBuffer::default();
        let mut screen = Drawn::new(prompt, width);
        // Position in history while browsing; `None` = editing the new line.
        let mut browsing: Option<usize> = None;
        let mut draft = String::new();
        screen.redraw(out, &line)?;
        loop {
            let Some(key) = read_key(next_byte) else {
                screen.finish(out, &line)?;
                return Ok(ReadOutcome::Eof);
            };
            match key {
                // A backslash right before the cursor at the end: a newline instead of Enter.
                Key::Enter
                    if line.cursor() == line.chars.len() && line.chars.last() == Some(&'\\') =>
                {
                    line.apply(Key::Backspace);
                    line.apply(Key::Newline);
                }
                Key::Enter => {
                    screen.finish(out, &line)?;
                    let text = line.text();
                    self.remember(&text);
                    return Ok(ReadOutcome::Line(text));
                }
                Key::Interrupt => {
                    line.cursor = line.chars.len();
                    screen.redraw(out, &line)?;
                    write!(out, "^C\r\n")?;
                    out.flush()?;
                    return Ok(ReadOutcome::Interrupted {
                        had_input: !line.text().is_empty(),
                    });
                }
                Key::EndOfFile if line.text().is_empty() => {
                    screen.finish(out, &line)?;
                    return Ok(ReadOutcome::Eof);
                }
                Key::EndOfFile => {
                    line.apply(Key::Delete);
                }
                Key::Suspend => {
                    screen.finish(out, &line)?;
                    suspend();
                    screen = Drawn::new(prompt, width);
                }
                Key::Up | Key::Down if line.is_multiline() && line.move_line(key == Key::Up) => {}
                Key::Up => {
                    let next = match browsing {
                        None if !self.history.is_empty() => {
                            draft = line.text();
                            Some(self.history.len() - 1)
                        }
                        Some(i) if i > 0 => Some(i - 1),
                        other => other,
                    };
                    if let Some(i) = next {
                        browsing = Some(i);
                        line.set(&self.history[i]);
                    }
                }
                Key::Down => match browsing {
                    Some(i) if i + 1 < self.history.len() => {
                        browsing = Some(i + 1);
                        line.set(&self.history[i + 1]);
                    }
                    Some(_) => {
                        browsing = None;
                        line.set(&draft);
                    }
                    None => {}
                },
                Key::ClearScreen => {
                    write!(out, "\x1b[2J\x1b[H")?;
                    screen = Drawn::new(prompt, width);
                }
                other => {
                    line.apply(other);
                }
            }
            screen.redraw(out, &line)?;
        }
    }
}

/// Reads at most `limit` bytes of `path`.
fn read_bounded(path: &Path, limit: u64) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let f = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    f.take(limit).read_to_end(&mut bytes)?;
    text.push_str(&String::from_utf8_lossy(&bytes));
    Ok(text)
}

#[cfg(test)]
mod tests;
