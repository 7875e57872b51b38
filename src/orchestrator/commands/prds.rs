//! `list-prds` and `view-prd`: the PRDs PRD §10 lets the caller see.

use crate::model::{Message, Prd, PrdState, Project};
use crate::orchestrator::RouteError;
use crate::orchestrator::content::{arg, ignore, required, to_value};
use crate::permissions::{self, Caller, Refused};
use crate::store::{Store, StoreError};
use serde_json::Value;
use std::collections::HashMap;

/// `list-prds [--project P]`: each PRD the caller may see, with the state folder it is in;
/// narrowed to a project the caller may not see, refused (never an empty list). Each
/// project is read once.
pub fn list(
    store: &Store,
    who: &Caller,
    project: Option<&str>,
    warn: &mut dyn FnMut(StoreError),
) -> Result<Vec<(PrdState, Prd)>, Refused> {
    if let Some(id) = project {
        permissions::visible_project(store, who, id)?;
    }
    let mut projects: HashMap<String, Option<Project>> = HashMap::new();
    let mut out = Vec::new();
    for (state, prd) in store.prds(project, warn)? {
        let p = projects
            .entry(prd.project.clone())
            .or_insert_with(|| store.project(&prd.project).ok());
        if who.can_see_prd(&prd, p.as_ref()) {
            out.push((state, prd));
        }
    }
    Ok(out)
}

/// `view-prd ID`.
pub fn view(store: &Store, who: &Caller, id: &str) -> Result<Prd, Refused> {
    permissions::visible_prd(store, who, id)
}

pub(super) fn answer_list(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    let project = arg(msg, "project").or(msg.project.as_deref());
    let prds: Vec<Prd> = list(store, who, project, &mut ignore)?
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    Ok(to_value(&prds))
}

pub(super) fn answer_view(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    Ok(to_value(&view(store, who, required(msg, "prd")?)?))
}
