//! A small raw-mode line editor over termios: history, cursor movement, editing keys, Ctrl+C.
//!
//! Written here rather than pulled in (rustyline, reedline) because the agent needs a prompt,
//! history and Ctrl+C — a few hundred lines — not a crate that brings its own terminal stack.
//! When stdin is not a terminal it reads plain lines, so pipes and tests work too.

use nix::sys::termios::{self, InputFlags, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use std::io::{self, BufRead, IsTerminal, Write};

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

/// A key, decoded from the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter.
    Enter,
    /// Backspace.
    Backspace,
    /// Delete (forward).
    Delete,
    /// Cursor left.
    Left,
    /// Cursor right.
    Right,
    /// History up.
    Up,
    /// History down.
    Down,
    /// Start of line.
    Home,
    /// End of line.
    End,
    /// Ctrl+C.
    Interrupt,
    /// Ctrl+D.
    EndOfFile,
    /// Ctrl+U: delete to the start.
    KillToStart,
    /// Ctrl+K: delete to the end.
    KillToEnd,
    /// Ctrl+W: delete the previous word.
    DeleteWord,
    /// Ctrl+L: clear the screen.
    ClearScreen,
    /// Anything else.
    Ignored,
}

/// Decode one key from `next_byte` (which blocks for the next input byte; `None` at EOF).
pub fn read_key(next_byte: &mut dyn FnMut() -> Option<u8>) -> Option<Key> {
    let b = next_byte()?;
    Some(match b {
        b'\r' | b'\n' => Key::Enter,
        0x7f | 0x08 => Key::Backspace,
        0x01 => Key::Home,
        0x02 => Key::Left,
        0x03 => Key::Interrupt,
        0x04 => Key::EndOfFile,
        0x05 => Key::End,
        0x06 => Key::Right,
        0x0b => Key::KillToEnd,
        0x0c => Key::ClearScreen,
        0x0e => Key::Down,
        0x10 => Key::Up,
        0x15 => Key::KillToStart,
        0x17 => Key::DeleteWord,
        0x1b => match next_byte()? {
            b'[' => {
                let mut params = Vec::new();
                loop {
                    let c = next_byte()?;
                    if (0x40..=0x7e).contains(&c) {
                        break match (c, params.as_slice()) {
                            (b'A', _) => Key::Up,
                            (b'B', _) => Key::Down,
                            (b'C', _) => Key::Right,
                            (b'D', _) => Key::Left,
                            (b'H', _) => Key::Home,
                            (b'F', _) => Key::End,
                            (b'~', b"3") => Key::Delete,
                            (b'~', b"1" | b"7") => Key::Home,
                            (b'~', b"4" | b"8") => Key::End,
                            _ => Key::Ignored,
                        };
                    }
                    params.push(c);
                }
            }
            b'O' => match next_byte()? {
                b'H' => Key::Home,
                b'F' => Key::End,
                b'A' => Key::Up,
                b'B' => Key::Down,
                b'C' => Key::Right,
                b'D' => Key::Left,
                _ => Key::Ignored,
            },
            _ => Key::Ignored,
        },
        c if c < 0x20 => Key::Ignored,
        c if c < 0x80 => Key::Char(c as char),
        lead => {
            let len = match lead {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => return Some(Key::Ignored),
            };
            let mut bytes = vec![lead];
            for _ in 1..len {
                bytes.push(next_byte()?);
            }
            match std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.chars().next())
            {
                Some(ch) => Key::Char(ch),
                None => Key::Ignored,
            }
        }
    })
}

/// The editable line: characters and a cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineBuffer {
    chars: Vec<char>,
    cursor: usize,
}

impl LineBuffer {
    /// The text.
    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    /// Cursor position in characters.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Replace the text, cursor at the end.
    pub fn set(&mut self, text: &str) {
        self.chars = text.chars().collect();
        self.cursor = self.chars.len();
    }

