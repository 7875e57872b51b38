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
