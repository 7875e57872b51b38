//! The projects and users pages.

use super::*;
use crate::model::Command;

/// The projects the caller may see (`list-projects`), each linked to its jobs, PRDs and
/// messages.
pub(super) async fn projects_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, Command::ListProjects, Map::new()).await?;
    let rows = all.as_array().cloned().unwrap_or_default();
    let mut b = String::from(
        "<h1>Projects</h1><table id=\"projects\"><thead><tr><th>project</th><th>owner</th><th>collaborators</th><th>default queue</th><th>directory</th><th>description</th><th>see</th></tr></thead><tbody>",
    );
    for p in &rows {
        let id = s(p, "/id");
        let u = percent_encode(id);
        let _ = write!(
            b,
            r#"<tr data-project="{i}"><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href="/jobs?project={u}">jobs</a> <a href="/prds?project={u}">PRDs</a> <a href="/messages?project={u}">messages</a></td></tr>"#,
            esc(s(p, "/owner")),
            esc(&joined(&p["collaborators"])),
            esc(s(p, "/default_queue")),
            esc(s(p, "/directory")),
            esc(s(p, "/description")),
            i = esc(id),
        );
    }
    b.push_str("</tbody></table>");
    if rows.is_empty() {
        b.push_str("<p>No project you may see.</p>");
    }
    Ok(page("Projects", who, false, &b))
}

/// The users (`list-users`: admins only; anyone else gets the daemon's refusal).
pub(super) async fn users_page(app: &App, who: &Actor) -> Result<Response<Body>, WebError> {
    let all = direct(app, who, Command::ListUsers, Map::new()).await?;
    let mut b = String::from(
        "<h1>Users</h1><table id=\"users\"><thead><tr><th>user</th><th>name</th><th>email</th><th>permissions</th><th>Unix user</th></tr></thead><tbody>",
    );
    for u in all.as_array().into_iter().flatten() {
        let _ = write!(
            b,
            r#"<tr data-user="{i}"><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(s(u, "/name")),
            esc(s(u, "/email")),
            esc(s(u, "/permissions")),
            esc(s(u, "/unix_user")),
            i = esc(s(u, "/id")),
        );
    }
    b.push_str("</tbody></table>");
    Ok(page("Users", who, false, &b))
}
