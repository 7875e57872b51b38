//! The queues page.

use super::*;
use crate::model::Command;

pub(super) async fn queues_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let queues = direct(app, who, Command::ListQueues, Map::new()).await?;
    let mut b = String::from(
        "<h1>Queues</h1><table id=\"queues\"><thead><tr><th>queue</th><th>manager</th><th>running</th><th>queued</th><th>workers</th><th>paused</th><th>last update</th></tr></thead><tbody>",
    );
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
        let num = |k: &str| {
            st.get(k)
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into())
        };
        let _ = write!(
            b,
            r#"<tr data-queue="{n}"><td><a href="/jobs?queue={u}">{n}</a></td><td>{m}</td><td class="active">{active}</td><td class="queued">{queued}</td><td>{w}</td><td>{p}</td><td>{l}</td></tr>"#,
            n = esc(name),
            u = percent_encode(name),
            m = if live {
                "running"
            } else {
                "stopped (starts on demand)"
            },
            w = st
                .get("worker_count")
                .or_else(|| q.pointer("/config/worker_count"))
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into()),
            p = num("paused"),
            l = esc(st.get("last_update").and_then(Value::as_str).unwrap_or("")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("Queues", who, true, &b))
}
