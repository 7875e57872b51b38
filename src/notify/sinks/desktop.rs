//! The desktop: `org.freedesktop.Notifications.Notify` on the session bus of the account the
//! notifier runs as (per-user mode: the researcher's own session). A system notifier cannot
//! reach another account's session bus (the bus lets only its owner in), so a user whose
//! Unix account is not the notifier's gets a clear permanent error instead.

use super::super::{Delivery, Sink, SinkError, SinkFuture};
use std::collections::HashMap;
use zbus::Variant as Value;

/// The desktop sink.
pub struct Desktop {
    conn: tokio::sync::OnceCell<zbus::Connection>,
    address: Option<String>,
}

impl Default for Desktop {
    fn default() -> Self {
        Desktop::new()
    }
}

impl Desktop {
    /// Connects on first use.
    pub fn new() -> Desktop {
        Desktop {
            conn: tokio::sync::OnceCell::new(),
            address: None,
        }
    }

    /// Notifies on the bus at `address` instead of the session bus.
    pub fn at(address: &str) -> Desktop {
        Desktop {
            conn: tokio::sync::OnceCell::new(),
            address: Some(address.to_string()),
        }
    }

    async fn connect(&self) -> zbus::Result<zbus::Connection> {
        match &self.address {
            Some(a) => zbus::connection::Builder::address(a.as_str()).build().await,
            None => zbus::Connection::session().await,
        }
    }
}

impl Sink for Desktop {
    fn name(&self) -> &str {
        "desktop"
    }

    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move {
            if let Some(u) = &d.user {
                let me = nix::unistd::geteuid();
                let theirs = nix::unistd::User::from_name(u.unix_name())
                    .ok()
                    .flatten()
                    .map(|a| a.uid);
                if theirs != Some(me) {
                    return Err(SinkError::Permanent(format!(
                        "desktop: user {}'s account {} is not the notifier's (uid {me}): a desktop notice reaches only the notifier's own session (per-user mode)",
                        u.id,
                        u.unix_name()
                    )));
                }
            }
            let conn = self
                .conn
                .get_or_try_init(|| self.connect())
                .await
                .map_err(|e| SinkError::Transient(format!("desktop: no session bus: {e}")))?;
            let hints: HashMap<&str, Value<'_>> = HashMap::new();
            let actions: Vec<&str> = Vec::new();
            let body = crate::store::notices::clip(&d.text(), 1000);
            conn.call_method(
                Some("org.freedesktop.Notifications"),
                "/org/freedesktop/Notifications",
                Some("org.freedesktop.Notifications"),
                "Notify",
                &(
                    "agentstore",
                    0u32,
                    "",
                    d.notice.title.as_str(),
                    body.as_str(),
                    actions,
                    hints,
                    -1i32,
                ),
            )
            .await
            .map_err(|e| SinkError::Transient(format!("desktop: {e}")))?;
            Ok(())
        })
    }
}
