//! Notifications from the command line (issue 31): `set-user` (a user's sinks, events and
//! quiet hours), `notify test --sink S` (one test notice through one sink, end to end, with
//! the machine's settings), and `notifications` (what was sent, what failed and why).

use super::render::{Table, write_json};
use super::{CliError, CliResult, Format, GlobalArgs, open_store};
use crate::model::{NotifyPrefs, QuietHours};
use crate::notify::ledger::{Entry, Ledger, Step};
use crate::notify::{Delivery, SinkError};
use crate::store::notices::{Notice, NoticeKind};
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::io::Write;

/// `set-user` options: change an existing user's settings.
#[derive(Debug, Args)]
pub struct SetUserArgs {
    /// The user (default: the logged-in user).
    pub id: Option<String>,
    /// Sinks, comma-separated: desktop, slack, telegram, email, webhook:NAME; `default`
    /// for the machine's defaults, `none` for none.
    #[arg(long, value_name = "SINKS")]
    pub notify: Option<String>,
    /// Events, comma-separated (job_finished, job_failed, approval_waiting,
    /// approval_answered, machine_lost, tasks_created, graph_done, graph_blocked,
    /// retry_exhausted);
    /// `default` for the machine's defaults.
    #[arg(long, value_name = "EVENTS")]
    pub notify_events: Option<String>,
    /// Quiet hours `HH:MM-HH:MM` (e.g. 22:00-07:00), optionally with a UTC offset
    /// (`22:00-07:00+02:00`); `off` to remove them.
    #[arg(long, value_name = "HH:MM-HH:MM[±HH:MM]")]
    pub quiet_hours: Option<String>,
    /// The Telegram chat the bot writes to; `off` to remove it.
    #[arg(long, value_name = "CHAT_ID")]
    pub telegram_chat_id: Option<String>,
    /// Slack member id (U…) notices go to as direct messages.
    #[arg(long, value_name = "MEMBER_ID")]
    pub slack_username: Option<String>,
}

/// `notify` actions.
#[derive(Debug, Subcommand)]
pub enum NotifyAction {
    /// Send a test notice through one sink now, with this machine's settings; prints what the
    /// sink answered (exit status 1 when it was not delivered).
    Test {
        /// The sink: desktop, slack, telegram, email or webhook:NAME.
        #[arg(long)]
        sink: String,
        /// The user it is for (default: the logged-in user).
        #[arg(long)]
        user: Option<String>,
    },
}

/// `notifications` options.
#[derive(Debug, Args)]
pub struct NotificationsArgs {
    /// Only deliveries that failed (given up, or failing now).
    #[arg(long)]
    pub failed: bool,
    /// At most this many, newest last.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Checks a sink name a user may choose.
fn check_sink(s: &str) -> Result<(), CliError> {
    let ok = matches!(s, "desktop" | "slack" | "telegram" | "email")
        || s.strip_prefix("webhook:").is_some_and(|n| {
            !n.is_empty()
                && n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "--notify: unknown sink {s:?} (desktop, slack, telegram, email, webhook:NAME)"
        )))
    }
}

/// Parses `HH:MM-HH:MM[±HH:MM]`.
fn parse_quiet(s: &str) -> Result<QuietHours, CliError> {
    let bad = || {
        CliError::new(format!(
            "--quiet-hours {s:?}: expected HH:MM-HH:MM, optionally followed by a UTC offset like +02:00"
        ))
    };
    if s.len() != 11 && s.len() != 17 {
        return Err(bad());
    }
    let q = QuietHours {
        start: s.get(0..5).ok_or_else(bad)?.to_string(),
        end: s.get(6..11).ok_or_else(bad)?.to_string(),
        utc_offset: s.get(11..).filter(|o| !o.is_empty()).map(str::to_string),
    };
    if s.get(5..6) != Some("-") {
        return Err(bad());
    }
    q.check()
        .map_err(|e| CliError::new(format!("--quiet-hours: {e}")))?;
    Ok(q)
}

