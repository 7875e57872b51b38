//! Secret broker — the only place secret values exist.
//!
//! The model sees placeholders (`{{secret:NAME}}`), never values. A placeholder in a command is
//! rewritten to a `${NAME}` reference and the value is put into the *child's environment* at
//! launch — never into argv, which `ps` shows. Every secret the broker knows is removed from
//! the child's environment unless the call asked for it, and every output is redacted before it
//! becomes a tool result, so `env` or `cat` of a file holding a secret returns nothing useful.
//!
//! Redaction is best effort against a model that chooses the output format: besides the exact
//! value, it finds fragments (windows of 8..12 bytes of the value) in their raw, reversed,
//! rot13, hex and base64 forms, compared case-insensitively, both in the text as is and with
//! whitespace removed (`od -c`, `hexdump -C`, `fold`). Derived forms are matched only for
//! values of [`MIN_DERIVED_LEN`]+ bytes and [`MIN_DERIVED_ENTROPY`]+ bits per byte (a PIN's hex
//! is lines of `seq`), and only windows with [`MIN_UNKNOWN_BYTES`] bytes past the value's
//! public prefix (`ghp_`) count. Shorter pieces, other encodings or a program that computes on
//! the value can still get it out: the policy, which asks before any command receives a secret
//! or reads a file holding one, is the real gate.
//!
//! Redaction must not become an oracle (a guess that comes back as a placeholder was right):
//! [`SecretBroker::probe`] finds a secret in a call's own text, also behind escapes, and
//! [`SecretBroker::guarded_hit`] in the output of a call nobody approved; the toolbox then ends
//! the session without telling the model anything, so at most one bit leaks per session.
//!
//! Credentials come from the user's `~/.agentshell/.env` (trusted). A project's `.env` may add
//! names, but it cannot replace one the user defined: the conflict is reported and ignored.

use std::collections::{BTreeMap, HashSet};

use thiserror::Error;

/// Values shorter than this are not redacted: they would shred ordinary output.
pub const MIN_REDACT_LEN: usize = 6;

/// A placeholder named a secret the broker does not have.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretError {
    /// `{{secret:NAME}}` with an unknown NAME.
    #[error("unknown secret `{0}` (known: {1})")]
    Unknown(String, String),
    /// A placeholder name that is not a valid environment variable name.
    #[error("invalid secret name `{0}`")]
    InvalidName(String),
}

/// A command ready to launch: argv-safe text plus the environment changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCommand {
    /// The command line with placeholders replaced by `${NAME}` references.
    pub command: String,
    /// Variables to set in the child's environment (secret values included).
    pub set_env: BTreeMap<String, String>,
    /// Variables to remove from the inherited environment (secrets not asked for).
    pub remove_env: Vec<String>,
}

/// Holds the secrets; substitutes them into environments and redacts them from outputs.
#[derive(Debug, Clone, Default)]
pub struct SecretBroker {
    secrets: BTreeMap<String, String>,
    /// Values sorted longest first, so a secret containing another is replaced whole.
    redaction_order: Vec<(String, String)>,
    /// Per secret: the fragment length and every lower-cased fragment of its encoded forms.
    fragments: Vec<Fragments>,
}

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
struct Fragments {
    name: String,
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
    fn new(name: &str, value: &str) -> Option<Self> {
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
    fn matches(&self, view: &[u8]) -> Vec<(usize, usize)> {
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
    fn found_in(&self, view: &[u8]) -> bool {
        !self.matches(view).is_empty()
    }
}

fn rot13(b: u8) -> u8 {
    match b {
        b'a'..=b'z' => (b - b'a' + 13) % 26 + b'a',
        b'A'..=b'Z' => (b - b'A' + 13) % 26 + b'A',
        _ => b,
    }
}

fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// Base64 without padding (standard or URL alphabet): the characters a window's bytes give
/// inside a longer stream.
fn base64(bytes: &[u8], url: bool) -> String {
    let encoding = if url {
        &data_encoding::BASE64URL_NOPAD
    } else {
        &data_encoding::BASE64_NOPAD
    };
    encoding.encode(bytes)
}

impl SecretBroker {
    /// Build from the trusted user secrets and the project's secrets. Returns the broker and
    /// one warning per project entry that tried to replace a user secret.
    pub fn new(
        user: BTreeMap<String, String>,
        project: BTreeMap<String, String>,
    ) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let mut secrets = user;
        for (name, value) in project {
            match secrets.get(&name) {
                Some(existing) if *existing != value => warnings.push(format!(
                    "project .env tried to replace the user's secret {name}; ignored"
                )),
                Some(_) => {}
                None => {
                    secrets.insert(name, value);
                }
            }
        }
        let mut redaction_order: Vec<(String, String)> = secrets
            .iter()
            .filter(|(_, v)| v.len() >= MIN_REDACT_LEN)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        redaction_order.sort_by_key(|entry| std::cmp::Reverse(entry.1.len()));
        let fragments = redaction_order
            .iter()
            .filter_map(|(name, value)| Fragments::new(name, value))
            .collect();
        (
            Self {
                secrets,
                redaction_order,
                fragments,
            },
            warnings,
        )
    }

    /// The value of one secret, for the transport that needs it itself (the Telegram bot's
    /// token); never for the model or the tools.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.secrets.get(name).map(String::as_str)
    }

