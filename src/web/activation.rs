//! Socket activation: the listeners systemd passes (`LISTEN_FDS`, `LISTEN_PID`,
//! `LISTEN_FDNAMES`, sd_listen_fds(3)).
//!
//! Parsed here rather than with the `libsystemd` crate: the protocol is three variables and
//! a run of descriptors from 3, and the crate would still leave the one `unsafe` step (taking
//! ownership of an inherited descriptor) to us; no dependency is added for it.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// A listener passed by systemd.
#[derive(Debug)]
pub enum Listener {
    /// A Unix stream socket (`ListenStream=/path`).
    Unix(std::os::unix::net::UnixListener),
    /// A TCP socket (`ListenStream=127.0.0.1:port`).
    Tcp(std::net::TcpListener),
}

/// Why the passed descriptors cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// A variable is malformed.
    #[error("socket activation: {0}")]
    Invalid(String),
    /// A descriptor is not a listening stream socket.
    #[error("socket activation: descriptor {fd} ({name}): {why}")]
    Descriptor {
        /// The descriptor.
        fd: RawFd,
        /// Its `LISTEN_FDNAMES` name.
        name: String,
        /// What is wrong.
        why: String,
    },
}

/// What the three variables say: how many descriptors from 3 are ours, and their names.
/// `None` when they are not for this process (unset, or `LISTEN_PID` another pid).
pub fn parse(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    names: Option<&str>,
    own_pid: u32,
) -> Result<Option<Vec<String>>, ActivationError> {
    let (Some(pid), Some(fds)) = (listen_pid, listen_fds) else {
        return Ok(None);
    };
    let pid: u32 = pid
        .trim()
        .parse()
        .map_err(|_| ActivationError::Invalid(format!("LISTEN_PID={pid:?} is not a pid")))?;
    if pid != own_pid {
        return Ok(None);
    }
    let n: usize = fds
        .trim()
        .parse()
        .map_err(|_| ActivationError::Invalid(format!("LISTEN_FDS={fds:?} is not a count")))?;
    if n > 64 {
        return Err(ActivationError::Invalid(format!(
            "LISTEN_FDS={n}: more than 64 descriptors"
        )));
    }
    let mut out: Vec<String> = names
        .map(|s| s.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    if !out.is_empty() && out.len() != n {
        return Err(ActivationError::Invalid(format!(
            "LISTEN_FDNAMES names {} descriptors, LISTEN_FDS says {n}",
            out.len()
        )));
    }
    out.resize(n, "unknown".to_string());
    Ok(Some(out))
}

/// Takes the listeners systemd passed to this process, and unsets the variables so children
/// do not see them. Empty when the process was not socket-activated.
pub fn take_listeners() -> Result<Vec<(String, Listener)>, ActivationError> {
    let var = |k: &str| std::env::var(k).ok();
    let parsed = parse(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        var("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    )?;
    // SAFETY: the process is single-threaded here (called from main before the runtime
    // starts), so nothing reads the environment concurrently.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    let Some(names) = parsed else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        let fd = LISTEN_FDS_START + i as RawFd;
        let bad = |why: String| ActivationError::Descriptor {
            fd,
            name: name.clone(),
            why,
        };
        // Check it is an open socket before owning it.
        // SAFETY: F_GETFD only reads the descriptor's flags; any int is a valid argument.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(bad(format!(
                "not open: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: systemd passed descriptors LISTEN_FDS_START.. to this process (LISTEN_PID
        // is ours); F_GETFD just showed this one is open, and nothing else in the process owns
        // it (the variables were read once and are now unset).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        use nix::sys::socket::{AddressFamily, SockType, SockaddrLike, SockaddrStorage};
        use nix::sys::socket::{getsockname, getsockopt, sockopt};
        let ty =
            getsockopt(&owned, sockopt::SockType).map_err(|e| bad(format!("not a socket: {e}")))?;
        if ty != SockType::Stream {
            return Err(bad(format!("a {ty:?} socket, not a stream")));
        }
        if !getsockopt(&owned, sockopt::AcceptConn).unwrap_or(false) {
            return Err(bad("not listening (Accept=yes is not supported)".into()));
        }
        let addr: SockaddrStorage =
            getsockname(std::os::fd::AsRawFd::as_raw_fd(&owned)).map_err(|e| bad(e.to_string()))?;
        let listener = match addr.family() {
            Some(AddressFamily::Unix) => {
                Listener::Unix(std::os::unix::net::UnixListener::from(owned))
            }
            Some(AddressFamily::Inet | AddressFamily::Inet6) => {
                Listener::Tcp(std::net::TcpListener::from(owned))
            }
            other => return Err(bad(format!("unsupported address family {other:?}"))),
        };
        out.push((name, listener));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn variables_for_another_pid_or_unset_are_not_ours() {
        assert!(parse(None, Some("1"), None, 5).unwrap().is_none());
        assert!(parse(Some("4"), Some("1"), None, 5).unwrap().is_none());
    }

    #[test]
    fn names_are_matched_to_descriptors() {
        let n = parse(Some("5"), Some("2"), Some("http:tcp"), 5)
            .unwrap()
            .unwrap();
        assert_eq!(n, ["http", "tcp"]);
        let n = parse(Some("5"), Some("2"), None, 5).unwrap().unwrap();
        assert_eq!(n, ["unknown", "unknown"]);
    }

    #[test]
    fn malformed_variables_are_named() {
        let e = parse(Some("x"), Some("1"), None, 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("LISTEN_PID"), "{e}");
        let e = parse(Some("5"), Some("-1"), None, 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("LISTEN_FDS"), "{e}");
        let e = parse(Some("5"), Some("2"), Some("a"), 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("LISTEN_FDNAMES"), "{e}");
    }
}
