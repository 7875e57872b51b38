//! Markdown for the terminal, rendered as it streams: headings, bullet and numbered lists,
//! block quotes, rules, **bold**, *italic*, `inline code` and fenced code blocks with simple
//! keyword highlighting, word-wrapped to the terminal width with a hanging indent.
//!
//! It never goes back: text is written a word at a time (a code line at a time inside a
//! fence), so a long answer costs about its own size in bytes, not a redraw per token. Its
//! input must already be sanitised (`display::visible`): the only escape sequences in the
//! output are the ones written here.

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const ITALIC: &str = "\x1b[3m";
const UNDERLINE: &str = "\x1b[4m";
const CODE: &str = "\x1b[36m";
const KEYWORD: &str = "\x1b[35m";
const STRING: &str = "\x1b[32m";

/// Words highlighted in code blocks (a union over common languages; simple on purpose).
const KEYWORDS: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "def",
    "default",
    "do",
    "elif",
    "else",
    "enum",
    "except",
    "export",
    "extends",
    "false",
    "False",
    "finally",
    "fn",
    "for",
    "from",
    "func",
    "function",
    "go",
    "if",
    "impl",
    "import",
    "in",
    "interface",
    "let",
    "loop",
    "match",
    "mod",
    "mut",
    "new",
    "nil",
    "None",
    "null",
    "package",
    "pub",
    "raise",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "super",
    "switch",
    "this",
    "throw",
    "trait",
    "true",
    "True",
    "try",
    "type",
    "use",
    "var",
    "void",
    "where",
    "while",
    "with",
    "yield",
    "then",
    "fi",
    "done",
    "esac",
    "local",
    "echo",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Nothing of the line seen yet (or only its first word, still in `head`).
    Start,
    /// Running text with this hanging indent.
    Text,
    /// A heading: bold to the end of the line.
    Heading,
    /// A line that may be a rule (`---`): kept until its end.
    MaybeRule,
    /// A code fence line or a line inside a fence: kept until its end.
    Code,
}

/// The streaming renderer's state.
#[derive(Debug)]
pub struct Markdown {
    width: usize,
    color: bool,
    col: usize,
    indent: usize,
    line: Line,
    head: String,
    word: String,
    space: bool,
    fence: bool,
    bold: bool,
    italic: bool,
    code: bool,
}

impl Markdown {
    /// A renderer for a `width`-column screen; `color` off writes no escape sequences.
    pub fn new(width: usize, color: bool) -> Self {
        Self {
            width: width.max(20),
            color,
            col: 0,
            indent: 0,
            line: Line::Start,
            head: String::new(),
            word: String::new(),
            space: false,
            fence: false,
            bold: false,
            italic: false,
            code: false,
        }
    }