fn target_user(
    store: &crate::store::Store,
    id: Option<String>,
) -> Result<(crate::permissions::Caller, String), CliError> {
    let who = super::browse::caller(store)?;
    let id = match id.or_else(|| who.user_id().map(str::to_string)) {
        Some(i) => i,
        None => {
            return Err(CliError::new(
                "name the user (nobody is logged in: `orchestrator login <user>`)",
            ));
        }
    };
    if !who.can_manage_notices_of(&id) {
        return Err(CliError::new(format!(
            "permission denied: only an admin or {id} may change or see {id}'s notifications"
        )));
    }
    Ok((who, id))
}

pub(super) fn set_user(g: &GlobalArgs, out: &mut dyn Write, a: SetUserArgs) -> CliResult {
    let store = open_store(g)?;
    let (_, id) = target_user(&store, a.id)?;
    let mut user = store.user(&id)?;
    let mut prefs = user.notify.clone().map(|b| *b).unwrap_or_default();
    if let Some(s) = &a.notify {
        prefs.sinks = match s.as_str() {
            "default" => None,
            "none" => Some(Vec::new()),
            _ => {
                let list = split_list(s);
                for x in &list {
                    check_sink(x)?;
                }
                Some(list)
            }
        };
    }
    if let Some(e) = &a.notify_events {
        prefs.events = if e == "default" {
            None
        } else {
            let list = split_list(e);
            for x in &list {
                if NoticeKind::parse(x).is_none() {
                    let all: Vec<&str> = NoticeKind::ALL.iter().map(|k| k.name()).collect();
                    return Err(CliError::new(format!(
                        "--notify-events: unknown event {x:?} (one of {})",
                        all.join(", ")
                    )));
                }
            }
            Some(list)
        };
    }
    if let Some(q) = &a.quiet_hours {
        prefs.quiet_hours = if q == "off" {
            None
        } else {
            Some(parse_quiet(q)?)
        };
    }
    if let Some(t) = &a.telegram_chat_id {
        prefs.telegram_chat_id = (t != "off").then(|| t.clone());
    }
    if let Some(s) = a.slack_username {
        user.slack_username = Some(s);
    }
    user.notify = (prefs != NotifyPrefs::default()).then(|| Box::new(prefs));
    let path = store.user_path(&id);
    store.write_doc(crate::model::DocKind::User, &path, &user)?;
    match g.format {
        Format::Json => write_json(out, &user)?,
        Format::Text => writeln!(out, "User {id} updated: {}", path.display())?,
    }
    Ok(())
}

pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, action: NotifyAction) -> CliResult {
    match action {
        NotifyAction::Test { sink, user } => test(g, out, &sink, user),
    }
}

fn test(g: &GlobalArgs, out: &mut dyn Write, sink: &str, user: Option<String>) -> CliResult {
    let store = open_store(g)?;
    let (_, id) = target_user(&store, user)?;
    let user = store.user(&id)?;
    let (cfg, source) = crate::notify::daemon::machine_config().map_err(CliError::new)?;
    let sinks = crate::notify::sinks::from_config(&cfg);
    let Some(s) = sinks.get(sink) else {
        let known: Vec<&str> = sinks.keys().map(String::as_str).collect();
        return Err(CliError::new(format!(
            "sink {sink:?} is not configured on this machine ({source}; configured: {})",
            known.join(", ")
        )));
    };
    let subject = format!("{}", chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0));
    let notice = Notice::new(
        NoticeKind::Test,
        &subject,
        Some(&id),
        "agentstore test notice",
    )
    .body(&format!(
        "Sent by `orchestrator notify test --sink {sink}` for {id}."
    ));
    let d = Delivery {
        key: Delivery::key_for(&notice.id, Some(&id), sink),
        notice,
        user: Some(user),
        sink: sink.to_string(),
        uncertain: false,
        thread: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start runtime: {e}")))?;
    let result = rt.block_on(s.deliver(&d));
    let mut ledger = Ledger::load(&store);
    let (step, error) = match &result {
        Ok(()) => (Step::Sent, None),
        Err(SinkError::Permanent(e)) | Err(SinkError::Transient(e)) => {
            (Step::Dead, Some(e.clone()))
        }
    };
    let entry = Entry {
        at: crate::model::Timestamp(chrono::Utc::now()),
        key: d.key.clone(),
        step,
        kind: NoticeKind::Test.name().into(),
        title: d.notice.title.clone(),
        error: error.clone(),
        host: String::new(),
    };
    if let Err(e) = ledger.record(entry) {
        super::render::warning(&format!("the notify ledger was not written: {e}"));
    }
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({"sink": sink, "user": id, "delivered": error.is_none(), "error": error}),
        )?,
        Format::Text => {
            if error.is_none() {
                writeln!(out, "Delivered a test notice to {id} through {sink}.")?;
            }
        }
    }
    match error {
        None => Ok(()),
        Some(e) => Err(CliError::new(format!("{sink}: not delivered: {e}"))),
    }
}

