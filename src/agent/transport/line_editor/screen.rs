//! The terminal: raw mode and its restoring, hidden input, widths, and drawing a (multi-line)
//! buffer under a prompt.

use super::*;

/// Puts the terminal (stdin) in raw mode and restores it when dropped.
pub(super) struct RawMode {
    pub(super) saved: Termios,
}

impl RawMode {
    pub(super) fn enable() -> io::Result<Self> {
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
    pub(super) fn suspend(&self) {
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

pub(super) fn read_byte() -> Option<u8> {
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
pub(super) struct Drawn<'a> {
    pub(super) prompt: &'a str,
    pub(super) prompt_width: usize,
    pub(super) width: usize,
    /// Rows between the top of the input and the row the cursor is on.
    pub(super) cursor_row: usize,
}

impl<'a> Drawn<'a> {
    pub(super) fn new(prompt: &'a str, width: usize) -> Self {
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

    pub(super) fn redraw(&mut self, out: &mut dyn Write, line: &LineBuffer) -> io::Result<()> {
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
    pub(super) fn finish(&mut self, out: &mut dyn Write, line: &LineBuffer) -> io::Result<()> {
        let (end_row, _) = self.place(&line.chars, line.chars.len());
        if end_row > self.cursor_row {
            write!(out, "\x1b[{}B", end_row - self.cursor_row)?;
        }
        write!(out, "\r\n")?;
        self.cursor_row = 0;
        out.flush()
    }
}
