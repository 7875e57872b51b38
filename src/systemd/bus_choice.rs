//! "Which bus", one type for every binary (`--bus auto|system|session|none`) and the rule
//! for `auto`: the system bus when running as the system service, else the session bus
//! when there is one, else none (inbox files only). DESIGN §8, deployment modes.

use crate::model::system_mode;
use std::fmt;

/// Which bus a daemon or client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum BusKind {
    /// The system bus (packaged services).
    #[default]
    System,
    /// The user's session bus (`systemctl --user`, tests with a private bus).
    Session,
}

impl fmt::Display for BusKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BusKind::System => "system",
            BusKind::Session => "session",
        })
    }
}

impl BusKind {
    /// A connection builder for this bus.
    pub fn builder<'a>(self) -> zbus::connection::Builder<'a> {
        match self {
            BusKind::System => zbus::connection::Builder::system(),
            BusKind::Session => zbus::connection::Builder::session(),
        }
    }

    /// The bus a client should try first: the first of [`BusChoice::client_buses`] for
    /// `auto`, else the system bus.
    pub fn from_env() -> BusKind {
        BusChoice::Auto
            .client_buses()
            .first()
            .copied()
            .unwrap_or(BusKind::System)
    }
}

/// True when a session bus can be reached: `DBUS_SESSION_BUS_ADDRESS`, else
/// `$XDG_RUNTIME_DIR/bus` (what `systemd --user` provides).
pub fn session_bus_available() -> bool {
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .is_some_and(|d| std::path::Path::new(&d).join("bus").exists())
}

/// True when a system bus may be reachable: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard
/// socket.
pub fn system_bus_available() -> bool {
    if std::env::var_os("DBUS_SYSTEM_BUS_ADDRESS").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    [
        "/run/dbus/system_bus_socket",
        "/var/run/dbus/system_bus_socket",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

/// The refusal of a removed "no bus" flag (`--no-bus`, `--no-dbus`): it names the one flag
/// that says which bus now. The old flags are still recognised only to say this.
pub fn removed_flag(flag: &str) -> String {
    format!(
        "{flag} was removed: use --bus none (one flag says which bus: --bus auto|system|session|none)"
    )
}

/// "Which bus", as every binary spells it: `--bus auto|system|session|none`.
///
/// `auto` (the default): the system bus when running as the system service
/// ([`system_mode`]), else the session bus when there is one, else none (inbox files only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum BusChoice {
    /// System service: system bus; else the session bus if present; else none.
    #[default]
    Auto,
    /// The system bus (packaged services).
    System,
    /// The user's session bus (`systemctl --user`, tests with a private bus).
    Session,
    /// No D-Bus: inbox files only.
    None,
}

impl fmt::Display for BusChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BusChoice::Auto => "auto",
            BusChoice::System => "system",
            BusChoice::Session => "session",
            BusChoice::None => "none",
        })
    }
}

impl BusChoice {
    /// The bus a daemon serves on; `None` means no D-Bus at all.
    pub fn for_daemon(self) -> Option<BusKind> {
        match self {
            BusChoice::System => Some(BusKind::System),
            BusChoice::Session => Some(BusKind::Session),
            BusChoice::None => None,
            BusChoice::Auto if system_mode() => Some(BusKind::System),
            BusChoice::Auto if session_bus_available() => Some(BusKind::Session),
            BusChoice::Auto => None,
        }
    }

    /// The buses a client tries, in order. `auto`: `AGENTSTORE_BUS`
    /// (`system`|`session`|`none`) when set, else the session bus when present, then the
    /// system bus when present. A client only talks to a daemon serving its own store, so
    /// trying both is safe.
    pub fn client_buses(self) -> Vec<BusKind> {
        match self {
            BusChoice::System => vec![BusKind::System],
            BusChoice::Session => vec![BusKind::Session],
            BusChoice::None => vec![],
            BusChoice::Auto => match std::env::var("AGENTSTORE_BUS").as_deref() {
                Ok("session") => vec![BusKind::Session],
                Ok("system") => vec![BusKind::System],
                Ok("none") => vec![],
                _ => {
                    let mut v = Vec::new();
                    if session_bus_available() && !system_mode() {
                        v.push(BusKind::Session);
                    }
                    if system_bus_available() {
                        v.push(BusKind::System);
                    }
                    v
                }
            },
        }
    }
}
