//! `ListJobs`: paged, filtered job listings whose every answer fits one D-Bus message.

use super::BusError;
use super::caller::caller_for_uid;
use super::orchestrator::Shared;
use crate::orchestrator::commands::job_listing::{VisibleJobs, job_filter};
use crate::store::listing::{Cursor, JobFilter};
use std::collections::HashMap;
use std::time::Instant;

/// Jobs in a page when the caller asks for 0.
pub const DEFAULT_PAGE: u32 = 500;
/// The most jobs in one page.
pub const MAX_PAGE: u32 = 5000;
/// About this many bytes of JSON in one page (a page holds at least one job).
pub const PAGE_BYTES: usize = 4 << 20;
/// The largest answer any method sends: well under the 32 MiB the system bus allows.
pub const MAX_REPLY_BYTES: usize = 16 << 20;

/// What a `ListJobs` call asked for, beyond the filter.
struct Ask {
    filter: JobFilter,
    user: Option<String>,
    /// `fields=summary`: rows of id, status, queue, project, queue_time, user, priority from the index,
    /// without reading any document (what a table needs).
    summary: bool,
}

fn filter_from(args: &HashMap<String, String>) -> Result<Ask, BusError> {
    let (mut status, mut project, mut queue) = (None, None, None);
    let mut user = None;
    let mut summary = false;
    for (k, v) in args {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        match k.as_str() {
            "status" => status = Some(v),
            "project" => project = Some(v),
            "queue" => queue = Some(v),
            "user" => user = Some(v.to_string()),
            "fields" => {
                summary = match v {
                    "summary" => true,
                    "all" => false,
                    other => {
                        return Err(BusError::InvalidMessage(format!(
                            "ListJobs: fields {other:?} is not one of all, summary"
                        )));
                    }
                }
            }
            other => {
                return Err(BusError::InvalidMessage(format!(
                    "ListJobs: unknown filter key {other:?} (known: status, project, queue, user, fields)"
                )));
            }
        }
    }
    Ok(Ask {
        filter: job_filter(status, project, queue, "ListJobs: filter status")
            .map_err(BusError::InvalidMessage)?,
        user,
        summary,
    })
}

/// One row of a `fields=summary` page.
#[derive(serde::Serialize)]
struct Summary<'a> {
    id: &'a str,
    status: &'a str,
    queue: &'a str,
    project: &'a str,
    queue_time: &'a crate::model::Timestamp,
    user: Option<&'a str>,
    priority: Option<i32>,
}

/// One page of `ListJobs` for the caller with Unix uid `uid`. Sequential pages continue one
/// open listing (a cursor over the index files); any other offset opens a new one and skips
/// to it. Memory stays at one page whatever the store holds.
pub fn list_jobs_page(
    shared: &Shared,
    uid: u32,
    args: &HashMap<String, String>,
    offset: u32,
    limit: u32,
) -> Result<(String, u32, u32), BusError> {
    let store = &shared.store;
    let ask = filter_from(args)?;
    let filter = &ask.filter;
    let who = caller_for_uid(store, uid, shared.own_uid, ask.user.as_deref())?;
    crate::permissions::check_job_filter(store, &who, filter)?;
    let limit = match limit {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    } as usize;
    let mut index = shared.job_index.lock();
    let key = format!(
        "{uid}\n{:?}\n{filter:?}\n{}",
        ask.user.as_deref(),
        ask.summary
    );
    let offset = offset as usize;
    let (mut jobs, key, mut next, total) = match index.take_cursor(&key, offset) {
        Some(c) => (
            VisibleJobs::over(c.listing, store, &who),
            c.key,
            c.next,
            c.total,
        ),
        None => {
            let mut jobs = VisibleJobs::over(index.listing(store, filter), store, &who);
            // The total: counted once, then kept while the folders and the caller's rights
            // are unchanged (a first page of 100,000 jobs then costs one page, not a count).
            let kept = index.cached_total(&key, jobs.listing()).cloned();
            let total = match kept {
                Some(k) if jobs.visibility().same_rights(&k.rights) => k.total,
                _ => {
                    let total = jobs.by_ref().count();
                    jobs.rewind()
                        .map_err(|e| BusError::Failed(format!("job index: {e}")))?;
                    let rights = jobs.visibility().rights();
                    index.keep_total(&key, jobs.listing(), rights, total);
                    total
                }
            };
            if !ask.summary {
                // Whole documents come from the documents cache beside the index (one fstatat
                // per job while its file is unchanged), not from reading and checking every
                // file again: the same folders, opened once more after the count.
                jobs.replace_listing(index.listing_with_documents(store, filter));
            }
            let next = jobs.skip_visible(offset);
            // Bringing a changed folder's index up to date freed a few megabytes: give them
            // back now rather than keep them while the caller pages.
            crate::store::listing::release_memory();
            (jobs, key, next, total)
        }
    };
    let mut page = Vec::with_capacity(64 * 1024);
    page.push(b'[');
    let mut count = 0;
    while let Some(l) = jobs.next() {
        if count >= limit {
            jobs.put_back(l);
            break;
        }
        let bytes = if ask.summary {
            serde_json::to_vec(&Summary {
                id: &l.id,
                status: l.status.name(),
                queue: &l.queue,
                project: &l.head.project,
                queue_time: &l.head.queue_time,
                user: l.head.user.as_deref(),
                priority: l.head.priority,
            })
            .map_err(|e| BusError::Failed(e.to_string()))?
        } else {
            let Some(mut job) = jobs.document(&l).ok().flatten() else {
                // Deleted since it was indexed, invalid (reported in errors.out), or not the
                // caller's to see after all: left out of this page.
                next += 1;
                continue;
            };
            job.runtime.output = None;
            job.config.queue.get_or_insert_with(|| l.queue.to_string());
            serde_json::to_vec(&job).map_err(|e| BusError::Failed(e.to_string()))?
        };
        if count > 0 && page.len() + bytes.len() + 2 > PAGE_BYTES {
            jobs.put_back(l);
            break;
        }
        if bytes.len() + 2 > MAX_REPLY_BYTES {
            // One job too big for any answer (a huge supporting_data): listed without it.
            tracing::warn!(job_id = %l.id, "job document too large for a listing page");
            next += 1;
            continue;
        }
        if count > 0 {
            page.push(b',');
        }
        page.extend_from_slice(&bytes);
        count += 1;
        next += 1;
    }
    page.push(b']');
    let next = next.min(total);
    let listing = jobs.into_listing();
    if next < total {
        index.keep_cursor(Cursor {
            key,
            listing,
            next,
            total,
            at: Instant::now(),
        });
    } else {
        index.drop_cursor();
        drop(listing);
        crate::store::listing::release_memory();
    }
    let text = String::from_utf8(page).map_err(|e| BusError::Failed(e.to_string()))?;
    let as_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok((text, as_u32(total), as_u32(next)))
}
