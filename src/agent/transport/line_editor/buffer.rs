//! The text being edited and what each key does to it; no terminal involved.

use super::*;

/// The editable text: characters (newlines included) and a cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineBuffer {
    pub(super) chars: Vec<char>,
    pub(super) cursor: usize,
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
