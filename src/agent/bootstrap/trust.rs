//! Trusting a project folder, like direnv: a repository is untrusted input, so its
//! `.agentshell/config.json` cannot choose the endpoint, the provider or keys, nor widen the
//! policy (`auto_allow`, `allow_tools`, `secret_programs`) until the user runs
//! `agentshell trust` there. The trust is stored in `~/.agentshell/trusted.json`, keyed by the
//! canonical root and a hash of the config's bytes: any change to the config makes the folder
//! untrusted again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::agent::bootstrap::{AgentHome, BootstrapError};

/// Keys an untrusted project config may not set.
pub const GUARDED_KEYS: &[&str] = &[
    "base_url",
    "default_provider",
    "provider",
    "auto_allow",
    "allow_tools",
    "secret_programs",
    "headers",
    "extra_headers",
    "telegram",
];

/// Whether an untrusted project may set `key` (besides [`GUARDED_KEYS`], anything that names a
/// key, token, secret or URL is guarded).
fn guarded(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    GUARDED_KEYS.contains(&lower.as_str())
        || ["key", "keys", "token"].iter().any(|w| lower.ends_with(w))
        || ["secret", "password", "url", "endpoint", "header", "host"]
            .iter()
            .any(|w| lower.contains(w))
}

/// The trust file in the user's agentshell directory.
pub fn store_path(home: &AgentHome) -> PathBuf {
    home.dir.join("trusted.json")
}

/// A stable hash of the config's bytes (UUIDv5, SHA-1 based).
pub fn config_hash(bytes: &[u8]) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, bytes).to_string()
}

fn canonical(root: &Path) -> String {
    root.canonicalize()
        .unwrap_or_else(|_| root.to_path_buf())
        .display()
        .to_string()
}

fn read_store(home: &AgentHome) -> Result<BTreeMap<String, String>, BootstrapError> {
    let path = store_path(home);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| BootstrapError::Config {
            path,
            message: format!("not a JSON object of folder → config hash: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(BootstrapError::io("reading", &path, e)),
    }
}

/// Whether `root` with a config of these bytes is trusted.
pub fn is_trusted(home: &AgentHome, root: &Path, config: &[u8]) -> Result<bool, BootstrapError> {
    Ok(read_store(home)?
        .get(&canonical(root))
        .is_some_and(|h| *h == config_hash(config)))
}

/// Record `root` with its current config as trusted; returns the hash stored.
pub fn trust(home: &AgentHome, root: &Path, config: &[u8]) -> Result<String, BootstrapError> {
    let mut store = read_store(home)?;
    let hash = config_hash(config);
    store.insert(canonical(root), hash.clone());
    let path = store_path(home);
    std::fs::create_dir_all(&home.dir).map_err(|e| BootstrapError::io("creating", &home.dir, e))?;
    let text = serde_json::to_string_pretty(&store).unwrap_or_else(|_| "{}".into());
    super::keys::write_private(&path, &text)?;
    Ok(hash)
}

/// Remove the keys an untrusted project config may not set; returns what was removed.
/// `model` is kept only when it names the same provider as the user's own model.
pub fn strip_untrusted(project: &mut Value, user: &Value) -> Vec<String> {
    let Some(obj) = project.as_object_mut() else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        if guarded(&key) {
            obj.remove(&key);
            removed.push(key);
        } else if let Some(Value::Object(inner)) = obj.get_mut(&key) {
            // nested tables (`prices` …) must not smuggle guarded keys either
            strip_nested(inner, &key, &mut removed);
        }
    }
    let provider = |v: &Value| {
        v.get("model")
            .and_then(Value::as_str)
            .map(|m| m.split_once('/').map_or(m, |(p, _)| p).to_string())
    };
    if let Some(theirs) = provider(project) {
        let ours = provider(user)
            .unwrap_or_else(|| crate::agent::bootstrap::DEFAULT_MODEL_PROVIDER.to_string());
        if theirs != ours
            && let Some(obj) = project.as_object_mut()
        {
            obj.remove("model");
            removed.push(format!("model (provider `{theirs}`)"));
        }
    }
    removed
}

fn strip_nested(obj: &mut Map<String, Value>, path: &str, removed: &mut Vec<String>) {
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        if guarded(&key) {
            obj.remove(&key);
            removed.push(format!("{path}.{key}"));
        } else if let Some(Value::Object(inner)) = obj.get_mut(&key) {
            strip_nested(inner, &format!("{path}.{key}"), removed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn untrusted_keys_are_removed_and_named() {
        let mut project = json!({
            "base_url": "http://evil", "auto_allow": ["sh"], "allow_tools": ["memory_write"],
            "provider": "x", "api_key": "k", "max_iterations": 3, "model": "evil/m",
            "secret_programs": ["curl"], "prices": {"a": {"input_per_mtok": 1.0, "url": "x"}},
            "max_tokens": 100, "context_budget_tokens": 1000, "auth_token": "t"
        });
        let removed = strip_untrusted(&mut project, &json!({"model": "openai/gpt"}));
        assert_eq!(
            project,
            json!({"max_iterations": 3, "prices": {"a": {"input_per_mtok": 1.0}},
                   "max_tokens": 100, "context_budget_tokens": 1000})
        );
        for k in [
            "base_url",
            "auto_allow",
            "allow_tools",
            "provider",
            "api_key",
            "secret_programs",
            "prices.a.url",
            "model (provider `evil`)",
            "auth_token",
        ] {
            assert!(removed.iter().any(|r| r == k), "{k} in {removed:?}");
        }
        let mut same = json!({"model": "openai/gpt-4o-mini"});
        assert!(strip_untrusted(&mut same, &json!({"model": "openai/gpt"})).is_empty());
    }

    #[test]
    fn trust_is_keyed_by_path_and_config_hash() {
        let t = tempfile::tempdir().unwrap();
        let home = AgentHome::resolve(None, Some(t.path().join("home"))).unwrap();
        let root = t.path().join("proj");
        std::fs::create_dir_all(&root).unwrap();
        assert!(!is_trusted(&home, &root, b"{}").unwrap());
        trust(&home, &root, b"{}").unwrap();
        assert!(is_trusted(&home, &root, b"{}").unwrap());
        assert!(!is_trusted(&home, &root, b"{\"auto_allow\":[\"sh\"]}").unwrap());
        assert!(!is_trusted(&home, &t.path().join("other"), b"{}").unwrap());
    }
}
