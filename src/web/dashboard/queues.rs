//! The queues page.

use super::*;
use crate::model::Command;

/// One queue's row.
struct Row {
    name: String,
    live: bool,
    active: u64,
    queued: u64,
    workers: String,
    paused: String,
    last_update: String,
}

pub(super) async fn queues_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let queues = direct(app, who, Command::ListQueues, Map::new()).await?;
    let mut rows = Vec::new();
    for q in queues.as_array().into_iter().flatten() {
        let name = s(q, "/config/id");
        let st = queue_state(app, name).await;
        let live = st["running"].as_bool().unwrap_or(false);
        // Counts: the manager's when it runs, else the store's (ListJobs totals).
        let count = |status: &'static str| {
            let q = HashMap::from([
                ("queue".to_string(), name.to_string()),
                ("status".to_string(), status.to_string()),
                ("fields".to_string(), "summary".to_string()),
                ("limit".to_string(), "1".to_string()),
            ]);
            async move { list_jobs(app, who, &q).await.map(|(_, total, _)| total) }
        };
        let (active, queued) = if live {
            (
                st["active_jobs"].as_u64().unwrap_or(0),
                st["queued_jobs"].as_u64().unwrap_or(0),
            )
        } else {
            (
                u64::from(count("running").await?),
                u64::from(count("queued").await?),
            )
        };
        rows.push(Row {
            name: name.to_string(),
            live,
            active,
            queued,
            workers: st
                .get("worker_count")
                .or_else(|| q.pointer("/config/worker_count"))
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into()),
            paused: st
                .get("paused")
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into()),
            last_update: st
                .get("last_update")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        });
    }
    let b = html! {
        h1 { "Queues" }
        table id="queues" {
            thead { tr { th { "queue" } th { "manager" } th { "running" } th { "queued" } th { "workers" } th { "paused" } th { "last update" } } }
            tbody {
                @for r in &rows {
                    tr data-queue=(r.name) {
                        td { a href={ "/jobs?queue=" (percent_encode(&r.name)) } { (r.name) } }
                        td { (if r.live { "running" } else { "stopped (starts on demand)" }) }
                        td class="active" { (r.active) }
                        td class="queued" { (r.queued) }
                        td { (r.workers) }
                        td { (r.paused) }
                        td { (r.last_update) }
                    }
                }
            }
        }
    };
    Ok(page("Queues", who, true, b))
}