    /// The values guarded against probes and transforms (those whose derived forms are
    /// matched, see [`MIN_DERIVED_LEN`]), with their names: the policy asks before a command
    /// reads a file holding one.
    pub fn guarded_values(&self) -> Vec<(String, String)> {
        self.fragments
            .iter()
            .filter_map(|f| Some((f.name.clone(), self.secrets.get(&f.name)?.clone())))
            .collect()
    }

    /// The names of all known secrets (never the values).
    pub fn names(&self) -> Vec<String> {
        self.secrets.keys().cloned().collect()
    }

    /// Prepare a command: placeholders in `command` and in `env` values are resolved into the
    /// child's environment; all other secrets are removed from it.
    pub fn prepare(
        &self,
        command: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<PreparedCommand, SecretError> {
        let mut set_env = BTreeMap::new();
        let command = self.substitute(command, &mut set_env, |name| format!("${{{name}}}"))?;
        for (key, value) in env {
            if !is_env_name(key) {
                return Err(SecretError::InvalidName(key.clone()));
            }
            let mut used = BTreeMap::new();
            let resolved = self.substitute(value, &mut used, |name| {
                self.secrets.get(name).cloned().unwrap_or_default()
            })?;
            set_env.insert(key.clone(), resolved);
        }
        let remove_env = self
            .secrets
            .keys()
            .filter(|k| !set_env.contains_key(*k))
            .cloned()
            .collect();
        Ok(PreparedCommand {
            command,
            set_env,
            remove_env,
        })
    }

    /// Replace every `{{secret:NAME}}` in `text` with `replacement(NAME)`, recording the used
    /// secrets in `used`.
    fn substitute(
        &self,
        text: &str,
        used: &mut BTreeMap<String, String>,
        replacement: impl Fn(&str) -> String,
    ) -> Result<String, SecretError> {
        const OPEN: &str = "{{secret:";
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(OPEN) {
            let after = &rest[start + OPEN.len()..];
            let Some(end) = after.find("}}") else {
                break;
            };
            let name = after[..end].trim();
            if !is_env_name(name) {
                return Err(SecretError::InvalidName(name.to_string()));
            }
            let Some(value) = self.secrets.get(name) else {
                return Err(SecretError::Unknown(
                    name.to_string(),
                    self.names().join(", "),
                ));
            };
            out.push_str(&rest[..start]);
            out.push_str(&replacement(name));
            used.insert(name.to_string(), value.clone());
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Replace every known secret value in `text` with its placeholder, then every fragment
    /// of an encoded form (best effort, see the module notes).
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, value) in &self.redaction_order {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("{{{{secret:{name}}}}}"));
            }
        }
        self.redact_fragments(&out)
    }

    fn redact_fragments(&self, text: &str) -> String {
        if self.fragments.is_empty() || text.is_empty() {
            return text.to_string();
        }
        let lower: Vec<u8> = text.bytes().map(|b| b.to_ascii_lowercase()).collect();
        let identity: Vec<usize> = (0..lower.len()).collect();
        let (compact, map): (Vec<u8>, Vec<usize>) = lower
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.is_ascii_whitespace())
            .map(|(i, b)| (*b, i))
            .unzip();
        // (start, end, secret index) in `text`'s byte offsets.
        let mut ranges: Vec<(usize, usize, usize)> = Vec::new();
        for (view, map) in [(&lower, &identity), (&compact, &map)] {
            for (idx, f) in self.fragments.iter().enumerate() {
                let mut found = f.matches(view);
                found.sort_unstable();
                // Overlapping or touching matches make one run.
                let mut run: Option<(usize, usize)> = None;
                for (i, end) in found {
                    run = match run {
                        Some((s, e)) if i <= e => Some((s, e.max(end))),
                        Some((s, e)) => {
                            ranges.push((map[s], map[e - 1] + 1, idx));
                            Some((i, end))
                        }
                        None => Some((i, end)),
                    };
                }
                if let Some((s, e)) = run {
                    ranges.push((map[s], map[e - 1] + 1, idx));
                }
            }
        }
        if ranges.is_empty() {
            return text.to_string();
        }
        ranges.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut pos = 0;
        for (start, end, idx) in ranges {
            let mut start = start.max(pos);
            let mut end = end;
            while start > 0 && !text.is_char_boundary(start) {
                start -= 1;
            }
            while end < text.len() && !text.is_char_boundary(end) {
                end += 1;
            }
            if end <= pos {
                continue;
            }
            if start > pos {
                out.push_str(&text[pos..start]);
            } else if start < pos {
                start = pos;
            }
            if start < end {
                out.push_str(&format!("{{{{secret:{}}}}}", self.fragments[idx].name));
            }
            pos = end;
        }
        out.push_str(&text[pos..]);
        out
    }
}

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

