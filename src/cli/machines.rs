//! `list-machines` and `view-machine` (issue 13): the machines sharing the store, from
//! their heartbeats under `machines/`, with how long a silent one has been silent.

use super::browse::show;
use super::render::{Table, write_json};
use super::{CliError, CliResult, Format, GlobalArgs, open_store};
use crate::model::Timestamp;
use crate::store::machines::MachineView;
use std::io::Write;

fn warn_problems(problems: &[String]) {
    for p in problems {
        super::render::warning(p);
    }
}

pub(super) fn list(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let all = store.machines();
    let now = Timestamp::now();
    let after = store.config().machines.stale_after_seconds;
    let rows: Vec<MachineView> = all.machines.iter().map(|m| m.view(&now, after)).collect();
    match g.format {
        Format::Json => {
            write_json(
                out,
                &serde_json::json!({"machines": rows, "problems": all.problems}),
            )?;
        }
        Format::Text => {
            warn_problems(&all.problems);
            let mut t = Table::new(&[
                "MACHINE",
                "HOSTNAME",
                "STATE",
                "LAST SEEN",
                "DAEMONS",
                "VERSION",
            ])
            // The key is what view-machine takes: never cut.
            .keep(0);
            for r in &rows {
                t.row(vec![
                    r.host.clone(),
                    r.hostname.clone().unwrap_or_else(|| r.host.clone()),
                    r.state.clone(),
                    r.last_seen.clone(),
                    r.daemons.join(", "),
                    r.versions.join(", "),
                ]);
            }
            if t.is_empty() {
                writeln!(
                    out,
                    "No machine has reported yet (no heartbeats under machines/)."
                )?;
            } else {
                t.write(out)?;
            }
        }
    }
    Ok(())
}

pub(super) fn this(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    use crate::store::identity;
    let key = crate::store::hostname();
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({
                "machine": key,
                "hostname": identity::display_hostname(),
                "machine_id": identity::machine_id(),
            }),
        )?,
        Format::Text => writeln!(out, "{key}")?,
    }
    Ok(())
}

pub(super) fn view(g: &GlobalArgs, out: &mut dyn Write, host: &str) -> CliResult {
    let store = open_store(g)?;
    crate::store::check_id("host", host)?;
    let all = store.machines();
    let Some(m) = all.get(host) else {
        warn_problems(&all.problems);
        return Err(CliError::new(format!(
            "machine {host} has never reported (no heartbeat under machines/{host}/)"
        )));
    };
    if g.format == Format::Text {
        warn_problems(&all.problems);
    }
    let now = Timestamp::now();
    let s = m.view(&now, store.config().machines.stale_after_seconds);
    let mut v = serde_json::to_value(&s).map_err(|e| CliError::new(e.to_string()))?;
    v["heartbeats"] = serde_json::to_value(&m.daemons).map_err(|e| CliError::new(e.to_string()))?;
    show(g, out, &v)
}

/// Why nothing will start jobs of `queue`, when the heartbeats and this machine's units say
/// so: no manager of it ever reported, or its last machine went silent, and no
/// `queue-manager@<queue>.path` is active here to start one. `None` when it is served.
pub(super) fn unserved(g: &GlobalArgs, store: &crate::store::Store, queue: &str) -> Option<String> {
    use crate::store::machines::QueueService;
    let after = store.config().machines.stale_after_seconds;
    let service = store
        .machines()
        .queue_service(queue, &Timestamp::now(), after);
    let why = match service {
        QueueService::Served { .. } => return None,
        QueueService::Never => format!(
            "no machine serves queue {queue}: no queue-manager@{queue} has ever reported (machines/)"
        ),
        QueueService::Lost { host, last_seen } => format!(
            "no machine serves queue {queue}: its manager on {host} stopped reporting at {last_seen}"
        ),
    };
    if path_unit_active(g, queue) {
        return None;
    }
    let user = if !g.store_bus().is_system() {
        " --user"
    } else {
        ""
    };
    Some(format!(
        "{why}; its jobs wait until one does: on a compute host, \
         `systemctl{user} enable --now queue-manager@{queue}.path` (or run `queue-manager --queue {queue}`)"
    ))
}

/// True when this machine's systemd watches the queue (`queue-manager@<queue>.path` active).
fn path_unit_active(g: &GlobalArgs, queue: &str) -> bool {
    let unit = format!("queue-manager@{queue}.path");
    super::daemon::systemctl(&g.store_bus(), &["is-active", "--quiet", &unit])
        .is_ok_and(|o| o.status.success())
}
