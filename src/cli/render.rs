//! Text tables that fit 80 columns, and JSON output.

use serde_json::Value;
use std::io::{self, Write};

/// Output format chosen with `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// Aligned tables and key/value listings.
    #[default]
    Text,
    /// The documents themselves, as JSON.
    Json,
}

/// Width text output is fitted to when neither `COLUMNS` nor the terminal says otherwise.
pub const WIDTH: usize = 80;

/// True when the width is known (`COLUMNS`, or stdout is a terminal): only then may a table
/// leave columns out; a pipe or a file gets every column (cut, never missing).
pub fn width_known() -> bool {
    std::env::var("COLUMNS")
        .ok()
        .is_some_and(|c| c.trim().parse::<usize>().is_ok())
        || terminal_size::terminal_size().is_some()
}

/// The width to fit text to: `COLUMNS` when set to a number (at least 40), else the width of
/// the terminal on stdout, else [`WIDTH`] (a pipe, a file).
pub fn terminal_width() -> usize {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
    {
        return n.clamp(40, 1000);
    }
    terminal_size::terminal_size()
        .map(|(terminal_size::Width(w), _)| usize::from(w).clamp(40, 1000))
        .unwrap_or(WIDTH)
}

/// Splits `text` into lines of at most `width` characters: at spaces where it can, inside a
/// word only when the word alone is longer; the text's own line breaks are kept and control
/// characters become spaces. Nothing is dropped.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let para: String = para
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let para = para.trim_end();
        if para.is_empty() {
            lines.push(String::new());
            continue;
        }
        let mut line = String::new();
        let mut len = 0;
        for word in para.split(' ') {
            let mut word: Vec<char> = word.chars().collect();
            if len > 0 && len + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
                len = 0;
            }
            if len > 0 {
                line.push(' ');
                len += 1;
            }
            while len + word.len() > width {
                let rest = word.split_off(width - len);
                line.extend(word);
                lines.push(std::mem::take(&mut line));
                len = 0;
                word = rest;
            }
            len += word.len();
            line.extend(word);
        }
        lines.push(line);
    }
    while lines.last().is_some_and(String::is_empty) && lines.len() > 1 {
        lines.pop();
    }
    lines
}

/// [`wrap`] with an indent: the first line after `first`, the others after `rest`, every
/// line at most `width` characters.
pub fn wrap_indented(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let room = width.saturating_sub(first.chars().count().max(rest.chars().count()));
    wrap(text, room.max(10))
        .into_iter()
        .enumerate()
        .map(|(i, l)| format!("{}{l}", if i == 0 { first } else { rest }))
        .collect()
}

/// The width to fit what goes to standard error to: `COLUMNS` when set to a number (at least
/// 40), else the width of the terminal on stderr; none when neither says (a pipe, a file, the
/// journal: a message stays one line there, for grep).
pub fn stderr_width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
    {
        return Some(n.clamp(40, 1000));
    }
    terminal_size::terminal_size_of(io::stderr())
        .map(|(terminal_size::Width(w), _)| usize::from(w).clamp(40, 1000))
}

/// Splits a message (a warning, an error) into lines of at most `width` characters at spaces,
/// the lines after the first indented two spaces. A command quoted in backticks is one word
/// (never split: it goes whole onto the next line, longer than `width` when it alone is, as a
/// path that long is: both are copied, not read); the text's own line breaks are kept.
pub fn wrap_message(text: &str, width: usize) -> Vec<String> {
    const INDENT: &str = "  ";
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for para in text.split('\n') {
        if !lines.is_empty() || len > 0 {
            lines.push(std::mem::take(&mut line));
            line.push_str(INDENT);
            len = INDENT.len();
        }
        let fresh = len;
        for word in message_words(para) {
            let wl = word.chars().count();
            if len > fresh && len + 1 + wl > width {
                lines.push(std::mem::take(&mut line));
                line.push_str(INDENT);
                len = INDENT.len();
            } else if len > fresh {
                line.push(' ');
                len += 1;
            }
            line.push_str(&word);
            len += wl;
        }
    }
    lines.push(line);
    lines
}

