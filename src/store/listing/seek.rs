//! Seeking in a listing (issue 33): a place in the listing's order ([`Bound`]: a job's queue
//! time, id and queue) and moving every folder's sorted records to it by a binary search
//! over the index file's bytes, so a page at any depth costs O(log n) reads per folder
//! plus the page, never a walk over the jobs before it.

use super::*;
use std::cmp::Ordering;

/// A place in a listing's order: oldest `queue_time` first, ties by id, then by queue (the
/// order [`Listing`] merges in). Written as the `after` cursor of `ListJobs` and the web API:
/// `<seconds>.<nanoseconds>/<queue>/<id>` — the job's `queue_time` as Unix seconds and nine
/// digits of nanoseconds, its queue and its id ([`Bound::token_of`]); every string of that
/// shape is a place, so the shape alone says whether a cursor is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    secs: i64,
    nanos: u32,
    id: Box<str>,
    queue: Box<str>,
}

/// What an `after` cursor must look like (the OpenAPI document's pattern says the same).
const SHAPE: &str = "is not <seconds>.<nanoseconds>/<queue>/<id> (a job's queue_time as Unix seconds, a dot and nine digits, its queue and its id, e.g. 1767225600.000000000/default/job-1: a page's next_after)";

impl Bound {
    /// The place of a listed job.
    pub fn of(l: &Listed) -> Bound {
        Bound {
            secs: l.head.queue_time.0.timestamp(),
            nanos: l.head.queue_time.0.timestamp_subsec_nanos(),
            id: l.id.as_str().into(),
            queue: l.queue.as_str().into(),
        }
    }

    /// The cursor of the job with `queue_time` in `queue` named `id` (as [`Bound::token`]).
    pub fn token_of(queue_time: &Timestamp, queue: &str, id: &str) -> String {
        format!(
            "{}.{:09}/{queue}/{id}",
            queue_time.0.timestamp(),
            queue_time.0.timestamp_subsec_nanos()
        )
    }

    /// Reads an `after` cursor; the error says what one looks like.
    pub fn parse(token: &str) -> Result<Bound, String> {
        let bad = || format!("after {token:?} {SHAPE}");
        let mut f = token.splitn(3, '/');
        let (Some(t), Some(queue), Some(id)) = (f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        let (secs, nanos) = t.split_once('.').ok_or_else(bad)?;
        let digits = |s: &str, n: std::ops::RangeInclusive<usize>| {
            n.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
        };
        let word = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        let unsigned = secs.strip_prefix('-').unwrap_or(secs);
        if !digits(unsigned, 1..=12) || !digits(nanos, 9..=9) || !word(queue) || !word(id) {
            return Err(bad());
        }
        Ok(Bound {
            secs: secs.parse().map_err(|_| bad())?,
            nanos: nanos.parse().map_err(|_| bad())?,
            id: id.into(),
            queue: queue.into(),
        })
    }

    /// The cursor as [`Bound::parse`] reads it.
    pub fn token(&self) -> String {
        format!("{}.{:09}/{}/{}", self.secs, self.nanos, self.queue, self.id)
    }

    /// Where a record of `queue` with `key` stands against this place.
    fn cmp_rec(&self, key: (i64, u32, &str), queue: &str) -> Ordering {
        key.cmp(&(self.secs, self.nanos, &self.id))
            .then_with(|| queue.cmp(&self.queue))
    }

    /// Where the listed job `l` stands against this place.
    pub fn cmp_listed(&self, l: &Listed) -> Ordering {
        let t = &l.head.queue_time.0;
        self.cmp_rec((t.timestamp(), t.timestamp_subsec_nanos(), &l.id), &l.queue)
    }

    /// Order of two places.
    pub fn cmp_bound(&self, o: &Bound) -> Ordering {
        o.cmp_rec((self.secs, self.nanos, &self.id), &self.queue)
    }
}

impl Listing {
    /// Moves to `bound`: the next job is the first one at or after it. Each
    /// folder's records are found by a binary search; documents from the cache are no longer
    /// read in step (they come from the store for the rest of this listing).
    pub fn seek(&mut self, bound: &Bound) -> std::io::Result<()> {
        for s in &mut self.sources {
            s.seek(bound)?;
        }
        self.last = None;
        self.pending = None;
        Ok(())
    }
}

impl Source {
    pub(super) fn seek(&mut self, bound: &Bound) -> std::io::Result<()> {
        let queue = self.queue.clone();
        let wanted = |r: &Rec| -> bool {
            let Some((s, n, ..)) = &r.head else {
                return false;
            };
            bound.cmp_rec((*s, *n, &r.id), &queue) != Ordering::Less
        };
        self.docs = None;
        self.current_doc = None;
        self.current = None;
        self.records.seek(&wanted)?;
        self.advance();
        Ok(())
    }
}