    fn style<'a>(&self, code: &'a str) -> &'a str {
        if self.color { code } else { "" }
    }

    /// Render `text` (a streamed piece) into `out`.
    pub fn push(&mut self, text: &str, out: &mut String) {
        for c in text.chars() {
            self.char(c, out);
        }
    }

    /// Write what is still held (the last word or line) and end styles; the cursor is left
    /// where the text ended.
    pub fn finish(&mut self, out: &mut String) {
        match self.line {
            Line::Start if !self.head.is_empty() => {
                let head = std::mem::take(&mut self.head);
                self.classify(&head, out);
                self.flush_word(out);
            }
            Line::Code | Line::MaybeRule => {
                let line = std::mem::take(&mut self.head);
                self.whole_line(&line, out);
            }
            _ => self.flush_word(out),
        }
        self.end_styles(out);
        self.line = Line::Start;
        self.indent = 0;
    }

    /// Whether the output so far ended a line.
    pub fn at_line_start(&self) -> bool {
        self.col == 0 && self.word.is_empty() && self.head.is_empty()
    }

    fn char(&mut self, c: char, out: &mut String) {
        match self.line {
            Line::Start => {
                if c == '\n' {
                    let head = std::mem::take(&mut self.head);
                    if self.fence || head.trim_start().starts_with("```") || is_rule(&head) {
                        self.whole_line(&head, out);
                    } else {
                        self.classify(&head, out);
                        self.flush_word(out);
                        self.end_styles(out);
                    }
                    self.newline(out);
                    return;
                }
                self.head.push(c);
                if self.fence || self.head.trim_start().starts_with("```") {
                    self.line = Line::Code;
                    return;
                }
                // The first word decides what the line is.
                if c == ' ' && !self.head.trim().is_empty() {
                    let head = std::mem::take(&mut self.head);
                    self.classify(&head, out);
                }
            }
            Line::Code | Line::MaybeRule => {
                if c == '\n' {
                    let line = std::mem::take(&mut self.head);
                    self.whole_line(&line, out);
                    self.newline(out);
                } else {
                    self.head.push(c);
                }
            }
            Line::Text | Line::Heading => match c {
                '\n' => {
                    self.flush_word(out);
                    self.end_styles(out);
                    self.newline(out);
                }
                ' ' | '\t' => {
                    self.flush_word(out);
                    self.space = true;
                }
                _ => self.word.push(c),
            },
        }
    }

    /// Decide what a line is from its first word (`head` ends with the space after it, or is
    /// the whole line).
    fn classify(&mut self, head: &str, out: &mut String) {
        let lead = head.len() - head.trim_start().len();
        let first = head.trim();
        let lead_text = &head[..lead];
        let marker = |text: &str, this: &mut Self, out: &mut String| {
            out.push_str(lead_text);
            out.push_str(text);
            this.col = lead + text.chars().count();
            this.indent = this.col;
            this.line = Line::Text;
        };
        if !first.is_empty() && first.len() <= 6 && first.chars().all(|c| c == '#') {
            out.push_str(self.style(BOLD));
            if first.len() == 1 {
                out.push_str(self.style(UNDERLINE));
            }
            if !self.color {
                out.push_str(first);
                out.push(' ');
                self.col = first.len() + 1;
            }
            self.bold = true;
            self.line = Line::Heading;
        } else if matches!(first, "-" | "*" | "+") {
            marker("• ", self, out);
        } else if first.len() <= 4
            && first.len() >= 2
            && first.ends_with(['.', ')'])
            && first[..first.len() - 1].chars().all(|c| c.is_ascii_digit())
        {
            marker(&format!("{first} "), self, out);
        } else if first == ">" {
            let bar = format!("{}│{} ", self.style(DIM), self.style(RESET));
            out.push_str(lead_text);
            out.push_str(&bar);
            self.col = lead + 2;
            self.indent = self.col;
            self.line = Line::Text;
        } else if first.len() >= 3
            && (first.chars().all(|c| c == '-')
                || first.chars().all(|c| c == '*')
                || first.chars().all(|c| c == '_'))
        {
            self.line = Line::MaybeRule;
            self.head = head.to_string();
        } else {
            out.push_str(lead_text);
            self.col = lead;
            self.indent = 0;
            self.line = Line::Text;
            self.word = first.to_string();
            if head.ends_with(' ') {
                self.flush_word(out);
                self.space = true;
            }
        }
    }

    /// A line kept whole: a fence, a code line, or a possible rule.
    fn whole_line(&mut self, line: &str, out: &mut String) {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            self.fence = !self.fence;
            out.push_str(self.style(DIM));
            out.push_str(line);
            out.push_str(self.style(RESET));
        } else if self.fence {
            out.push_str("  ");
            if self.color {
                highlight(line, out);
            } else {
                out.push_str(line);
            }
        } else if is_rule(line) {
            let rule = "─".repeat(self.width.min(40));
            out.push_str(self.style(DIM));
            out.push_str(&rule);
            out.push_str(self.style(RESET));
        } else {
            // `--- x` and the like: plain text after all.
            self.line = Line::Text;
            self.indent = 0;
            for c in line.chars() {
                if c == ' ' || c == '\t' {
                    self.flush_word(out);
                    self.space = true;
                } else {
                    self.word.push(c);
                }
            }
            self.flush_word(out);
            self.end_styles(out);
        }
        self.line = Line::Start;
    }

    fn newline(&mut self, out: &mut String) {
        out.push('\n');
        self.col = 0;
        self.indent = 0;
        self.space = false;
        self.line = Line::Start;
    }

    fn end_styles(&mut self, out: &mut String) {
        if self.bold || self.italic || self.code {
            out.push_str(self.style(RESET));
        }
        self.bold = false;
        self.italic = false;
        self.code = false;
    }

    /// Write the held word, wrapping first if it does not fit.
    fn flush_word(&mut self, out: &mut String) {
        if self.word.is_empty() {
            return;
        }
        let word = std::mem::take(&mut self.word);
        let (styled, width) = self.inline(&word);
        let gap = usize::from(self.space && self.col > self.indent);
        if self.col > self.indent && self.col + gap + width > self.width {
            // Styles carry over the line break; the hanging indent keeps lists aligned.
            out.push('\n');
            out.push_str(&" ".repeat(self.indent));
            self.col = self.indent;
        } else if gap == 1 {
            out.push(' ');
            self.col += 1;
        }
        out.push_str(&styled);
        self.col += width;
        if self.col >= self.width {
            self.col %= self.width;
        }
        self.space = false;
    }

    /// A word with its inline markers turned into styles; returns it and its width.
    fn inline(&mut self, word: &str) -> (String, usize) {
        let mut out = String::with_capacity(word.len() + 8);
        let mut width = 0;
        let chars: Vec<char> = word.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '`' {
                self.code = !self.code;
                self.restyle(&mut out);
                i += 1;
                continue;
            }
            if !self.code && c == '*' {
                if chars.get(i + 1) == Some(&'*') {
                    self.bold = !self.bold;
                    self.restyle(&mut out);
                    i += 2;
                    continue;
                }
                // `*` alone is italic only next to a letter (not `a * b`)
                let next_word = chars.get(i + 1).is_some_and(|n| !n.is_whitespace());
                if next_word || self.italic {
                    self.italic = !self.italic;
                    self.restyle(&mut out);
                    i += 1;
                    continue;
                }
            }
            out.push(c);
            width += 1;
            i += 1;
        }
        if !self.color {
            // No styles: keep the text as written.
            return (word.to_string(), word.chars().count());
        }
        (out, width)
    }

    fn restyle(&self, out: &mut String) {
        if !self.color {
            return;
        }
        out.push_str(RESET);
        if self.bold {
            out.push_str(BOLD);
        }
        if self.italic {
            out.push_str(ITALIC);
        }
        if self.code {
            out.push_str(CODE);
        }
    }
}