    /// Apply an editing key; returns false for keys that are not edits.
    pub fn apply(&mut self, key: Key) -> bool {
        match key {
            Key::Char(c) => {
                self.chars.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.chars.remove(self.cursor);
            }
            Key::Delete if self.cursor < self.chars.len() => {
                self.chars.remove(self.cursor);
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.chars.len()),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.chars.len(),
            Key::KillToStart => {
                self.chars.drain(..self.cursor);
                self.cursor = 0;
            }
            Key::KillToEnd => self.chars.truncate(self.cursor),
            Key::DeleteWord => {
                let mut start = self.cursor;
                while start > 0 && self.chars[start - 1] == ' ' {
                    start -= 1;
                }
                while start > 0 && self.chars[start - 1] != ' ' {
                    start -= 1;
                }
                self.chars.drain(start..self.cursor);
                self.cursor = start;
            }
            Key::Backspace | Key::Delete => {}
            _ => return false,
        }
        true
    }
}

/// Puts the terminal (stdin) in raw mode and restores it when dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enable() -> io::Result<Self> {
        let stdin = io::stdin();
        let saved = termios::tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        raw.input_flags &= !(InputFlags::ICRNL
            | InputFlags::IXON
            | InputFlags::BRKINT
            | InputFlags::INPCK
            | InputFlags::ISTRIP);
        raw.local_flags &=
            !(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG | LocalFlags::IEXTEN);
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(&stdin, SetArg::TCSADRAIN, &raw)?;
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(io::stdin(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// The terminal's attributes, saved so they can be restored on an abrupt exit (a signal while
/// a reader thread holds the terminal in raw mode).
pub struct TerminalState(Termios);

impl TerminalState {
    /// Save stdin's attributes; `None` when stdin is not a terminal.
    pub fn save() -> Option<Self> {
        let stdin = io::stdin();
        if !is_tty(&stdin) {
            return None;
        }
        termios::tcgetattr(&stdin).ok().map(Self)
    }

    /// Put the saved attributes back.
    pub fn restore(&self) {
        let _ = termios::tcsetattr(io::stdin(), SetArg::TCSANOW, &self.0);
    }
}

/// Whether `f` (stdin, stdout, a file) is a terminal.
pub fn is_tty(f: &impl IsTerminal) -> bool {
    f.is_terminal()
}

fn read_byte() -> Option<u8> {
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(io::stdin(), &mut b) {
            Ok(1) => return Some(b[0]),
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return None,
        }
    }
}

/// Read one line without echo (for API keys); `None` at end of input. Off a terminal it reads a
/// plain line.
pub fn read_hidden(prompt: &str) -> io::Result<Option<String>> {
    let stdin = io::stdin();
    let mut out = io::stderr();
    // Echo goes off before the prompt appears: whatever is typed (or pasted) once the prompt
    // is visible is never echoed.
    let saved = if is_tty(&stdin) {
        // Only ECHO is cleared; canonical input stays on.
        let t = termios::tcgetattr(&stdin)?;
        let mut quiet = t.clone();
        quiet.local_flags &= !LocalFlags::ECHO;
        termios::tcsetattr(&stdin, SetArg::TCSADRAIN, &quiet)?;
        Some(t)
    } else {
        None
    };
    write!(out, "{prompt}")?;
    out.flush()?;
    let mut line = String::new();
    let n = stdin.lock().read_line(&mut line);
    if let Some(t) = saved {
        let _ = termios::tcsetattr(&stdin, SetArg::TCSADRAIN, &t);
        writeln!(out)?;
    }
    Ok(match n? {
        0 => None,
        _ => Some(line.trim_end_matches(['\n', '\r']).to_string()),
    })
}

/// The line editor: a history and the terminal it reads from.
#[derive(Debug, Default)]
pub struct LineEditor {
    history: Vec<String>,
}

/// Most lines kept in the history.
const MAX_HISTORY: usize = 1000;

impl LineEditor {
    /// An editor with an empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// The history, oldest first.
    pub fn history(&self) -> &[String] {
        &self.history
    }

    /// Show `prompt` and read one line from stdin.
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
        let outcome = self.edit(prompt, &mut read_byte, &mut out);
        drop(raw);
        outcome
    }

    /// The editing loop, over any byte source and output (testable without a terminal).
    pub fn edit(
        &mut self,
        prompt: &str,
        next_byte: &mut dyn FnMut() -> Option<u8>,
        out: &mut dyn Write,
    ) -> io::Result<ReadOutcome> {
        let mut line = LineBuffer::default();
        // Position in history while browsing; `None` = editing the new line.
        let mut browsing: Option<usize> = None;
        let mut draft = String::new();
        redraw(out, prompt, &line)?;
        loop {
            let Some(key) = read_key(next_byte) else {
                write!(out, "\r\n")?;
                out.flush()?;
                return Ok(ReadOutcome::Eof);
            };
            match key {
                Key::Enter => {
                    write!(out, "\r\n")?;
                    out.flush()?;
                    let text = line.text();
                    if !text.trim().is_empty() && self.history.last() != Some(&text) {
                        self.history.push(text.clone());
                        if self.history.len() > MAX_HISTORY {
                            self.history.remove(0);
                        }
                    }
                    return Ok(ReadOutcome::Line(text));
                }
                Key::Interrupt => {
                    write!(out, "^C\r\n")?;
                    out.flush()?;
                    return Ok(ReadOutcome::Interrupted {
                        had_input: !line.text().is_empty(),
                    });
                }
                Key::EndOfFile if line.text().is_empty() => {
                    write!(out, "\r\n")?;
                    out.flush()?;
                    return Ok(ReadOutcome::Eof);
                }
                Key::EndOfFile => {
                    line.apply(Key::Delete);
                }
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
                Key::ClearScreen => write!(out, "\x1b[2J\x1b[H")?,
                other => {
                    line.apply(other);
                }
            }
            redraw(out, prompt, &line)?;
        }
    }
}

