//! Who is asking over HTTP: over the Unix socket, the peer's uid from the kernel
//! (`SO_PEERCRED`), mapped to a PRD §10 caller by the same rule the D-Bus interfaces use
//! (`orchestrator::caller::caller_for_uid`); over loopback TCP, whoever presents the per-user
//! token (`~/.config/agentstore/web-token`, mode 0600) acts as the service's own account.

use super::error::WebError;
use crate::bus::BusError;
use crate::orchestrator::caller::caller_for_uid;
use crate::permissions::Caller;
use crate::store::Store;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How a connection reached the server.
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    /// A Unix-socket peer with this uid (from the kernel).
    Unix(u32),
    /// A loopback TCP peer (the token decides).
    Tcp,
}

/// The caller a request acts as.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The PRD §10 caller.
    pub caller: Caller,
    /// The user id the front end acts for on the bus (`None`: a trusted caller acting for
    /// no one).
    pub user: Option<String>,
    /// Who the pages greet: the user id, else the caller's Unix login (a trusted caller:
    /// root, the service's account, or in per-user mode the store's own user).
    pub name: String,
}

impl Actor {
    /// The caller with Unix uid `uid` (the web service's own uid is `own_uid`), claiming to
    /// be `claimed`: the orchestrator's one rule, so the answers and refusals are the
    /// D-Bus ones.
    pub fn for_uid(
        store: &Store,
        uid: u32,
        own_uid: u32,
        claimed: Option<&str>,
    ) -> Result<Actor, WebError> {
        let caller = caller_for_uid(store, uid, own_uid, claimed)
            .map_err(|e| WebError::from(BusError::from(e)))?;
        let user = caller.user_id().map(str::to_string);
        let name = user.clone().unwrap_or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map(|u| u.name)
                .unwrap_or_else(|| format!("uid {uid}"))
        });
        Ok(Actor { caller, user, name })
    }
}

/// Equal without an early exit, so the time taken tells nothing about the token.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Where the per-user token lives: `~/.config/agentstore/web-token`.
pub fn token_path(home: &Path) -> PathBuf {
    home.join(".config/agentstore/web-token")
}

/// The token in `path`, made (32 random bytes as hex, mode 0600) when missing. A token file
/// readable by others is refused, naming the file.
pub fn load_or_create_token(path: &Path) -> Result<String, String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            if !m.file_type().is_file() {
                return Err(format!("{}: not a regular file", path.display()));
            }
            if m.permissions().mode() & 0o077 != 0 {
                return Err(format!(
                    "{}: mode {:o} lets others read the token; chmod 600 it",
                    path.display(),
                    m.permissions().mode() & 0o777
                ));
            }
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let t = text.trim().to_string();
            if t.len() < 16 {
                return Err(format!(
                    "{}: the token is shorter than 16 characters",
                    path.display()
                ));
            }
            Ok(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            let mut bytes = [0u8; 32];
            let mut f =
                std::fs::File::open("/dev/urandom").map_err(|e| format!("/dev/urandom: {e}"))?;
            std::io::Read::read_exact(&mut f, &mut bytes)
                .map_err(|e| format!("/dev/urandom: {e}"))?;
            let token = data_encoding::HEXLOWER.encode(&bytes);
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            writeln!(out, "{token}").map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(token)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The token a request presents: `Authorization: Bearer …`, else the `agentstore_token`
/// cookie.
pub fn presented_token(headers: &hyper::HeaderMap) -> Option<String> {
    if let Some(v) = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(t) = v.strip_prefix("Bearer ")
    {
        return Some(t.trim().to_string());
    }
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().strip_prefix("agentstore_token="))
        .map(str::to_string)
        .next()
}

/// Where a redirect may send the browser, given a `next` the request named (already
/// %-decoded once): a path and query on this server, as a browser reads it, or `None`.
///
/// The one rule for every redirect target a request chooses. A browser strips tabs and
/// newlines from a URL, takes `\` for `/` and `//host` for another host, and a path may be
/// %-decoded again by whatever reads it next; so anything but printable ASCII without spaces
/// and backslashes is refused, and `next` and each of its %-decodings must read, by the URL
/// standard (the `url` crate) against this server, as this server with a path starting with
/// exactly one `/`. What is returned is that reading of `next` itself.
pub fn local_path(next: &str) -> Option<String> {
    let suspicious = |s: &str| {
        !s.starts_with('/')
            || s.starts_with("//")
            || s.chars().any(|c| {
                !c.is_ascii() || c.is_ascii_control() || c.is_ascii_whitespace() || c == '\\'
            })
    };
    let base = url::Url::parse("http://agentstore.invalid/").ok()?;
    let read = |s: &str| -> Option<String> {
        if suspicious(s) {
            return None;
        }
        let u = base.join(s).ok()?;
        if u.origin() != base.origin() || !u.username().is_empty() || u.password().is_some() {
            return None;
        }
        let mut out = u.path().to_string();
        if let Some(q) = u.query() {
            out.push('?');
            out.push_str(q);
        }
        (!suspicious(&out)).then_some(out)
    };
    let answer = read(next)?;
    // Whatever decodes it again must read a local path too.
    let mut level = next.to_string();
    for _ in 0..4 {
        // %-decoding only ('+' is a space in a form, not in a path or a redirect).
        let decoded = super::percent::percent_decode(&level.replace('+', "%2B")).ok()?;
        if decoded == level {
            return Some(answer);
        }
        read(&decoded)?;
        level = decoded;
    }
    None
}

/// Refuses a form POST another site's page sent (CSRF): a browser says where a request
/// comes from in `Sec-Fetch-Site` and `Origin`; either naming another site is refused. (The
/// token cookie is also `SameSite=Strict`, so a cross-site POST over TCP carries no token.)
pub fn same_origin(headers: &hyper::HeaderMap) -> Result<(), WebError> {
    let refuse = |why: String| {
        Err(WebError::new(
            403,
            "org.agentstore.Error.PermissionDenied",
            format!("cross-site form POST refused ({why})"),
        ))
    };
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" && site != "none" {
            return refuse(format!("Sec-Fetch-Site: {site}"));
        }
    }
    if let Some(origin) = headers.get(hyper::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = headers
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if origin_host.is_empty() || origin_host != host {
            return refuse(format!("Origin {origin} is not this server ({host})"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdef", b"abcdeg"));
        assert!(!constant_time_eq(b"abcdef", b"abcde"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn token_is_made_private_and_an_open_one_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = token_path(d.path());
        let t = load_or_create_token(&p).unwrap();
        assert_eq!(t.len(), 64);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create_token(&p).unwrap(), t);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create_token(&p).unwrap_err();
        assert!(e.contains("web-token") && e.contains("644"), "{e}");
    }
}
