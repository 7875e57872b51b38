//! `list-errors` and `list-events`: the store's shared logs as one history across machines.
//! Each machine appends to its own file (`errors@<host>.out`, `events-YYYY-MM@<host>.jsonl`,
//! see `store::perhost`); these read them all, with the PRD-named files of an older store,
//! in time order.

use super::render::{Table, write_json};
use super::{CliError, CliResult, Format, GlobalArgs, open_store};
use crate::model::Timestamp;
use std::io::Write;

/// Tells on stderr about lines that could not be read (never silently dropped).
fn warn_unreadable(unreadable: &[String]) {
    for l in unreadable {
        super::render::warning(&format!("unreadable line: {l}"));
    }
}

fn host_cell(host: &Option<String>) -> String {
    host.clone().unwrap_or_else(|| "-".to_string())
}

pub(super) fn list_errors(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let m = store
        .read_errors()
        .map_err(|e| CliError::new(format!("cannot read JSONValidation/errors*.out: {e}")))?;
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({"errors": m.entries, "unreadable": m.unreadable}),
        )?,
        Format::Text => {
            warn_unreadable(&m.unreadable);
            let mut t = Table::new(&["TIME", "HOST", "TYPE", "ID", "ERROR"]).keep(4);
            for e in &m.entries {
                t.row(vec![
                    e.entry.timestamp.to_string(),
                    host_cell(&e.host),
                    e.entry.kind.clone(),
                    e.entry.id.clone(),
                    e.entry.error.clone(),
                ]);
            }
            if t.is_empty() {
                writeln!(out, "No validation errors recorded.")?;
            } else {
                t.write(out)?;
            }
        }
    }
    Ok(())
}

pub(super) fn list_events(g: &GlobalArgs, out: &mut dyn Write, month: Option<&str>) -> CliResult {
    let store = open_store(g)?;
    let merged = match month {
        Some("all") => store.read_all_events(),
        Some(m) => {
            let at: Timestamp = format!("{m}-01T00:00:00Z").parse().map_err(|_| {
                CliError::new(format!(
                    "--month {m:?}: expected YYYY-MM (like 2025-10) or all"
                ))
            })?;
            store.read_events(&at)
        }
        None => store.read_events(&Timestamp::now()),
    }
    .map_err(|e| CliError::new(format!("cannot read the event logs under logs/: {e}")))?;
    match g.format {
        Format::Json => {
            let events: Vec<_> = merged.entries.iter().map(|e| &e.entry).collect();
            write_json(
                out,
                &serde_json::json!({"events": events, "unreadable": merged.unreadable}),
            )?
        }
        Format::Text => {
            warn_unreadable(&merged.unreadable);
            let mut t =
                Table::new(&["TIME", "HOST", "DAEMON", "EVENT", "JOB", "QUEUE", "DETAIL"]).keep(6);
            for e in &merged.entries {
                let ev = &e.entry;
                t.row(vec![
                    ev.timestamp.to_string(),
                    ev.host.clone(),
                    ev.daemon.clone(),
                    ev.event.clone(),
                    ev.job_id.clone().unwrap_or_default(),
                    ev.queue.clone().unwrap_or_default(),
                    ev.detail.clone().unwrap_or_default(),
                ]);
            }
            if t.is_empty() {
                writeln!(out, "No events recorded for that month.")?;
            } else {
                t.write(out)?;
            }
        }
    }
    Ok(())
}
