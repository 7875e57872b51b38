//! The `.env` files: parsing them, and writing the user's `~/.agentshell/.env` with mode 0600.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::agent::bootstrap::BootstrapError;

/// Parse `KEY=VALUE` lines: `#` comments, blank lines, an optional `export `, optional single
/// or double quotes around the value.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        out.insert(key.to_string(), value.to_string());
    }
    out
}

/// Read and parse an `.env` file; a missing file is empty.
pub fn read_env(path: &Path) -> Result<BTreeMap<String, String>, BootstrapError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(parse_env(&t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(BootstrapError::io("reading", path, e)),
    }
}

/// Merge `updates` into the `.env` at `path` and write it atomically with mode 0600 (the
/// directory is created with mode 0700 when missing). Returns the keys now stored.
pub fn write_env(
    path: &Path,
    updates: &BTreeMap<String, String>,
) -> Result<Vec<String>, BootstrapError> {
    if let Some(dir) = path.parent()
        && !dir.is_dir()
    {
        std::fs::create_dir_all(dir).map_err(|e| BootstrapError::io("creating", dir, e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| BootstrapError::io("restricting", dir, e))?;
    }
    let mut all = read_env(path)?;
    for (k, v) in updates {
        all.insert(k.clone(), v.clone());
    }
    let mut text = String::from("# agentshell credentials (setup-keys). Keep this file private.\n");
    for (k, v) in &all {
        text.push_str(&format!("{k}=\"{}\"\n", v.replace('"', "")));
    }
    write_private(path, &text)?;
    Ok(all.into_keys().collect())
}

/// Writes `text` to `path` mode 0600, atomically (see [`crate::agent::private_file`]).
pub fn write_private(path: &Path, text: &str) -> Result<(), BootstrapError> {
    crate::agent::private_file::write_private(path, text)
        .map_err(|e| BootstrapError::io(e.action, &e.path, e.source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        let env = parse_env("# c\nA=1\nexport B = \"two words\"\nC='x'\nbad line\n=v\nD=\n");
        let expected: BTreeMap<String, String> =
            [("A", "1"), ("B", "two words"), ("C", "x"), ("D", "")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(env, expected);
    }

    #[test]
    fn written_with_mode_0600_and_merged() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("agentshell/.env");
        let one: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
        write_env(&path, &one).unwrap();
        let two: BTreeMap<String, String> = [("B".to_string(), "2".to_string())].into();
        assert_eq!(
            write_env(&path, &two).unwrap(),
            vec!["A".to_string(), "B".to_string()]
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(
            read_env(&path).unwrap().get("B").map(String::as_str),
            Some("2")
        );
    }
}
