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
    /// Whether any part of the current word was quoted or escaped (`'2'>x` is an argument
    /// `2`, not a descriptor number).
    word_quoted: bool,
    /// Set after `<`, `>`, `>>`, `>|`, `>&` or `<&`: the next word is a redirection target.
    pending_redirect: Option<Redirect>,
    /// Set for the final end of the line: trailing blanks and newlines end no command.
    trailing_blank: bool,
    /// The last separator was `|`, `&&` or `||` and no word followed yet.
    after_binary: bool,
}

#[derive(Clone, Copy)]
enum Redirect {
    In,
    Out,
    /// `>&WORD` / `<&WORD`: a descriptor number or `-` duplicates or closes one; any other
    /// word is a file (bash writes it: `echo x >& ../.bashrc`).
    Dup,
}

impl Splitter {
    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        self.in_word = false;
        let quoted = std::mem::take(&mut self.word_quoted);
        match self.pending_redirect.take() {
            Some(Redirect::Dup) => {
                let descriptor =
                    !quoted && (word == "-" || word.chars().all(|d| d.is_ascii_digit()));
                if !descriptor {
                    self.issue(&format!(
                        "redirects with `>&`/`<&` to `{word}` (a file, not a descriptor)"
                    ));
                }
            }
            Some(Redirect::In) => self.parsed.inputs.push(word),
            Some(Redirect::Out) => {
                if word != "/dev/null" {
                    self.parsed
                        .issues
                        .push(format!("redirects output into `{word}`"));
                }
            }
            None => {
                self.current.push(word);
                self.after_binary = false;
            }
        }
    }

    fn end_segment(&mut self) {
        self.end_word();
        if self.pending_redirect.take().is_some() {
            self.issue("redirection without a target");
        }
        let segment = std::mem::take(&mut self.current);
        if !segment.is_empty() {
            self.parsed.segments.push(segment);
        } else if !self.trailing_blank {
            self.issue("empty command");
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
    if chars
        .iter()
        .any(|c| (c.is_control() && *c != '\n' && *c != '\t') || is_unusual_space(*c))
    {
        // A carriage return, a NUL or another control character: shells differ on them, and
        // so may a reader of the question.
        s.issue("contains control characters");
    }
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => s.end_word(),
            '\n' if s.current.is_empty() && !s.in_word && s.pending_redirect.is_none() => {
                // A blank line ends nothing, but a newline right after `|`, `&&` or `||`
                // continues that list in the shell.
                if s.after_binary {
                    s.issue("continues a pipeline or list on the next line");
                }
            }
            '\n' | ';' => {
                s.end_segment();
                s.after_binary = false;
            }
            '|' => {
                if chars.get(i + 1) == Some(&'|') {
                    i += 1;
                }
                s.end_segment();
                s.after_binary = true;
            }
            '&' => {
                if chars.get(i + 1) == Some(&'&') {
                    i += 1;
                    s.end_segment();
                    s.after_binary = true;
                } else {
                    s.issue("runs a command in the background (`&`)");
                    s.end_segment();
                }
            }
            '>' | '<' => {
                // An unquoted all-digit word right before is a file descriptor number (`2>`).
                if s.in_word && !s.word_quoted && s.word.chars().all(|d| d.is_ascii_digit()) {
                    if s.word.len() > 1 {
                        // bash reads `10>` as descriptor 10, dash as an argument `10`
                        s.issue("uses a descriptor number of more than one digit");
                    }
                    s.word.clear();
                    s.in_word = false;
                } else {
                    s.end_word();
                }
                if s.pending_redirect.is_some() {
                    s.issue("redirection without a target");
                }
                let next = chars.get(i + 1).copied();
                let redirect = match (c, next) {
                    ('<', Some('<')) => {
                        // `<<`, `<<-`, `<<<`: the lines or word after are input, not
                        // commands, in a way this splitter does not follow.
                        s.issue("uses a here-document or here-string (`<<`)");
                        i += 1;
                        Redirect::In
                    }
                    ('<', Some('>')) => {
                        s.issue("opens a file for reading and writing (`<>`)");
                        i += 1;
                        Redirect::Out
                    }
                    ('<', Some('(')) | ('>', Some('(')) => {
                        s.issue("uses process substitution");
                        Redirect::Out
                    }
                    (_, Some('&')) => {
                        i += 1;
                        Redirect::Dup
                    }
                    ('>', Some('>')) => {
                        i += 1;
                        if chars.get(i + 1) == Some(&'&') || chars.get(i + 1) == Some(&'|') {
                            s.issue("uses an unusual redirection");
                        }
                        Redirect::Out
                    }
                    ('>', Some('|')) => {
                        i += 1;
                        Redirect::Out
                    }
                    ('<', _) => Redirect::In,
                    _ => Redirect::Out,
                };
                s.pending_redirect = Some(redirect);
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
                        s.word_quoted = true;
                        s.word.push(n);
                    }
                    None => return Err(ParseError::TrailingBackslash),
                }
            }
            '\'' => {
                s.in_word = true;
                s.word_quoted = true;
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
                s.word_quoted = true;
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
    // A line that ends in `;` or an operator ends with an empty command; one that ends in a
    // word or a newline does not.
    let ends_line = line.trim_end_matches([' ', '\t']).ends_with('\n') || line.trim().is_empty();
    s.trailing_blank = ends_line || s.in_word || !s.current.is_empty();
    s.end_segment();
    Ok(s.parsed)
}

/// Unicode spaces that look like a blank but are part of a word for the shell.
fn is_unusual_space(c: char) -> bool {
    c.is_whitespace() && !matches!(c, ' ' | '\t' | '\n')
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
            // issue 28: the shell reads these differently from a plain word splitter
            "cat <<EOF\necho '\nEOF\ntouch PWN\necho '",
            "cat <<-EOF\nx\nEOF",
            "cat <<< word",
            "echo x >& ../.bashrc",
            "echo x >&../.bashrc",
            "echo x >&1x",
            "echo x <& file",
            "echo x &> out",
            "cat <> file",
            "echo x >| out",
            "cat <(ls)",
            "ls > ; ls",
            "ls >",
            "ls > > x",
            "; ls",
            "ls |",
            "ls |\n",
            "ls\rtouch x",
            "ls\u{0}x",
            "ls\u{a0}x",
            "cat 10>&1",
            "cat 10</dev/null",
        ] {
            let p = parse(line).unwrap();
            assert!(!p.issues.is_empty(), "{line} should have issues");
        }
    }

    #[test]
    fn descriptor_duplication_and_quoted_digits() {
        for line in [
            "ls 2>&1",
            "ls >&2",
            "ls 2>&-",
            "ls >& 2",
            "ls 2>/dev/null",
            "ls\n",
            "ls\n\n",
        ] {
            let p = parse(line).unwrap();
            assert!(p.issues.is_empty(), "{line}: {:?}", p.issues);
            assert_eq!(p.segments, vec![argv(&["ls"])], "{line}");
        }
        // a quoted `2` is an argument, whatever follows
        let p = parse("cat '2'<a.txt").unwrap();
        assert_eq!(p.segments, vec![argv(&["cat", "2"])]);
        assert_eq!(p.inputs, argv(&["a.txt"]));
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
