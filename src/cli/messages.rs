//! `list-messages` and `view-message`: the requests and answers in `messaging/` (PRD §4.6),
//! with the same rules and the same answer as Orchestrator1's direct commands of those names
//! (`orchestrator::messages`): a user sees their own messages, admins every one.

use super::browse::{caller, show};
use super::render::{Table, write_json};
use super::{CliError, CliResult, Format, GlobalArgs, open_store};
use crate::orchestrator::messages::{Direction, MessageFilter};
use crate::orchestrator::{RouteError, messages};
use serde_json::{Map, Value, json};
use std::io::Write;

/// `list-messages` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ListMessagesArgs {
    /// Only messages about this project.
    #[arg(add = crate::cli::complete::project(), long)]
    pub project: Option<String>,
    /// Only messages of this user (admins; a user sees only their own anyway).
    #[arg(long)]
    pub user: Option<String>,
    /// Only messages whose document has this status: queued, processing, done, error.
    #[arg(long)]
    pub status: Option<String>,
    /// Only requests (`in`: inbox, processed_inbox) or answers (`out`: outbox, processed_outbox).
    #[arg(long)]
    pub direction: Option<String>,
    /// Skip this many (newest first).
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// At most this many (default 1000, newest first; the footer says how to see more).
    #[arg(long)]
    pub limit: Option<usize>,
}

/// Messages in one listing when `--limit` is not given: a page, as `ListJobs` gives one. An
/// answer is built whole (and over D-Bus it is bounded at 2 MiB of rows), so the whole
/// history of a busy store (200,000 files) is never asked for at once by default.
pub const DEFAULT_LIMIT: usize = 1000;

impl ListMessagesArgs {
    /// The content of the `list-messages` direct command these options ask for.
    pub(super) fn content(&self) -> Map<String, Value> {
        let mut c = Map::new();
        for (k, v) in [
            ("project", &self.project),
            ("user", &self.user),
            ("status", &self.status),
            ("direction", &self.direction),
        ] {
            if let Some(v) = v {
                c.insert(k.into(), json!(v));
            }
        }
        c.insert("offset".into(), json!(self.offset));
        c.insert("limit".into(), json!(self.limit.unwrap_or(DEFAULT_LIMIT)));
        c
    }
}

fn route_err(e: RouteError) -> CliError {
    CliError::new(e.to_string())
}

pub(super) fn list(g: &GlobalArgs, out: &mut dyn Write, a: &ListMessagesArgs) -> CliResult {
    let store = open_store(g)?;
    let who = caller(&store)?;
    let filter: MessageFilter = messages::filter_from(&a.content()).map_err(route_err)?;
    let v = messages::list(&store, &who, &filter).map_err(route_err)?;
    render_list(g, out, &v)
}

pub(super) fn view(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let who = caller(&store)?;
    let v = messages::view(&store, &who, id).map_err(route_err)?;
    show(g, out, &v)
}

/// A message's STATUS as listed: an answer's own status; for a request (DIR `in`), its
/// answer's, or `waiting` while none has come (a request's own status stays `queued`;
/// `--format json` has both).
fn status_cell(m: &Value) -> String {
    if m["direction"] != json!(Direction::In.name()) {
        return m["status"].as_str().unwrap_or("-").to_string();
    }
    match m["answer"].as_str() {
        Some(a) => a.to_string(),
        None => match m["status"].as_str() {
            Some("queued") | None => "waiting".to_string(),
            Some(other) => other.to_string(),
        },
    }
}

/// Prints a `list-messages` answer (read here or by orchestratord).
pub(super) fn render_list(g: &GlobalArgs, out: &mut dyn Write, v: &Value) -> CliResult {
    if g.format == Format::Json {
        write_json(out, v)?;
        return Ok(());
    }
    for p in v["problems"].as_array().into_iter().flatten() {
        super::render::warning(p.as_str().unwrap_or_default());
    }
    let s = |m: &Value, k: &str| m[k].as_str().unwrap_or("-").to_string();
    // At 80 columns the request's id (copied whole), its state, command and time fit; USER,
    // then PROJECT, then DIR are left out when they would not (`--user`, `--project` and
    // `--direction` still select by them). Nothing is cut at 160.
    let mut t = Table::new(&[
        "ID", "DIR", "STATUS", "COMMAND", "PROJECT", "USER", "QUEUED",
    ])
    .keep(0)
    .keep(2)
    .keep(3)
    .keep(6)
    .droppable(5)
    .droppable(4)
    .droppable(1);
    let rows = v["messages"].as_array().cloned().unwrap_or_default();
    for m in &rows {
        t.row(vec![
            s(m, "id"),
            s(m, "direction"),
            status_cell(m),
            s(m, "command"),
            s(m, "project"),
            s(m, "user"),
            m["queue_time"]
                .as_str()
                .and_then(|q| q.parse::<crate::model::Timestamp>().ok())
                .map_or_else(|| s(m, "queue_time"), |q| super::browse::queued_cell(&q)),
        ]);
    }
    if t.is_empty() {
        writeln!(out, "No messages.")?;
    } else {
        t.write(out)?;
        let total = v["total"].as_u64().unwrap_or(0);
        if (rows.len() as u64) < total {
            writeln!(
                out,
                "({} of {total} shown; --offset {} for more)",
                rows.len(),
                v["next_offset"].as_u64().unwrap_or(0)
            )?;
        }
    }
    Ok(())
}
