//! An incremental Server-Sent Events parser: bytes in, `(event, data)` pairs out.

use crate::agent::core::provider::ProviderError;

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Feeds on chunks of any size; lines may be split anywhere, even inside a UTF-8 character.
/// Linear in the input: each byte is scanned for a line end once (`scanned` remembers where the
/// last search stopped), and consumed lines are dropped from the buffer once per chunk.
#[derive(Debug, Default)]
pub struct SseParser {
    pending: Vec<u8>,
    /// Bytes of `pending` already known to hold no `\n`.
    scanned: usize,
    event: String,
    data: Vec<String>,
}

impl SseParser {
    /// Parse `chunk`, returning the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, ProviderError> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(offset) = self.pending[from..].iter().position(|&b| b == b'\n') {
            let end = from + offset;
            let raw = std::mem::take(&mut self.pending);
            let result = self.line(&raw[start..end], &mut events);
            self.pending = raw;
            result?;
            start = end + 1;
            from = start;
        }
        if start > 0 {
            self.pending.drain(..start);
        }
        self.scanned = self.pending.len();
        Ok(events)
    }

    fn line(&mut self, raw: &[u8], events: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let line = std::str::from_utf8(raw)
            .map_err(|e| ProviderError::MalformedStream(format!("invalid UTF-8: {e}")))?;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !self.data.is_empty() || !self.event.is_empty() {
                events.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = value.to_string(),
            _ => {}
        }
        Ok(())
    }

    /// At end of stream: the last event if the stream did not end with a blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.scanned = 0;
            let _ = self.feed_line_end(&rest);
        }
        if self.data.is_empty() && self.event.is_empty() {
            None
        } else {
            Some(SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data).join("\n"),
            })
        }
    }

    fn feed_line_end(&mut self, rest: &[u8]) -> Result<(), ProviderError> {
        let mut line = rest.to_vec();
        line.push(b'\n');
        let events = self.feed(&line)?;
        debug_assert!(events.is_empty());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_anywhere() {
        let text =
            "event: a\ndata: {\"x\":\"é\"}\r\n\r\n: comment\ndata: 1\ndata: 2\n\ndata: [DONE]\n\n";
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            let mut p = SseParser::default();
            let mut events = p.feed(&bytes[..split]).unwrap();
            events.extend(p.feed(&bytes[split..]).unwrap());
            assert_eq!(
                events,
                vec![
                    SseEvent {
                        event: "a".into(),
                        data: "{\"x\":\"é\"}".into()
                    },
                    SseEvent {
                        event: String::new(),
                        data: "1\n2".into()
                    },
                    SseEvent {
                        event: String::new(),
                        data: "[DONE]".into()
                    },
                ],
                "split at {split}"
            );
        }
    }

    /// A 50 MB answer in one SSE line, in 16 KiB chunks, parses in linear time (the old parser
    /// rescanned the whole pending buffer per chunk: minutes).
    #[test]
    fn one_huge_line_is_linear() {
        let payload = "x".repeat(50 * 1024 * 1024);
        let text = format!("data: {payload}\n\n");
        let started = std::time::Instant::now();
        let mut p = SseParser::default();
        let mut events = Vec::new();
        for chunk in text.as_bytes().chunks(16 * 1024) {
            events.extend(p.feed(chunk).unwrap());
        }
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), payload.len());
        // generous for an unoptimised build on a loaded machine; quadratic takes minutes
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn many_small_lines_in_one_chunk() {
        let text = "data: 1\n\n".repeat(100_000);
        let mut p = SseParser::default();
        let events = p.feed(text.as_bytes()).unwrap();
        assert_eq!(events.len(), 100_000);
    }

    #[test]
    fn unterminated_last_event() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: x").unwrap().is_empty());
        assert_eq!(
            p.finish(),
            Some(SseEvent {
                event: String::new(),
                data: "x".into()
            })
        );
    }
}