impl SecretBroker {
    /// Redact the fragments of secrets at a cut: `head` ends where bytes were dropped and
    /// `tail` starts after them. A head ending with the start of a secret, or a tail starting
    /// with the end of one (at least [`MIN_FRAGMENT_LEN`] bytes), has that fragment replaced.
    pub fn redact_cut(&self, head: &str, tail: &str) -> (String, String) {
        let mut head = self.redact(head);
        let mut tail = self.redact(tail);
        for (name, value) in &self.redaction_order {
            let placeholder = format!("{{{{secret:{name}}}}}");
            for k in (MIN_FRAGMENT_LEN..value.len()).rev() {
                if value.is_char_boundary(k) && head.ends_with(&value[..k]) {
                    head.truncate(head.len() - k);
                    head.push_str(&placeholder);
                    break;
                }
            }
            for k in (MIN_FRAGMENT_LEN..value.len()).rev() {
                let start = value.len() - k;
                if value.is_char_boundary(start) && tail.starts_with(&value[start..]) {
                    tail.replace_range(..k, &placeholder);
                    break;
                }
            }
        }
        (head, tail)
    }
}

/// Shortest fragment of a secret redacted at a cut.
pub const MIN_FRAGMENT_LEN: usize = 4;

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_become_env_references_never_argv() {
        let (broker, _) = SecretBroker::new(
            map(&[
                ("GITHUB_TOKEN", "ghp_abcdef123456"),
                ("OTHER", "other-secret-1"),
            ]),
            BTreeMap::new(),
        );
        let p = broker
            .prepare("curl -H 'x: {{secret:GITHUB_TOKEN}}' url", &BTreeMap::new())
            .unwrap();
        assert_eq!(
            p,
            PreparedCommand {
                command: "curl -H 'x: ${GITHUB_TOKEN}' url".into(),
                set_env: map(&[("GITHUB_TOKEN", "ghp_abcdef123456")]),
                remove_env: vec!["OTHER".into()],
            }
        );
        assert!(!p.command.contains("ghp_"));
    }

    #[test]
    fn env_values_are_substituted() {
        let (broker, _) = SecretBroker::new(map(&[("TOKEN", "tok-123456")]), BTreeMap::new());
        let p = broker
            .prepare("make deploy", &map(&[("AUTH", "Bearer {{secret:TOKEN}}")]))
            .unwrap();
        assert_eq!(p.set_env, map(&[("AUTH", "Bearer tok-123456")]));
        assert_eq!(p.remove_env, vec!["TOKEN".to_string()]);
    }

    #[test]
    fn unknown_and_invalid_names_are_errors() {
        let (broker, _) = SecretBroker::new(map(&[("A_KEY", "value-123456")]), BTreeMap::new());
        assert_eq!(
            broker.prepare("echo {{secret:NOPE}}", &BTreeMap::new()),
            Err(SecretError::Unknown("NOPE".into(), "A_KEY".into()))
        );
        assert_eq!(
            broker.prepare("echo {{secret:a b}}", &BTreeMap::new()),
            Err(SecretError::InvalidName("a b".into()))
        );
    }

    #[test]
    fn redaction_replaces_longest_first() {
        let (broker, _) = SecretBroker::new(
            map(&[
                ("SHORT", "abcdef"),
                ("LONG", "abcdef-ghijkl"),
                ("TINY", "ab"),
            ]),
            BTreeMap::new(),
        );
        assert_eq!(
            broker.redact("x=abcdef-ghijkl y=abcdef z=ab"),
            "x={{secret:LONG}} y={{secret:SHORT}} z=ab"
        );
    }

    #[test]
    fn fragments_at_a_cut_are_redacted() {
        let (broker, _) = SecretBroker::new(map(&[("TOKEN", "abcdefghijklmnop")]), BTreeMap::new());
        assert_eq!(
            broker.redact_cut("log line abcdefgh", "ijklmnop more"),
            (
                "log line {{secret:TOKEN}}".to_string(),
                "{{secret:TOKEN}} more".to_string()
            )
        );
        assert_eq!(
            broker.redact_cut("ends abc", "xyz"),
            ("ends abc".to_string(), "xyz".to_string()),
            "fragments shorter than MIN_FRAGMENT_LEN stay"
        );
    }

    /// The encodings a model can choose: each output must lose the secret.
    #[test]
    fn encoded_forms_are_redacted() {
        let value = "AKIAsecretvalue0123456789XYZ";
        let (broker, _) =
            SecretBroker::new(map(&[("AWS_SECRET_ACCESS_KEY", value)]), BTreeMap::new());
        let rev: String = value.chars().rev().collect();
        let rot: String = value.bytes().map(|b| char::from(rot13(b))).collect();
        let hexed = hex(value.as_bytes());
        let spaced_hex: String = value
            .bytes()
            .map(|b| format!("{b:02x} "))
            .collect::<String>();
        let od_c: String = value
            .chars()
            .collect::<Vec<_>>()
            .chunks(16)
            .enumerate()
            .map(|(i, c)| {
                format!(
                    "{:07o} {}\n",
                    i * 16,
                    c.iter().map(|c| format!("   {c}")).collect::<String>()
                )
            })
            .collect();
        let folded: String = value
            .chars()
            .collect::<Vec<_>>()
            .chunks(3)
            .map(|c| c.iter().collect::<String>() + "\n")
            .collect();
        let mut outputs = vec![
            format!("KEY={rev}"),
            rot.clone(),
            value.to_uppercase(),
            value.to_lowercase(),
            hexed.to_uppercase(),
            spaced_hex,
            od_c,
            folded,
            value[..14].to_string(),
            value[14..].to_string(),
        ];
        for prefix in ["", "K", "KE", "AWS_SECRET_ACCESS_KEY="] {
            outputs.push(base64(format!("{prefix}{value}\n").as_bytes(), false));
            outputs.push(base64(format!("{prefix}{value}").as_bytes(), true));
        }
        for out in outputs {
            let red = broker.redact(&out);
            let flat: String = red.chars().filter(|c| !c.is_whitespace()).collect();
            assert!(
                red.contains("{{secret:AWS_SECRET_ACCESS_KEY}}"),
                "{out:?} -> {red:?}"
            );
            for piece in value.as_bytes().chunks(8) {
                let piece = std::str::from_utf8(piece).unwrap().to_lowercase();
                if piece.len() == 8 {
                    assert!(!flat.to_lowercase().contains(&piece), "{out:?} -> {red:?}");
                }
            }
        }
        // ordinary text is left alone
        assert_eq!(
            broker.redact("cargo test --lib 2>&1 | tail"),
            "cargo test --lib 2>&1 | tail"
        );
        assert_eq!(broker.redact("née ünïcode ✓"), "née ünïcode ✓");
    }

    /// Issue 28: lines of `seq` output are not the hex of a short or patterned secret.
    #[test]
    fn ordinary_output_is_not_redacted_by_coincidence() {
        let (broker, _) = SecretBroker::new(
            map(&[
                ("PIN", "123456789"),
                ("TOKEN", "ab123456789cdXYZqr"),
                ("WORDS", "aaaaaaaaaaaaaaaaaaaa"),
            ]),
            BTreeMap::new(),
        );
        let seq: String = (1..=3000).map(|i| format!("{i}\n")).collect();
        let seq_hex: String = (0x30..=0x39).map(|i| format!("{i}\n")).collect();
        for text in [seq.as_str(), seq_hex.as_str(), "31 32 33 34 35 36 37 38 39"] {
            assert_eq!(broker.redact(text), text);
            assert_eq!(broker.probe(text), None, "{text}");
        }
        // the value itself is still redacted where it appears whole
        assert_eq!(broker.redact("pin 123456789"), "pin {{secret:PIN}}");
        // in a URL with credentials, only the credentials are secret
        let (broker, _) = SecretBroker::new(
            map(&[(
                "DATABASE_URL",
                "postgres://app:Xk9mQ2pLw7@localhost:5432/dev",
            )]),
            BTreeMap::new(),
        );
        for text in [
            "db at localhost:5432/dev",
            "postgres://app@localhost:5432/dev",
        ] {
            assert_eq!(broker.redact(text), text);
            assert_eq!(broker.guarded_hit(text), None, "{text}");
        }
        assert_eq!(
            broker.guarded_hit("app:Xk9mQ2pLw7").as_deref(),
            Some("DATABASE_URL")
        );
    }

    /// Issue 28: a command that carries a guess of a secret in a form the redactor knows is a
    /// probe; a public prefix and a few guessed bytes are not enough to match a fragment.
    #[test]
    fn probes_are_recognised_in_every_known_form() {
        let token = "ghp_Zx9Qw3Er7Ty1Ui5Op2As6Df4Gh8Jk0LmNbVc";
        let (broker, _) = SecretBroker::new(map(&[("GITHUB_TOKEN", token)]), BTreeMap::new());
        let window = &token[4..16];
        let hexed = hex(window.as_bytes());
        let escaped: String = window.bytes().map(|b| format!("\\x{b:02x}")).collect();
        let octal: String = window.bytes().map(|b| format!("\\{b:o}")).collect();
        let decimal: Vec<String> = window.bytes().map(|b| b.to_string()).collect();
        let reversed: String = window.chars().rev().collect();
        for command in [
            format!("echo {token}"),
            format!("printf '%s\\n' 'aaaa|{hexed}|bbbb'"),
            format!("printf '%s' '{}'", hexed.to_uppercase()),
            format!("printf '{escaped}'"),
            format!("printf '{octal}'"),
            format!("jq -n '[{}]|implode'", decimal.join(",")),
            format!("echo {}", base64(window.as_bytes(), false)),
            format!("echo {reversed} | rev"),
            format!("grep -q {window} notes.txt"),
        ] {
            assert_eq!(
                broker.probe(&command).as_deref(),
                Some("GITHUB_TOKEN"),
                "{command}"
            );
        }
        // the public prefix with a few guessed bytes, and ordinary commands, are no probe;
        // and their output is not redacted either (nothing to learn from it)
        for text in [
            "printf '%s\\n' ghp_Zx9Q ghp_Zx9q",
            &hex(b"ghp_Zx9Qw"),
            "cargo test --lib 2>&1 | tail -40",
            "git log --oneline -5",
        ] {
            assert_eq!(broker.probe(text), None, "{text}");
            assert_eq!(broker.redact(text), text);
        }
    }

    /// The encoded forms are what `base64`/`basenc --base64url` and `xxd -p` print, without
    /// base64's padding (a window's characters inside a longer stream have none).
    #[test]
    fn encoded_forms_are_unpadded_base64_and_lowercase_hex() {
        assert_eq!(base64(b"ab", false), "YWI");
        assert_eq!(base64(b"abc", false), "YWJj");
        assert_eq!(base64(b"a", true), "YQ");
        assert_eq!(base64(&[0xfb, 0xff], false), "+/8");
        assert_eq!(base64(&[0xfb, 0xff], true), "-_8");
        assert_eq!(hex(&[0x00, 0xAB, 0x7f]), "00ab7f");
    }

    #[test]
    fn project_cannot_replace_user_credentials() {
        let (broker, warnings) = SecretBroker::new(
            map(&[("OPENAI_API_KEY", "sk-user-000000")]),
            map(&[
                ("OPENAI_API_KEY", "sk-evil-111111"),
                ("DB_URL", "postgres://x"),
            ]),
        );
        assert_eq!(
            broker.names(),
            vec!["DB_URL".to_string(), "OPENAI_API_KEY".to_string()]
        );
        let p = broker
            .prepare("run {{secret:OPENAI_API_KEY}}", &BTreeMap::new())
            .unwrap();
        assert_eq!(p.set_env.get("OPENAI_API_KEY").unwrap(), "sk-user-000000");
        assert_eq!(
            warnings,
            vec!["project .env tried to replace the user's secret OPENAI_API_KEY; ignored"]
        );
    }
}
