//! What redaction looks for besides a value itself: its fragments in their raw, reversed,
//! rot13, hex and base64 forms, for values long and mixed enough that ordinary output does not
//! contain those forms by coincidence.

use super::*;

/// Derived forms (fragments, reverse, rot13, hex, base64) are matched only for values at
/// least this long that mix at least two kinds of characters (lower case, upper case, digits,
/// others) and carry at least [`MIN_DERIVED_ENTROPY`] bits per byte: a short or patterned
/// value (`123456789`, `localhost`) has encodings that ordinary output contains by
/// coincidence (the hex of "123456789" is lines of `seq` output run together). Such values
/// are still redacted where they appear whole.
pub const MIN_DERIVED_LEN: usize = 8;

/// Shannon entropy, bits per byte, a value needs for its derived forms to be matched.
pub const MIN_DERIVED_ENTROPY: f64 = 2.5;

/// How many kinds of characters (lower, upper, digit, other) `bytes` mixes.
fn char_kinds(bytes: &[u8]) -> usize {
    let kinds = [
        bytes.iter().any(u8::is_ascii_lowercase),
        bytes.iter().any(u8::is_ascii_uppercase),
        bytes.iter().any(u8::is_ascii_digit),
        bytes.iter().any(|b| !b.is_ascii_alphanumeric()),
    ];
    kinds.iter().filter(|k| **k).count()
}

/// A fragment (a window of the value) is matched only when at least this many of its bytes lie
/// past the value's public prefix (`ghp_`, `sk-ant-api03-`, `postgres://`): a model that knows
/// the prefix must then guess this many bytes at once, and cannot slide a window along the
/// value one guessed byte at a time.
pub const MIN_UNKNOWN_BYTES: usize = 6;

#[derive(Debug, Clone)]
pub(super) struct Fragments {
    pub(super) name: String,
    /// Lower-cased fragments of every derived form, by length.
    grams: BTreeMap<usize, HashSet<Vec<u8>>>,
    /// A bit per two-byte start of any fragment: most positions of a text are ruled out
    /// without hashing.
    starts: Vec<u64>,
}

