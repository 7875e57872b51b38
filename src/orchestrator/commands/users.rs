//! `list-users` and `view-user`: the users PRD §10 lets the caller see.

use crate::model::{Message, User};
use crate::orchestrator::RouteError;
use crate::orchestrator::content::{arg, ignore, to_value};
use crate::permissions::{self, Caller, Refused};
use crate::store::{Store, StoreError};
use serde_json::Value;

/// `list-users`: every user for an admin, the caller alone otherwise; `warn` hears of each
/// document that could not be read.
pub fn list(
    store: &Store,
    who: &Caller,
    warn: &mut dyn FnMut(StoreError),
) -> Result<Vec<User>, Refused> {
    permissions::visible_users(store, who, warn)
}

/// `view-user ID`.
pub fn view(store: &Store, who: &Caller, id: &str) -> Result<User, Refused> {
    permissions::visible_user(store, who, id)
}

pub(super) fn answer_list(store: &Store, who: &Caller) -> Result<Value, RouteError> {
    Ok(to_value(&list(store, who, &mut ignore)?))
}

pub(super) fn answer_view(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    let id = arg(msg, "user").or(arg(msg, "id")).ok_or_else(|| {
        RouteError::Invalid("view-user: content.user is required (a string)".into())
    })?;
    Ok(to_value(&view(store, who, id)?))
}
