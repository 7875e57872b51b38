//! Direct commands: login/set-*, list-*, view-*. They read the store directly; the job
//! listings are in [`jobs`], the streamed text tables they print in [`table`].

mod jobs;
mod table;

pub(super) use jobs::{list_archived, list_jobs, list_jobs_dbus};
pub(super) use table::{JobRow, jobs_table, queued_cell};

use super::render::{Format, Table, write_fields, write_json};
use super::{CliError, CliResult, GlobalArgs, Session, open_store};
use crate::model::{Job, JobStatus, Prd, PrdState, Project, Queue, User};
use crate::orchestrator::commands as cmd;
use crate::permissions::{self, Caller};
use crate::store::{Store, StoreError};
use serde_json::Value;
use std::io::Write;
use std::time::{Duration, Instant};

/// Reports a document that could not be read, without stopping the listing.
fn warn(e: StoreError) {
    super::render::warning(&e.to_string());
}

/// The caller for permission checks: the logged-in user, or trusted when nobody is.
pub(super) fn caller(store: &Store) -> Result<Caller, CliError> {
    let session = Session::load().map_err(CliError::new)?;
    match session.username {
        None => Ok(Caller::Trusted),
        Some(u) => match store.user(&u) {
            Ok(user) => Ok(Caller::User(user)),
            Err(StoreError::NotFound { .. }) => Err(CliError::new(format!(
                "logged in as {u:?}, but users/{u}.json does not exist in {}; run `orchestrator login <user>`",
                store.root().display()
            ))),
            Err(e) => Err(e.into()),
        },
    }
}

pub(super) fn login(g: &GlobalArgs, out: &mut dyn Write, username: &str) -> CliResult {
    // A store this user may not read (the packaged system store): orchestratord checks the
    // name, with the same PRD §10 rules as any view-user over the bus.
    let id = if super::remote::store_unreadable(g) {
        let mut c = serde_json::Map::new();
        c.insert("user".into(), Value::String(username.to_string()));
        let v = super::remote::ask(g, crate::model::Command::ViewUser, c)?;
        v.get("id")
            .and_then(Value::as_str)
            .unwrap_or(username)
            .to_string()
    } else {
        open_store(g)?.user(username)?.id
    };
    let mut s = Session::load().unwrap_or_default();
    if s.username.as_deref() != Some(&id) {
        s = Session {
            username: Some(id.clone()),
            project: None,
            prd: None,
        };
    }
    let path = s.save().map_err(CliError::new)?;
    match g.format {
        Format::Json => write_json(out, &s)?,
        Format::Text => writeln!(out, "Logged in as {id} ({})", path.display())?,
    }
    Ok(())
}

pub(super) fn set_project(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let project = permissions::visible_project(&store, &caller(&store)?, id)?;
    let mut s = Session::load().map_err(CliError::new)?;
    s.project = Some(project.id.clone());
    s.prd = None;
    s.save().map_err(CliError::new)?;
    match g.format {
        Format::Json => write_json(out, &s)?,
        Format::Text => writeln!(out, "Current project: {}", project.id)?,
    }
    Ok(())
}

pub(super) fn set_prd(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let (_, _, prd) = store.find_prd(id)?;
    let mut s = Session::load().map_err(CliError::new)?;
    s.project = Some(prd.project.clone());
    s.prd = Some(prd.id.clone());
    s.save().map_err(CliError::new)?;
    match g.format {
        Format::Json => write_json(out, &s)?,
        Format::Text => writeln!(
            out,
            "Current PRD: {} ({}, project {})",
            prd.id, prd.title, prd.project
        )?,
    }
    Ok(())
}

pub(super) fn list_users(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let users = cmd::users::list(&store, &caller(&store)?, &mut warn)?;
    render_users(g, out, &users)
}

