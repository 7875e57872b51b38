//! The charts page.

use super::*;

pub(super) async fn charts_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    // The most recent CHART_JOBS jobs: one page to learn the total, one from the end.
    let mut q = HashMap::from([
        ("limit".to_string(), "1".to_string()),
        ("fields".into(), "summary".into()),
    ]);
    let (_, total, _) = list_jobs(app, who, &q).await?;
    q.remove("fields");
    q.insert(
        "offset".into(),
        total.saturating_sub(CHART_JOBS).to_string(),
    );
    q.insert("limit".into(), CHART_JOBS.to_string());
    let (page_text, _, _) = list_jobs(app, who, &q).await?;
    let jobs: Vec<Value> = serde_json::from_str(&page_text)
        .map_err(|e| WebError::new(502, "org.agentstore.Error.Failed", e.to_string()))?;
    let b = html! {
        h1 { "Charts" }
        p { "From the " (jobs.len()) " most recent of " (total) " jobs." }
        (charts::jobs_per_hour(&jobs))
        (charts::durations_per_command(&jobs))
        (charts::cost_per_project(&jobs))
        (crate::web::agent_costs::cost_per_agent(&jobs))
    };
    Ok(page("Charts", who, false, b))
}
