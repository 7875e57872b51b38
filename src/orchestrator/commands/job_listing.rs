//! The one walk over a job listing that every door takes (issue 29): the inbox's and
//! `Submit`'s `list-jobs` (an answer bounded in bytes), D-Bus `ListJobs` (pages through a
//! kept cursor; the web asks it) and the CLI's local `list-jobs` (a stream to the terminal).
//! Each writes its own shape, but which jobs it may list is decided here once: the filter
//! is parsed by [`job_filter`], checked against PRD §10 by [`VisibleJobs::open`] (a filter
//! naming a project the caller may not see is refused, never answered with an empty list),
//! and the walk yields only the jobs the caller may see, by the index, with
//! [`VisibleJobs::document`] letting the document decide where it disagrees with the index.

use crate::model::{Job, JobStatus};
use crate::permissions::{self, Caller, Refused, Visibility};
use crate::store::listing::{Bound, JobFilter, JobIndex, Listed, Listing};
use crate::store::{Store, StoreError};

/// The filter of a job listing from its words: `status` (a state name), `project`,
/// `queue`; `status_what` names where the status came from in a refusal
/// (`list-jobs: content.status`, `ListJobs: filter status`).
pub fn job_filter(
    status: Option<&str>,
    project: Option<&str>,
    queue: Option<&str>,
    status_what: &str,
) -> Result<JobFilter, String> {
    Ok(JobFilter {
        status: status
            .map(|s| JobStatus::from_filter(status_what, s))
            .transpose()?,
        project: project.map(str::to_string),
        queue: queue.map(str::to_string),
    })
}

/// A job listing as one caller may see it: an iterator over the listed jobs PRD §10 lets
/// them see (by the index's head of each; each project read once).
pub struct VisibleJobs<'a> {
    listing: Listing,
    vis: Visibility<'a>,
}

impl<'a> VisibleJobs<'a> {
    /// The live jobs `filter` selects, for `who`; with `documents`, each listed job carries
    /// its document from the cache beside the index where that is current. Refused when
    /// the filter names a project the caller may not see.
    pub fn open(
        store: &'a Store,
        who: &'a Caller,
        filter: &JobFilter,
        index: &mut JobIndex,
        documents: bool,
    ) -> Result<VisibleJobs<'a>, Refused> {
        permissions::check_job_filter(store, who, filter)?;
        let listing = if documents {
            index.listing_with_documents(store, filter)
        } else {
            index.listing(store, filter)
        };
        Ok(VisibleJobs::over(listing, store, who))
    }

    /// The archived jobs of `queue` (all queues when `None`) and `project`, for `who`; with
    /// `documents` as in [`VisibleJobs::open`]. Narrowed to a project the caller may not
    /// see, refused as the live listing is; one that no longer exists may still have
    /// archived jobs: listed as far as the caller may see them.
    pub fn archived(
        store: &'a Store,
        who: &'a Caller,
        index: &mut JobIndex,
        queue: Option<&str>,
        project: Option<&str>,
        documents: bool,
    ) -> Result<VisibleJobs<'a>, Refused> {
        if let Some(p) = project {
            match permissions::visible_project(store, who, p) {
                Ok(_) | Err(Refused::Store(StoreError::NotFound { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(q) = queue {
            store.queue(q)?;
        }
        let listing = index.archived_listing(store, queue, project, documents);
        Ok(VisibleJobs::over(listing, store, who))
    }

    /// An open listing (a kept cursor's) walked as `who` may see it. The caller has checked
    /// the listing's filter ([`permissions::check_job_filter`]) when it opened it.
    pub fn over(listing: Listing, store: &'a Store, who: &'a Caller) -> VisibleJobs<'a> {
        VisibleJobs {
            listing,
            vis: Visibility::new(store, who),
        }
    }

    /// Walks `listing` from here on, with what was learnt of the caller's rights; returns
    /// the one walked so far.
    pub fn replace_listing(&mut self, listing: Listing) -> Listing {
        std::mem::replace(&mut self.listing, listing)
    }

    /// The listing back (to keep it as a cursor).
    pub fn into_listing(self) -> Listing {
        self.listing
    }

    /// The listing beneath (its unreadable files).
    pub fn listing(&self) -> &Listing {
        &self.listing
    }

    /// The caller's visibility (what the answer depended on).
    pub fn visibility(&mut self) -> &mut Visibility<'a> {
        &mut self.vis
    }

    /// Starts again from the first job, over the same folder contents.
    pub fn rewind(&mut self) -> std::io::Result<()> {
        self.listing.rewind()
    }

    /// Moves to `bound` (see [`Listing::seek`]); what is visible is decided as before.
    pub fn seek(&mut self, bound: &Bound) -> std::io::Result<()> {
        self.listing.seek(bound)
    }

    /// Puts back the job `next` returned last.
    pub fn put_back(&mut self, l: Listed) {
        self.listing.put_back(l);
    }

    /// Passes over `n` visible jobs; returns how many there were (fewer at the end).
    pub fn skip_visible(&mut self, n: usize) -> usize {
        let mut skipped = 0;
        while skipped < n && self.next().is_some() {
            skipped += 1;
        }
        skipped
    }

    /// The document of `l` (one this walk yielded), its id filled in, if the caller may see
    /// it after all: the document decides where it names another project or user than the
    /// index did. `Ok(None)`: deleted since it was indexed, or not the caller's to see.
    pub fn document(&mut self, l: &Listed) -> Result<Option<Job>, StoreError> {
        self.vis.document(l)
    }

    /// True when `job`, read by the caller's door itself for `l` (an archived job), may be
    /// shown.
    pub fn admits_document(&mut self, l: &Listed, job: &Job) -> bool {
        self.vis.admits_document(l, job)
    }
}

impl Iterator for VisibleJobs<'_> {
    type Item = Listed;

    fn next(&mut self) -> Option<Listed> {
        loop {
            let l = self.listing.next()?;
            if self.vis.admits(&l.head.project, l.head.user.as_deref()) {
                return Some(l);
            }
        }
    }
}
