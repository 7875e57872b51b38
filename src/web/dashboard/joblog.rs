//! The job page's log: the job's journal lines (`job-log`, what `orchestrator logs ID
//! --follow` prints), the first page drawn by the server so it reads without JavaScript,
//! then followed by `/static/live.js` through `GET /api/v1/jobs/{id}/log?after=CURSOR`
//! until the job has ended.

use crate::model::Command;
use crate::web::App;
use crate::web::api::direct;
use crate::web::auth::Actor;
use maud::{Markup, display, html};
use serde_json::{Map, Value, json};

/// The "Log" section of job `id`'s page.
pub async fn section(app: &App, who: &Actor, id: &str) -> Markup {
    let mut c = Map::new();
    c.insert("job".into(), json!(id));
    let log = direct(app, who, Command::JobLog, c).await;
    html! {
        h2 { "Log" }
        @match &log {
            Ok(v) => {
                @let lines: Vec<&str> = v["lines"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                @let ended = v["ended"].as_bool().unwrap_or(false);
                pre id="joblog" data-job=(id) data-after=(v["cursor"].as_str().unwrap_or(""))
                    data-ended=(display(ended && !v["more"].as_bool().unwrap_or(false)))
                    data-empty=(display(lines.is_empty())) {
                    @for l in &lines { (l) "\n" }
                    @if lines.is_empty() {
                        (if ended { "(no journal lines for this job)" } else { "(no lines yet)" })
                    }
                }
            }
            Err(e) => {
                p id="joblog-missing" { "The log cannot be shown here: " (e.message) }
            }
        }
        p {
            "In a terminal: " code { "orchestrator logs " (id) " --follow 600" }
            " (the journal, " code { "JOB_ID=" (id) } ")"
        }
    }
}
