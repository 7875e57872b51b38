//! `list-projects` and `view-project`: the projects PRD §10 lets the caller see.

use crate::model::{Message, Project};
use crate::orchestrator::RouteError;
use crate::orchestrator::content::{arg, ignore, to_value};
use crate::permissions::{self, Caller, Refused};
use crate::store::{Store, StoreError};
use serde_json::Value;

/// `list-projects`: those the caller may see; `warn` hears of each unreadable document.
pub fn list(
    store: &Store,
    who: &Caller,
    warn: &mut dyn FnMut(StoreError),
) -> Result<Vec<Project>, Refused> {
    Ok(store
        .projects(warn)?
        .into_iter()
        .filter(|p| who.can_see_project(p))
        .collect())
}

/// `view-project ID`.
pub fn view(store: &Store, who: &Caller, id: &str) -> Result<Project, Refused> {
    permissions::visible_project(store, who, id)
}

pub(super) fn answer_list(store: &Store, who: &Caller) -> Result<Value, RouteError> {
    Ok(to_value(&list(store, who, &mut ignore)?))
}

pub(super) fn answer_view(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    let id = arg(msg, "project")
        .or(msg.project.as_deref())
        .ok_or_else(|| RouteError::Invalid("view-project: project is required".into()))?;
    Ok(to_value(&view(store, who, id)?))
}