fn redraw(out: &mut dyn Write, prompt: &str, line: &LineBuffer) -> io::Result<()> {
    let text = line.text();
    write!(out, "\r\x1b[K{prompt}{text}")?;
    let back = text.chars().count() - line.cursor();
    if back > 0 {
        write!(out, "\x1b[{back}D")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(editor: &mut LineEditor, input: &[u8]) -> ReadOutcome {
        let mut bytes = input.iter().copied();
        let mut out = Vec::new();
        editor.edit("> ", &mut || bytes.next(), &mut out).unwrap()
    }

    #[test]
    fn editing_keys() {
        let mut e = LineEditor::new();
        // type "helo", left, insert "l", end, "!" → "hello!"
        assert_eq!(
            run(&mut e, b"helo\x1b[Dl\x1b[F!\r"),
            ReadOutcome::Line("hello!".into())
        );
        // backspace and Ctrl+U
        assert_eq!(
            run(&mut e, b"abc\x7f\x7fz\r"),
            ReadOutcome::Line("az".into())
        );
        assert_eq!(run(&mut e, b"junk\x15ok\r"), ReadOutcome::Line("ok".into()));
        // Ctrl+W deletes a word
        assert_eq!(
            run(&mut e, b"one two\x17three\r"),
            ReadOutcome::Line("one three".into())
        );
        // UTF-8 and Home
        assert_eq!(
            run(&mut e, "é\x01x\r".as_bytes()),
            ReadOutcome::Line("xé".into())
        );
    }

    #[test]
    fn history_up_down() {
        let mut e = LineEditor::new();
        run(&mut e, b"first\r");
        run(&mut e, b"second\r");
        assert_eq!(
            run(&mut e, b"\x1b[A\x1b[A\r"),
            ReadOutcome::Line("first".into())
        );
        assert_eq!(
            run(&mut e, b"draft\x1b[A\x1b[B\r"),
            ReadOutcome::Line("draft".into())
        );
        // a recalled line is appended again; a repeat of the last line is not
        run(&mut e, b"\x1b[A\r");
        assert_eq!(
            e.history(),
            &["first", "second", "first", "draft"].map(String::from)
        );
    }

    #[test]
    fn interrupt_and_eof() {
        let mut e = LineEditor::new();
        assert_eq!(
            run(&mut e, b"text\x03"),
            ReadOutcome::Interrupted { had_input: true }
        );
        assert_eq!(
            run(&mut e, b"\x03"),
            ReadOutcome::Interrupted { had_input: false }
        );
        assert_eq!(run(&mut e, b"\x04"), ReadOutcome::Eof);
        assert_eq!(run(&mut e, b"ab"), ReadOutcome::Eof);
    }
}
