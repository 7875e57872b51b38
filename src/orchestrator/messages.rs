//! Browsing the messages (PRD §4.6) in `messaging/`: requests in `inbox/` and
//! `processed_inbox/`, answers in `outbox/` and `processed_outbox/` — the `list-messages` and
//! `view-message` direct commands, shared by Orchestrator1's `Submit`, the CLI and (through the
//! bus) the web API.
//!
//! PRD §10: a message is its `user`'s; a user sees their own messages, admins (and trusted
//! callers) every one. A message with no `user` (a file dropped in the inbox by whoever can
//! write the store) is seen by admins only. Reading never logs a rejection (the orchestrator
//! already answered each invalid request with its reason): an unreadable file is reported to
//! admins in `problems` and left as it is.

use super::RouteError;
use crate::model::{Command, Message, MessageStatus};
use crate::permissions::Caller;
use crate::store::Store;
use crate::store::listing::{
    ListedMessage, MARK_EVERY, MessageFolder, MessageListing, MessagePlace, cached_message_total,
    keep_message_total,
};
use serde_json::{Map, Value, json};
use std::path::PathBuf;

/// Which way a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A request (`inbox/`, `processed_inbox/`).
    In,
    /// An answer (`outbox/`, `processed_outbox/`).
    Out,
}

impl Direction {
    /// `in` or `out`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }

    /// Parses `in` / `out`.
    pub fn from_name(s: &str) -> Option<Direction> {
        match s {
            "in" => Some(Direction::In),
            "out" => Some(Direction::Out),
            _ => None,
        }
    }
}

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct MessageFilter {
    /// Only messages about this project.
    pub project: Option<String>,
    /// Only messages of this user.
    pub user: Option<String>,
    /// Only messages whose document has this status.
    pub status: Option<MessageStatus>,
    /// Only requests or only answers.
    pub direction: Option<Direction>,
    /// Skip this many (after filtering).
    pub offset: usize,
    /// At most this many (`None`: all).
    pub limit: Option<usize>,
}

/// The status names `content.status` / `--status` take.
pub const STATUS_NAMES: &str = "queued, processing, done, error";

/// Parses a message status name.
pub fn status_from_name(s: &str) -> Option<MessageStatus> {
    serde_json::from_value(Value::String(s.to_string())).ok()
}

/// One message file read.
struct Found {
    folder: &'static str,
    direction: Direction,
    id: String,
    msg: Message,
}

/// The four folders, requests first.
fn folders(store: &Store) -> [(&'static str, Direction, PathBuf); 4] {
    [
        ("inbox", Direction::In, store.inbox()),
        ("processed_inbox", Direction::In, store.processed_inbox()),
        ("outbox", Direction::Out, store.outbox()),
        ("processed_outbox", Direction::Out, store.processed_outbox()),
    ]
}

// Reads one message file without logging a rejection; the reason when it cannot be read.
use crate::store::listing::read_message as read;

/// A message as listed or viewed: the document with its `id` (file name without `.json`,
/// what `view-message` takes), `folder` and `direction`; `content` only when `full`.
fn row(f: &Found, full: bool) -> Value {
    let mut v = serde_json::to_value(&f.msg).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        if !full {
            o.remove("content");
        }
        o.insert("id".into(), json!(f.id));
        o.insert("folder".into(), json!(f.folder));
        o.insert("direction".into(), json!(f.direction.name()));
    }
    v
}

/// True when `who` may see `msg` (PRD §10, see the module's text).
fn may_see(who: &Caller, msg: &Message) -> bool {
    who.can_see_message(msg.user.as_deref())
}

/// The most `problems` one `list-messages` answer names; past it, one line says how many more
/// files were not read (a folder of 100,000 broken files must not fill the answer).
pub const MAX_PROBLEMS: usize = 100;