/// One delivery as `notifications` shows it.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    at: crate::model::Timestamp,
    notice: String,
    user: String,
    sink: String,
    kind: String,
    title: String,
    state: &'static str,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    host: String,
}

pub(super) fn list(g: &GlobalArgs, out: &mut dyn Write, a: &NotificationsArgs) -> CliResult {
    let store = open_store(g)?;
    let who = super::browse::caller(&store)?;
    let entries = Ledger::entries(&store).map_err(|e| CliError::new(e.to_string()))?;
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for e in entries {
        let mut parts = e.key.splitn(3, '/');
        let (Some(notice), Some(user), Some(sink)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !who.can_manage_notices_of(user) {
            continue;
        }
        let r = rows.entry(e.key.clone()).or_insert_with(|| {
            order.push(e.key.clone());
            Row {
                at: e.at,
                notice: notice.into(),
                user: user.into(),
                sink: sink.into(),
                kind: e.kind.clone(),
                title: e.title.clone(),
                state: "sending",
                attempts: 0,
                error: None,
                host: e.host.clone(),
            }
        });
        if r.state == "sent" || r.state == "undeliverable" {
            continue;
        }
        r.at = e.at;
        r.host = e.host.clone();
        match e.step {
            Step::Begin => {
                r.attempts += 1;
                // An attempt after a failure is a retry in flight: still failing, as far as
                // anyone knows, with its last error (`--failed` keeps listing it).
                r.state = if r.error.is_some() {
                    "retrying"
                } else {
                    "sending"
                };
            }
            Step::Sent => r.state = "sent",
            Step::Failed => {
                r.state = "retrying";
                r.error = e.error;
            }
            Step::Dead => {
                r.state = "undeliverable";
                r.error = e.error;
            }
        }
    }
    let mut shown: Vec<Row> = order
        .into_iter()
        .filter_map(|k| rows.remove(&k))
        .filter(|r| !a.failed || matches!(r.state, "retrying" | "undeliverable"))
        .collect();
    shown.sort_by_key(|x| x.at);
    let skip = shown.len().saturating_sub(a.limit);
    let shown = &shown[skip..];
    match g.format {
        Format::Json => write_json(out, &serde_json::json!({ "notifications": shown }))?,
        Format::Text => {
            let mut t = Table::new(&["WHEN", "USER", "SINK", "EVENT", "STATE", "TRIES", "DETAIL"]);
            for r in shown {
                t.row(vec![
                    r.at.to_string(),
                    r.user.clone(),
                    r.sink.clone(),
                    r.kind.clone(),
                    r.state.to_string(),
                    r.attempts.to_string(),
                    r.error.clone().unwrap_or_else(|| r.title.clone()),
                ]);
            }
            if t.is_empty() {
                writeln!(out, "No notifications recorded.")?;
            } else {
                t.write(out)?;
            }
        }
    }
    Ok(())
}