/// Bits per byte of `bytes` (Shannon).
fn entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let mut counts = [0usize; 256];
    for b in bytes {
        counts[usize::from(*b)] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = *c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// The `user:password` part of a URL with credentials, if `bytes` is one.
fn url_userinfo(bytes: &[u8]) -> Option<&[u8]> {
    let scheme_end = bytes.windows(3).position(|w| w == b"://")? + 3;
    let rest = &bytes[scheme_end..];
    let authority_end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let at = rest[..authority_end].iter().rposition(|b| *b == b'@')?;
    Some(&rest[..at])
}

/// The length of a value's public prefix: a URL scheme, then short lower-case segments ending
/// in `-` or `_` (`ghp_`, `sk-ant-api03-`, `xoxb-`, `github_pat_`).
fn public_prefix_len(bytes: &[u8]) -> usize {
    let mut pos = 0;
    if let Some(i) = bytes.windows(3).position(|w| w == b"://")
        && bytes[..i]
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+.-".contains(b))
    {
        pos = i + 3;
    }
    loop {
        let seg = bytes[pos..]
            .iter()
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            .count();
        match bytes.get(pos + seg) {
            Some(b'-' | b'_') if (1..=12).contains(&seg) => pos += seg + 1,
            _ => return pos,
        }
    }
}

impl Fragments {
    /// The fragments of `value`, or `None` when its derived forms are not matched at all
    /// (too short or too patterned, see [`MIN_DERIVED_LEN`]).
    pub(super) fn new(name: &str, value: &str) -> Option<Self> {
        let bytes = value.as_bytes();
        if bytes.len() < MIN_DERIVED_LEN
            || entropy(bytes) < MIN_DERIVED_ENTROPY
            || char_kinds(bytes) < 2
        {
            return None;
        }
        // In a URL with credentials (`postgres://user:pw@localhost:5432/db`) only the user
        // part is secret: host names and ports are ordinary text elsewhere.
        let bytes = match url_userinfo(bytes) {
            Some(user) if user.len() >= MIN_DERIVED_LEN => user,
            Some(_) => return None,
            None => bytes,
        };
        let prefix = public_prefix_len(bytes);
        let w = (bytes.len() / 3).clamp(8, 12);
        let mut grams: BTreeMap<usize, HashSet<Vec<u8>>> = BTreeMap::new();
        let mut add = |form: Vec<u8>| {
            if form.len() >= 8 {
                let lower: Vec<u8> = form.iter().map(u8::to_ascii_lowercase).collect();
                grams.entry(lower.len()).or_default().insert(lower);
            }
        };
        for start in 0..=bytes.len().saturating_sub(w) {
            let window = &bytes[start..start + w];
            let unknown = start + w - start.max(prefix).min(start + w);
            let distinct: HashSet<u8> = window.iter().copied().collect();
            let alnum_kinds = [
                window.iter().any(u8::is_ascii_lowercase),
                window.iter().any(u8::is_ascii_uppercase),
                window.iter().any(u8::is_ascii_digit),
            ]
            .iter()
            .filter(|k| **k)
            .count();
            // A window of one kind of character (`ocalhost`, `23456789`) is ordinary text.
            if unknown < MIN_UNKNOWN_BYTES || distinct.len() < 4 || alnum_kinds < 2 {
                continue;
            }
            let reversed: Vec<u8> = window.iter().rev().copied().collect();
            add(window.to_vec());
            add(reversed.clone());
            add(window.iter().map(|b| rot13(*b)).collect());
            add(hex(window).into_bytes());
            add(hex(&reversed).into_bytes());
            for url in [false, true] {
                for shift in 0..3usize {
                    // The window at each offset mod 3 inside a larger base64 stream: drop the
                    // characters that depend on the bytes around it.
                    let mut padded = vec![0u8; shift];
                    padded.extend_from_slice(window);
                    let encoded = base64(&padded, url);
                    let skip = (shift * 4).div_ceil(3);
                    let keep = encoded.len().saturating_sub(4);
                    if keep > skip {
                        add(encoded.as_bytes()[skip..keep].to_vec());
                    }
                }
            }
        }
        let mut starts = vec![0u64; 1024];
        for g in grams.values().flatten() {
            let k = (usize::from(g[0]) << 8) | usize::from(g[1]);
            starts[k / 64] |= 1 << (k % 64);
        }
        Some(Self {
            name: name.to_string(),
            grams,
            starts,
        })
    }

    /// The (start, end) of every fragment found in `view`.
    pub(super) fn matches(&self, view: &[u8]) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        for i in 0..view.len().saturating_sub(1) {
            let k = (usize::from(view[i]) << 8) | usize::from(view[i + 1]);
            if self.starts[k / 64] & (1 << (k % 64)) == 0 {
                continue;
            }
            for (len, set) in &self.grams {
                if i + len <= view.len() && set.contains(&view[i..i + len]) {
                    found.push((i, i + len));
                }
            }
        }
        found
    }

    /// Whether `view` holds any fragment.
    pub(super) fn found_in(&self, view: &[u8]) -> bool {
        !self.matches(view).is_empty()
    }
}

pub(super) fn rot13(b: u8) -> u8 {
    match b {
        b'a'..=b'z' => (b - b'a' + 13) % 26 + b'a',
        b'A'..=b'Z' => (b - b'A' + 13) % 26 + b'A',
        _ => b,
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// Base64 without padding (standard or URL alphabet): the characters a window's bytes give
/// inside a longer stream.
pub(super) fn base64(bytes: &[u8], url: bool) -> String {
    let encoding = if url {
        &data_encoding::BASE64URL_NOPAD
    } else {
        &data_encoding::BASE64_NOPAD
    };
    encoding.encode(bytes)
}
