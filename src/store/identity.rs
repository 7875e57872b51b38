//! This machine's identity in the store (issue 35): the machine id (`/etc/machine-id`,
//! machine-id(5)), read with the `libsystemd` crate and hashed with agentstore's own
//! application id (`sd_id128_get_machine_app_specific(3)`: the raw machine id is never written
//! into a shared folder). Heartbeats, the store lock, claims and every per-machine file are
//! keyed by it, so two machines with the same host name (cloned VMs, containers) are never
//! taken for one, and a renamed host keeps its jobs. The host name is kept beside it for
//! display ([`display_hostname`]).
//!
//! `AGENTSTORE_HOSTNAME` still names a machine outright (several "machines" on one computer
//! in tests, or an administrator's choice); `AGENTSTORE_MACHINE_ID` (32 hex digits) stands in
//! for `/etc/machine-id` (two machines with one host name on one computer, in tests).

use libsystemd::id128::Id128;
use std::sync::OnceLock;

/// Overrides `/etc/machine-id` (32 hex digits).
pub const MACHINE_ID_ENV: &str = "AGENTSTORE_MACHINE_ID";

/// agentstore's application id for `sd_id128_get_machine_app_specific` (fixed forever: a
/// new one would make every machine a new machine).
const APP_ID: &str = "5f0c8a5e2b7d4c19a3e6d1b04f9e7a21";

/// The machine's identity as stored: its app-specific machine id in lower hex, `None` when
/// neither the override nor `/etc/machine-id` holds a valid id.
pub fn machine_id() -> Option<String> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        let raw = match std::env::var(MACHINE_ID_ENV) {
            Ok(v) => match Id128::parse_str(v.trim()) {
                Ok(id) => Some(id),
                Err(e) => {
                    tracing::warn!("{MACHINE_ID_ENV}={v:?} is not a machine id ({e}): ignored");
                    None
                }
            },
            Err(_) => None,
        };
        let raw = match raw {
            Some(id) => id,
            None => match libsystemd::id128::get_machine() {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(
                        "/etc/machine-id: {e}; this machine is known by its host name instead"
                    );
                    return None;
                }
            },
        };
        app_specific(&raw)
    })
    .clone()
}

/// `raw` hashed with agentstore's application id.
fn app_specific(raw: &Id128) -> Option<String> {
    let app = Id128::parse_str(APP_ID).ok()?;
    raw.app_specific(&app).ok().map(|id| id.lower_hex())
}

/// This machine's key in the store: `$AGENTSTORE_HOSTNAME` when set (to a safe name), else
/// `m-` and the first 16 hex digits of its app-specific machine id (64 bits: no two machines
/// of one store meet), else its host name.
pub fn machine_key() -> String {
    if let Some(h) = std::env::var(super::HOSTNAME_ENV)
        .ok()
        .filter(|h| crate::model::is_safe_id(h))
    {
        return h;
    }
    match machine_id() {
        Some(id) => format!("m-{}", &id[..16]),
        None => kernel_hostname(),
    }
}

/// The host name the kernel reports (`localhost` when it has none).
pub fn kernel_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// This machine's name for people: `$AGENTSTORE_HOSTNAME` when set, else the host name.
pub fn display_hostname() -> String {
    std::env::var(super::HOSTNAME_ENV)
        .ok()
        .filter(|h| crate::model::is_safe_id(h))
        .unwrap_or_else(kernel_hostname)
}

/// The name files of this machine were keyed by before machine ids (its host name), when it
/// differs from [`machine_key`]; `None` under `AGENTSTORE_HOSTNAME` (which keys as before).
pub fn legacy_key() -> Option<String> {
    if std::env::var(super::HOSTNAME_ENV)
        .ok()
        .is_some_and(|h| crate::model::is_safe_id(&h))
    {
        return None;
    }
    let h = kernel_hostname();
    (crate::model::is_safe_id(&h) && h != machine_key()).then_some(h)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn app_specific_id_is_stable_and_not_the_raw_id() {
        let raw = Id128::parse_str("0123456789abcdef0123456789abcdef").unwrap();
        let a = app_specific(&raw).unwrap();
        assert_eq!(a, app_specific(&raw).unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, "0123456789abcdef0123456789abcdef");
        let other = Id128::parse_str("fedcba9876543210fedcba9876543210").unwrap();
        assert_ne!(a, app_specific(&other).unwrap());
    }
}
