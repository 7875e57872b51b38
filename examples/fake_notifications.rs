//! A minimal `org.freedesktop.Notifications` server on the session bus
//! (`DBUS_SESSION_BUS_ADDRESS`), for the real-systemd suite's per-user test: the desktop
//! sink of `agentstore-notify --user` talks to it as to a desktop's notification daemon.
//!
//! ```text
//! cargo run --example fake_notifications -- --log notifications.jsonl
//! ```
//!
//! Each notification is appended to `--log` as a JSON line (`app_name`, `summary`, `body`).
//! It prints `ready` once it owns the name, then runs until killed.

#[path = "../tests/support/fake_notifications.rs"]
mod fake_notifications;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let log = match (args.next().as_deref(), args.next()) {
        (Some("--log"), Some(path)) => std::path::PathBuf::from(path),
        _ => return Err("usage: fake_notifications --log FILE".into()),
    };
    let server = fake_notifications::Notifications {
        seen: Default::default(),
        log: Some(log),
    };
    let _conn = zbus::connection::Builder::session()
        .serve_at("/org/freedesktop/Notifications", server)
        .name("org.freedesktop.Notifications")
        .build()
        .await?;
    println!("ready");
    std::future::pending::<()>().await;
    Ok(())
}
