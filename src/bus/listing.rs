//! `ListJobs`: paged, filtered job listings whose every answer fits one D-Bus message.

use super::BusError;
use super::caller::caller_for_uid;
use super::orchestrator::Shared;
use crate::model::{DocKind, Job, JobStatus, Project};
use crate::store::listing::JobFilter;
use std::collections::HashMap;

/// Jobs in a page when the caller asks for 0.
pub const DEFAULT_PAGE: u32 = 500;
/// The most jobs in one page.
pub const MAX_PAGE: u32 = 5000;
/// About this many bytes of JSON in one page (a page holds at least one job).
pub const PAGE_BYTES: usize = 4 << 20;
/// The largest answer any method sends: well under the 32 MiB the system bus allows.
pub const MAX_REPLY_BYTES: usize = 16 << 20;

fn filter_from(args: &HashMap<String, String>) -> Result<(JobFilter, Option<String>), BusError> {
    let mut f = JobFilter::default();
    let mut user = None;
    for (k, v) in args {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        match k.as_str() {
            "status" => f.status = Some(JobStatus::from_name(v).ok_or_else(|| {
                BusError::InvalidMessage(format!(
                    "ListJobs: filter status {v:?} is not one of queued, running, finished, failed"
                ))
            })?),
            "project" => f.project = Some(v.to_string()),
            "queue" => f.queue = Some(v.to_string()),
            "user" => user = Some(v.to_string()),
            other => {
                return Err(BusError::InvalidMessage(format!(
                    "ListJobs: unknown filter key {other:?} (known: status, project, queue, user)"
                )));
            }
        }
    }
    Ok((f, user))
}

/// One page of `ListJobs` for the caller with Unix uid `uid`.
pub fn list_jobs_page(
    shared: &Shared,
    uid: u32,
    args: &HashMap<String, String>,
    offset: u32,
    limit: u32,
) -> Result<(String, u32, u32), BusError> {
    let store = &shared.store;
    let (filter, user) = filter_from(args)?;
    let who = caller_for_uid(store, uid, shared.own_uid, user.as_deref())?;
    if let Some(p) = &filter.project {
        store.project(p)?;
    }
    if let Some(q) = &filter.queue {
        store.queue(q)?;
    }
    let limit = match limit {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    } as usize;
    let mut index = shared
        .job_index
        .lock()
        .map_err(|_| BusError::Failed("job index lock poisoned".into()))?;
    index.refresh(store, &filter);
    let mut projects: HashMap<String, Option<Project>> = HashMap::new();
    let listed = index.select(&filter, |l| {
        if who.is_admin() {
            return true;
        }
        if who.user_id().is_some() && who.user_id() == l.head.user.as_deref() {
            return true;
        }
        projects
            .entry(l.head.project.clone())
            .or_insert_with(|| store.project(&l.head.project).ok())
            .as_ref()
            .is_some_and(|p| who.can_see_project(p))
    });
    let total = listed.len();
    let start = (offset as usize).min(total);
    let mut page = Vec::with_capacity(64 * 1024);
    page.push(b'[');
    let mut next = start;
    let mut count = 0;
    for l in &listed[start..] {
        if count >= limit {
            break;
        }
        let path = store.job_path(l.queue, l.status, l.id);
        let doc: Option<Job> = store.read_doc(DocKind::Job, &path).ok();
        let Some(mut job) = doc else {
            // Moved or rewritten since it was indexed, or invalid (reported in errors.out):
            // left out of this page.
            next += 1;
            continue;
        };
        job.runtime.output = None;
        job.id.get_or_insert_with(|| l.id.to_string());
        job.config.queue.get_or_insert_with(|| l.queue.to_string());
        let bytes = serde_json::to_vec(&job).map_err(|e| BusError::Failed(e.to_string()))?;
        if count > 0 && page.len() + bytes.len() + 2 > PAGE_BYTES {
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
    let text = String::from_utf8(page).map_err(|e| BusError::Failed(e.to_string()))?;
    let as_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok((text, as_u32(total), as_u32(next)))
}
