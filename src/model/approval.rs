//! Approvals for unattended jobs (issue 15): the queue's policy (`config.approvals`), the
//! request and answer files a running job and its queue manager exchange, and what the job
//! records about each decision (`runtime.approvals`).

use super::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Seconds a request waits for a human when the queue says nothing.
pub const DEFAULT_DEADLINE_SECONDS: u64 = 300;

/// Longest deadline a queue may set (a day).
pub const MAX_DEADLINE_SECONDS: u64 = 86_400;

/// What a rule or the default decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Allowed without a human.
    Allow,
    /// Denied without a human.
    Deny,
    /// Asked: published on D-Bus until answered or the deadline passes (then denied).
    Ask,
}

/// One rule: a tool (exact name, or `*`) and an optional glob over the request's subject
/// (Bash: the command; file tools: the path; otherwise the input as compact JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    /// Tool name (`Write`, `Bash`, `mcp__x__y`, agentshell's `run_command` …) or `*`.
    pub tool: String,
    /// Glob (`*` any text, `?` one character) over the subject; absent matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// What the rule answers (`allow` or `deny`; `ask` sends it to a human).
    pub decision: Decision,
}

/// A queue's approval policy (`config.approvals`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// Rules, the first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ApprovalRule>,
    /// What happens when no rule matches (default `ask`).
    #[serde(default = "default_decision")]
    pub default: Decision,
    /// Seconds a request waits for an answer before it is denied (default 300).
    #[serde(default = "default_deadline")]
    pub deadline_seconds: u64,
}

fn default_decision() -> Decision {
    Decision::Ask
}

fn default_deadline() -> u64 {
    DEFAULT_DEADLINE_SECONDS
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        ApprovalPolicy {
            rules: Vec::new(),
            default: Decision::Ask,
            deadline_seconds: DEFAULT_DEADLINE_SECONDS,
        }
    }
}

impl ApprovalPolicy {
    /// The deadline within its bounds (1 s … a day).
    pub fn deadline(&self) -> u64 {
        self.deadline_seconds.clamp(1, MAX_DEADLINE_SECONDS)
    }

    /// The decision of the first rule in `extra` (the job's `always` rules), then in the
    /// queue's rules, matching `tool` and `subject`; else the default. The matching rule is
    /// returned for the record.
    pub fn decide<'a>(
        &'a self,
        extra: &'a [ApprovalRule],
        tool: &str,
        subject: &str,
    ) -> (Decision, Option<&'a ApprovalRule>) {
        match extra
            .iter()
            .chain(self.rules.iter())
            .find(|r| r.matches(tool, subject))
        {
            Some(r) => (r.decision, Some(r)),
            None => (self.default, None),
        }
    }
}

impl ApprovalRule {
    /// True when the rule covers this tool and subject.
    pub fn matches(&self, tool: &str, subject: &str) -> bool {
        (self.tool == "*" || self.tool == tool)
            && self.pattern.as_deref().is_none_or(|p| glob(p, subject))
    }
}

/// `*` matches any text (also empty), `?` one character, anything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// What a rule's pattern is matched against: Bash's (and agentshell's) command, a file
/// tool's path, else the input as compact JSON.
pub fn subject(input: &Value) -> String {
    for key in [
        "command",
        "file_path",
        "path",
        "notebook_path",
        "url",
        "pattern",
    ] {
        if let Some(s) = input.get(key).and_then(Value::as_str) {
            return s.to_string();
        }
    }
    input.to_string()
}

/// One line for people: `Write /tmp/x`, `Bash: ls -l` (at most 200 characters).
pub fn summary(tool: &str, input: &Value) -> String {
    let s = format!("{tool}: {}", subject(input));
    if s.chars().count() > 200 {
        let mut cut: String = s.chars().take(199).collect();
        cut.push('…');
        cut
    } else {
        s
    }
}

/// A request waiting for an answer: `Jobs/approvals/<request_id>.request.json`, written by
/// the job's worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    /// `<job_id>-a<n>-<random>`: unguessable, so no answer can wait for it in advance.
    pub request_id: String,
    /// The job asking.
    pub job_id: String,
    /// The tool the agent wants to use.
    pub tool: String,
    /// One line for people.
    pub summary: String,
    /// The tool's input.
    pub input: Value,
    /// When it was asked.
    pub requested_at: Timestamp,
    /// When it is denied if nobody answered.
    pub deadline: Timestamp,
}

