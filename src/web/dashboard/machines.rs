//! The machines page and one machine's page.

use super::*;
use crate::model::Command;

pub(super) async fn machines_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, Command::ListMachines, Map::new()).await?;
    let rows = all["machines"].as_array().cloned().unwrap_or_default();
    let stale = rows.iter().filter(|m| m["stale"] == json!(true)).count();
    let mut b = format!(
        r#"<h1>Machines</h1><p id="summary">{} machines, {stale} stale</p><table id="machines"><thead><tr><th>host</th><th>state</th><th>last seen</th><th>daemons</th><th>queues</th><th>version</th></tr></thead><tbody>"#,
        rows.len()
    );
    for m in &rows {
        let is_stale = m["stale"] == json!(true);
        let _ = write!(
            b,
            r#"<tr data-machine="{h}"{cls}><td><a href="/machines/{hu}">{h}</a></td><td class="state">{st}</td><td>{seen}</td><td>{d}</td><td>{q}</td><td>{v}</td></tr>"#,
            h = esc(s(m, "/host")),
            hu = percent_encode(s(m, "/host")),
            cls = if is_stale { r#" class="stale""# } else { "" },
            st = if is_stale {
                format!("<strong>⚠ {}</strong>", esc(s(m, "/state")))
            } else {
                esc(s(m, "/state"))
            },
            seen = esc(s(m, "/last_seen")),
            d = esc(&joined(&m["daemons"])),
            q = esc(&joined(&m["queues"])),
            v = esc(&joined(&m["versions"])),
        );
    }
    b.push_str("</tbody></table>");
    if rows.is_empty() {
        b.push_str("<p>No machine has reported yet (no heartbeats under machines/).</p>");
    }
    problems_list(&mut b, "Skipped", &all["problems"]);
    Ok(page("Machines", who, true, &b))
}

/// One machine (`view-machine`): its row, and each daemon's heartbeat with its age.
pub(super) async fn machine_page(
    app: &App,
    who: &Actor,
    host: &str,
) -> Result<Response<Body>, WebError> {
    let m = direct(app, who, Command::ViewMachine, one("host", host)).await?;
    let stale = m["stale"] == json!(true);
    let mut b = format!(
        r#"<h1>Machine {h}</h1><p><a href="/machines">← all machines</a></p><table id="machine">"#,
        h = esc(host)
    );
    let state = if stale {
        format!("<strong>⚠ {}</strong>", esc(s(&m, "/state")))
    } else {
        esc(s(&m, "/state"))
    };
    let rows = [
        ("state", state),
        ("last-seen", esc(s(&m, "/last_seen"))),
        ("daemons", esc(&joined(&m["daemons"]))),
        ("queues", esc(&joined(&m["queues"]))),
        ("versions", esc(&joined(&m["versions"]))),
        ("orchestrator", esc(s(&m, "/orchestrator_role"))),
        ("boot-id", esc(s(&m, "/boot_id"))),
    ];
    for (label, cell) in rows {
        if cell.is_empty() {
            continue;
        }
        let _ = write!(
            b,
            r#"<tr{cls}><th>{}</th><td id="f-{label}">{cell}</td></tr>"#,
            label.replace('-', " "),
            cls = if stale && label == "state" {
                r#" class="stale""#
            } else {
                ""
            },
        );
    }
    b.push_str("</table><h2>Heartbeats</h2><table id=\"heartbeats\"><thead><tr><th>daemon</th><th>queue</th><th>pid</th><th>version</th><th>started</th><th>last seen</th><th>age</th><th>every</th><th>stopped</th></tr></thead><tbody>");
    let now = crate::model::Timestamp::now();
    for d in m["heartbeats"].as_array().into_iter().flatten() {
        let seen = s(d, "/last_seen");
        let age = seen
            .parse::<crate::model::Timestamp>()
            .ok()
            .map(|t| {
                let secs = u64::try_from((now.0 - t.0).num_seconds()).unwrap_or(0);
                crate::store::machines::duration_text(secs)
            })
            .unwrap_or_default();
        let _ = write!(
            b,
            r#"<tr data-daemon="{daemon}"><td>{daemon}</td><td>{queue}</td><td>{pid}</td><td>{version}</td><td>{started}</td><td>{seen}</td><td class="age">{age}</td><td>{every}</td><td>{stopped}</td></tr>"#,
            daemon = esc(s(d, "/daemon")),
            queue = esc(s(d, "/queue")),
            pid = d["pid"],
            version = esc(s(d, "/version")),
            started = esc(s(d, "/started")),
            seen = esc(seen),
            age = esc(&age),
            every = d["interval_seconds"]
                .as_u64()
                .map(|n| format!("{n} s"))
                .unwrap_or_default(),
            stopped = if d["stopped"] == json!(true) {
                "yes"
            } else {
                ""
            },
        );
    }
    b.push_str("</tbody></table>");
    Ok(page(&format!("Machine {host}"), who, true, &b))
}
