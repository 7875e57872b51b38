//! Redaction must not become an oracle: a secret in a call's own text (also behind printf,
//! `echo -e`, `$'…'`, URL and C escapes, or as a list of numbers), or in the output of a call
//! nobody approved, is found here so that the toolbox can end the session.

use super::*;

impl SecretBroker {
    /// The secret that model-chosen text (a command, an argument) holds, in any form the
    /// redactor knows — whole, a fragment, reversed, rot13, hex, base64 — also once shell and
    /// printf escapes (`\x67`, `\147`, `\u0067`, `%67`, `0x67`) and lists of numbers
    /// (`[103,104]`) are decoded. Such text is a probe: if it ran, the redaction of its output
    /// would tell the model which guess was right. Only values whose derived forms are matched
    /// (see [`MIN_DERIVED_LEN`]) count, so ordinary words never end a session.
    pub fn probe(&self, text: &str) -> Option<String> {
        if self.fragments.is_empty() || text.len() < 8 {
            return None;
        }
        let lower: Vec<u8> = text.bytes().map(|b| b.to_ascii_lowercase()).collect();
        let decoded: Vec<u8> = decode_escapes(text.as_bytes())
            .iter()
            .map(u8::to_ascii_lowercase)
            .collect();
        let numbers: Vec<u8> = decode_numbers(text.as_bytes())
            .iter()
            .map(u8::to_ascii_lowercase)
            .collect();
        let compact = |v: &[u8]| -> Vec<u8> {
            v.iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect()
        };
        let views = [compact(&lower), lower, compact(&decoded), decoded, numbers];
        self.fragments
            .iter()
            .find(|f| views.iter().any(|v| f.found_in(v)))
            .map(|f| f.name.clone())
    }
}

impl SecretBroker {
    /// The guarded secret (see [`SecretBroker::guarded_values`]) that `output` holds whole or
    /// in part, in a form the redactor knows. Output of a command nobody approved that holds
    /// one was computed by the model (a guess pushed through `tr`, `jq`, arithmetic…) or read
    /// past the policy: either way its redaction must not reach the model.
    pub fn guarded_hit(&self, output: &str) -> Option<String> {
        if self.fragments.is_empty() || output.len() < 8 {
            return None;
        }
        let lower: Vec<u8> = output.bytes().map(|b| b.to_ascii_lowercase()).collect();
        let compact: Vec<u8> = lower
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        self.fragments
            .iter()
            .find(|f| f.found_in(&lower) || f.found_in(&compact))
            .map(|f| f.name.clone())
    }
}

/// `text` with the escapes of printf, echo -e, `$'…'`, URLs and C decoded into the bytes they
/// stand for (`\x67`, `\147`, `\0147`, `\u0067`, `%67`, `0x67`); other bytes kept.
fn decode_escapes(text: &[u8]) -> Vec<u8> {
    let hex_val = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        let rest = &text[i + 1..];
        let hex_run = |from: &[u8], max: usize| -> (u32, usize) {
            let mut v = 0u32;
            let mut n = 0;
            while n < max && n < from.len() {
                match hex_val(from[n]) {
                    Some(d) => v = v * 16 + d,
                    None => break,
                }
                n += 1;
            }
            (v, n)
        };
        match (b, rest.first().copied()) {
            (b'\\', Some(b'x' | b'X')) | (b'%', _) | (b'0', Some(b'x' | b'X')) => {
                let lead = if b == b'%' { 1 } else { 2 };
                let (v, n) = hex_run(&text[i + lead..], 2);
                if n == 2 {
                    out.push(u8::try_from(v).unwrap_or(b'?'));
                    i += lead + n;
                    continue;
                }
            }
            (b'\\', Some(b'u' | b'U')) => {
                let (v, n) = hex_run(&rest[1..], 8);
                if n >= 2 {
                    let mut buf = [0u8; 4];
                    if let Some(c) = char::from_u32(v) {
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        i += 2 + n;
                        continue;
                    }
                }
            }
            (b'\\', Some(b'0'..=b'7')) => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 4 && n < rest.len() && (b'0'..=b'7').contains(&rest[n]) {
                    v = v * 8 + u32::from(rest[n] - b'0');
                    n += 1;
                }
                out.push(u8::try_from(v & 0xff).unwrap_or(b'?'));
                i += 1 + n;
                continue;
            }
            (b'\\', Some(next)) => {
                out.push(next);
                i += 2;
                continue;
            }
            _ => {}
        }
        out.push(b);
        i += 1;
    }
    out
}

/// The bytes that the decimal numbers in `text` (each below 256) stand for, in order: the
/// shape of `jq 'implode'` input or a list of code points.
fn decode_numbers(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut current: Option<u32> = None;
    for b in text.iter().chain(std::iter::once(&b' ')) {
        if b.is_ascii_digit() {
            let v = current.unwrap_or(0).saturating_mul(10) + u32::from(b - b'0');
            current = Some(v.min(100_000));
        } else if let Some(v) = current.take()
            && let Ok(byte) = u8::try_from(v)
        {
            out.push(byte);
        }
    }
    out
}
