//! The Slurm relay's one record (issue 27, docs/trust-model.md): a batch step run as the job's
//! own account ends by printing the job's final document on one line of its output file after
//! [`END_MARKER`]; the root queue manager reads that file with the account's rights and takes
//! the last such line as what the job says about its own run (untrusted input).

/// Starts the line of the relay file that carries the job's final document.
pub const END_MARKER: &str = "@@agentstore-relay-end@@ ";

/// Starts a line of the relay file that carries one approval request of the job (an
/// [`ApprovalRequest`](crate::model::approval::ApprovalRequest) on one line): the manager puts
/// it in the store, where its owner lists and answers it (untrusted input, checked there).
pub const ASK_MARKER: &str = "@@agentstore-relay-ask@@ ";

/// What the manager hands a relay step besides the job and the queue's settings: the third
/// line of its batch script's input.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handover {
    /// The file (the account's own) the manager appends its answers to, one per line.
    pub answers: std::path::PathBuf,
    /// The public half of the key the manager signs this job's answers with (hex).
    pub public_key: String,
}

/// The approval requests in a relay file's text (the lines after [`ASK_MARKER`]).
pub fn asks_in(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let marker = ASK_MARKER.as_bytes();
    text.split(|b| *b == b'\n')
        .filter_map(move |l| l.strip_prefix(marker))
}

/// The most of a relay file's end the manager reads (the job's output is bounded at 10 MiB;
/// its document on one line, escaped, stays well below this).
pub const READ_LIMIT: u64 = 32 << 20;

/// The job's final document in a relay file's text (its last [`END_MARKER`] line), if any.
pub fn end_of(text: &[u8]) -> Option<&[u8]> {
    let marker = END_MARKER.as_bytes();
    text.split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(marker))
        .next_back()
}

/// The most lines of a relay file's end [`last_words`] keeps.
const LAST_LINES: usize = 10;

/// What a batch step said last, for the manager's journal when it wrote no end: its last
/// [`LAST_LINES`] lines that are not relay records, each cut at 300 characters, control
/// characters shown as `?` (the account wrote them). `None`: nothing.
pub fn last_words(text: &[u8]) -> Option<String> {
    let lines: Vec<String> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.starts_with(b"@@agentstore-relay-"))
        .map(|l| {
            String::from_utf8_lossy(l)
                .chars()
                .take(300)
                .map(|c| if c.is_control() { '?' } else { c })
                .collect::<String>()
        })
        .filter(|l| !l.trim().is_empty())
        .collect();
    let keep = &lines[lines.len().saturating_sub(LAST_LINES)..];
    (!keep.is_empty()).then(|| keep.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_end_line_counts() {
        let text = format!("noise\n{END_MARKER}{{\"a\":1}}\nmore\n{END_MARKER}{{\"a\":2}}\n");
        assert_eq!(end_of(text.as_bytes()), Some(&b"{\"a\":2}"[..]));
        assert_eq!(end_of(b"no end here\n"), None);
        assert_eq!(end_of(format!("x{END_MARKER}{{}}").as_bytes()), None);
    }

    #[test]
    fn the_last_words_are_the_steps_own_lines_cleaned() {
        let mut text = format!("{ASK_MARKER}{{}}\n");
        for i in 0..12 {
            text.push_str(&format!("line {i}\n\n"));
        }
        text.push_str("bell\u{7}\u{1b}[31m\n");
        text.push_str(&format!("{END_MARKER}{{}}\n"));
        let w = last_words(text.as_bytes()).unwrap();
        assert_eq!(w.lines().count(), LAST_LINES, "{w}");
        assert!(w.starts_with("line 3\n"), "{w}");
        assert!(w.ends_with("bell??[31m"), "{w}");
        assert!(!w.contains("@@agentstore"), "{w}");
        assert_eq!(
            last_words(format!("\n  \n{END_MARKER}{{}}").as_bytes()),
            None
        );
        assert_eq!(
            last_words(&"x".repeat(1000).into_bytes()).unwrap().len(),
            300
        );
    }
}