/// Prints users as a table or JSON.
pub(super) fn render_users(g: &GlobalArgs, out: &mut dyn Write, users: &[User]) -> CliResult {
    match g.format {
        Format::Json => write_json(out, &users)?,
        Format::Text => {
            let mut t = Table::new(&["ID", "PERMISSIONS", "NAME", "EMAIL"]);
            for u in users {
                t.row(vec![
                    u.id.clone(),
                    format!("{:?}", u.permissions).to_lowercase(),
                    u.name.clone(),
                    u.email.clone(),
                ]);
            }
            t.write(out)?;
        }
    }
    Ok(())
}

pub(super) fn list_projects(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let projects = cmd::projects::list(&store, &caller(&store)?, &mut warn)?;
    render_projects(g, out, &projects)
}

/// Prints projects as a table or JSON.
pub(super) fn render_projects(
    g: &GlobalArgs,
    out: &mut dyn Write,
    projects: &[Project],
) -> CliResult {
    match g.format {
        Format::Json => write_json(out, &projects)?,
        Format::Text => {
            let mut t = Table::new(&["ID", "OWNER", "QUEUE", "UPDATED", "DIRECTORY"]);
            for p in projects {
                t.row(vec![
                    p.id.clone(),
                    p.owner.clone(),
                    p.default_queue.clone(),
                    p.update_time.to_string(),
                    p.directory.clone(),
                ]);
            }
            t.write(out)?;
        }
    }
    Ok(())
}

pub(super) fn list_prds(g: &GlobalArgs, out: &mut dyn Write, project: Option<&str>) -> CliResult {
    let store = open_store(g)?;
    let prds = cmd::prds::list(&store, &caller(&store)?, project, &mut warn)?;
    render_prds(g, out, &prds)
}

/// Prints PRDs (with the state folder each is in) as a table or JSON.
pub(super) fn render_prds(
    g: &GlobalArgs,
    out: &mut dyn Write,
    prds: &[(PrdState, Prd)],
) -> CliResult {
    match g.format {
        Format::Json => write_json(out, &prds.iter().map(|(_, p)| p).collect::<Vec<_>>())?,
        Format::Text => {
            let mut t = Table::new(&["ID", "PROJECT", "STATUS", "JOBS", "TITLE"]);
            for (state, p) in prds {
                t.row(vec![
                    p.id.clone(),
                    p.project.clone(),
                    state.name().to_string(),
                    p.jobs.len().to_string(),
                    p.title.clone(),
                ]);
            }
            t.write(out)?;
        }
    }
    Ok(())
}

pub(super) fn list_queues(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let mut queues = cmd::queues::list(&store, &mut warn)?;
    let live = overlay_live(g, &mut queues);
    let mut unserved = Vec::new();
    for q in &mut queues {
        if live.contains(&q.config.id) {
            continue;
        }
        // No manager up: its own count is stale; the folder says what waits.
        q.runtime.queued_jobs = store.queued_count(&q.config.id);
        if let Some(why) = super::machines::unserved(g, &store, &q.config.id) {
            unserved.push(why);
        }
    }
    render_queues(g, out, &queues)?;
    if g.format == Format::Text {
        let width = super::render::terminal_width();
        for why in unserved {
            for l in super::render::wrap_message(&why, width) {
                writeln!(out, "{l}")?;
            }
        }
    }
    Ok(())
}

/// Replaces each queue's runtime from the file with its manager's live D-Bus state, where
/// the manager is up; returns the queues whose manager answered.
pub(super) fn overlay_live(
    g: &GlobalArgs,
    queues: &mut [Queue],
) -> std::collections::HashSet<String> {
    let ids: Vec<String> = queues.iter().map(|q| q.config.id.clone()).collect();
    let live = super::jobs::live_states(g.client_buses().first(), &ids);
    for q in queues {
        if let Some(s) = live.get(&q.config.id) {
            with_live(q, s);
        }
    }
    live.into_keys().collect()
}

