//! The approvals page.

use super::*;

pub(super) async fn approvals_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let rows = crate::web::api::approvals(app, who).await?;
    let rows = rows.as_array().cloned().unwrap_or_default();
    let mut b = format!(
        r#"<h1>Approvals</h1><p id="waiting">{} waiting</p><table id="approvals"><thead><tr><th>queue</th><th>job</th><th>request</th><th>tool</th><th>summary</th><th>deadline</th><th>answer</th></tr></thead><tbody>"#,
        rows.len()
    );
    for r in &rows {
        let (queue, job, req) = (s(r, "/queue"), s(r, "/job_id"), s(r, "/request_id"));
        let _ = write!(
            b,
            r#"<tr data-request="{req}"><td>{queue}</td><td><a href="/jobs/{ju}">{job}</a></td><td>{req}</td><td>{tool}</td><td>{summary}</td><td>{deadline}</td><td><form method="post" action="/approvals/{qu}/{ru}/answer"><input name="message" placeholder="reason (optional)" size="16"><label><input type="checkbox" name="always"> always</label><button name="decision" value="allow" class="allow">Allow</button><button name="decision" value="deny" class="deny">Deny</button></form></td></tr>"#,
            queue = esc(queue),
            job = esc(job),
            ju = percent_encode(job),
            req = esc(req),
            qu = percent_encode(queue),
            ru = percent_encode(req),
            tool = esc(s(r, "/tool")),
            summary = esc(s(r, "/summary")),
            deadline = esc(s(r, "/deadline")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("Approvals", who, true, &b))
}
