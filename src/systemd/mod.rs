//! The systemd side of a daemon: readiness and status notifications, and logging to the
//! journal with structured fields (or to stderr where there is no journal).

pub mod bus_choice;
pub mod credentials;
pub mod watchdog;

pub use bus_choice::{Bus, BusChoice};
use std::sync::OnceLock;
pub use watchdog::Watchdog;

/// Tells the service manager the daemon is ready (`Type=notify`). A no-op outside systemd.
pub fn notify_ready(status: &str) {
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ]);
}

/// Updates the `STATUS=` line `systemctl status` shows.
pub fn notify_status(status: &str) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(status)]);
}

/// Tells the service manager the daemon is stopping.
pub fn notify_stopping(status: &str) {
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status(status),
    ]);
}

/// True when this machine's journal can be read here: journald listens and `journalctl`
/// answers (the CLI's `logs` and `job-log` read jobs' lines through it).
pub fn journal_readable() -> bool {
    std::path::Path::new("/run/systemd/journal/socket").exists()
        && std::process::Command::new("journalctl")
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// True when stderr is connected to the journal (systemd sets `JOURNAL_STREAM`).
pub fn stderr_is_journal() -> bool {
    std::env::var_os("JOURNAL_STREAM").is_some()
}

static LOGGING: OnceLock<()> = OnceLock::new();

/// Sets up `tracing` once per process: the journal (with fields such as `JOB_ID=`,
/// `QUEUE=`, `CORRELATION_ID=` taken from event fields, upper-cased) when running under
/// systemd, else human-readable lines on stderr. `RUST_LOG` overrides `default_level`.
///
/// `identifier` becomes `SYSLOG_IDENTIFIER=`.
pub fn init_logging(identifier: &str, default_level: &str) {
    LOGGING.get_or_init(|| {
        use tracing_subscriber::prelude::*;
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
        if stderr_is_journal()
            && let Ok(journald) = tracing_journald::layer()
        {
            // No `F_` prefix: `job_id = …` becomes `JOB_ID=`, so `journalctl JOB_ID=<id>` works.
            let layer = journald
                .with_syslog_identifier(identifier.to_string())
                .with_field_prefix(None);
            let _ = tracing_subscriber::registry()
                .with(filter)
                .with(layer)
                .try_init();
            return;
        }
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(false);
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init();
    });
}

/// The exit status of a daemon that finds another instance already running (the D-Bus name
/// or the store lock is held). Its unit lists it in `RestartPreventExitStatus=`, so systemd
/// does not restart it every few seconds against the running one.
pub const EXIT_ALREADY_RUNNING: u8 = 2;

/// Resolves with the signal's name when the daemon is asked to stop (SIGTERM from systemd,
/// SIGINT from a terminal). Never resolves if the handlers cannot be installed. The one
/// shutdown future both daemons' `run(…, shutdown)` get from their binaries.
pub async fn shutdown_signal() -> &'static str {
    first_signal(false).await
}

/// Like [`shutdown_signal`], and also on SIGHUP (the terminal went away): for programs that
/// run in a terminal or as a job's child rather than as a service.
pub async fn termination_signal() -> &'static str {
    first_signal(true).await
}

async fn first_signal(hangup: bool) -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    let mut hup = if hangup {
        match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(_) => return std::future::pending().await,
        }
    } else {
        None
    };
    let hup_recv = async {
        match hup.as_mut() {
            Some(h) => h.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup_recv => "SIGHUP",
    }
}
