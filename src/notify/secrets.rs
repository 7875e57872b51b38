//! Secrets for the sinks: a systemd credential (`$CREDENTIALS_DIRECTORY/<name>`, from
//! `LoadCredential=`/`SetCredential=` in the unit) or the inline value of config.yaml. Never
//! logged: errors name the credential, not its contents.

/// The longest secret read (bytes).
const MAX_SECRET: u64 = 4096;

/// The secret named `credential` (preferred) or the inline `value`. The error names what is
/// missing.
pub fn secret(what: &str, value: Option<&str>, credential: Option<&str>) -> Result<String, String> {
    if let Some(name) = credential {
        let Some(dir) = crate::systemd::credentials::directory() else {
            return Err(format!(
                "{what}: credential {name:?} named, but $CREDENTIALS_DIRECTORY is not set (LoadCredential= in the unit)"
            ));
        };
        let text = crate::systemd::credentials::read_from(&dir, name)
            .map_err(|e| format!("{what}: {e}"))?;
        let t = text.trim();
        if t.is_empty() {
            return Err(format!("{what}: credential {name} is empty"));
        }
        if t.len() as u64 > MAX_SECRET {
            return Err(format!(
                "{what}: credential {name}: more than {MAX_SECRET} bytes"
            ));
        }
        return Ok(t.to_string());
    }
    match value {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(format!("{what}: no secret configured")),
    }
}
