//! `list-machines` and `view-machine` (issue 13): the machines sharing the store, from
//! their heartbeats under `machines/`, with how long a silent one has been silent.

use super::browse::show;
use super::render::{Table, write_json};
use super::{CliError, CliResult, Format, GlobalArgs, open_store};
use crate::model::Timestamp;
use crate::store::machines::Machine;
use serde::Serialize;
use std::io::Write;

/// One machine as shown.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    host: &'a str,
    /// `ok`, `stale for 3m12s` or `stopped 3m12s ago`.
    state: String,
    stale: bool,
    silent_seconds: u64,
    last_seen: String,
    boot_id: Option<&'a str>,
    versions: &'a [String],
    queues: &'a [String],
    daemons: Vec<String>,
    /// The role of its orchestratord, if one runs there: `active`, `standby`, `read-only`.
    orchestrator_role: Option<&'a str>,
    /// The store lock's epoch when its orchestratord is the active one.
    #[serde(skip_serializing_if = "Option::is_none")]
    lock_epoch: Option<u64>,
}

/// `3m12s`, `2h05m`, `4d03h`, `42s`.
pub fn duration_text(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn shown<'a>(m: &'a Machine, now: &Timestamp, stale_after: u64) -> Shown<'a> {
    let silent = m.silent_for(now);
    let stale = m.is_stale(now, stale_after) && !m.all_stopped();
    let state = if m.all_stopped() {
        format!("stopped {} ago", duration_text(silent))
    } else if stale {
        format!("stale for {}", duration_text(silent))
    } else {
        "ok".to_string()
    };
    let orchestrator = m
        .daemons
        .iter()
        .find(|d| d.daemon == crate::orchestrator::DAEMON && !d.stopped);
    Shown {
        orchestrator_role: orchestrator.and_then(|d| d.role.as_deref()),
        lock_epoch: orchestrator.and_then(|d| d.epoch),
        host: &m.host,
        state,
        stale,
        silent_seconds: silent,
        last_seen: m.last_seen.to_string(),
        boot_id: m.boot_id.as_deref(),
        versions: &m.versions,
        queues: &m.queues,
        daemons: m
            .daemons
            .iter()
            .map(|d| match (&d.queue, &d.role) {
                (Some(q), _) => format!("{}@{q}", d.daemon),
                (None, Some(r)) if !d.stopped => format!("{} ({r})", d.daemon),
                (None, _) => d.daemon.clone(),
            })
            .collect(),
    }
}

fn warn_problems(problems: &[String]) {
    for p in problems {
        eprintln!("warning: {p}");
    }
}

pub(super) fn list(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let all = store.machines();
    let now = Timestamp::now();
    let after = store.config().machines.stale_after_seconds;
    let rows: Vec<Shown> = all.machines.iter().map(|m| shown(m, &now, after)).collect();
    match g.format {
        Format::Json => {
            write_json(
                out,
                &serde_json::json!({"machines": rows, "problems": all.problems}),
            )?;
        }
        Format::Text => {
            warn_problems(&all.problems);
            let mut t = Table::new(&["HOST", "STATE", "LAST SEEN", "DAEMONS", "VERSION"]);
            for r in &rows {
                t.row(vec![
                    r.host.to_string(),
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
    let s = shown(m, &now, store.config().machines.stale_after_seconds);
    let mut v = serde_json::to_value(&s).map_err(|e| CliError::new(e.to_string()))?;
    v["heartbeats"] = serde_json::to_value(&m.daemons).map_err(|e| CliError::new(e.to_string()))?;
    show(g, out, &v)
}
