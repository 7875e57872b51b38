//! `list-machines` and `view-machine` (issue 13): every caller may see which machines serve
//! the store, as anyone who can read the store's `machines/` can.

use crate::model::{Message, Timestamp};
use crate::orchestrator::RouteError;
use crate::orchestrator::content::{required, to_value};
use crate::store::Store;
use serde_json::Value;

pub(super) fn answer_list(store: &Store) -> Result<Value, RouteError> {
    let all = store.machines();
    let now = Timestamp::now();
    let after = store.config().machines.stale_after_seconds;
    let rows: Vec<_> = all.machines.iter().map(|m| m.view(&now, after)).collect();
    Ok(serde_json::json!({"machines": rows, "problems": all.problems}))
}

pub(super) fn answer_view(store: &Store, msg: &Message) -> Result<Value, RouteError> {
    let host = required(msg, "host")?;
    crate::store::check_id("host", host)?;
    let all = store.machines();
    let m = all.get(host).ok_or_else(|| {
        RouteError::NotFound(format!(
            "Machine not found: {host} (no heartbeat under machines/{host}/)"
        ))
    })?;
    let now = Timestamp::now();
    let mut v = to_value(&m.view(&now, store.config().machines.stale_after_seconds));
    v["heartbeats"] = to_value(&m.daemons);
    Ok(v)
}
