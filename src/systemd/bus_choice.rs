//! "Which bus", one type for every binary and the queue manager ([`Bus`]: system, session
//! or an address), the flag that names it (`--bus auto|system|session|none|ADDRESS`,
//! [`BusChoice`]) and the rule for `auto`: the system bus when running as the system
//! service, else the session bus when there is one, else none (inbox files only). DESIGN
//! §8, deployment modes.

use crate::model::system_mode;
use std::fmt;

/// Which bus a daemon serves on or a client calls: the one type for "which bus" in the
/// crate (what `--bus` resolves to, the queue manager's, the web server's, the CLI's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Bus {
    /// The system bus (packaged services).
    #[default]
    System,
    /// The user's session bus (`systemctl --user`, tests with a private bus).
    Session,
    /// The bus at this D-Bus address (`--bus unix:path=…`; tests' private `dbus-daemon`).
    Address(String),
}

impl fmt::Display for Bus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bus::System => f.write_str("system"),
            Bus::Session => f.write_str("session"),
            Bus::Address(a) => write!(f, "{a}"),
        }
    }
}

impl Bus {
    /// A connection builder for this bus.
    pub fn builder(&self) -> zbus::connection::Builder<'_> {
        match self {
            Bus::System => zbus::connection::Builder::system(),
            Bus::Session => zbus::connection::Builder::session(),
            // Checked when parsed (`--bus`); a bad one fails when the connection is built.
            Bus::Address(a) => zbus::connection::Builder::address(a.as_str()),
        }
    }

    /// True for the system bus: the packaged services' (whose units are `systemctl`, not
    /// `systemctl --user`). A bus named by address is a user's own, like the session bus.
    pub fn is_system(&self) -> bool {
        *self == Bus::System
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

/// "Which bus", as every binary spells it: `--bus auto|system|session|none|ADDRESS`, a
/// [`Bus`] or the two words that resolve to one or to none.
///
/// `auto` (the default): the system bus when running as the system service
/// ([`system_mode`]), else the session bus when there is one, else none (inbox files only).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BusChoice {
    /// System service: system bus; else the session bus if present; else none.
    #[default]
    Auto,
    /// No D-Bus: inbox files only.
    None,
    /// This bus.
    Bus(Bus),
}

impl fmt::Display for BusChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusChoice::Auto => f.write_str("auto"),
            BusChoice::None => f.write_str("none"),
            BusChoice::Bus(b) => b.fmt(f),
        }
    }
}

impl std::str::FromStr for BusChoice {
    type Err = String;

    /// `auto`, `none`, `system`, `session`, or a D-Bus address (`unix:path=/run/x/bus`).
    fn from_str(s: &str) -> Result<BusChoice, String> {
        Ok(match s {
            "auto" => BusChoice::Auto,
            "none" => BusChoice::None,
            "system" => BusChoice::Bus(Bus::System),
            "session" => BusChoice::Bus(Bus::Session),
            a if a.contains(':') => match a.parse::<zbus::Address>() {
                Ok(_) => BusChoice::Bus(Bus::Address(a.to_string())),
                Err(e) => return Err(format!("'{a}' is not a D-Bus address: {e}")),
            },
            other => {
                return Err(format!(
                    "'{other}' is no bus: use auto, system, session, none, or a D-Bus address (unix:path=…)"
                ));
            }
        })
    }
}

impl BusChoice {
    /// The bus a daemon serves on; `None` means no D-Bus at all.
    pub fn for_daemon(&self) -> Option<Bus> {
        match self {
            BusChoice::Bus(b) => Some(b.clone()),
            BusChoice::None => None,
            BusChoice::Auto if system_mode() => Some(Bus::System),
            BusChoice::Auto if session_bus_available() => Some(Bus::Session),
            BusChoice::Auto => None,
        }
    }

    /// The buses a client tries, in order. `auto`: `AGENTSTORE_BUS`
    /// (`system`|`session`|`none`) when set, else the session bus when present, then the
    /// system bus when present. A client only talks to a daemon serving its own store, so
    /// trying both is safe.
    pub fn client_buses(&self) -> Vec<Bus> {
        match self {
            BusChoice::Bus(b) => vec![b.clone()],
            BusChoice::None => vec![],
            BusChoice::Auto => match std::env::var("AGENTSTORE_BUS").as_deref() {
                Ok("session") => vec![Bus::Session],
                Ok("system") => vec![Bus::System],
                Ok("none") => vec![],
                _ => {
                    let mut v = Vec::new();
                    if session_bus_available() && !system_mode() {
                        v.push(Bus::Session);
                    }
                    if system_bus_available() {
                        v.push(Bus::System);
                    }
                    v
                }
            },
        }
    }

    /// The one bus for a client call that needs one (systemctl, a queue manager): the first
    /// of [`client_buses`](Self::client_buses), else the system bus.
    pub fn first_bus(&self) -> Bus {
        self.client_buses().into_iter().next().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_and_a_wrong_one_names_the_choices() {
        assert_eq!("auto".parse(), Ok(BusChoice::Auto));
        assert_eq!("none".parse(), Ok(BusChoice::None));
        assert_eq!("system".parse(), Ok(BusChoice::Bus(Bus::System)));
        assert_eq!("session".parse(), Ok(BusChoice::Bus(Bus::Session)));
        let a = "unix:path=/run/user/1000/bus";
        assert_eq!(a.parse(), Ok(BusChoice::Bus(Bus::Address(a.into()))));
        assert_eq!(BusChoice::Bus(Bus::Address(a.into())).to_string(), a);
        let bad = "nobus".parse::<BusChoice>().unwrap_err();
        assert!(bad.contains("session") && bad.contains("address"), "{bad}");
        assert!("nope:x".parse::<BusChoice>().is_err());
    }

    #[test]
    fn a_named_bus_is_the_daemons_and_the_clients() {
        let a = BusChoice::Bus(Bus::Address("unix:path=/x".into()));
        assert_eq!(a.for_daemon(), Some(Bus::Address("unix:path=/x".into())));
        assert_eq!(a.client_buses(), vec![Bus::Address("unix:path=/x".into())]);
        assert_eq!(BusChoice::None.for_daemon(), None);
        assert!(BusChoice::None.client_buses().is_empty());
        assert_eq!(BusChoice::None.first_bus(), Bus::System);
        assert!(!Bus::Address("unix:path=/x".into()).is_system());
    }
}
