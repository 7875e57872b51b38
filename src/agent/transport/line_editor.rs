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

/// A key, decoded from the byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Alt+Enter: insert a newline.
    Newline,
    /// A bracketed paste: its text, newlines kept.
    Paste(String),
    /// Ctrl+Z: suspend.
    Suspend,
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
        0x1a => Key::Suspend,
        0x1b => match next_byte()? {
            b'\r' | b'\n' => Key::Newline,
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
                            (b'~', b"200") => read_paste(next_byte)?,
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

/// The body of a bracketed paste, up to `ESC[201~`: CR and CRLF become newlines, other
/// control characters except tab are dropped, and at most [`MAX_PASTE_CHARS`] are kept.
fn read_paste(next_byte: &mut dyn FnMut() -> Option<u8>) -> Option<Key> {
    const END: &[u8] = b"\x1b[201~";
    let mut bytes = Vec::new();
    loop {
        bytes.push(next_byte()?);
        if bytes.ends_with(END) {
            bytes.truncate(bytes.len() - END.len());
            break;
        }
        // Keep memory bounded: drop the middle of an endless paste, keeping the tail that may
        // hold the start of the end marker.
        if bytes.len() > MAX_PASTE_CHARS * 4 + END.len() {
            bytes.drain(MAX_PASTE_CHARS * 4..bytes.len() - END.len());
        }
    }
    let text = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
    let text: String = text
        .chars()
        .map(|c| if c == '\r' { '\n' } else { c })
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .take(MAX_PASTE_CHARS)
        .collect();
    Some(Key::Paste(text))
}

/// The editable text: characters (newlines included) and a cursor.
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

    /// Whether the text spans several lines.
    pub fn is_multiline(&self) -> bool {
        self.chars.contains(&'\n')
    }

    /// Line and column of the cursor.
    fn cursor_line_col(&self) -> (usize, usize) {
        let before = &self.chars[..self.cursor];
        let line = before.iter().filter(|c| **c == '\n').count();
        let col = before.iter().rev().take_while(|c| **c != '\n').count();
        (line, col)
    }

    /// Move the cursor one line up (`up`) or down, keeping the column where the line allows;
    /// false when there is no such line.
    pub fn move_line(&mut self, up: bool) -> bool {
        let (line, col) = self.cursor_line_col();
        let lines: Vec<usize> = std::iter::once(0)
            .chain(
                self.chars
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c == '\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        let target = match (up, line) {
            (true, 0) => return false,
            (true, l) => l - 1,
            (false, l) if l + 1 >= lines.len() => return false,
            (false, l) => l + 1,
        };
        let start = lines[target];
        let end = lines
            .get(target + 1)
            .map_or(self.chars.len(), |next| next - 1);
        self.cursor = (start + col).min(end);
        true
    }

    fn insert_str(&mut self, text: &str) {
        for c in text.chars() {
            self.chars.insert(self.cursor, c);
            self.cursor += 1;
        }
    }

    /// Apply an editing key; returns false for keys that are not edits.
    pub fn apply(&mut self, key: Key) -> bool {
        match key {
            Key::Char(c) => {
                self.chars.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Newline => self.insert_str("\n"),
            Key::Paste(text) => self.insert_str(&text),
            Key::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.chars.remove(self.cursor);
            }
            Key::Delete if self.cursor < self.chars.len() => {
                self.chars.remove(self.cursor);
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.chars.len()),
            Key::Home => {
                while self.cursor > 0 && self.chars[self.cursor - 1] != '\n' {
                    self.cursor -= 1;
                }
            }
            Key::End => {
                while self.cursor < self.chars.len() && self.chars[self.cursor] != '\n' {
                    self.cursor += 1;
                }
            }
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
        let mut out = io::stdout();
        let _ = write!(out, "{PASTE_ON}").and_then(|()| out.flush());
        Ok(Self { saved })
    }

    /// Give the terminal back for a while (Ctrl+Z): paste mode off, attributes restored, the
    /// process stopped; raw mode and paste mode again once it is continued.
    fn suspend(&self) {
        let mut out = io::stdout();
        let _ = write!(out, "{PASTE_OFF}").and_then(|()| out.flush());
        let stdin = io::stdin();
        let raw = termios::tcgetattr(&stdin).ok();
        let _ = termios::tcsetattr(&stdin, SetArg::TCSADRAIN, &self.saved);
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTSTP);
        if let Some(raw) = raw {
            let _ = termios::tcsetattr(&stdin, SetArg::TCSADRAIN, &raw);
        }
        let _ = write!(out, "{PASTE_ON}").and_then(|()| out.flush());
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let mut out = io::stdout();
        let _ = write!(out, "{PASTE_OFF}").and_then(|()| out.flush());
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

    /// Put the saved attributes back and switch bracketed paste off.
    pub fn restore(&self) {
        let mut out = io::stdout();
        let _ = write!(out, "{PASTE_OFF}").and_then(|()| out.flush());
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

/// The terminal's width in columns (stdout, then stdin; 80 when neither says).
pub fn terminal_width() -> usize {
    #[allow(unsafe_code)]
    fn ask(fd: i32) -> Option<usize> {
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own; the fd is only read.
        let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
        (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
    }
    ask(1).or_else(|| ask(0)).unwrap_or(80)
}

/// Columns `text` takes on screen: escape sequences take none, every other char one.
pub fn display_width(text: &str) -> usize {
    let mut width = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ params final
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            }
        } else if !c.is_control() {
            width += 1;
        }
    }
    width
}

/// Columns one character of the input takes as drawn (controls are shown as `^X` or `<U+…>`).
fn char_width(c: char) -> usize {
    if c.is_control()
        || !crate::agent::tools::display::visible_line(&c.to_string()).eq(&c.to_string())
    {
        crate::agent::tools::display::visible_line(&c.to_string())
            .chars()
            .count()
    } else {
        1
    }
}

/// What the editor drew last, so a redraw only rewrites the input's own rows: up to the first
/// of them, clear to the end of the screen, draw again, put the cursor back.
struct Drawn<'a> {
    prompt: &'a str,
    prompt_width: usize,
    width: usize,
    /// Rows between the top of the input and the row the cursor is on.
    cursor_row: usize,
}