/// An answer: `Jobs/approvals/<request_id>.answer.json`, written once (never replaced) by
/// the queue manager for a person, or by the worker at the deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    /// The request answered.
    pub request_id: String,
    /// Allowed or denied.
    pub allow: bool,
    /// Also answer the same tool (and subject) this way for the rest of the job.
    #[serde(default)]
    pub always: bool,
    /// The reason the agent sees (a deny), or a note.
    #[serde(default)]
    pub message: String,
    /// Who answered: a user id, a login, `deadline`.
    pub by: String,
    /// When.
    pub at: Timestamp,
    /// The writer's proof ([`ApprovalAnswer::sign`]): a keyed digest of the answer under
    /// the job's approval key, which only its queue manager and its worker hold (handed on
    /// the worker's gate, never in the store). An answer without a valid proof — planted in
    /// the store by a sync peer or another account — is not an answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub proof: String,
}

/// Where a worker that has no gate finds its job's approval key: the environment Slurm
/// gives the batch step (the queue manager hands it to `sbatch` in sbatch's own environment,
/// never on a command line or in the store; the step runs as root, so only root can read it
/// there). Never passed on to the agent ([`crate::worker`]'s `agent_env`).
pub const APPROVAL_KEY_ENV: &str = "AGENTSTORE_APPROVAL_KEY";

