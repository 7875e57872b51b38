//! systemd credentials (`LoadCredential=`, `SetCredentialEncrypted=`, systemd.exec(5)): a
//! service's secrets in `$CREDENTIALS_DIRECTORY`. A token given so never sits in a unit file,
//! an environment listing or a store document.
//!
//! Read by hand, not with `libsystemd::credentials::CredentialsLoader`: agentshell moves
//! credential-like variables (this one included) out of its process environment at start
//! (`app::scrub_environment`), and the crate's loader only looks there; the directory comes
//! from the environment agentshell handed over instead.

use std::io::Read;
use std::path::Path;

/// The environment variable systemd names the directory in.
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// The largest credential read (a token is tens of bytes).
const MAX_BYTES: u64 = 64 * 1024;

/// The credential `name` in `dir` (`$CREDENTIALS_DIRECTORY`), without its trailing newline;
/// `None` when there is no directory or no such credential. An unreadable or empty one is an
/// error naming it.
pub fn credential(dir: Option<&str>, name: &str) -> Result<Option<String>, String> {
    let Some(dir) = dir.filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    if name.contains('/') {
        return Err(format!("credential {name:?}: not a credential name"));
    }
    let path = Path::new(dir).join(name);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("credential {name} ({}): {e}", path.display())),
    };
    let mut text = String::new();
    file.take(MAX_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("credential {name} ({}): {e}", path.display()))?;
    let value = text.trim_end_matches(['\n', '\r']).to_string();
    if value.is_empty() {
        return Err(format!("credential {name} ({}) is empty", path.display()));
    }
    Ok(Some(value))
}
