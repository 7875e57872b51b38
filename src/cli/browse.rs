//! Direct commands: login/set-*, list-*, view-*. They read the store directly.

use super::render::{Format, JsonArrayWriter, Table, write_fields, write_json};
use super::{CliError, CliResult, GlobalArgs, Session, open_store};
use crate::model::flow::priority_name;
use crate::model::{Job, JobStatus, Prd, PrdState, Project, Queue, Timestamp, User};
use crate::orchestrator::commands as cmd;
use crate::orchestrator::commands::job_listing::VisibleJobs;
use crate::permissions::{self, Caller};
use crate::store::listing::{JobFilter, JobIndex, Listed};
use crate::store::{JobLocation, Store, StoreError};
use serde_json::Value;
use std::collections::HashMap;
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

pub(super) fn list_jobs(
    g: &GlobalArgs,
    out: &mut dyn Write,
    status: Option<JobStatus>,
    project: Option<&str>,
) -> CliResult {
    buffered(out, |w| list_jobs_to(g, w, status, project))
}

/// Runs `write` on a 64 KiB buffer over `out`: standard output is line-buffered, and one
/// write per line would cost more than a listing.
fn buffered(out: &mut dyn Write, write: impl FnOnce(&mut dyn Write) -> CliResult) -> CliResult {
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, out);
    write(&mut w)?;
    w.flush()?;
    Ok(())
}

fn list_jobs_to(
    g: &GlobalArgs,
    out: &mut dyn Write,
    status: Option<JobStatus>,
    project: Option<&str>,
) -> CliResult {
    let store = open_store(g)?;
    let who = caller(&store)?;
    let filter = JobFilter {
        status,
        project: project.map(str::to_string),
        queue: g.queue.clone(),
    };
    // The index gives the order from each job's head (queue time, project, user); whole
    // documents are read one at a time while writing, so memory stays at one job. JSON:
    // whole documents, printed from a cache beside the index where it is current.
    let mut index = JobIndex::default();
    let json = g.format == Format::Json;
    let mut listing = VisibleJobs::open(&store, &who, &filter, &mut index, json)?;
    for (q, s, id) in listing.listing().unreadable() {
        // Read through the validator so the reason is reported and logged in errors.out.
        if let Err(e) = store.job(&JobLocation {
            queue: q.clone(),
            status: *s,
            id: id.clone(),
            path: store.job_path(q, *s, id),
        }) {
            warn(e);
        }
    }
    match g.format {
        Format::Json => {
            let mut w = JsonArrayWriter::start(out)?;
            while let Some(l) = listing.next() {
                match &l.doc {
                    // Cached whole, and only while its project and user were the index's (so
                    // the walk judged the document): printed as it is.
                    Some(doc) => w.raw_element(doc)?,
                    None => match listing.document(&l) {
                        Err(e) => warn(e),
                        Ok(None) => {}
                        Ok(Some(job)) => w.element(&job)?,
                    },
                }
            }
            w.finish()?;
        }
        Format::Text => {
            // Two passes over the same index files: widths first, then the lines.
            let mut t = StreamTable::new(&JOB_HEADERS, &[0, 1, 5], &JOB_DROPPABLE);
            for l in listing.by_ref() {
                t.measure_widths(&[
                    l.id.chars().count(),
                    l.status.name().len(),
                    priority_name(l.head.priority).len(),
                    l.queue.chars().count(),
                    l.head.project.chars().count(),
                    QUEUED_WIDTH,
                ]);
            }
            listing.rewind()?;
            t.header(out)?;
            for l in listing {
                t.line(out, &job_cells(&l))?;
            }
        }
    }
    Ok(())
}

/// `list-jobs --archived`: the archive folders through the same index as the live ones,
/// streamed (text from the index alone; JSON reads one document at a time).
pub(super) fn list_archived(
    g: &GlobalArgs,
    out: &mut dyn Write,
    project: Option<&str>,
) -> CliResult {
    buffered(out, |w| list_archived_to(g, w, project))
}

