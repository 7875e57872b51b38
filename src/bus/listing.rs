//! `ListJobs`: paged, filtered job listings whose every answer fits one D-Bus message.

use super::BusError;
use super::caller::caller_for_uid;
use super::orchestrator::Shared;
use crate::orchestrator::commands::job_listing::{VisibleJobs, job_filter};
use crate::store::listing::{Bound, Cursor, JobFilter, MARK_EVERY};
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
    /// `after`: the page starts just past this place (a cursor that stays put while jobs
    /// are added or leave before it).
    after: Option<Bound>,
    /// `fields=summary`: rows of id, status, queue, project, queue_time, user, priority from the index,
    /// without reading any document (what a table needs).
    summary: bool,
}

fn filter_from(args: &HashMap<String, String>) -> Result<Ask, BusError> {
    let (mut status, mut project, mut queue) = (None, None, None);
    let mut user = None;
    let mut summary = false;
    let mut after = None;
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
            "after" => {
                after = Some(
                    Bound::parse(v)
                        .map_err(|e| BusError::InvalidMessage(format!("ListJobs: {e}")))?,
                )
            }
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
                    "ListJobs: unknown filter key {other:?} (known: status, project, queue, user, fields, after)"
                )));
            }
        }
    }
    Ok(Ask {
        filter: job_filter(status, project, queue, "ListJobs: filter status")
            .map_err(BusError::InvalidMessage)?,
        user,
        after,
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

/// The `after` cursor of the page following `page` (a `ListJobs` page): the place of its
/// last job ([`Bound::token_of`], from a document or a summary row).
pub fn next_after(page: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Config {
        queue: Option<String>,
        queue_time: crate::model::Timestamp,
    }
    #[derive(serde::Deserialize)]
    struct Row {
        id: String,
        queue: Option<String>,
        queue_time: Option<crate::model::Timestamp>,
        config: Option<Config>,
    }
    let rows: Vec<&serde_json::value::RawValue> = serde_json::from_str(page).ok()?;
    let last: Row = serde_json::from_str(rows.last()?.get()).ok()?;
    let (queue, time) = match last.config {
        Some(c) => (c.queue?, c.queue_time),
        None => (last.queue?, last.queue_time?),
    };
    Some(Bound::token_of(&time, &queue, &last.id))
}

/// One page of `ListJobs` for the caller with Unix uid `uid`. A page continues the listing
/// a previous page left open (a cursor over the index files, kept per caller and filter)
/// when it asks for where that one ended (its `next_offset`, or `after` its last job);
/// any other page opens the listing and seeks: to the mark (one every [`MARK_EVERY`] jobs,
/// taken when the listing was counted) before its offset, or to its `after` place, so a
/// page at any depth costs the page and a binary search, not the jobs before it. The
/// shared index is locked only to look up and keep cursors and totals, never while files
/// are read: calls are served side by side. Memory stays at one page whatever the store
/// holds.
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
    let lock = || shared.job_index.lock();
    let key = format!(
        "{uid}\n{:?}\n{filter:?}\n{}",
        ask.user.as_deref(),
        ask.summary
    );
    let offset = offset as usize;
    let after = ask.after.as_ref();
    let failed = |e: std::io::Error| BusError::Failed(format!("job index: {e}"));
    let (kept, mut index) = {
        let mut shared_index = lock();
        (
            shared_index.take_cursor(&key, offset, after),
            shared_index.detached(store),
        )
    };
    let (mut jobs, key, mut next, total) = match kept {
        Some(c) => (
            VisibleJobs::over(c.listing, store, &who),
            c.key,
            c.next,
            c.total,
        ),
        None => {
            let mut jobs = VisibleJobs::over(index.listing(store, filter), store, &who);
            // The total and the marks: counted once, then kept while the folders and the
            // caller's rights are unchanged (a page of 100,000 jobs then costs one page).
            let kept = lock().cached_total(&key, jobs.listing()).cloned();
            let (total, marks) = match kept {
                Some(k) if jobs.visibility().same_rights(&k.rights) => (k.total, k.marks),
                _ => {
                    let mut marks = Vec::new();
                    let mut total = 0;
                    for l in jobs.by_ref() {
                        if total % MARK_EVERY == 0 {
                            marks.push(Bound::of(&l));
                        }
                        total += 1;
                    }
                    jobs.rewind().map_err(failed)?;
                    let rights = jobs.visibility().rights();
                    let marks = std::sync::Arc::new(marks);
                    lock().keep_total(&key, jobs.listing(), rights, total, marks.clone());
                    (total, marks)
                }
            };
            // A page's documents are read from the store, a page's worth: never a documents
            // cache of the whole listing (its first build reads and checks every job, and a
            // folder changed by one job would copy all the others again).
            let next = match after {
                None => skip_to(&mut jobs, &marks, offset).map_err(failed)?,
                Some(b) => seek_past(&mut jobs, &marks, b).map_err(failed)?,
            };
            // Bringing a changed folder's index up to date freed a few megabytes: give them
            // back now rather than keep them while the caller pages.
            crate::store::listing::release_memory();
            (jobs, key, next, total)
        }
    };
    let mut page = Vec::with_capacity(64 * 1024);
    page.push(b'[');
    let mut count = 0;
    let mut last = after.cloned();
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
                last = Some(Bound::of(&l));
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
        last = Some(Bound::of(&l));
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
        lock().keep_cursor(Cursor {
            key,
            listing,
            next,
            last,
            total,
            at: Instant::now(),
        });
    } else {
        drop(listing);
        crate::store::listing::release_memory();
    }
    let text = String::from_utf8(page).map_err(|e| BusError::Failed(e.to_string()))?;
    let as_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok((text, as_u32(total), as_u32(next)))
}

/// Moves `jobs` (at its start) to the `offset`th job from the mark before it; returns where
/// it got (fewer at the end).
fn skip_to(jobs: &mut VisibleJobs<'_>, marks: &[Bound], offset: usize) -> std::io::Result<usize> {
    let m = (offset / MARK_EVERY).min(marks.len().saturating_sub(1));
    if m == 0 {
        return Ok(jobs.skip_visible(offset));
    }
    jobs.seek(&marks[m])?;
    Ok(m * MARK_EVERY + jobs.skip_visible(offset - m * MARK_EVERY))
}

/// Moves `jobs` (at its start) just past `after`; returns how many jobs of the listing
/// come before that place (the offset of the next job).
fn seek_past(jobs: &mut VisibleJobs<'_>, marks: &[Bound], after: &Bound) -> std::io::Result<usize> {
    // The last mark at or before `after`: the count goes on from there.
    let m = marks.partition_point(|b| b.cmp_bound(after).is_le());
    let mut at = 0;
    if m > 0 {
        jobs.seek(&marks[m - 1])?;
        at = (m - 1) * MARK_EVERY;
    }
    while let Some(l) = jobs.next() {
        if after.cmp_listed(&l).is_gt() {
            jobs.put_back(l);
            break;
        }
        at += 1;
    }
    Ok(at)
}
