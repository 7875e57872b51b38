//! Socket activation: the listeners systemd passes (`LISTEN_FDS`, `LISTEN_PID`,
//! `LISTEN_FDNAMES`, sd_listen_fds_with_names(3)), received with the `libsystemd` crate
//! ([`libsystemd::activation::receive_descriptors_with_names`]), which checks `LISTEN_PID`,
//! sets close-on-exec on each descriptor and unsets the variables so children do not see them.
//!
//! What stays here: the crate hands out raw descriptor numbers, so taking ownership of one is
//! the one `unsafe` step; and each must be a *listening stream* socket (the crate only tells a
//! socket's family), which is checked before it is served.
#![allow(unsafe_code)]

use libsystemd::activation::{FileDescriptor, IsType};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// More passed descriptors than this is a configuration mistake, not a server's listeners.
const MAX_LISTENERS: usize = 64;

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
    /// A variable is malformed, or a descriptor is not open.
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

/// Checks what the crate does not: the count is sane and `LISTEN_FDNAMES` names exactly
/// `LISTEN_FDS` descriptors. Only for variables meant for this process.
fn check_variables(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    names: Option<&str>,
    own_pid: u32,
) -> Result<(), ActivationError> {
    let (Some(pid), Some(fds)) = (listen_pid, listen_fds) else {
        return Ok(());
    };
    if pid.trim().parse::<u32>().ok() != Some(own_pid) {
        return Ok(()); // not ours (a malformed pid is the crate's error to name)
    }
    let n: usize = fds
        .trim()
        .parse()
        .map_err(|_| ActivationError::Invalid(format!("LISTEN_FDS={fds:?} is not a count")))?;
    if n > MAX_LISTENERS {
        return Err(ActivationError::Invalid(format!(
            "LISTEN_FDS={n}: more than {MAX_LISTENERS} descriptors"
        )));
    }
    if let Some(names) = names
        && names.split(':').count() != n
    {
        return Err(ActivationError::Invalid(format!(
            "LISTEN_FDNAMES={names:?} names {} descriptors, LISTEN_FDS says {n}",
            names.split(':').count()
        )));
    }
    Ok(())
}

/// Takes the listeners systemd passed to this process (the crate unsets the variables).
/// Empty when the process was not socket-activated. Call before any thread starts.
pub fn take_listeners() -> Result<Vec<(String, Listener)>, ActivationError> {
    let var = |k: &str| std::env::var(k).ok();
    let names = var("LISTEN_FDNAMES");
    let checked = check_variables(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        names.as_deref(),
        std::process::id(),
    );
    let received: Result<Vec<(FileDescriptor, String)>, _> = if names.is_some() {
        libsystemd::activation::receive_descriptors_with_names(true)
    } else {
        // Without names (a systemd before v227, or a hand-made activation) every descriptor
        // is "unknown", as sd_listen_fds_with_names(3) says.
        libsystemd::activation::receive_descriptors(true)
            .map(|v| v.into_iter().map(|d| (d, "unknown".to_string())).collect())
    };
    checked?;
    let received = received.map_err(|e| ActivationError::Invalid(e.to_string()))?;
    let mut out = Vec::with_capacity(received.len());
    for (i, (desc, name)) in received.into_iter().enumerate() {
        let fd = LISTEN_FDS_START + i as RawFd;
        let bad = |why: String| ActivationError::Descriptor {
            fd,
            name: name.clone(),
            why,
        };
        let (unix, inet) = (desc.is_unix(), desc.is_inet());
        // SAFETY: systemd passed descriptors LISTEN_FDS_START.. to this process (the crate
        // checked LISTEN_PID is ours and set FD_CLOEXEC on each, which fails for one that is
        // not open); the variables are now unset, so nothing else in the process owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(desc.into_raw_fd()) };
        use nix::sys::socket::{SockType, getsockopt, sockopt};
        let ty =
            getsockopt(&owned, sockopt::SockType).map_err(|e| bad(format!("not a socket: {e}")))?;
        if ty != SockType::Stream {
            return Err(bad(format!("a {ty:?} socket, not a stream")));
        }
        if !getsockopt(&owned, sockopt::AcceptConn).unwrap_or(false) {
            return Err(bad("not listening (Accept=yes is not supported)".into()));
        }
        let listener = if unix {
            Listener::Unix(std::os::unix::net::UnixListener::from(owned))
        } else if inet {
            Listener::Tcp(std::net::TcpListener::from(owned))
        } else {
            return Err(bad("neither a Unix nor an IP socket".into()));
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
    fn variables_for_another_pid_or_unset_are_not_checked() {
        check_variables(None, Some("1"), Some("a:b"), 5).unwrap();
        check_variables(Some("4"), Some("1"), Some("a:b"), 5).unwrap();
    }

    #[test]
    fn names_must_match_descriptors() {
        check_variables(Some("5"), Some("2"), Some("http:tcp"), 5).unwrap();
        check_variables(Some("5"), Some("2"), None, 5).unwrap();
        let e = check_variables(Some("5"), Some("2"), Some("a"), 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("LISTEN_FDNAMES"), "{e}");
    }

    #[test]
    fn malformed_or_huge_counts_are_named() {
        let e = check_variables(Some("5"), Some("-1"), None, 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("LISTEN_FDS"), "{e}");
        let e = check_variables(Some("5"), Some("65"), None, 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 64"), "{e}");
    }
}