fn list_archived_to(g: &GlobalArgs, out: &mut dyn Write, project: Option<&str>) -> CliResult {
    let store = open_store(g)?;
    let who = caller(&store)?;
    let mut index = JobIndex::default();
    let json = matches!(g.format, Format::Json);
    let mut listing =
        VisibleJobs::archived(&store, &who, &mut index, g.queue.as_deref(), project, json)?;
    let path = |l: &Listed| {
        crate::store::archive::archive_root(&store, &l.queue)
            .join(l.month.as_deref().unwrap_or_default())
            .join(l.status.dir())
            .join(format!("{}.json", l.id))
    };
    // Files that are not readable jobs: read through the validator so the reason is told.
    for (dir, id) in listing.listing().unreadable_paths() {
        if let Err(e) =
            store.read_doc::<Job>(crate::model::DocKind::Job, &dir.join(format!("{id}.json")))
        {
            warn(e);
        }
    }
    match g.format {
        Format::Json => {
            let mut w = JsonArrayWriter::start(out)?;
            while let Some(l) = listing.next() {
                if let Some(doc) = &l.doc {
                    w.raw_element(doc)?;
                    continue;
                }
                match store.read_doc::<Job>(crate::model::DocKind::Job, &path(&l)) {
                    Err(StoreError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => warn(e),
                    Ok(job) => {
                        if listing.admits_document(&l, &job) {
                            w.element(&with_id(job, &l.id))?;
                        }
                    }
                }
            }
            w.finish()?;
        }
        Format::Text => {
            let mut t = StreamTable::new(&ARCHIVED_HEADERS, &[0, 1], &[2, 4]);
            for l in listing.by_ref() {
                t.measure(&archived_cells(&l));
            }
            listing.rewind()?;
            t.header(out)?;
            for l in listing {
                t.line(out, &archived_cells(&l))?;
            }
        }
    }
    Ok(())
}

const ARCHIVED_HEADERS: [&str; 6] = ["ID", "STATUS", "QUEUE", "PROJECT", "ARCHIVE", "ENDED"];

fn archived_cells(l: &Listed) -> [String; 6] {
    [
        l.id.clone(),
        l.status.name().to_string(),
        l.queue.clone(),
        l.head.project.clone(),
        l.month.clone().unwrap_or_default(),
        l.head
            .finish_time
            .map(|f| f.0.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_default(),
    ]
}

fn job_cells(l: &Listed) -> [String; 6] {
    [
        l.id.clone(),
        l.status.name().to_string(),
        priority_name(l.head.priority),
        l.queue.clone(),
        l.head.project.clone(),
        queued_cell(&l.head.queue_time),
    ]
}

/// Width of the QUEUED cell ("MM-DD HH:MM").
const QUEUED_WIDTH: usize = 11;

/// The QUEUED cell, `%m-%d %H:%M` without a format parser per row.
pub(super) fn queued_cell(t: &Timestamp) -> String {
    use chrono::{Datelike, Timelike};
    let t = t.0;
    format!(
        "{:02}-{:02} {:02}:{:02}",
        t.month(),
        t.day(),
        t.hour(),
        t.minute()
    )
}

const JOB_HEADERS: [&str; 6] = ["ID", "STATUS", "PRIORITY", "QUEUE", "PROJECT", "QUEUED"];
/// Left out first when a UUID, the status and the time leave no room (80 columns):
/// PRIORITY, then QUEUE (`--queue` and `view-job` still say them).
const JOB_DROPPABLE: [usize; 2] = [2, 3];

/// A table written row by row: widths are measured in a first pass over the rows (cheap
/// cells, not documents), then each line is written as it is made — the same layout as
/// [`super::render::Table`] without holding every row.
struct StreamTable {
    headers: Vec<String>,
    widths: Vec<usize>,
    keep: Vec<usize>,
    droppable: Vec<usize>,
    fitted: Option<Vec<usize>>,
}

impl StreamTable {
    /// `keep`: columns never cut; `droppable`: columns left out, in this order, when the
    /// terminal cannot hold every column at its narrowest.
    fn new(headers: &[&str], keep: &[usize], droppable: &[usize]) -> StreamTable {
        StreamTable {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            widths: headers.iter().map(|h| h.chars().count()).collect(),
            keep: keep.to_vec(),
            droppable: droppable.to_vec(),
            fitted: None,
        }
    }

    fn measure(&mut self, cells: &[String]) {
        for (w, c) in self.widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }

    /// [`measure`](Self::measure) from the cells' widths alone.
    fn measure_widths(&mut self, widths: &[usize]) {
        for (w, c) in self.widths.iter_mut().zip(widths) {
            *w = (*w).max(*c);
        }
    }

    fn fitted(&mut self) -> Vec<usize> {
        if let Some(f) = &self.fitted {
            return f.clone();
        }
        let mut widths = self.widths.clone();
        super::render::fit_widths(&mut widths, &self.keep, &self.droppable);
        self.fitted = Some(widths.clone());
        widths
    }

    fn header(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let h = self.headers.clone();
        self.line(out, &h)
    }

    fn line(&mut self, out: &mut dyn Write, cells: &[String]) -> std::io::Result<()> {
        if self.fitted.is_none() {
            self.fitted();
        }
        let widths = self.fitted.as_deref().unwrap_or(&[]);
        let mut s = String::with_capacity(96);
        for (i, w) in widths.iter().enumerate() {
            if *w == 0 {
                continue;
            }
            let cell = cells.get(i).map(String::as_str).unwrap_or("");
            let cut = super::render::fit(cell, *w);
            s.push_str(&cut);
            let pad = w.saturating_sub(cut.chars().count()) + 2;
            s.extend(std::iter::repeat_n(' ', pad));
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        out.write_all(s.as_bytes())
    }
}

/// One line of the text job listing.
pub(super) struct JobRow {
    pub(super) id: String,
    pub(super) status: JobStatus,
    pub(super) priority: Option<i32>,
    pub(super) queue: String,
    pub(super) project: String,
    pub(super) queue_time: Timestamp,
}

/// The text job listing: full ids (users copy them), 80 columns.
pub(super) fn jobs_table(out: &mut dyn Write, rows: &[JobRow]) -> CliResult {
    let mut t = Table::new(&JOB_HEADERS)
        .keep(0)
        .keep(1)
        .keep(5)
        .droppable(JOB_DROPPABLE[0])
        .droppable(JOB_DROPPABLE[1]);
    for r in rows {
        t.row(vec![
            r.id.clone(),
            r.status.name().to_string(),
            priority_name(r.priority),
            r.queue.clone(),
            r.project.clone(),
            queued_cell(&r.queue_time),
        ]);
    }
    t.write(out)?;
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

/// `list-jobs` through orchestratord (the store is not readable by the caller): pages of
/// `ListJobs`, each bounded, streamed out as they come (JSON), or as small rows for the
/// table (text).
pub(super) fn list_jobs_dbus(
    g: &GlobalArgs,
    out: &mut dyn Write,
    status: Option<JobStatus>,
    project: Option<&str>,
) -> CliResult {
    buffered(out, |w| list_jobs_dbus_to(g, w, status, project))
}

fn list_jobs_dbus_to(
    g: &GlobalArgs,
    out: &mut dyn Write,
    status: Option<JobStatus>,
    project: Option<&str>,
) -> CliResult {
    use crate::bus::orchestrator::Orchestrator1Proxy;
    let user = Session::load().ok().and_then(|s| s.username);
    let mut filter: HashMap<&str, &str> = HashMap::new();
    if let Some(s) = status {
        filter.insert("status", s.name());
    }
    if let Some(p) = project {
        filter.insert("project", p);
    }
    if let Some(q) = &g.queue {
        filter.insert("queue", q);
    }
    if let Some(u) = &user {
        filter.insert("user", u);
    }
    let bus = g.unreadable_store_bus();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(e.to_string()))?;
    let unreachable = |e: zbus::Error| match e {
        zbus::Error::MethodError(n, detail, _)
            if n.as_str().starts_with("org.agentstore.Error.") =>
        {
            CliError::new(detail.unwrap_or_else(|| n.to_string()))
        }
        other => CliError::new(format!(
            "the store is not readable by you and orchestratord is not reachable on the {bus} bus ({other}); ask an admin to add you to the agentstore group"
        )),
    };
    let proxy = rt.block_on(async {
        let conn = bus
            .builder()
            .method_timeout(Duration::from_secs(120))
            .build()
            .await?;
        Orchestrator1Proxy::new(&conn).await
    });
    let proxy = proxy.map_err(unreachable)?;
    if g.format == Format::Text {
        // A table needs only the index's rows, not the documents.
        filter.insert("fields", "summary");
    }
    let mut json = match g.format {
        Format::Json => Some(JsonArrayWriter::start(out)?),
        Format::Text => None,
    };
    // Text rows wait in an unlinked temp file while the widths are measured, so memory stays
    // at one page however many jobs there are.
    let mut spool = match g.format {
        Format::Text => Some(Spool::new()?),
        Format::Json => None,
    };
    let mut table = StreamTable::new(&JOB_HEADERS, &[0, 1, 5], &JOB_DROPPABLE);
    // Pages follow one another by `after` (the place of the last job listed), which stays
    // put while jobs are added or leave; by offset when the daemon is older than `after`.
    let (mut offset, mut after, mut by_offset) = (0u32, None::<String>, false);
    loop {
        let mut ask = filter.clone();
        if let (Some(a), false) = (&after, by_offset) {
            ask.insert("after", a.as_str());
        }
        let answer = rt.block_on(crate::bus::orchestrator::again_while_stopping(|| {
            proxy.list_jobs(ask.clone(), offset, crate::bus::listing::MAX_PAGE)
        }));
        let (page, total, next) = match answer {
            Err(zbus::Error::MethodError(n, Some(d), _))
                if after.is_some()
                    && !by_offset
                    && n.as_str() == "org.agentstore.Error.InvalidMessage"
                    && d.contains("unknown filter key \"after\"") =>
            {
                by_offset = true;
                continue;
            }
            other => other.map_err(unreachable)?,
        };
        let bad = |e: serde_json::Error| {
            CliError::new(format!("unexpected answer from orchestratord: {e}"))
        };
        let mut last = None;
        match (&mut json, &mut spool) {
            (Some(w), _) => {
                for j in serde_json::from_str::<Vec<Job>>(&page).map_err(bad)? {
                    w.element(&j)?;
                    last = j.config.queue.as_ref().zip(j.id.as_ref()).map(|(q, id)| {
                        crate::store::listing::Bound::token_of(&j.config.queue_time, q, id)
                    });
                }
            }
            (None, Some(sp)) => {
                for r in serde_json::from_str::<Vec<SummaryRow>>(&page).map_err(bad)? {
                    last = Some(crate::store::listing::Bound::token_of(
                        &r.queue_time,
                        &r.queue,
                        &r.id,
                    ));
                    let cells = [
                        r.id,
                        r.status,
                        priority_name(r.priority),
                        r.queue,
                        r.project,
                        queued_cell(&r.queue_time),
                    ];
                    table.measure(&cells);
                    sp.push(&cells)?;
                }
            }
            (None, None) => {}
        }
        if next >= total || next <= offset || last.is_none() {
            break;
        }
        offset = next;
        after = last;
    }
    match (json, spool) {
        (Some(w), _) => w.finish()?,
        (None, Some(sp)) => {
            table.header(out)?;
            sp.replay(|cells| table.line(out, cells))?;
        }
        (None, None) => {}
    }
    Ok(())
}

/// A `fields=summary` row of `ListJobs`.
#[derive(serde::Deserialize)]
struct SummaryRow {
    id: String,
    status: String,
    queue: String,
    project: String,
    queue_time: Timestamp,
    #[serde(default)]
    priority: Option<i32>,
}

/// Table rows kept in an anonymous memory file (tab-separated, one per line): no temporary
/// folder is needed to print (one not writable by the caller used to fail the listing);
/// only where `memfd_create` is missing, an unlinked file in the temporary folder.
struct Spool {
    file: std::io::BufWriter<std::fs::File>,
}

impl Spool {
    fn new() -> Result<Spool, CliError> {
        use nix::sys::memfd::{MFdFlags, memfd_create};
        if let Ok(fd) = memfd_create("agentstore-list-jobs", MFdFlags::MFD_CLOEXEC) {
            return Ok(Spool {
                file: std::io::BufWriter::new(std::fs::File::from(fd)),
            });
        }
        let dir = std::env::temp_dir();
        for n in 0..100u32 {
            let path = dir.join(format!(
                ".agentstore-list-jobs.{}.{n}.tmp",
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => {
                    let _ = std::fs::remove_file(&path);
                    return Ok(Spool {
                        file: std::io::BufWriter::new(f),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(CliError::new(format!(
                        "cannot create a temporary file in {}: {e}",
                        dir.display()
                    )));
                }
            }
        }
        Err(CliError::new(format!(
            "cannot create a temporary file in {}",
            dir.display()
        )))
    }

    fn push(&mut self, cells: &[String]) -> std::io::Result<()> {
        let mut line = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            // The table shows controls as spaces anyway.
            line.extend(c.chars().map(|c| if c.is_control() { ' ' } else { c }));
        }
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }

    fn replay(self, mut each: impl FnMut(&[String]) -> std::io::Result<()>) -> std::io::Result<()> {
        use std::io::{BufRead, Seek};
        let mut f = self.file.into_inner().map_err(|e| e.into_error())?;
        f.seek(std::io::SeekFrom::Start(0))?;
        for line in std::io::BufReader::new(f).lines() {
            let cells: Vec<String> = line?.split('\t').map(str::to_string).collect();
            each(&cells)?;
        }
        Ok(())
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
