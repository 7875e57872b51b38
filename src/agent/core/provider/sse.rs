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
#[derive(Debug, Default)]
pub struct SseParser {
    pending: Vec<u8>,
    event: String,
    data: Vec<String>,
}

impl SseParser {
    /// Parse `chunk`, returning the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, ProviderError> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = self.pending.drain(..=pos).collect();
            let line = std::str::from_utf8(&raw[..raw.len() - 1])
                .map_err(|e| ProviderError::MalformedStream(format!("invalid UTF-8: {e}")))?;
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() {
                if !self.data.is_empty() || !self.event.is_empty() {
                    events.push(SseEvent {
                        event: std::mem::take(&mut self.event),
                        data: std::mem::take(&mut self.data).join("\n"),
                    });
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "data" => self.data.push(value.to_string()),
                "event" => self.event = value.to_string(),
                _ => {}
            }
        }
        Ok(events)
    }

    /// At end of stream: the last event if the stream did not end with a blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
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