/// A job's approval key: random, made by the queue manager when it starts the job and
/// handed to the worker on its gate; never written to the store.
pub fn new_approval_key() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl ApprovalAnswer {
    /// What the proof covers: every field but the proof, in a fixed form.
    fn signed_text(&self) -> String {
        serde_json::json!([
            "agentstore-approval-answer-1",
            self.request_id,
            self.allow,
            self.always,
            self.message,
            self.by,
            self.at.to_string(),
        ])
        .to_string()
    }

    /// The proof of this answer under `key` (a nested keyed SHA-1 through UUID v5, the
    /// shape of an HMAC; the key is 122 random bits): empty for a key that is not one.
    fn proof_with(&self, key: &str) -> String {
        let Ok(k) = uuid::Uuid::parse_str(key) else {
            return String::new();
        };
        let inner = uuid::Uuid::new_v5(&k, self.signed_text().as_bytes());
        uuid::Uuid::new_v5(&k, inner.as_bytes())
            .simple()
            .to_string()
    }

    /// Signs this answer with the job's approval `key`.
    pub fn sign(mut self, key: &str) -> ApprovalAnswer {
        self.proof = self.proof_with(key);
        self
    }

    /// True when the answer was signed with `key` and not changed since.
    pub fn verify(&self, key: &str) -> bool {
        let want = self.proof_with(key);
        !want.is_empty()
            && want.len() == self.proof.len()
            && want
                .bytes()
                .zip(self.proof.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// True when `request_id` has the form of a request of job `job_id`:
/// `<job_id>-a<n>-<24 hex digits>` (as the worker makes them).
pub fn is_request_id_of(job_id: &str, request_id: &str) -> bool {
    let Some(rest) = request_id
        .strip_prefix(job_id)
        .and_then(|r| r.strip_prefix("-a"))
    else {
        return false;
    };
    let Some((n, random)) = rest.split_once('-') else {
        return false;
    };
    (1..=9).contains(&n.len())
        && n.bytes().all(|b| b.is_ascii_digit())
        && random.len() == 24
        && random.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Answers relayed to a Slurm batch step run as the job's own account (issue 27,
/// docs/trust-model.md): that account (and so the agent) can write the file the step reads
/// its answers from, and must hold nothing that could sign one — a key it can read signs
/// answers to its own requests. So the manager signs these with Ed25519, under a private key
/// derived from the job's approval key (which never leaves the manager), and the step holds
/// only the public half ([`relay_public_key`]).
impl ApprovalAnswer {
    /// Signs this answer for a relay step of the job whose approval key is `job_key`.
    pub fn sign_for_relay(mut self, job_key: &str) -> ApprovalAnswer {
        self.proof = relay_private_key(job_key)
            .and_then(|k| {
                let mut s = openssl::sign::Signer::new_without_digest(&k).ok()?;
                s.sign_oneshot_to_vec(self.signed_text().as_bytes()).ok()
            })
            .map(|sig| to_hex(&sig))
            .unwrap_or_default();
        self
    }

    /// True when the answer was signed (and not changed since) by the holder of the private
    /// half of `public_key` (hex, as [`relay_public_key`] gives it).
    pub fn verify_relayed(&self, public_key: &str) -> bool {
        let (Some(pk), Some(sig)) = (from_hex(public_key), from_hex(&self.proof)) else {
            return false;
        };
        let Ok(pk) =
            openssl::pkey::PKey::public_key_from_raw_bytes(&pk, openssl::pkey::Id::ED25519)
        else {
            return false;
        };
        openssl::sign::Verifier::new_without_digest(&pk)
            .and_then(|mut v| v.verify_oneshot(&sig, self.signed_text().as_bytes()))
            .unwrap_or(false)
    }
}

/// The Ed25519 key the manager signs a relay job's answers with: its seed is a digest of the
/// job's approval key, so a manager that restarts (and re-adopts the job) signs as before.
fn relay_private_key(job_key: &str) -> Option<openssl::pkey::PKey<openssl::pkey::Private>> {
    use sha2::Digest;
    uuid::Uuid::parse_str(job_key).ok()?;
    let seed = sha2::Sha256::new()
        .chain_update(b"agentstore-relay-answer-key-1\0")
        .chain_update(job_key.as_bytes())
        .finalize();
    openssl::pkey::PKey::private_key_from_raw_bytes(&seed, openssl::pkey::Id::ED25519).ok()
}

/// The public half of the key [`ApprovalAnswer::sign_for_relay`] signs with (hex; `None`
/// for a key that is not one). Handed to the relay step in its batch script: public.
pub fn relay_public_key(job_key: &str) -> Option<String> {
    relay_private_key(job_key)?
        .raw_public_key()
        .ok()
        .map(|k| to_hex(&k))
}

fn to_hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// The bytes of `text` in hex (either case; at most 512 bytes).
fn from_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() > 1024 {
        return None;
    }
    data_encoding::HEXLOWER_PERMISSIVE
        .decode(text.as_bytes())
        .ok()
}

/// What a job records about one decision (`runtime.approvals[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRecord {
    /// The request (`<job_id>-a<n>-<random>`).
    pub request_id: String,
    /// Tool.
    pub tool: String,
    /// One line for people.
    pub summary: String,
    /// Allowed or denied.
    pub allow: bool,
    /// An `always` answer (a rule for the rest of the job).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always: bool,
    /// Who decided: a user id or login, `queue rule`, `queue default`, `job rule`,
    /// `deadline`.
    pub by: String,
    /// When.
    pub at: Timestamp,
    /// The reason given (a deny's message), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_ids_are_the_jobs_own() {
        let ok = "j1-a2-0123456789abcdef01234567";
        assert!(is_request_id_of("j1", ok));
        for bad in [
            "j2-a2-0123456789abcdef01234567",
            "j1-a-0123456789abcdef01234567",
            "j1-a2-0123456789abcdef0123456",
            "j1-a2-0123456789abcdef0123456z",
            "j1-a2-0123456789abcdef01234567/../x",
            "j1-ax-0123456789abcdef01234567",
        ] {
            assert!(!is_request_id_of("j1", bad), "{bad}");
        }
    }

    #[test]
    fn relay_answers_verify_only_with_the_managers_public_key() {
        let key = new_approval_key();
        let public = relay_public_key(&key).unwrap();
        let answer = ApprovalAnswer {
            request_id: "j-a1-0123456789abcdef01234567".into(),
            allow: true,
            always: false,
            message: "go".into(),
            by: "chenry".into(),
            at: Timestamp::now(),
            proof: String::new(),
        };
        let signed = answer.clone().sign_for_relay(&key);
        assert!(signed.verify_relayed(&public));
        assert_eq!(
            relay_public_key(&key).unwrap(),
            public,
            "the same key again"
        );
        // Another job's key, a changed answer, the job's symmetric proof: none verifies.
        assert!(
            !answer
                .clone()
                .sign_for_relay(&new_approval_key())
                .verify_relayed(&public)
        );
        let mut changed = signed.clone();
        changed.allow = false;
        assert!(!changed.verify_relayed(&public));
        assert!(!answer.clone().sign(&key).verify_relayed(&public));
        assert!(!answer.verify_relayed(&public), "unsigned");
        assert!(!signed.verify_relayed("zz"), "not a key");
        assert!(relay_public_key("not a key").is_none());
        // Hex is read in either case, as before the hex crate (written lowercase).
        let mut upper = signed.clone();
        upper.proof = upper.proof.to_uppercase();
        assert!(upper.verify_relayed(&public.to_uppercase()));
    }

    #[test]
    fn hex_is_whole_bytes_of_hex_digits() {
        assert_eq!(from_hex("00aBFf"), Some(vec![0, 0xab, 0xff]));
        assert_eq!(from_hex(""), Some(vec![]));
        // Odd length, a non-digit, a sign (`u8::from_str_radix` took "+f"), a character
        // of two bytes, too long.
        for bad in ["0", "0g", "+f", "é0", &"00".repeat(513)] {
            assert_eq!(from_hex(bad), None, "{bad}");
        }
        assert_eq!(to_hex(&[0, 0xab, 0xff]), "00abff");
    }

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("/tmp/*", "/tmp/a/b"));
        assert!(glob("ls*", "ls -l"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(!glob("/tmp/*", "/etc/passwd"));
        assert!(glob("*.txt", "x.y.txt"));
        assert!(!glob("*.txt", "x.txt.gz"));
    }

    #[test]
    fn first_rule_wins_job_rules_first_then_default() {
        let p: ApprovalPolicy = serde_json::from_value(json!({
            "rules": [
                {"tool": "Write", "pattern": "/tmp/*", "decision": "allow"},
                {"tool": "*", "decision": "deny"}
            ],
            "default": "ask",
            "deadline_seconds": 10
        }))
        .unwrap();
        assert_eq!(p.decide(&[], "Write", "/tmp/x").0, Decision::Allow);
        assert_eq!(p.decide(&[], "Write", "/etc/x").0, Decision::Deny);
        let job = [ApprovalRule {
            tool: "Write".into(),
            pattern: Some("/etc/x".into()),
            decision: Decision::Allow,
        }];
        assert_eq!(p.decide(&job, "Write", "/etc/x").0, Decision::Allow);
        let empty = ApprovalPolicy::default();
        assert_eq!(empty.decide(&[], "Bash", "ls"), (Decision::Ask, None));
        assert!(serde_json::from_value::<ApprovalPolicy>(json!({"rulez": []})).is_err());
    }

    #[test]
    fn answers_count_only_with_the_jobs_key() {
        let key = new_approval_key();
        let a = ApprovalAnswer {
            request_id: "j-a1-x".into(),
            allow: true,
            always: false,
            message: String::new(),
            by: "alice".into(),
            at: Timestamp::now(),
            proof: String::new(),
        };
        assert!(!a.verify(&key), "an unsigned answer");
        let signed = a.clone().sign(&key);
        assert!(signed.verify(&key));
        assert!(!signed.verify(&new_approval_key()), "another job's key");
        let mut changed = signed.clone();
        changed.request_id = "j-a2-x".into();
        assert!(!changed.verify(&key), "moved to another request");
        let mut flipped = signed.clone();
        flipped.allow = false;
        assert!(!flipped.verify(&key), "its decision changed");
        assert!(!a.clone().sign("not a key").verify("not a key"));
    }

    #[test]
    fn subjects_and_summaries() {
        assert_eq!(subject(&json!({"command": "ls"})), "ls");
        assert_eq!(subject(&json!({"file_path": "/a", "content": "x"})), "/a");
        assert_eq!(subject(&json!({"q": 1})), "{\"q\":1}");
        assert_eq!(summary("Bash", &json!({"command": "ls"})), "Bash: ls");
        assert_eq!(
            summary("Bash", &json!({"command": "x".repeat(500)}))
                .chars()
                .count(),
            200
        );
    }
}
