//! A small POSIX-shell word splitter, enough for the policy to judge a command on its argv.
//!
//! It splits a command line into simple commands (separated by `|`, `||`, `&&`, `;`, newline)
//! and records every construct it cannot judge statically — expansions, command substitution,
//! subshells, background jobs, redirections into files — as an *issue*. The policy turns any
//! issue into ASK, so an incomplete parser errs on the side of asking.

use thiserror::Error;

/// A command line split into simple commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedCommand {
    /// Each simple command's argv, in order.
    pub segments: Vec<Vec<String>>,
    /// Files read through `<` redirections.
    pub inputs: Vec<String>,
    /// Constructs that cannot be judged statically, in human words.
    pub issues: Vec<String>,
}

/// Why a command line could not be split at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// A quote was opened and never closed.
    #[error("unterminated {0} quote")]
    UnterminatedQuote(&'static str),
    /// A trailing backslash with nothing to escape.
    #[error("trailing backslash")]
    TrailingBackslash,
}

#[derive(Default)]
struct Splitter {
    parsed: ParsedCommand,
    current: Vec<String>,
    word: String,
    in_word: bool,
    /// Set after `<`, `>` or `>>`: the next word is a redirection target.
    pending_redirect: Option<Redirect>,
}

#[derive(Clone, Copy)]
enum Redirect {
    In,
    Out,
}

impl Splitter {
    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        self.in_word = false;
        match self.pending_redirect.take() {
            Some(Redirect::In) => self.parsed.inputs.push(word),
            Some(Redirect::Out) => {
                if word != "/dev/null" {
                    self.parsed
                        .issues
                        .push(format!("redirects output into `{word}`"));
                }
            }
            None => self.current.push(word),
        }
    }

    fn end_segment(&mut self) {
        self.end_word();
        let segment = std::mem::take(&mut self.current);
        if !segment.is_empty() {
            self.parsed.segments.push(segment);
        } else if !self.parsed.segments.is_empty() || self.pending_redirect.is_some() {
            self.parsed.issues.push("empty command".to_string());
        }
    }

    fn issue(&mut self, text: &str) {
        if !self.parsed.issues.iter().any(|i| i == text) {
            self.parsed.issues.push(text.to_string());
        }
    }
}

/// Split `line` into simple commands, recording constructs the policy cannot judge.
pub fn parse(line: &str) -> Result<ParsedCommand, ParseError> {
    let chars: Vec<char> = line.chars().collect();
    let mut s = Splitter::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => s.end_word(),
            '\n' | ';' => s.end_segment(),
            '|' => {
                if chars.get(i + 1) == Some(&'|') {
                    i += 1;
                }
                s.end_segment();
            }
            '&' => {
                if chars.get(i + 1) == Some(&'&') {
                    i += 1;
                    s.end_segment();
                } else {
                    s.issue("runs a command in the background (`&`)");
                    s.end_segment();
                }
            }
            '>' | '<' => {
                // An all-digit word right before is a file descriptor number (`2>`).
                if s.in_word && s.word.chars().all(|d| d.is_ascii_digit()) {
                    s.word.clear();
                    s.in_word = false;
                } else {
                    s.end_word();
                }
                let append = c == '>' && chars.get(i + 1) == Some(&'>');
                if append {
                    i += 1;
                }
                if c == '>' && chars.get(i + 1) == Some(&'&') {
                    // `>&2`, `2>&1`: duplicating a descriptor writes no file.
                    i += 2;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                    continue;
                }
                s.pending_redirect = Some(if c == '<' {
                    Redirect::In
                } else {
                    Redirect::Out
                });
            }
            '(' | ')' => s.issue("uses a subshell or grouping `( )`"),
            '`' => s.issue("uses command substitution"),
            '$' => {
                if chars.get(i + 1) == Some(&'(') {
                    s.issue("uses command substitution");
                } else {
                    s.issue("uses shell expansion (`$`)");
                }
                s.in_word = true;
                s.word.push(c);
            }
            '#' if !s.in_word => s.issue("contains a shell comment"),
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some('\n') => {}
                    Some(&n) => {
                        s.in_word = true;
                        s.word.push(n);
                    }
                    None => return Err(ParseError::TrailingBackslash),
                }
            }
            '\'' => {
                s.in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        Some('\'') => break,
                        Some(&q) => s.word.push(q),
                        None => return Err(ParseError::UnterminatedQuote("single")),
                    }
                    i += 1;
                }
            }
            '"' => {
                s.in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        Some('"') => break,
                        Some('\\') => {
                            i += 1;
                            match chars.get(i) {
                                Some(&e @ ('"' | '\\' | '$' | '`')) => s.word.push(e),
                                Some('\n') => {}
                                Some(&e) => {
                                    s.word.push('\\');
                                    s.word.push(e);
                                }
                                None => return Err(ParseError::UnterminatedQuote("double")),
                            }
                        }
                        Some('$') => {
                            s.issue("uses shell expansion (`$`)");
                            s.word.push('$');
                        }
                        Some('`') => {
                            s.issue("uses command substitution");
                            s.word.push('`');
                        }
                        Some(&q) => s.word.push(q),
                        None => return Err(ParseError::UnterminatedQuote("double")),
                    }
                    i += 1;
                }
            }
            '*' | '?' | '[' => {
                s.issue("uses a shell glob (unquoted `*`, `?` or `[`)");
                s.in_word = true;
                s.word.push(c);
            }
            '{' | '}' => {
                s.issue("uses braces (grouping or brace expansion)");
                s.in_word = true;
                s.word.push(c);
            }
            '~' if !s.in_word || s.word.ends_with('=') || s.word.ends_with(':') => {
                s.issue("uses tilde expansion (`~`)");
                s.in_word = true;
                s.word.push(c);
            }
            _ => {
                s.in_word = true;
                s.word.push(c);
            }
        }
        i += 1;
    }
    s.end_segment();
    if s.pending_redirect.is_some() {
        s.issue("redirection without a target");
    }
    Ok(s.parsed)
}

