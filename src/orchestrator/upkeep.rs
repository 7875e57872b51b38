//! The store's upkeep commands (issue 17): `retry`, `archive` and `migrate`. They write the
//! store, so in the packaged system store (owned by the `agentstore` account) only
//! orchestratord can carry them out: they are message commands like the agent commands,
//! answered over D-Bus (`Submit`) or through the inbox, with PRD §10 applied to the caller
//! (retry: the project's owner or an admin; archive and migrate: admins). The CLI runs the
//! same functions itself only when no daemon serves the store (a store it may write).
//!
//! Each answer's `content.result` is a JSON report; the CLI renders it the same way whichever
//! path it came by.

use super::RouteError;
use crate::model::{Command, Message, Timestamp};
use crate::permissions::Caller;
use crate::store::Store;
use serde_json::{Value, json};

/// An archive answer lists at most this many moved jobs (`moved_count` has them all), so
/// the answer stays small at 100,000 jobs.
pub const MAX_LISTED: usize = 10_000;

/// Answers an upkeep message: its report.
pub fn answer(
    store: &Store,
    command: Command,
    msg: &Message,
    who: &Caller,
) -> Result<Value, RouteError> {
    if matches!(
        command,
        Command::RetryTask | Command::CancelTask | Command::SetTask
    ) {
        return super::tasks::edit::answer(store, command, msg, who);
    }
    let c = &msg.content;
    let dry_run = match c.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(RouteError::Invalid(format!(
                "content.dry_run must be true or false, not {other}"
            )));
        }
    };
    let text = |field: &str| -> Result<&str, RouteError> {
        c.get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                RouteError::Invalid(format!("{} needs content.{field} (a string)", msg.command))
            })
    };
    match command {
        Command::Retry => retry(store, who, text("job")?),
        Command::Archive => archive(store, who, text("older_than")?, dry_run),
        Command::Migrate => migrate(store, who, dry_run),
        other => Err(RouteError::Invalid(format!(
            "{other}: not an upkeep command"
        ))),
    }
}

/// `retry JOB`: `{"retried": [{"retry_of", "job_id", "queue"}…]}`.
pub fn retry(store: &Store, who: &Caller, id: &str) -> Result<Value, RouteError> {
    crate::store::check_id("job", id).map_err(RouteError::from)?;
    let done = super::retry::retry_by_hand(store, who, id)?;
    let rows: Vec<Value> = done
        .iter()
        .map(|r| json!({"retry_of": r.of, "job_id": r.id, "queue": r.queue}))
        .collect();
    Ok(json!({ "retried": rows }))
}

/// `archive --older-than AGE [--dry-run]` (admins).
pub fn archive(
    store: &Store,
    who: &Caller,
    older_than: &str,
    dry_run: bool,
) -> Result<Value, RouteError> {
    let age = crate::store::archive::parse_age(older_than).map_err(RouteError::Invalid)?;
    who.require_admin(crate::permissions::Denied::Archive)?;
    let now = Timestamp::now();
    let cutoff = Timestamp(
        now.0
            .checked_sub_signed(chrono::TimeDelta::seconds(
                i64::try_from(age).unwrap_or(i64::MAX),
            ))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC),
    );
    let r = crate::store::archive::archive(store, cutoff, dry_run)?;
    Ok(json!({
        "dry_run": dry_run,
        "cutoff": cutoff.to_string(),
        "seen": r.seen,
        "moved_count": r.moved.len(),
        "moved": r.moved.iter().take(MAX_LISTED).map(|(q, s, id, m)| json!({"queue": q, "status": s.name(), "id": id, "month": m})).collect::<Vec<_>>(),
        "not_handled": r.not_handled,
        "collisions": r.collisions,
        "errors": r.errors,
    }))
}

/// `migrate [--dry-run]` (admins). Queued and running jobs are left as they are (their queue
/// manager and worker own them; a 0.5 job document is a valid 0.6 one) and counted in
/// `in_use`. Daemons that opened the store before keep the schemas they loaded until they
/// restart (`restart_daemons` in the answer says so when anything changed).
pub fn migrate(store: &Store, who: &Caller, dry_run: bool) -> Result<Value, RouteError> {
    who.require_admin(crate::permissions::Denied::Migrate)?;
    let r = crate::store::migrate::migrate(store, dry_run)?;
    let rel = |p: &std::path::Path| store.relative(p).display().to_string();
    let changed = !dry_run && (r.config || !r.schemas.is_empty());
    Ok(json!({
        "dry_run": dry_run,
        "from": r.from,
        "to": r.to,
        "schemas": r.schemas.iter().map(|p| rel(p)).collect::<Vec<_>>(),
        "upgraded": r.upgraded.iter().map(|p| rel(p)).collect::<Vec<_>>(),
        "current": r.current,
        "in_use": r.in_use,
        "config": r.config,
        "errors": r.errors,
        "restart_daemons": changed,
    }))
}
