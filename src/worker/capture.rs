//! Bounded output capture: an agent may print gigabytes; the job keeps at most
//! [`OUTPUT_LIMIT`] bytes in memory (PRD §4.6), plus a short tail so the final JSON result
//! line can still be parsed after truncation.

use std::io::Read;

/// The most output kept for `runtime.output` (10 MiB, PRD §4.6).
pub const OUTPUT_LIMIT: usize = 10 * 1024 * 1024;

/// Bytes kept from the end of a stream (for the result line and error messages).
pub const TAIL_LIMIT: usize = 1024 * 1024;

/// What was read from one stream.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    /// The first `limit` bytes.
    pub head: Vec<u8>,
    /// The last [`TAIL_LIMIT`] bytes (only filled once `head` is full).
    pub tail: Vec<u8>,
    /// Every byte seen, kept or not.
    pub total: u64,
}

impl Captured {
    /// True when more was written than kept.
    pub fn truncated(&self) -> bool {
        self.total > self.head.len() as u64
    }

    /// The end of the stream: the whole stream when it fit, else the tail.
    pub fn end(&self) -> &[u8] {
        if self.truncated() {
            &self.tail
        } else {
            &self.head
        }
    }

    /// `head` as text, invalid UTF-8 replaced, never longer than `limit` bytes.
    pub fn head_text(&self, limit: usize) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if s.len() > limit {
            let mut cut = limit;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    }
}

/// Reads `r` to its end, keeping the first `limit` bytes and the last [`TAIL_LIMIT`] ones.
/// `on_line` sees each complete line of the kept head (for the journal). The stream is always
/// drained, so the writer never blocks on a full pipe.
pub fn capture<R: Read>(mut r: R, limit: usize, mut on_line: impl FnMut(&[u8])) -> Captured {
    let mut c = Captured::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut line_start = 0usize;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        c.total += n as u64;
        let room = limit.saturating_sub(c.head.len());
        if room > 0 {
            let take = room.min(n);
            c.head.extend_from_slice(&chunk[..take]);
            while let Some(pos) = c.head[line_start..].iter().position(|&b| b == b'\n') {
                on_line(&c.head[line_start..line_start + pos]);
                line_start += pos + 1;
            }
            if take < n {
                c.tail.extend_from_slice(&chunk[take..]);
            }
        } else {
            c.tail.extend_from_slice(chunk);
        }
        if c.tail.len() > 2 * TAIL_LIMIT {
            let excess = c.tail.len() - TAIL_LIMIT;
            c.tail.drain(..excess);
        }
    }
    if line_start < c.head.len() && !c.truncated() {
        on_line(&c.head[line_start..]);
    }
    if c.tail.len() > TAIL_LIMIT {
        let excess = c.tail.len() - TAIL_LIMIT;
        c.tail.drain(..excess);
    }
    c
}

/// The last non-empty line of `bytes`.
pub fn last_line(bytes: &[u8]) -> &[u8] {
    let trimmed = bytes.trim_ascii_end();
    match trimmed.iter().rposition(|&b| b == b'\n') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_and_counts_all() {
        let data: Vec<u8> = (b'a'..=b'z').cycle().take(5000).collect();
        let mut lines = 0;
        let c = capture(&data[..], 1000, |_| lines += 1);
        assert_eq!(c.total, 5000);
        assert_eq!(c.head, data[..1000]);
        assert_eq!(c.tail, data[1000..]);
        assert!(c.truncated());
        assert_eq!(lines, 0);
    }

    #[test]
    fn small_output_is_whole() {
        let mut seen = Vec::new();
        let c = capture(&b"a\nbb\nlast"[..], 100, |l| seen.push(l.to_vec()));
        assert!(!c.truncated());
        assert_eq!(c.end(), b"a\nbb\nlast");
        assert_eq!(seen, vec![b"a".to_vec(), b"bb".to_vec(), b"last".to_vec()]);
        assert_eq!(last_line(b"x\n{\"a\":1}\n\n"), b"{\"a\":1}");
    }

    #[test]
    fn head_text_never_exceeds_limit() {
        let c = Captured {
            head: "é".repeat(10).into_bytes(),
            tail: Vec::new(),
            total: 20,
        };
        assert_eq!(c.head_text(5), "éé");
    }
}
