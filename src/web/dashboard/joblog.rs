//! The job page's log: the job's journal lines (`job-log`, what `orchestrator logs ID
//! --follow` prints), the first page drawn by the server so it reads without JavaScript,
//! then followed by `/static/live.js` through `GET /api/v1/jobs/{id}/log?after=CURSOR`
//! until the job has ended.

use crate::model::Command;
use crate::web::App;
use crate::web::api::direct;
use crate::web::auth::Actor;
use crate::web::html::esc;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

/// Appends the "Log" section of job `id`'s page to `b`.
pub async fn section(app: &App, who: &Actor, id: &str, b: &mut String) {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let _ = write!(b, "<h2>Log</h2>");
    match direct(app, who, Command::JobLog, c).await {
        Ok(v) => {
            let lines: Vec<&str> = v["lines"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let ended = v["ended"].as_bool().unwrap_or(false);
            let mut text = String::new();
            for l in &lines {
                text.push_str(&esc(l));
                text.push('\n');
            }
            if lines.is_empty() {
                text.push_str(if ended {
                    "(no journal lines for this job)"
                } else {
                    "(no lines yet)"
                });
            }
            let _ = write!(
                b,
                r#"<pre id="joblog" data-job="{}" data-after="{}" data-ended="{}" data-empty="{}">{text}</pre>"#,
                esc(id),
                esc(v["cursor"].as_str().unwrap_or("")),
                ended && !v["more"].as_bool().unwrap_or(false),
                lines.is_empty(),
            );
        }
        Err(e) => {
            let _ = write!(
                b,
                r#"<p id="joblog-missing">The log cannot be shown here: {}</p>"#,
                esc(&e.message)
            );
        }
    }
    let _ = write!(
        b,
        r#"<p>In a terminal: <code>orchestrator logs {} --follow 600</code> (the journal, <code>JOB_ID={}</code>)</p>"#,
        esc(id),
        esc(id)
    );
}
