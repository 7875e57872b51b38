//! Secrets for the sinks: a systemd credential (`$CREDENTIALS_DIRECTORY/<name>`, from
//! `LoadCredential=`/`SetCredential=` in the unit) or the inline value of config.yaml. Never
//! logged: errors name the credential, not its contents.

use std::path::PathBuf;

/// The longest secret read (bytes).
const MAX_SECRET: u64 = 4096;

/// The secret named `credential` (preferred) or the inline `value`. The error names what is
/// missing.
pub fn secret(what: &str, value: Option<&str>, credential: Option<&str>) -> Result<String, String> {
    if let Some(name) = credential {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(format!(
                "{what}: credential name {name:?} is not a file name"
            ));
        }
        let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") else {
            return Err(format!(
                "{what}: credential {name:?} named, but $CREDENTIALS_DIRECTORY is not set (LoadCredential= in the unit)"
            ));
        };
        let path = PathBuf::from(dir).join(name);
        let mut text = String::new();
        let f = std::fs::File::open(&path)
            .map_err(|e| format!("{what}: credential {}: {e}", path.display()))?;
        std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_SECRET), &mut text)
            .map_err(|e| format!("{what}: credential {}: {e}", path.display()))?;
        let t = text.trim();
        if t.is_empty() {
            return Err(format!("{what}: credential {} is empty", path.display()));
        }
        return Ok(t.to_string());
    }
    match value {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(format!("{what}: no secret configured")),
    }
}
