//! Config merge: `~/.agentshell/config.json` underneath, `<project>/.agentshell/config.json` on
//! top. The result is a plain JSON object; each layer below reads its own keys from it.

use std::path::Path;

use serde_json::{Map, Value};

use crate::agent::bootstrap::BootstrapError;

/// Read a config file; a missing file is an empty object, anything but an object is an error.
pub fn load(path: &Path) -> Result<Value, BootstrapError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Value::Object(Map::new())),
        Err(e) => return Err(BootstrapError::io("reading", path, e)),
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| BootstrapError::Config {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if !value.is_object() {
        return Err(BootstrapError::Config {
            path: path.to_path_buf(),
            message: "the top level must be a JSON object".to_string(),
        });
    }
    Ok(value)
}

/// Deep-merge `top` onto `base`: objects merge key by key, anything else is replaced.
pub fn merge(base: Value, top: Value) -> Value {
    match (base, top) {
        (Value::Object(mut b), Value::Object(t)) => {
            for (k, v) in t {
                let merged = match b.remove(&k) {
                    Some(old) => merge(old, v),
                    None => v,
                };
                b.insert(k, merged);
            }
            Value::Object(b)
        }
        (_, top) => top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn project_wins_and_objects_merge() {
        let user =
            json!({"model": "a/b", "max_iterations": 10, "prices": {"x": {"input_per_mtok": 1.0}}});
        let project = json!({"model": "c/d", "prices": {"y": {"input_per_mtok": 2.0}}});
        assert_eq!(
            merge(user, project),
            json!({"model": "c/d", "max_iterations": 10,
                   "prices": {"x": {"input_per_mtok": 1.0}, "y": {"input_per_mtok": 2.0}}})
        );
    }

    #[test]
    fn missing_is_empty_and_bad_json_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(load(&t.path().join("none.json")).unwrap(), json!({}));
        std::fs::write(t.path().join("bad.json"), "{").unwrap();
        assert!(matches!(
            load(&t.path().join("bad.json")),
            Err(BootstrapError::Config { .. })
        ));
        std::fs::write(t.path().join("arr.json"), "[]").unwrap();
        assert!(matches!(
            load(&t.path().join("arr.json")),
            Err(BootstrapError::Config { .. })
        ));
    }
}