impl<'a> Drawn<'a> {
    fn new(prompt: &'a str, width: usize) -> Self {
        Self {
            prompt,
            prompt_width: display_width(prompt),
            width: width.max(10),
            cursor_row: 0,
        }
    }

    /// Row and column of character offset `at` (a cursor position) when `line` is drawn.
    fn place(&self, chars: &[char], at: usize) -> (usize, usize) {
        let (mut row, mut col) = (0, self.prompt_width);
        for c in &chars[..at] {
            if *c == '\n' {
                row += 1;
                col = self.prompt_width;
            } else {
                col += char_width(*c);
                while col >= self.width {
                    row += 1;
                    col -= self.width;
                }
            }
        }
        (row, col)
    }

    fn redraw(&mut self, out: &mut dyn Write, line: &LineBuffer) -> io::Result<()> {
        let mut text = String::new();
        if self.cursor_row > 0 {
            text.push_str(&format!("\x1b[{}A", self.cursor_row));
        }
        text.push_str("\r\x1b[J");
        text.push_str(self.prompt);
        for (i, part) in line.text().split('\n').enumerate() {
            if i > 0 {
                text.push_str("\r\n");
                text.push_str(CONTINUATION);
            }
            text.push_str(&crate::agent::tools::display::visible_line(part));
        }
        let (end_row, end_col) = self.place(&line.chars, line.chars.len());
        if end_col == 0 && end_row > 0 && line.chars.last() != Some(&'\n') {
            // The text ends exactly at the margin: move to the next row so the cursor is
            // where the computation says.
            text.push_str("\r\n");
        }
        let (row, col) = self.place(&line.chars, line.cursor);
        if end_row > row {
            text.push_str(&format!("\x1b[{}A", end_row - row));
        }
        text.push('\r');
        if col > 0 {
            text.push_str(&format!("\x1b[{col}C"));
        }
        self.cursor_row = row;
        out.write_all(text.as_bytes())?;
        out.flush()
    }