/// True when `msg` (in a folder of direction `d`) is listed for `who` under `f`.
fn admitted(who: &Caller, f: &MessageFilter, d: Direction, msg: &Message) -> bool {
    admits(
        who,
        f,
        d,
        (msg.user.as_deref(), msg.project.as_deref(), msg.status),
    )
}

/// [`admitted`] on what the index holds of a message: its user, project and status.
fn admits(
    who: &Caller,
    f: &MessageFilter,
    d: Direction,
    (user, project, status): (Option<&str>, Option<&str>, MessageStatus),
) -> bool {
    who.can_see_message(user)
        && f.project.as_deref().is_none_or(|p| project == Some(p))
        && f.user.as_deref().is_none_or(|u| user == Some(u))
        && f.status.is_none_or(|s| status == s)
        && f.direction.is_none_or(|x| x == d)
}

/// `list-messages`: requests and answers, newest first (by `queue_time`, then answers before
/// their requests, then id), filtered and sliced; `{"messages", "total", "next_offset",
/// "problems"}` where `total` counts every message the filter admits for `who` and `problems`
/// names the files that could not be read (admins only; at most [`MAX_PROBLEMS`], then how
/// many more). Each request carries `answer`: its answer's status, or null while unanswered.
/// `content` is left out (see `view-message`).
///
/// Memory stays at one index record per folder and the page's keys, whatever the folders
/// hold: the order and the total come from the folders' index files (a file is read and
/// checked once, when it is new), and only the page's files (and their answers) are read for
/// the rows, each checked again against the rules. A folder the direction filter leaves out
/// is not read. Problems are named folder by folder, by file name.
pub fn list(store: &Store, who: &Caller, f: &MessageFilter) -> Result<Value, RouteError> {
    if let Some(u) = &f.user
        && !who.can_view_user(u)
    {
        return Err(RouteError::PermissionDenied(
            crate::permissions::Denied::ListMessagesOf(u.clone()).to_string(),
        ));
    }
    let dirs = folders(store);
    // The folders' index files, merged newest first: a few dozen bytes a message are read
    // for the order and the total, and only the page's files (and their answers) for rows.
    let listed: Vec<usize> = (0..dirs.len())
        .filter(|&i| f.direction.is_none_or(|d| d == dirs[i].1))
        .collect();
    let wanted: Vec<MessageFolder<'_>> = listed
        .iter()
        .map(|&i| MessageFolder {
            name: dirs[i].0,
            out: dirs[i].1 == Direction::Out,
            dir: &dirs[i].2,
        })
        .collect();
    let mut listing = MessageListing::open(store, &wanted)
        .map_err(|e| RouteError::Failed(format!("cannot list messaging/: {e}")))?;
    let mut problems: Vec<String> = listing
        .problems()
        .iter()
        .take(MAX_PROBLEMS)
        .cloned()
        .collect();
    let more = listing.problems().len() - problems.len();
    if more > 0 {
        problems.push(format!(
            "… and {more} more files not read (the first {MAX_PROBLEMS} are named)"
        ));
    }
    let end = f.limit.map_or(usize::MAX, |l| f.offset.saturating_add(l));
    let mut admitted_of = |m: &ListedMessage| {
        let d = dirs[listed[m.folder]].1;
        admits(
            who,
            f,
            d,
            (m.user.as_deref(), m.project.as_deref(), m.status),
        )
    };
    // The total and the marks (one every MARK_EVERY messages): counted once, then kept while
    // the folders are unchanged, by the caller's rights and the filter (a page then costs a
    // seek to the mark before it and the page).
    let key = format!(
        "{}\n{}\n{:?}\n{:?}",
        store.root().display(),
        who.is_admin(),
        who.user_id(),
        MessageFilter {
            offset: 0,
            limit: None,
            ..f.clone()
        }
    );
    let (mut keys, mut total) = (Vec::new(), 0usize);
    match cached_message_total(&key, listing.signature()) {
        Some((all, marks)) => {
            total = all;
            // Never past the last admitted message: a page beyond it (or of a filter that
            // admits none) reads nothing.
            let end = end.min(total);
            let m = (f.offset / MARK_EVERY).min(marks.len().saturating_sub(1));
            let mut at = 0;
            if m > 0 && f.offset < end {
                listing
                    .seek(&marks[m])
                    .map_err(|e| RouteError::Failed(format!("cannot list messaging/: {e}")))?;
                at = m * MARK_EVERY;
            }
            while at < end {
                let Some(m) = listing.by_ref().find(&mut admitted_of) else {
                    break;
                };
                if at >= f.offset {
                    keys.push(m);
                }
                at += 1;
            }
        }
        None => {
            let mut marks = Vec::new();
            for m in listing.by_ref().filter(&mut admitted_of) {
                if total % MARK_EVERY == 0 {
                    marks.push(MessagePlace::of(
                        &m,
                        dirs[listed[m.folder]].1 == Direction::Out,
                    ));
                }
                if (f.offset..end).contains(&total) {
                    keys.push(m);
                }
                total += 1;
            }
            let signature = listing.signature().map(str::to_string);
            keep_message_total(&key, signature, total, std::sync::Arc::new(marks));
        }
    }
    for m in &mut keys {
        m.folder = listed[m.folder];
    }
    drop(listing);
    // The page's documents, read again (a request answered meanwhile has moved from inbox/
    // to processed_inbox/; one gone or changed past the filter since is left out).
    let reread = |k: &ListedMessage| -> Option<Found> {
        let (folder, direction, _) = &dirs[k.folder];
        let mut tries = vec![k.folder];
        tries.extend((0..dirs.len()).filter(|&j| j != k.folder && dirs[j].1 == *direction));
        for j in tries {
            let path = dirs[j].2.join(format!("{}.json", k.id));
            if let Ok(mut msg) = read(store, &path) {
                if !admitted(who, f, *direction, &msg) {
                    return None;
                }
                msg.content = Map::new();
                let folder = if j == k.folder { folder } else { dirs[j].0 };
                return Some(Found {
                    folder,
                    direction: *direction,
                    id: k.id.clone(),
                    msg,
                });
            }
        }
        None
    };
    // A request's answer is the answer file named after its correlation id (as `view`
    // finds it; an answer to a reused id, `<id>.duplicate-N.json`, answers another file);
    // processed_outbox/ first, as a file there is the later copy.
    let answer_of = |name: &str| -> Option<MessageStatus> {
        [3usize, 2].iter().find_map(|&j| {
            let path = dirs[j].2.join(format!("{name}.json"));
            if !crate::store::safe::exists(&path) {
                return None;
            }
            read(store, &path).ok().map(|m| m.status)
        })
    };
    let (mut rows, mut bytes, mut consumed) = (Vec::new(), 2usize, 0usize);
    for k in &keys {
        consumed += 1;
        let Some(m) = reread(k) else { continue };
        let mut r = row(&m, false);
        if m.direction == Direction::In {
            let name = crate::model::derive_safe_id(&m.msg.correlation_id);
            r["answer"] = json!(answer_of(&name));
        }
        bytes += r.to_string().len() + 1;
        if bytes > super::content::MAX_LIST_BYTES {
            return Err(RouteError::Invalid(format!(
                "list-messages: the answer would be over {} bytes ({} messages fit); ask for a slice with content.offset and content.limit, or narrow it with content.project, content.user, content.status or content.direction",
                super::content::MAX_LIST_BYTES,
                rows.len()
            )));
        }
        rows.push(r);
    }
    drop(keys);
    let next = f.offset.saturating_add(consumed).min(total.max(f.offset));
    if !who.can_see_store_problems() {
        problems.clear();
    }
    Ok(json!({
        "messages": rows,
        "total": total,
        "next_offset": next,
        "problems": problems,
    }))
}

