//! `orchestrator daemon start|stop|status`: the PRD's `orchestrator-daemon`, driving the
//! systemd unit (systemd runs the daemon; the CLI never forks it itself).

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs};
use crate::bus::Bus;
use crate::bus::orchestrator::Orchestrator1Proxy;
use clap::Subcommand;
use std::io::Write;
use std::process::Command;

/// The orchestrator's systemd unit.
pub const UNIT: &str = "agentstore-orchestrator.service";

/// `daemon` actions.
#[derive(Debug, Subcommand, Clone, Copy)]
pub enum DaemonAction {
    /// Start agentstore-orchestrator.service (systemctl start).
    Start,
    /// Stop it (systemctl stop); the lock file is removed.
    Stop,
    /// Is it running, and what has it done? Exit 0 when running, 3 when not.
    Status,
}

/// `systemctl` (`--user` on the session bus) with `args`; an error where systemd is not
/// running here.
pub(super) fn systemctl(bus: &Bus, args: &[&str]) -> Result<std::process::Output, CliError> {
    if !std::path::Path::new("/run/systemd/system").exists() {
        return Err(CliError::new(
            "systemd is not running on this machine; run the daemon in the foreground instead: orchestratord (it uses the session bus when there is one, else none)",
        ));
    }
    let mut c = Command::new("systemctl");
    if !bus.is_system() {
        c.arg("--user");
    }
    c.args(args)
        .output()
        .map_err(|e| CliError::new(format!("cannot run systemctl: {e}")))
}

/// Live properties over D-Bus, if the daemon answers.
fn live(bus: &Bus) -> Option<serde_json::Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let conn = bus.builder().build().await.ok()?;
        // Don't activate it just to ask: only ask a running daemon.
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.ok()?;
        let name = zbus::names::BusName::try_from(crate::bus::ORCHESTRATOR_NAME).ok()?;
        if !dbus.name_has_owner(name).await.ok()? {
            return None;
        }
        let p = Orchestrator1Proxy::new(&conn).await.ok()?;
        Some(serde_json::json!({
            "version": p.version().await.ok()?,
            "store_root": p.store_root().await.ok()?,
            "messages_processed": p.messages_processed().await.ok()?,
            "jobs_created": p.jobs_created().await.ok()?,
            "last_loop_time": p.last_loop_time().await.ok()?,
        }))
    })
}

pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, action: DaemonAction) -> CliResult {
    let bus = g.store_bus();
    match action {
        DaemonAction::Start | DaemonAction::Stop => {
            let verb = if matches!(action, DaemonAction::Start) {
                "start"
            } else {
                "stop"
            };
            let o = systemctl(&bus, &[verb, UNIT])?;
            if !o.status.success() {
                return Err(CliError::new(format!(
                    "systemctl {verb} {UNIT} failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )));
            }
            if g.format == Format::Text {
                writeln!(out, "{UNIT}: {verb}ed")?;
            }
            Ok(())
        }
        DaemonAction::Status => {
            let state = systemctl(&bus, &["is-active", UNIT])
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|_| "no-systemd".into());
            let props = live(&bus);
            let running = props.is_some() || state == "active";
            match g.format {
                Format::Json => write_json(
                    out,
                    &serde_json::json!({"unit": UNIT, "state": state, "running": running, "dbus": props}),
                )?,
                Format::Text => {
                    writeln!(out, "{UNIT}: {state}")?;
                    if let Some(p) = &props {
                        for (k, v) in p.as_object().into_iter().flatten() {
                            writeln!(
                                out,
                                "  {k:<20} {}",
                                v.as_str().map(str::to_string).unwrap_or(v.to_string())
                            )?;
                        }
                    }
                }
            }
            if running {
                Ok(())
            } else {
                Err(CliError {
                    message: String::new(),
                    code: 3,
                })
            }
        }
    }
}
