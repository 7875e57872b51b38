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
use crate::model::{Command, DocKind, Message, MessageStatus};
use crate::permissions::Caller;
use crate::store::{Scanned, Store, read_limited, scan_each};
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

/// Reads one message file without logging a rejection; the reason when it cannot be read.
fn read(store: &Store, path: &std::path::Path) -> Result<Message, String> {
    let bytes = read_limited(path).map_err(|e| e.to_string())?;
    store
        .validator()
        .parse(DocKind::Message, &bytes)
        .map_err(|r| format!("{}: {r}", store.relative(path).display()))
}

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

/// What the listing order needs of a message, kept between reading every file and reading the
/// page's files again: 24 bytes a message (its id lives in one shared text), never its
/// document.
#[derive(Debug, Clone, Copy)]
struct Key {
    queue_time: crate::model::Timestamp,
    out: bool,
    /// Index into [`folders`].
    folder: u8,
    /// The id: a range of the ids' text.
    id_at: u32,
    id_len: u16,
}

impl Key {
    fn id<'a>(&self, ids: &'a str) -> &'a str {
        let at = self.id_at as usize;
        ids.get(at..at + usize::from(self.id_len))
            .unwrap_or_default()
    }

    /// Listing order: newest `queue_time` first, answers before their requests, then id
    /// (descending), then folder.
    fn order(&self, o: &Key, ids: &str) -> std::cmp::Ordering {
        (o.queue_time, o.out)
            .cmp(&(self.queue_time, self.out))
            .then_with(|| o.id(ids).cmp(self.id(ids)))
            .then_with(|| self.folder.cmp(&o.folder))
    }
}

/// Keeps the first `keep` of `keys` in listing order (in no order).
fn cut(keys: &mut Vec<Key>, keep: usize, ids: &str) {
    if keys.len() > keep {
        if keep > 0 {
            keys.select_nth_unstable_by(keep - 1, |a, b| a.order(b, ids));
        }
        keys.truncate(keep);
    }
}

/// True when `msg` (in a folder of direction `d`) is listed for `who` under `f`.
fn admitted(who: &Caller, f: &MessageFilter, d: Direction, msg: &Message) -> bool {
    may_see(who, msg)
        && f.project
            .as_ref()
            .is_none_or(|p| msg.project.as_ref() == Some(p))
        && f.user.as_ref().is_none_or(|u| msg.user.as_ref() == Some(u))
        && f.status.is_none_or(|s| msg.status == s)
        && f.direction.is_none_or(|x| x == d)
}

/// `list-messages`: requests and answers, newest first (by `queue_time`, then answers before
/// their requests, then id), filtered and sliced; `{"messages", "total", "next_offset",
/// "problems"}` where `total` counts every message the filter admits for `who` and `problems`
/// names the files that could not be read (admins only; at most [`MAX_PROBLEMS`], then how
/// many more). Each request carries `answer`: its answer's status, or null while unanswered.
/// `content` is left out (see `view-message`).
///
/// Memory stays at a small key per admitted message (at most `offset + limit` of them when a
/// limit is given), whatever the folders hold: every file is read and checked once for the
/// order and the total, and only the page's files (and their answers) are read again for the
/// rows. A folder the direction filter leaves out is not read.
pub fn list(store: &Store, who: &Caller, f: &MessageFilter) -> Result<Value, RouteError> {
    if let Some(u) = &f.user
        && !who.can_view_user(u)
    {
        return Err(RouteError::PermissionDenied(
            crate::permissions::Denied::ListMessagesOf(u.clone()).to_string(),
        ));
    }
    let dirs = folders(store);
    // The keys of the first `offset + limit` messages in listing order (cut back to those
    // whenever twice as many gathered), or of every message when there is no limit.
    let keep = f.limit.map_or(usize::MAX, |l| f.offset.saturating_add(l));
    let (mut keys, mut ids): (Vec<Key>, String) = (Vec::new(), String::new());
    let (mut total, mut problems, mut more) = (0usize, Vec::new(), 0usize);
    let mut problem = |p: String| {
        if problems.len() < MAX_PROBLEMS {
            problems.push(p);
        } else {
            more += 1;
        }
    };
    for (i, (_, direction, dir)) in dirs.iter().enumerate() {
        if f.direction.is_some_and(|d| d != *direction) {
            continue;
        }
        let scanned = scan_each(dir, |entry| {
            let name = match entry {
                Scanned::Document(name) => name,
                Scanned::Conflict(name) => {
                    return problem(format!(
                        "{}: a sync engine's conflict copy; not read",
                        store.relative(&dir.join(name)).display()
                    ));
                }
                Scanned::Refused(name) => {
                    return problem(format!(
                        "{}: not a regular file; never followed or read",
                        store.relative(&dir.join(name)).display()
                    ));
                }
            };
            let path = dir.join(name);
            let msg = match read(store, &path) {
                Ok(msg) => msg,
                Err(e) => return problem(e),
            };
            if !admitted(who, f, *direction, &msg) {
                return;
            }
            total += 1;
            if keep == 0 {
                return;
            }
            let id = name.strip_suffix(".json").unwrap_or(name);
            let (Ok(id_at), Ok(id_len)) = (u32::try_from(ids.len()), u16::try_from(id.len()))
            else {
                return problem(format!(
                    "{}: too many message names to list at once; not read",
                    store.relative(&path).display()
                ));
            };
            ids.push_str(id);
            keys.push(Key {
                queue_time: msg.queue_time,
                out: *direction == Direction::Out,
                folder: i as u8,
                id_at,
                id_len,
            });
            if keys.len() >= keep.saturating_mul(2).max(4096) {
                cut(&mut keys, keep, &ids);
            }
        });
        scanned.map_err(|e| {
            RouteError::Failed(format!(
                "cannot list {}: {e}",
                store.relative(dir).display()
            ))
        })?;
    }
    if more > 0 {
        problems.push(format!(
            "… and {more} more files not read (the first {MAX_PROBLEMS} are named)"
        ));
    }
    cut(&mut keys, keep, &ids);
    keys.sort_unstable_by(|a, b| a.order(b, &ids));
    // The page's documents, read again (a request answered meanwhile has moved from inbox/
    // to processed_inbox/; one gone or changed past the filter since is left out).
    let reread = |k: &Key| -> Option<Found> {
        let (folder, direction, _) = &dirs[usize::from(k.folder)];
        let mut tries = vec![usize::from(k.folder)];
        tries.extend(
            (0..dirs.len()).filter(|&j| j != usize::from(k.folder) && dirs[j].1 == *direction),
        );
        for j in tries {
            let path = dirs[j].2.join(format!("{}.json", k.id(&ids)));
            if let Ok(mut msg) = read(store, &path) {
                if !admitted(who, f, *direction, &msg) {
                    return None;
                }
                msg.content = Map::new();
                let folder = if j == usize::from(k.folder) {
                    folder
                } else {
                    dirs[j].0
                };
                return Some(Found {
                    folder,
                    direction: *direction,
                    id: k.id(&ids).to_string(),
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
    let limit = f.limit.unwrap_or(usize::MAX);
    let (mut rows, mut bytes, mut consumed) = (Vec::new(), 2usize, 0usize);
    for k in keys.iter().skip(f.offset).take(limit) {
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
    drop((keys, ids));
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
