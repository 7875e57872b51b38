//! The projects and users pages.

use super::*;
use crate::model::Command;

/// The projects the caller may see (`list-projects`), each linked to its jobs, PRDs and
/// messages.
pub(super) async fn projects_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, Command::ListProjects, Map::new()).await?;
    let rows = all.as_array().cloned().unwrap_or_default();
    let b = html! {
        h1 { "Projects" }
        table id="projects" {
            thead { tr { th { "project" } th { "owner" } th { "collaborators" } th { "default queue" } th { "directory" } th { "description" } th { "see" } } }
            tbody {
                @for p in &rows {
                    @let id = s(p, "/id");
                    @let u = percent_encode(id);
                    tr data-project=(id) {
                        td { (id) }
                        td { (s(p, "/owner")) }
                        td { (joined(&p["collaborators"])) }
                        td { (s(p, "/default_queue")) }
                        td { (s(p, "/directory")) }
                        td { (s(p, "/description")) }
                        td {
                            a href={ "/jobs?project=" (u) } { "jobs" } " "
                            a href={ "/prds?project=" (u) } { "PRDs" } " "
                            a href={ "/messages?project=" (u) } { "messages" }
                        }
                    }
                }
            }
        }
        @if rows.is_empty() {
            p { "No project you may see." }
        }
    };
    Ok(page("Projects", who, false, b))
}

/// The users (`list-users`: admins only; anyone else gets the daemon's refusal).
pub(super) async fn users_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, Command::ListUsers, Map::new()).await?;
    let b = html! {
        h1 { "Users" }
        table id="users" {
            thead { tr { th { "user" } th { "name" } th { "email" } th { "permissions" } th { "Unix user" } } }
            tbody {
                @for u in all.as_array().into_iter().flatten() {
                    tr data-user=(s(u, "/id")) {
                        td { (s(u, "/id")) }
                        td { (s(u, "/name")) }
                        td { (s(u, "/email")) }
                        td { (s(u, "/permissions")) }
                        td { (s(u, "/unix_user")) }
                    }
                }
            }
        }
    };
    Ok(page("Users", who, false, b))
}
