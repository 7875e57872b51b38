//! Reading a command's arguments from a message's `content`: the one place that says how a
//! missing, misspelt or mistyped argument is refused, for every command module (those of
//! `commands/` and the ones `messages` and `tasks` answer), and how large a listing's answer
//! may grow.

use crate::model::Message;
use crate::orchestrator::RouteError;
use serde_json::{Map, Value};

/// The most bytes of jobs (or messages) one `list-jobs` (`list-messages`) answer carries.
/// Well under a D-Bus reply's bound: an answer is held as a JSON tree (about five times its
/// text) and then as text twice (the answer, the D-Bus message), so 16 MiB answers took
/// orchestratord to 150 MB; 2 MiB keeps it near 35 MB at 100,000 jobs. More: slices
/// (`offset`, `limit`), or `ListJobs` pages.
pub const MAX_LIST_BYTES: usize = 2 << 20;

/// `content.<key>` when it is a string.
pub(crate) fn arg<'a>(msg: &'a Message, key: &str) -> Option<&'a str> {
    msg.content.get(key).and_then(Value::as_str)
}

/// `content.<key>`, which must be a string.
pub(crate) fn required<'a>(msg: &'a Message, key: &str) -> Result<&'a str, RouteError> {
    arg(msg, key).ok_or_else(|| missing(msg, key))
}

/// `content.<key>`, else `content.<alias>` (an older spelling), one of which must be a string.
pub(crate) fn required_or<'a>(
    msg: &'a Message,
    key: &str,
    alias: &str,
) -> Result<&'a str, RouteError> {
    arg(msg, key)
        .or(arg(msg, alias))
        .ok_or_else(|| missing(msg, key))
}

fn missing(msg: &Message, key: &str) -> RouteError {
    RouteError::Invalid(format!(
        "{}: content.{key} is required (a string)",
        msg.command
    ))
}

/// A value as the answer's JSON (`null` if it cannot be one).
pub(crate) fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// `content.<key>` of a `command` message as a whole number ≥ 0 (`None` when absent or null).
pub(crate) fn whole_number(
    content: &Map<String, Value>,
    command: &str,
    key: &str,
) -> Result<Option<usize>, RouteError> {
    match content.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                RouteError::Invalid(format!(
                    "{command}: content.{key} must be a whole number ≥ 0, not {v}"
                ))
            }),
    }
}

/// Refuses a content key a listing does not know (a misspelt filter would otherwise list
/// everything, as if no filter had been given).
pub(crate) fn known_content_keys(
    content: &Map<String, Value>,
    command: &str,
    known: &[&str],
) -> Result<(), RouteError> {
    match content.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(RouteError::Invalid(format!(
            "{command}: unknown content key {k:?} (known: {})",
            known.join(", ")
        ))),
    }
}

/// Refuses `content.<key>` when it is there and neither a string nor null (a filter given
/// as a number or a list would otherwise be no filter at all).
pub(crate) fn text_or_null(msg: &Message, key: &str) -> Result<(), RouteError> {
    match msg.content.get(key) {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(v) => Err(RouteError::Invalid(format!(
            "{}: content.{key} must be a string, not {v}",
            msg.command
        ))),
    }
}

/// Reports a document that could not be read, without stopping an answer.
pub(crate) fn ignore(e: crate::store::StoreError) {
    tracing::warn!("{e}");
}
