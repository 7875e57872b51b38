//! Keys, decoded from the bytes a terminal sends (escape sequences, bracketed paste).

use super::*;

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
