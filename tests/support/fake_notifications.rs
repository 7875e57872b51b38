//! The one minimal `org.freedesktop.Notifications` server of the tests: it records each
//! notification (application, summary, body) and, given a log file, appends it there as a
//! JSON line. `tests/notify.rs` serves it on a private bus; `examples/fake_notifications.rs`
//! on a user's session bus in the real-systemd suite (a desktop's notification daemon needs
//! a display; this needs none).
//! No `unwrap`/`expect` here: the example binary compiles this file outside `cfg(test)`.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// What a notification said: application name, summary, body.
pub type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// The server object, served at `/org/freedesktop/Notifications`.
pub struct Notifications {
    pub seen: Seen,
    pub log: Option<std::path::PathBuf>,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Notifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        _actions: Vec<String>,
        _hints: std::collections::HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        if let Some(path) = &self.log {
            let line = serde_json::json!({"app_name": app_name, "summary": summary, "body": body});
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(f, "{line}");
            }
        }
        let mut s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        s.push((app_name, summary, body));
        s.len() as u32
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec!["body".into()]
    }

    fn get_server_information(&self) -> (String, String, String, String) {
        ("test".into(), "agentstore".into(), "1".into(), "1.2".into())
    }

    fn close_notification(&self, _id: u32) {}
}