/// The words of one line of a message: split at spaces, except inside a pair of backticks;
/// control characters become spaces. An unpaired backtick is an ordinary character.
fn message_words(para: &str) -> Vec<String> {
    let para: String = para
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let plain = || {
        para.split(' ')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    if para.matches('`').count() % 2 == 1 {
        return plain();
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in para.chars() {
        match c {
            '`' => {
                quoted = !quoted;
                word.push(c);
            }
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Writes `prefix` and `text` to standard error, wrapped to its width ([`wrap_message`])
/// when that is known.
pub fn eprint_message(prefix: &str, text: &str) {
    let mut err = io::stderr().lock();
    let text = format!("{prefix}{text}");
    let Some(width) = stderr_width() else {
        let _ = writeln!(err, "{text}");
        return;
    };
    for l in wrap_message(&text, width) {
        let _ = writeln!(err, "{l}");
    }
}

/// A warning on standard error (`warning: …`), wrapped to its width.
pub fn warning(text: &str) {
    eprint_message("warning: ", text);
}

/// An aligned table. The last column absorbs what is left of the width and is cut with `…`;
/// other columns are cut only when they alone would not fit.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    keep: Vec<usize>,
    droppable: Vec<usize>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
            keep: Vec::new(),
            droppable: Vec::new(),
        }
    }

    /// Leaves column `i` out when the terminal is too narrow for every column at its
    /// narrowest (columns marked so go in the order they were marked).
    pub fn droppable(mut self, i: usize) -> Table {
        self.droppable.push(i);
        self
    }

    /// Never cuts column `i` (ids that users copy).
    pub fn keep(mut self, i: usize) -> Table {
        self.keep.push(i);
        self
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True without rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Writes the table.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        fit_widths(&mut widths, &self.keep, &self.droppable);
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, w) in widths.iter().enumerate().take(n) {
                if *w == 0 {
                    continue;
                }
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                s.push_str(&format!("{:<w$}  ", fit(cell, *w), w = w));
            }
            s.trim_end().to_string()
        };
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        writeln!(out, "{}", line(&headers))?;
        for r in &self.rows {
            writeln!(out, "{}", line(r))?;
        }
        Ok(())
    }
}

/// Cuts `s` to `width` characters, ending with `…` when cut; newlines become spaces.
pub fn fit(s: &str, width: usize) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().count() <= width {
        return s;
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Writes a document as `key  value` lines, nested keys dotted, long values cut to the width.
pub fn write_fields(out: &mut dyn Write, doc: &Value) -> io::Result<()> {
    let mut pairs = Vec::new();
    flatten("", doc, &mut pairs);
    let kw = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0)
        .min(32);
    for (k, v) in pairs {
        let room = terminal_width().saturating_sub(kw + 2).max(16);
        let shown = if v.chars().count() > room {
            let note = format!(" ({} chars; --format json shows all)", v.chars().count());
            format!(
                "{}{note}",
                fit(&v, room.saturating_sub(note.chars().count()).max(8))
            )
        } else {
            v
        };
        writeln!(out, "{:<kw$}  {}", fit(&k, kw), shown, kw = kw)?;
    }
    Ok(())
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) if !m.is_empty() && prefix.matches('.').count() < 2 => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::String(s) => out.push((prefix.to_string(), s.clone())),
        Value::Null => out.push((prefix.to_string(), "-".to_string())),
        Value::Array(a) if a.iter().all(|x| x.is_string()) => out.push((
            prefix.to_string(),
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        )),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// Writes one JSON value, pretty, with a newline.
pub fn write_json(out: &mut dyn Write, v: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(io::Error::other)?;
    writeln!(out)
}

/// Streams a JSON array whose elements are produced one at a time, so a listing never holds
/// every document in memory.
pub struct JsonArrayWriter<'a> {
    out: &'a mut dyn Write,
    first: bool,
}

impl<'a> JsonArrayWriter<'a> {
    /// Starts the array.
    pub fn start(out: &'a mut dyn Write) -> io::Result<Self> {
        out.write_all(b"[")?;
        Ok(JsonArrayWriter { out, first: true })
    }