/// Prints queues as a table or JSON.
pub(super) fn render_queues(g: &GlobalArgs, out: &mut dyn Write, queues: &[Queue]) -> CliResult {
    match g.format {
        Format::Json => write_json(out, &queues)?,
        Format::Text => {
            let mut t = Table::new(&["QUEUE", "WORKERS", "ACTIVE", "QUEUED", "PID", "LAST UPDATE"]);
            for q in queues {
                t.row(vec![
                    q.config.id.clone(),
                    q.config.worker_count.to_string(),
                    q.runtime.active_jobs.to_string(),
                    q.runtime.queued_jobs.to_string(),
                    q.runtime
                        .process_id
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "-".into()),
                    q.runtime
                        .last_update
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                ]);
            }
            t.write(out)?;
            // What keeps a queue from starting jobs, under the table (a sentence each).
            for q in queues {
                if q.runtime.paused == Some(true) {
                    writeln!(
                        out,
                        "{}: paused (its manager's Resume over D-Bus starts jobs again)",
                        q.config.id
                    )?;
                }
                if let Some(why) = &q.runtime.slurm_status {
                    writeln!(out, "{}: Slurm: {why}", q.config.id)?;
                }
            }
        }
    }
    Ok(())
}

/// A job as listed: the document, with its id (the file stem) filled in.
fn with_id(mut job: Job, id: &str) -> Job {
    if job.id.is_none() {
        job.id = Some(id.to_string());
    }
    job
}

/// Prints one document as `key  value` lines or JSON.
pub(super) fn show(g: &GlobalArgs, out: &mut dyn Write, doc: &impl serde::Serialize) -> CliResult {
    match g.format {
        Format::Json => write_json(out, doc)?,
        Format::Text => {
            let v: Value = serde_json::to_value(doc).map_err(|e| CliError::new(e.to_string()))?;
            write_fields(out, &v)?;
        }
    }
    Ok(())
}

/// Prints one job: as a person reads it, or as JSON.
pub(super) fn show_job(g: &GlobalArgs, out: &mut dyn Write, id: &str, job: Job) -> CliResult {
    match g.format {
        Format::Json => write_json(out, &with_id(job, id))?,
        Format::Text => {
            // The machine's host name for people (`runtime.host` is its key, m-…), when its
            // heartbeats can be read.
            let hostname = job.runtime.host.as_deref().and_then(|h| {
                open_store(g)
                    .ok()?
                    .machines()
                    .get(h)?
                    .hostname
                    .clone()
                    .filter(|n| n != h)
            });
            super::job_view::write_job_here(out, id, &job, hostname.as_deref())?
        }
    }
    Ok(())
}

pub(super) fn view_user(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    show(g, out, &cmd::users::view(&store, &caller(&store)?, id)?)
}

pub(super) fn view_project(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    show(g, out, &cmd::projects::view(&store, &caller(&store)?, id)?)
}

pub(super) fn view_prd(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let prd = cmd::prds::view(&store, &caller(&store)?, id)?;
    show(g, out, &prd)?;
    if g.format == Format::Text {
        super::flow::show_chain(&store, out, &prd)?;
    }
    Ok(())
}

