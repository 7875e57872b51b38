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

mod fragments;
mod probe;

use fragments::Fragments;
pub use fragments::{MIN_DERIVED_ENTROPY, MIN_DERIVED_LEN, MIN_UNKNOWN_BYTES};

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
mod tests;
