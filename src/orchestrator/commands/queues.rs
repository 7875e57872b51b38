//! `list-queues` and `view-queue`: every caller may see the queues (PRD §10 restricts jobs,
//! not queues), as anyone who can read the store's `Queues/` can.

use crate::model::{Message, Queue};
use crate::orchestrator::RouteError;
use crate::orchestrator::content::{ignore, required, to_value};
use crate::permissions::Refused;
use crate::store::{Store, StoreError};
use serde_json::Value;

/// `list-queues`; `warn` hears of each unreadable document.
pub fn list(store: &Store, warn: &mut dyn FnMut(StoreError)) -> Result<Vec<Queue>, Refused> {
    Ok(store.queues(warn)?)
}

/// `view-queue ID`.
pub fn view(store: &Store, id: &str) -> Result<Queue, Refused> {
    Ok(store.queue(id)?)
}

pub(super) fn answer_list(store: &Store) -> Result<Value, RouteError> {
    Ok(to_value(&list(store, &mut ignore)?))
}

pub(super) fn answer_view(store: &Store, msg: &Message) -> Result<Value, RouteError> {
    Ok(to_value(&view(store, required(msg, "queue")?)?))
}
