//! Secret broker — the only place secret values exist.
//!
//! The model sees placeholders (`{{secret:NAME}}`), never values. A placeholder in a command is
//! rewritten to a `${NAME}` reference and the value is put into the *child's environment* at
//! launch — never into argv, which `ps` shows. Every secret the broker knows is removed from
//! the child's environment unless the call asked for it, and every output is redacted before it
//! becomes a tool result, so `env` or `cat` of a file holding a secret returns nothing useful.
//!
//! Redaction is best effort against a model that chooses the output format: besides the exact
//! value, it finds fragments (a third of the value, 8..12 bytes) of the value, its reverse,
//! its rot13, its hex and its base64 forms, compared case-insensitively, both in the text as
//! is and with whitespace removed (`od -c`, `hexdump -C`, `fold`). Shorter pieces, other
//! encodings or a program that computes on the value can still get it out: the policy, which
//! asks before any command receives a secret, is the real gate.
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

#[derive(Debug, Clone)]
struct Fragments {
    name: String,
    len: usize,
    grams: HashSet<Vec<u8>>,
}

impl Fragments {
    fn new(name: &str, value: &str) -> Self {
        let bytes = value.as_bytes();
        let len = (bytes.len() / 3).clamp(8, 12);
        let mut forms: Vec<Vec<u8>> = vec![bytes.to_vec()];
        forms.push(bytes.iter().rev().copied().collect());
        forms.push(bytes.iter().map(|b| rot13(*b)).collect());
        forms.push(hex(bytes).into_bytes());
        forms.push(hex(&bytes.iter().rev().copied().collect::<Vec<u8>>()).into_bytes());
        for url in [false, true] {
            for shift in 0..3usize {
                // The value at each offset mod 3 inside a larger base64 stream: drop the
                // characters that depend on the bytes around it.
                let mut padded = vec![0u8; shift];
                padded.extend_from_slice(bytes);
                let encoded = base64(&padded, url);
                let skip = if shift == 0 {
                    0
                } else {
                    (shift * 4).div_ceil(3)
                };
                let keep = encoded.len().saturating_sub(4);
                if keep > skip {
                    forms.push(encoded.as_bytes()[skip..keep].to_vec());
                }
            }
        }
        let mut grams = HashSet::new();
        for form in forms {
            let lower: Vec<u8> = form.iter().map(u8::to_ascii_lowercase).collect();
            if lower.len() >= len {
                for w in lower.windows(len) {
                    grams.insert(w.to_vec());
                }
            }
        }
        Self {
            name: name.to_string(),
            len,
            grams,
        }
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
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn base64(bytes: &[u8], url: bool) -> String {
    const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let table = if url { URL } else { STD };
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(table[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
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
            .map(|(name, value)| Fragments::new(name, value))
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
                if view.len() < f.len {
                    continue;
                }
                let mut run: Option<(usize, usize)> = None;
                for i in 0..=view.len() - f.len {
                    if f.grams.contains(&view[i..i + f.len]) {
                        run = match run {
                            Some((s, e)) if i <= e => Some((s, i + f.len)),
                            Some((s, e)) => {
                                ranges.push((map[s], map[e - 1] + 1, idx));
                                Some((i, i + f.len))
                            }
                            None => Some((i, i + f.len)),
                        };
                    }
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