pub(super) fn view_queue(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let mut queue = cmd::queues::view(&store, id)?;
    if let Some(s) = super::jobs::live_states(g.client_buses().first(), &[id.to_string()]).get(id) {
        with_live(&mut queue, s);
    }
    if g.format == Format::Json {
        return show(g, out, &queue);
    }
    // Text: the approval rules read as rules, not a cut JSON array (issue 32).
    let policy = queue.config.approvals.take();
    show(g, out, &queue)?;
    if let Some(p) = policy {
        for line in approvals_text(&p, super::render::terminal_width()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// A queue's approval policy as `view-queue` prints it: each rule on a line (first match
/// wins), then what happens otherwise and when nobody answers; wrapped to the terminal.
pub(super) fn approvals_text(
    p: &crate::model::approval::ApprovalPolicy,
    width: usize,
) -> Vec<String> {
    use crate::model::approval::Decision;
    let word = |d: Decision| match d {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
        Decision::Ask => "ask a person",
    };
    let mut lines = vec!["Approvals (the first rule that matches decides)".to_string()];
    for (i, r) in p.rules.iter().enumerate() {
        let what = match &r.pattern {
            Some(pat) => format!("{} {pat}", r.tool),
            None => format!("{} (any)", r.tool),
        };
        let text = format!("{}. {what} → {}", i + 1, word(r.decision));
        lines.extend(super::render::wrap_indented(&text, width, "  ", "     "));
    }
    let rest = format!(
        "otherwise {}; a request nobody answers in {} s is denied",
        word(p.default),
        p.deadline()
    );
    lines.extend(super::render::wrap_indented(&rest, width, "  ", "  "));
    lines
}

/// Overlays the manager's live D-Bus state on the (possibly stale) runtime from the file.
fn with_live(q: &mut crate::model::Queue, s: &crate::bus::queue::QueueState) {
    q.runtime.active_jobs = s.active_jobs;
    q.runtime.queued_jobs = s.queued_jobs;
    q.runtime.paused = Some(s.paused);
    if let Ok(t) = s.last_update.parse() {
        q.runtime.last_update = Some(t);
    }
}

pub(super) fn view_job(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let who = caller(&store)?;
    let deadline = g.follow.map(|s| Instant::now() + Duration::from_secs(s));
    loop {
        // The file moves between state folders; a read can race a rename, so look again.
        let (loc, job) = match cmd::jobs::view(&store, &who, id) {
            Ok(found) => found,
            Err(permissions::Refused::Store(StoreError::Io { source, .. }))
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            // Asked for, not made yet: say where the request waits; --follow waits for it.
            Err(e @ permissions::Refused::Store(StoreError::NotFound { .. })) => {
                let Some(why) = super::pending_job::waiting_request(&store, &who, id) else {
                    return Err(e.into());
                };
                match deadline {
                    Some(d) if Instant::now() < d => {
                        if g.verbose {
                            eprintln!("job {id}: requested, not made yet");
                        }
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    _ => return Err(CliError::new(why)),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let done = matches!(job.runtime.status, JobStatus::Finished | JobStatus::Failed);
        match deadline {
            Some(d) if !done => {
                if Instant::now() >= d {
                    show_job(g, out, id, job)?;
                    return Err(CliError::new(format!(
                        "job {id} is still {} after {} s",
                        loc.status.name(),
                        g.follow.unwrap_or(0)
                    )));
                }
                if g.verbose {
                    eprintln!("job {id}: {}", loc.status.name());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            _ => return show_job(g, out, id, job),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::approval::{ApprovalPolicy, ApprovalRule, Decision};

    /// Issue 32: `view-queue` shows the approval rules whole, one a line, at 80 and 160
    /// columns (it cut them to `[{"tool"… (110 chars; …)`).
    #[test]
    fn approval_rules_read_whole_at_80_and_160_columns() {
        let p = ApprovalPolicy {
            rules: vec![
                ApprovalRule {
                    tool: "Bash".into(),
                    pattern: Some("git push*".into()),
                    decision: Decision::Deny,
                },
                ApprovalRule {
                    tool: "Write".into(),
                    pattern: Some(format!("/home/rosa/{}/*", "deep/".repeat(20))),
                    decision: Decision::Allow,
                },
                ApprovalRule {
                    tool: "*".into(),
                    pattern: None,
                    decision: Decision::Ask,
                },
            ],
            default: Decision::Ask,
            deadline_seconds: 300,
        };
        for width in [80, 160] {
            let lines = super::approvals_text(&p, width);
            let text = lines.join("\n");
            for l in &lines {
                assert!(l.chars().count() <= width, "{width}: {l:?}\n{text}");
            }
            assert!(!text.contains('…'), "nothing cut: {text}");
            assert!(lines[1].starts_with("  1. Bash git push* → deny"), "{text}");
            assert!(text.contains("3. * (any) → ask a person"), "{text}");
            let flat = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            assert!(flat.contains("/home/rosa/deep/"), "{text}");
            assert!(
                flat.contains(
                    "otherwise ask a person; a request nobody answers in 300 s is denied"
                ),
                "{text}"
            );
        }
    }
}
