//! The machines page and one machine's page.

use super::*;
use crate::model::Command;

/// A machine's state, flagged when its heartbeats are stale.
fn state(m: &Value, stale: bool) -> Markup {
    html! {
        @if stale { strong { "⚠ " (s(m, "/state")) } } @else { (s(m, "/state")) }
    }
}

pub(super) async fn machines_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, Command::ListMachines, Map::new()).await?;
    let rows = all["machines"].as_array().cloned().unwrap_or_default();
    let stale = rows.iter().filter(|m| m["stale"] == json!(true)).count();
    let b = html! {
        h1 { "Machines" }
        p id="summary" { (rows.len()) " machines, " (stale) " stale" }
        table id="machines" {
            thead { tr { th { "host" } th { "state" } th { "last seen" } th { "daemons" } th { "queues" } th { "version" } } }
            tbody {
                @for m in &rows {
                    @let is_stale = m["stale"] == json!(true);
                    @let host = s(m, "/host");
                    tr data-machine=(host) class=[is_stale.then_some("stale")] {
                        td { a href={ "/machines/" (percent_encode(host)) } { (host) } }
                        td class="state" { (state(m, is_stale)) }
                        td { (s(m, "/last_seen")) }
                        td { (joined(&m["daemons"])) }
                        td { (joined(&m["queues"])) }
                        td { (joined(&m["versions"])) }
                    }
                }
            }
        }
        @if rows.is_empty() {
            p { "No machine has reported yet (no heartbeats under machines/)." }
        }
        (problems_list("Skipped", &all["problems"]))
    };
    Ok(page("Machines", who, true, b))
}

/// One machine (`view-machine`): its row, and each daemon's heartbeat with its age.
pub(super) async fn machine_page(
    app: &App,
    who: &Actor,
    host: &str,
) -> Result<Response<Body>, WebError> {
    let m = direct(app, who, Command::ViewMachine, one("host", host)).await?;
    let stale = m["stale"] == json!(true);
    let rows = [
        ("last-seen", s(&m, "/last_seen").to_string()),
        ("daemons", joined(&m["daemons"])),
        ("queues", joined(&m["queues"])),
        ("versions", joined(&m["versions"])),
        ("orchestrator", s(&m, "/orchestrator_role").to_string()),
        ("boot-id", s(&m, "/boot_id").to_string()),
    ];
    let now = crate::model::Timestamp::now();
    let age = |seen: &str| {
        seen.parse::<crate::model::Timestamp>()
            .ok()
            .map(|t| {
                let secs = u64::try_from((now.0 - t.0).num_seconds()).unwrap_or(0);
                crate::store::machines::duration_text(secs)
            })
            .unwrap_or_default()
    };
    let b = html! {
        h1 { "Machine " (host) }
        p { a href="/machines" { "← all machines" } }
        table id="machine" {
            @if stale || !s(&m, "/state").is_empty() {
                tr class=[stale.then_some("stale")] {
                    th { "state" }
                    td id="f-state" { (state(&m, stale)) }
                }
            }
            @for (label, cell) in &rows {
                @if !cell.is_empty() {
                    tr { th { (label.replace('-', " ")) } td id={ "f-" (label) } { (cell) } }
                }
            }
        }
        h2 { "Heartbeats" }
        table id="heartbeats" {
            thead { tr { th { "daemon" } th { "queue" } th { "pid" } th { "version" } th { "started" } th { "last seen" } th { "age" } th { "every" } th { "stopped" } } }
            tbody {
                @for d in m["heartbeats"].as_array().into_iter().flatten() {
                    @let daemon = s(d, "/daemon");
                    tr data-daemon=(daemon) {
                        td { (daemon) }
                        td { (s(d, "/queue")) }
                        td { (display(&d["pid"])) }
                        td { (s(d, "/version")) }
                        td { (s(d, "/started")) }
                        td { (s(d, "/last_seen")) }
                        td class="age" { (age(s(d, "/last_seen"))) }
                        td {
                            @if let Some(n) = d["interval_seconds"].as_u64() { (n) " s" }
                        }
                        td { (if d["stopped"] == json!(true) { "yes" } else { "" }) }
                    }
                }
            }
        }
    };
    Ok(page(&format!("Machine {host}"), who, true, b))
}