/// Split a configuration entry like `"cargo test"` into words (no operators expected).
pub fn words(entry: &str) -> Vec<String> {
    match parse(entry) {
        Ok(p) => p.segments.into_iter().flatten().collect(),
        Err(_) => entry.split_whitespace().map(str::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pipeline_with_descriptor_duplication() {
        let p = parse("cargo build 2>&1 | tail -40").unwrap();
        assert_eq!(
            p,
            ParsedCommand {
                segments: vec![argv(&["cargo", "build"]), argv(&["tail", "-40"])],
                inputs: vec![],
                issues: vec![],
            }
        );
    }

    #[test]
    fn quotes_and_escapes() {
        let p = parse(r#"grep -rn "fn main" 'src dir' a\ b"#).unwrap();
        assert_eq!(
            p.segments,
            vec![argv(&["grep", "-rn", "fn main", "src dir", "a b"])]
        );
        assert!(p.issues.is_empty());
    }

    #[test]
    fn constructs_that_cannot_be_judged_are_issues() {
        for line in [
            "echo $HOME",
            "echo \"$(id)\"",
            "ls `pwd`",
            "(cd / && ls)",
            "sleep 5 &",
            "echo hi > out.txt",
            "echo hi >> out.txt",
            "cat .?/.ss?/id_*",
            "cat src/*.rs",
            "ls [a-z]",
            "ls ~/x",
            "ls --dir=~/x",
            "echo {a,b}",
            "{ ls; }",
        ] {
            let p = parse(line).unwrap();
            assert!(!p.issues.is_empty(), "{line} should have issues");
        }
    }

    #[test]
    fn quoted_glob_characters_are_literal() {
        let p = parse("find . -name '*.rs' -o -name \"[ab]?\" HEAD~1").unwrap();
        assert!(p.issues.is_empty(), "{:?}", p.issues);
        assert_eq!(p.segments[0][3], "*.rs");
    }

    #[test]
    fn dev_null_and_input_redirection() {
        let p = parse("wc -l < Cargo.toml 2>/dev/null").unwrap();
        assert_eq!(p.segments, vec![argv(&["wc", "-l"])]);
        assert_eq!(p.inputs, argv(&["Cargo.toml"]));
        assert!(p.issues.is_empty());
    }

    #[test]
    fn separators() {
        let p = parse("ls && pwd; git status || true\nwc").unwrap();
        assert_eq!(p.segments.len(), 5);
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse("echo 'x"),
            Err(ParseError::UnterminatedQuote("single"))
        );
        assert_eq!(
            parse("echo \"x"),
            Err(ParseError::UnterminatedQuote("double"))
        );
        assert_eq!(parse("echo \\"), Err(ParseError::TrailingBackslash));
    }
}
