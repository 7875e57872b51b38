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

/// Prints a `list-messages` answer (read here or by orchestratord).
pub(super) fn render_list(g: &GlobalArgs, out: &mut dyn Write, v: &Value) -> CliResult {
    if g.format == Format::Json {
        write_json(out, v)?;
        return Ok(());
    }
    for p in v["problems"].as_array().into_iter().flatten() {
        eprintln!("warning: {}", p.as_str().unwrap_or_default());
    }
    let s = |m: &Value, k: &str| m[k].as_str().unwrap_or("-").to_string();
    let mut t = Table::new(&[
        "ID", "DIR", "STATUS", "ANSWER", "COMMAND", "PROJECT", "USER", "QUEUED",
    ])
    .keep(0);
    let rows = v["messages"].as_array().cloned().unwrap_or_default();
    for m in &rows {
        let answer = if m["direction"] == json!(Direction::In.name()) {
            m["answer"].as_str().unwrap_or("none yet").to_string()
        } else {
            "-".into()
        };
        t.row(vec![
            s(m, "id"),
            s(m, "direction"),
            s(m, "status"),
            answer,
            s(m, "command"),
            s(m, "project"),
            s(m, "user"),
            s(m, "queue_time"),
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
