//! systemd credentials (`LoadCredential=`, `LoadCredentialEncrypted=`, `SetCredential=`,
//! `SetCredentialEncrypted=`, systemd.exec(5)): a service's secrets in
//! `$CREDENTIALS_DIRECTORY`. A token given so never sits in a unit file, an environment
//! listing or a store document.
//!
//! The one reader of a credential file, for the whole crate: agentshell's Telegram token
//! here, and through `crate::systemd::credentials` the notifier's Slack and Telegram tokens,
//! the Slack app's tokens and the jobs' keys. It lives in `agent/` because `agent/` uses
//! nothing else of the crate. Errors name the credential, never its contents.
//!
//! Read by hand, not with `libsystemd::credentials::CredentialsLoader`: agentshell moves
//! credential-like variables (this one included) out of its process environment at start
//! (`app::scrub_environment`), and the crate's loader only looks there; the directory comes
//! from the environment agentshell handed over instead.

use std::io::Read;
use std::path::Path;

/// The environment variable systemd names the directory in.
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// The largest credential read (bytes); a longer one is an error, never cut.
pub const MAX_BYTES: u64 = 64 * 1024;

/// The credential `name` in `dir`, without the trailing newline `systemd-creds` and editors
/// leave; `None` when there is no such credential. A name that is not a file name, a file
/// that cannot be read, one over [`MAX_BYTES`] or not UTF-8 is an error naming the credential.
pub fn read(dir: &Path, name: &str) -> Result<Option<String>, String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(format!("credential name {name:?} is not a file name"));
    }
    let path = dir.join(name);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("credential {name} ({}): {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("credential {name} ({}): {e}", path.display()))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!(
            "credential {name} ({}): more than {MAX_BYTES} bytes",
            path.display()
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("credential {name} ({}): not UTF-8 text", path.display()))?;
    Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()))
}

/// The credential `name` in `dir` (`$CREDENTIALS_DIRECTORY`, as agentshell was handed it);
/// `None` when there is no directory or no such credential. An empty one is an error naming
/// it, like every other fault [`read`] finds.
pub fn credential(dir: Option<&str>, name: &str) -> Result<Option<String>, String> {
    let Some(dir) = dir.filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    match read(Path::new(dir), name)? {
        Some(v) if v.is_empty() => Err(format!("credential {name} ({dir}/{name}) is empty")),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reader_for_every_fault() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_str().unwrap();
        std::fs::write(d.path().join("TOKEN"), "123:abc\n").unwrap();
        assert_eq!(
            credential(Some(dir), "TOKEN").unwrap().as_deref(),
            Some("123:abc")
        );
        assert_eq!(credential(Some(dir), "ABSENT").unwrap(), None);
        assert_eq!(credential(None, "TOKEN").unwrap(), None);
        std::fs::write(d.path().join("EMPTY"), "\n").unwrap();
        assert!(
            credential(Some(dir), "EMPTY")
                .unwrap_err()
                .contains("EMPTY")
        );
        // Too long: an error naming it, never the first 64 KiB of it.
        std::fs::write(d.path().join("BIG"), vec![b'k'; MAX_BYTES as usize + 1]).unwrap();
        let e = credential(Some(dir), "BIG").unwrap_err();
        assert!(e.contains("BIG") && !e.contains("kkk"), "{e}");
        std::fs::write(d.path().join("BIN"), [0xff, 0xfe]).unwrap();
        assert!(
            credential(Some(dir), "BIN")
                .unwrap_err()
                .contains("not UTF-8")
        );
        for bad in ["../TOKEN", ".hidden", ""] {
            assert!(credential(Some(dir), bad).is_err(), "{bad}");
        }
    }
}
