//! The approvals page.

use super::*;

pub(super) async fn approvals_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let rows = crate::web::api::approvals(app, who).await?;
    let rows = rows.as_array().cloned().unwrap_or_default();
    let b = html! {
        h1 { "Approvals" }
        p id="waiting" { (rows.len()) " waiting" }
        table id="approvals" {
            thead { tr { th { "queue" } th { "job" } th { "request" } th { "tool" } th { "summary" } th { "deadline" } th { "answer" } } }
            tbody {
                @for r in &rows {
                    @let (queue, job, req) = (s(r, "/queue"), s(r, "/job_id"), s(r, "/request_id"));
                    tr data-request=(req) {
                        td { (queue) }
                        td { a href={ "/jobs/" (percent_encode(job)) } { (job) } }
                        td { (req) }
                        td { (s(r, "/tool")) }
                        td { (s(r, "/summary")) }
                        td { (s(r, "/deadline")) }
                        td { (answer_form(queue, req)) }
                    }
                }
            }
        }
    };
    Ok(page("Approvals", who, true, b))
}
