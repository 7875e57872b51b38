//! A desktop notification on a session bus (`org.freedesktop.Notifications`), best effort:
//! no notification service (a server, a headless session) is no error worth more than a
//! debug line.

use std::collections::HashMap;
use zbus::Variant;

/// Shows `title` and `body` through the notification service on `conn`, if there is one.
pub async fn desktop(conn: &zbus::Connection, title: &str, body: &str) {
    let hints: HashMap<&str, Variant<'_>> = HashMap::new();
    let actions: Vec<&str> = Vec::new();
    let r = conn
        .call_method(
            Some("org.freedesktop.Notifications"),
            "/org/freedesktop/Notifications",
            Some("org.freedesktop.Notifications"),
            "Notify",
            &("agentstore", 0u32, "", title, body, actions, hints, -1i32),
        )
        .await;
    if let Err(e) = r {
        tracing::debug!("no desktop notification: {e}");
    }
}