/// `view-message ID`: the message named `ID` (its file name without `.json`, in any of the
/// four folders) with its other half — `{"id", "request", "answer"}`, each the whole document
/// with its folder, or null (an answer not written yet; a request that came over D-Bus and so
/// has no file). Seen by the rules of [`list`], judged on the request when there is one.
pub fn view(store: &Store, who: &Caller, id: &str) -> Result<Value, RouteError> {
    crate::store::check_id("message", id)?;
    let find = |name: &str, want: Direction| -> Result<Option<Found>, RouteError> {
        for (folder, direction, dir) in folders(store) {
            if direction != want {
                continue;
            }
            let path = dir.join(format!("{name}.json"));
            if !crate::store::safe::exists(&path) {
                continue;
            }
            let msg = read(store, &path).map_err(RouteError::Failed)?;
            return Ok(Some(Found {
                folder,
                direction,
                id: name.to_string(),
                msg,
            }));
        }
        Ok(None)
    };
    let mut request = find(id, Direction::In)?;
    let mut answer = find(id, Direction::Out)?;
    match (&request, &answer) {
        (Some(r), None) => {
            let name = crate::model::derive_safe_id(&r.msg.correlation_id);
            if name != id {
                answer = find(&name, Direction::Out)?;
            }
        }
        (None, Some(a)) => {
            let name = crate::model::derive_safe_id(&a.msg.correlation_id);
            if name != id {
                request = find(&name, Direction::In)?;
            }
        }
        _ => {}
    }
    let Some(judged) = request.as_ref().or(answer.as_ref()) else {
        return Err(RouteError::NotFound(format!(
            "Message not found: {id} (no messaging/{{inbox,processed_inbox,outbox,processed_outbox}}/{id}.json)"
        )));
    };
    if !may_see(who, &judged.msg) {
        return Err(RouteError::PermissionDenied(
            crate::permissions::Denied::Message(id.to_string()).to_string(),
        ));
    }
    Ok(json!({
        "id": id,
        "request": request.as_ref().map(|r| row(r, true)),
        "answer": answer.as_ref().map(|a| row(a, true)),
    }))
}

