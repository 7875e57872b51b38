//! Who is calling over D-Bus: the sender's Unix uid (`GetConnectionUnixUser`); the uid is
//! mapped to a PRD §10 caller by [`caller_for_uid`] (the orchestrator's one rule, re-exported
//! here for the interfaces).

use super::BusError;
use zbus::message::Header;

pub use crate::orchestrator::caller::{caller_for_uid, login_name};

/// The Unix uid of the sender of the message being handled.
pub async fn caller_uid(conn: &zbus::Connection, hdr: &Header<'_>) -> Result<u32, BusError> {
    let sender = hdr
        .sender()
        .ok_or_else(|| BusError::permission_denied("no sender"))?;
    let dbus = zbus::fdo::DBusProxy::new(conn).await?;
    dbus.get_connection_unix_user(sender.clone().into())
        .await
        .map_err(|e| match e {
            // Our own connection failing (a daemon at its idle exit, its connection closing):
            // nothing of the call was done, so it is Unavailable and the caller calls again
            // (`again_while_stopping`), answered by the next instance.
            zbus::fdo::Error::ZBus(zbus::Error::InputOutput(_)) | zbus::fdo::Error::IOError(_) => {
                BusError::Unavailable(format!(
                    "cannot identify caller ({e}): this instance is going away; call again"
                ))
            }
            e => BusError::Failed(format!("cannot identify caller: {e}")),
        })
}