    /// Writes one element.
    pub fn element(&mut self, v: &impl serde::Serialize) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer_pretty(&mut *self.out, v).map_err(io::Error::other)
    }

    /// Writes one element already printed as JSON (pretty, as [`element`](Self::element)
    /// prints it).
    pub fn raw_element(&mut self, json: &[u8]) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        self.out.write_all(json)
    }

    /// Ends the array.
    pub fn finish(self) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"]\n" } else { b"\n]\n" })
    }
}

/// Shrinks the widest columns (never those in `keep`, never below 8) until a line of these
/// widths, two spaces apart, fits in [`terminal_width`].
pub fn fit_widths(widths: &mut [usize], keep: &[usize], droppable: &[usize]) {
    let total = |w: &[usize]| {
        let shown: Vec<usize> = w.iter().copied().filter(|w| *w > 0).collect();
        shown.iter().sum::<usize>() + 2 * shown.len().saturating_sub(1)
    };
    let room = terminal_width();
    // First leave out columns (in the order given) while even every column at its
    // narrowest (8, kept columns whole) would be wider than the terminal; 0 = not shown.
    let narrowest = |w: &[usize]| -> Vec<usize> {
        w.iter()
            .enumerate()
            .map(|(i, w)| if keep.contains(&i) { *w } else { (*w).min(8) })
            .collect()
    };
    for &d in droppable.iter().filter(|_| width_known()) {
        if total(&narrowest(widths)) <= room {
            break;
        }
        if let Some(w) = widths.get_mut(d) {
            *w = 0;
        }
    }
    // Then narrow the widest column that may be cut, one character at a time.
    while total(widths) > room {
        let Some((i, _)) = widths
            .iter()
            .enumerate()
            .filter(|(i, w)| !keep.contains(i) && **w > 8)
            .max_by_key(|(_, w)| **w)
        else {
            break;
        };
        widths[i] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_fits_80_columns() {
        let mut t = Table::new(&["ID", "TITLE"]);
        t.row(vec!["x".repeat(100), "y".repeat(200)]);
        t.row(vec!["short".into(), "line\nbreak".into()]);
        let mut buf = Vec::new();
        t.write(&mut buf).unwrap();
        let s = String::from_utf8(buf).unwrap();
        for l in s.lines() {
            assert!(l.chars().count() <= WIDTH, "{l:?}");
        }
        assert!(s.contains("line break"));
    }

    #[test]
    fn messages_wrap_at_spaces_but_never_inside_a_command() {
        let cmd = "`orchestrator edit-project notes --directory DIR`";
        let text = format!(
            "warning: /home/rita/proejcts/notes does not exist on this machine (lab-7); jobs fail: create it or change it ({cmd}).\nsecond   line"
        );
        for width in [40, 80, 160] {
            let lines = wrap_message(&text, width);
            for (i, l) in lines.iter().enumerate() {
                assert!(
                    l.chars().count() <= width || l.trim() == format!("({cmd})."),
                    "{width}: {l:?}"
                );
                assert_eq!(i > 0, l.starts_with("  "), "{width}: {l:?}");
            }
            let joined = lines.join(" ");
            assert!(joined.contains(&format!("({cmd}).")), "{width}: {lines:?}");
            let words: Vec<&str> = joined.split_whitespace().collect();
            let want: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(words, want, "{width}: nothing lost or added");
        }
        assert_eq!(wrap_message("a `b c", 3), ["a", "  `b", "  c"]);
        assert_eq!(wrap_message("", 80), [""]);
    }

    #[test]
    fn json_array_streams() {
        let mut buf = Vec::new();
        let mut w = JsonArrayWriter::start(&mut buf).unwrap();
        w.element(&1).unwrap();
        w.element(&serde_json::json!({"a": 2})).unwrap();
        w.finish().unwrap();
        let v: Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v, serde_json::json!([1, {"a": 2}]));
        let mut empty = Vec::new();
        JsonArrayWriter::start(&mut empty)
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&empty).unwrap(),
            serde_json::json!([])
        );
    }
}