/// The filter a `list-messages` message carries in its content.
pub fn filter_from(content: &Map<String, Value>) -> Result<MessageFilter, RouteError> {
    super::content::known_content_keys(
        content,
        Command::ListMessages.name(),
        &["project", "user", "status", "direction", "offset", "limit"],
    )?;
    let text = |k: &str| -> Result<Option<String>, RouteError> {
        match content.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(RouteError::Invalid(format!(
                "list-messages: content.{k} must be a string, not {v}"
            ))),
        }
    };
    let number = |k: &str| super::content::whole_number(content, Command::ListMessages.name(), k);
    let status = match text("status")? {
        None => None,
        Some(s) => Some(status_from_name(&s).ok_or_else(|| {
            RouteError::Invalid(format!(
                "list-messages: content.status {s:?} is not one of {STATUS_NAMES}"
            ))
        })?),
    };
    let direction = match text("direction")? {
        None => None,
        Some(d) => Some(Direction::from_name(&d).ok_or_else(|| {
            RouteError::Invalid(format!(
                "list-messages: content.direction {d:?} is not one of in, out"
            ))
        })?),
    };
    let project = text("project")?;
    let user = text("user")?;
    for (kind, v) in [("project", &project), ("user", &user)] {
        if let Some(v) = v {
            crate::store::check_id(kind, v)?;
        }
    }
    Ok(MessageFilter {
        project,
        user,
        status,
        direction,
        offset: number("offset")?.unwrap_or(0),
        limit: number("limit")?,
    })
}

/// `list-messages` as a message asks it (its filter in `content`).
pub(super) fn answer_list(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    list(store, who, &filter_from(&msg.content)?)
}

/// `view-message` as a message asks it (`content.message`, or `content.id`).
pub(super) fn answer_view(store: &Store, msg: &Message, who: &Caller) -> Result<Value, RouteError> {
    view(
        store,
        who,
        super::content::required_or(msg, "message", "id")?,
    )
}