    /// Leave the cursor below the input, at the start of a fresh row.
    fn finish(&mut self, out: &mut dyn Write, line: &LineBuffer) -> io::Result<()> {
        let (end_row, _) = self.place(&line.chars, line.chars.len());
        if end_row > self.cursor_row {
            write!(out, "\x1b[{}B", end_row - self.cursor_row)?;
        }
        write!(out, "\r\n")?;
        self.cursor_row = 0;
        out.flush()
    }
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

    #[test]
    fn alt_enter_and_trailing_backslash_insert_newlines() {
        let mut e = LineEditor::new();
        assert_eq!(
            run(&mut e, b"one\x1b\rtwo\r"),
            ReadOutcome::Line("one\ntwo".into())
        );
        assert_eq!(
            run(&mut e, b"first \\\rsecond\r"),
            ReadOutcome::Line("first \nsecond".into())
        );
        // a backslash not at the end is text
        assert_eq!(
            run(&mut e, b"a\\b\x1b[D\x1b[D\r"),
            ReadOutcome::Line("a\\b".into())
        );
    }

    #[test]
    fn a_bracketed_paste_is_one_piece_and_never_submits() {
        let mut e = LineEditor::new();
        // the paste's CR/LF are newlines, not Enter; its escape bytes are dropped
        let input = b"\x1b[200~line one\r\nline two\rline\x1b three\n\x1b[201~ and typed\r";
        assert_eq!(
            run(&mut e, input),
            ReadOutcome::Line("line one\nline two\nline three\n and typed".into())
        );
        // a paste that never ends is end of input, not a submission
        assert_eq!(run(&mut e, b"\x1b[200~rm -rf x\r"), ReadOutcome::Eof);
    }

    #[test]
    fn up_and_down_move_between_lines_of_a_multiline_entry() {
        let mut e = LineEditor::new();
        run(&mut e, b"older\r");
        // on the second line Up moves to the first; Home; insert
        assert_eq!(
            run(&mut e, b"abc\x1b\rdef\x1b[A\x01>\r"),
            ReadOutcome::Line(">abc\ndef".into())
        );
        // on the first line Up recalls history
        assert_eq!(
            run(&mut e, b"\x1b[A\r"),
            ReadOutcome::Line(">abc\ndef".into())
        );
    }

    #[test]
    fn redraw_stays_on_the_input_rows() {
        // A 3-line entry: every redraw goes up to the input's first row and clears below;
        // it never clears the whole screen.
        let mut e = LineEditor::new();
        let mut bytes = b"a\x1b\rb\x1b\rc\x1b[A\r".iter().copied();
        let mut out = Vec::new();
        e.edit("> ", &mut || bytes.next(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("\x1b[2J"), "{text:?}");
        assert!(text.contains("\x1b[2A\r\x1b[J> a"), "{text:?}");
    }

    #[test]
    fn history_file_survives_and_keeps_multiline_entries() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history");
        let (mut e, warning) = LineEditor::with_history_file(&path);
        assert!(warning.is_none());
        run(&mut e, b"one\x1b\rtwo\r");
        run(&mut e, b"three\r");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (mut again, _) = LineEditor::with_history_file(&path);
        assert_eq!(again.history(), &["one\ntwo", "three"].map(String::from));
        assert_eq!(
            run(&mut again, b"\x1b[A\x1b[A\r"),
            ReadOutcome::Line("one\ntwo".into())
        );
        // a damaged line is named and skipped, the rest kept
        std::fs::write(&path, "\"ok\"\nnot json\n").unwrap();
        let (e, warning) = LineEditor::with_history_file(&path);
        assert_eq!(e.history(), &["ok".to_string()]);
        assert!(warning.unwrap().contains("line 2"));
    }
}