/// `---`, `***`, `___` (three or more, spaces allowed between).
fn is_rule(line: &str) -> bool {
    let marks: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3
        && ["-", "*", "_"]
            .iter()
            .any(|m| marks.chars().all(|c| c.to_string() == *m))
}

/// One code line with keywords, strings and comments coloured.
fn highlight(line: &str, out: &mut String) {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") || trimmed.starts_with('#') || trimmed.starts_with("--") {
        out.push_str(DIM);
        out.push_str(line);
        out.push_str(RESET);
        return;
    }
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            let end = (i + 1).min(chars.len());
            out.push_str(STRING);
            out.extend(&chars[start..end]);
            out.push_str(RESET);
            i = end;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if KEYWORDS.contains(&word.as_str()) {
                out.push_str(KEYWORD);
                out.push_str(&word);
                out.push_str(RESET);
            } else {
                out.push_str(&word);
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(text: &str, width: usize, color: bool, piece: usize) -> String {
        let mut md = Markdown::new(width, color);
        let mut out = String::new();
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(piece.max(1)) {
            md.push(&chunk.iter().collect::<String>(), &mut out);
        }
        md.finish(&mut out);
        out
    }

    /// The text without escape sequences.
    fn strip(s: &str) -> String {
        let re = regex::Regex::new("\x1b\\[[0-9;]*m").unwrap();
        re.replace_all(s, "").into_owned()
    }

    const DOC: &str = "# Title\n\nSome **bold** and *italic* and `code` here.\n\n\
        - first item\n- second item that is long enough to wrap around the narrow screen\n\
        1. one\n2. two\n\n> quoted\n\n---\n\n```rust\nfn main() { let s = \"hi\"; }\n// note\n```\ndone\n";

    #[test]
    fn renders_blocks_and_inline_styles() {
        let out = render(DOC, 40, true, 3);
        assert!(out.contains("\x1b[1m\x1b[4mTitle"), "{out:?}");
        assert!(out.contains("\x1b[1mbold"), "{out:?}");
        assert!(out.contains("\x1b[3mitalic"), "{out:?}");
        assert!(out.contains("\x1b[36mcode"), "{out:?}");
        assert!(out.contains("\x1b[35mfn\x1b[0m main"), "{out:?}");
        assert!(out.contains("\x1b[32m\"hi\"\x1b[0m"), "{out:?}");
        let plain = strip(&out);
        assert!(plain.contains("• first item"), "{plain}");
        assert!(plain.contains("1. one\n2. two"), "{plain}");
        assert!(plain.contains("│ quoted"), "{plain}");
        assert!(plain.contains("────"), "{plain}");
        assert!(!plain.contains("**") && !plain.contains('`') || plain.contains("```rust"));
        // wrapped to the width, with a hanging indent under the bullet
        for line in plain.lines() {
            assert!(line.chars().count() <= 40, "{line:?}");
        }
        assert!(plain.contains("\n  "), "hanging indent: {plain}");
    }

    #[test]
    fn the_same_whatever_the_stream_pieces() {
        let whole = render(DOC, 40, true, 10_000);
        for piece in [1, 2, 5, 7] {
            assert_eq!(render(DOC, 40, true, piece), whole, "pieces of {piece}");
        }
    }

    #[test]
    fn without_color_no_escape_is_written() {
        let out = render(DOC, 40, false, 3);
        assert!(!out.contains('\x1b'), "{out:?}");
        assert!(out.contains("**bold**"));
    }

    #[test]
    fn output_is_linear_in_the_answer() {
        // 5,000 tokens of prose, streamed a token at a time: no redraws
        let text: String = (0..5000).map(|i| format!("w{} ", i % 97)).collect();
        let out = render(&text, 80, true, 4);
        assert!(
            out.len() <= text.len() + text.len() / 10,
            "{} bytes for {} of text",
            out.len(),
            text.len()
        );
    }
}
