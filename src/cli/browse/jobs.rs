//! `list-jobs` (live and `--archived`): from the store through the one listing
//! (`orchestrator::commands::job_listing`), or page by page over D-Bus when the store is not
//! readable by the caller.

use super::table::{
    ARCHIVED_HEADERS, JOB_DROPPABLE, JOB_HEADERS, QUEUED_WIDTH, Spool, StreamTable, archived_cells,
    job_cells, queued_cell,
};
use super::{caller, warn, with_id};
use crate::cli::render::{Format, JsonArrayWriter};
use crate::cli::{CliError, CliResult, GlobalArgs, Session, open_store};
use crate::model::flow::priority_name;
use crate::model::{Job, JobStatus, Timestamp};
use crate::orchestrator::commands::job_listing::VisibleJobs;
use crate::store::listing::{JobFilter, JobIndex, Listed};
use crate::store::{JobLocation, StoreError};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

pub(in crate::cli) fn list_jobs(
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
pub(in crate::cli) fn list_archived(
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

/// `list-jobs` through orchestratord (the store is not readable by the caller): pages of
/// `ListJobs`, each bounded, streamed out as they come (JSON), or as small rows for the
/// table (text).
pub(in crate::cli) fn list_jobs_dbus(
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
