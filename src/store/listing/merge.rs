//! Listings over the index: the per-user index cache, cursors and the streaming merge of
//! the sorted index files (`Listing`).

use super::*;

/// Where one reader keeps its index files for one store, and the open `ListJobs` cursor.
#[derive(Debug, Default)]
pub struct JobIndex {
    /// `None` until first used; then the folder (or `Some(None)`: no writable cache, so the
    /// index lives in memory for one listing at a time).
    dir: Option<Option<PathBuf>>,
    /// The listings paging callers are walking through (at most [`MAX_CURSORS`]).
    cursors: Vec<Cursor>,
    /// Totals of recent listings, by caller and filter (see [`JobIndex::cached_total`]).
    totals: Totals<Bound>,
}

/// A listing's total, kept while the folders it counted are unchanged.
#[derive(Debug, Clone)]
pub struct CachedTotal<M = Bound> {
    /// The listed folders' stamps when it was counted ([`Listing::signature`]).
    pub folders: String,
    /// What the caller's rights were then (who decides: the caller of [`JobIndex::keep_total`]).
    pub rights: Vec<(String, bool)>,
    /// Entries in the listing.
    pub total: usize,
    /// The place of every [`MARK_EVERY`]th entry of the listing (the first, then …), so a
    /// page at any offset starts from the mark before it (a seek) instead of walking from the
    /// start.
    pub marks: std::sync::Arc<Vec<M>>,
}

/// Totals of recent listings by caller and filter, each kept while the folders it counted
/// are unchanged (at most [`MAX_TOTALS`]; the oldest are dropped all at once).
#[derive(Debug)]
pub struct Totals<M>(HashMap<String, CachedTotal<M>>);

impl<M> Default for Totals<M> {
    fn default() -> Self {
        Totals(HashMap::new())
    }
}

impl<M> Totals<M> {
    /// The total counted for `key` when the folders were exactly as `signature` says they are
    /// now (same identity and modification time, each settled, so a change since would show).
    pub fn get(&self, key: &str, signature: Option<&str>) -> Option<&CachedTotal<M>> {
        let now = signature?;
        self.0.get(key).filter(|c| c.folders == now)
    }

    /// Keeps `total` for `key` while the folders stay as `signature` says (nothing is kept
    /// when a folder changed too recently to tell).
    pub fn keep(
        &mut self,
        key: &str,
        signature: Option<String>,
        rights: Vec<(String, bool)>,
        total: usize,
        marks: std::sync::Arc<Vec<M>>,
    ) {
        let Some(folders) = signature else {
            self.0.remove(key);
            return;
        };
        if self.0.len() >= MAX_TOTALS {
            self.0.clear();
        }
        let kept = CachedTotal {
            folders,
            rights,
            total,
            marks,
        };
        self.0.insert(key.to_string(), kept);
    }
}

/// One mark every this many jobs of a counted listing.
pub const MARK_EVERY: usize = 256;

/// Listings kept open for the callers' next pages at most (the oldest is dropped first).
pub const MAX_CURSORS: usize = 32;

/// Totals kept at most (one per caller and filter; the oldest are dropped all at once).
pub(super) const MAX_TOTALS: usize = 256;

/// The cache folder for this process: systemd's `CACHE_DIRECTORY`, `XDG_CACHE_HOME`,
/// `~/.cache`, in that order.
pub(super) fn cache_base() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(c) = env("CACHE_DIRECTORY") {
        // systemd lists several folders with ':' when the unit names several.
        let first = c.to_string_lossy().split(':').next().map(PathBuf::from);
        return first;
    }
    if let Some(x) = env("XDG_CACHE_HOME").map(PathBuf::from)
        && x.is_absolute()
    {
        return Some(x.join("agentstore"));
    }
    super::super::home_dir().map(|h| h.join(".cache/agentstore"))
}

impl JobIndex {
    /// An index kept under `dir` (tests, and callers with their own cache folder).
    pub fn in_dir(dir: PathBuf) -> JobIndex {
        JobIndex {
            dir: Some(Some(dir)),
            cursors: Vec::new(),
            totals: Totals::default(),
        }
    }

    /// An index over the same cache folder with no cursors or totals of its own: what one
    /// call walks while the shared one stays free for the others (the index files are
    /// written whole and renamed, so two walks bringing a folder up to date never clash).
    pub fn detached(&mut self, store: &Store) -> JobIndex {
        JobIndex {
            dir: Some(self.dir_for(store)),
            cursors: Vec::new(),
            totals: Totals::default(),
        }
    }

    pub(super) fn dir_for(&mut self, store: &Store) -> Option<PathBuf> {
        let base = self.dir.get_or_insert_with(|| {
            let base = cache_base()?;
            let root = std::fs::canonicalize(store.root()).unwrap_or(store.root().to_path_buf());
            // Never inside the store (a service user whose home is the store): it may be
            // synced to other machines.
            if base.starts_with(&root) || base.starts_with(store.root()) {
                return None;
            }
            let key = uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_URL,
                root.as_os_str().as_encoded_bytes(),
            );
            Some(base.join("job-index").join(key.to_string()))
        });
        base.clone()
    }

    /// Brings the folders `filter` can match up to date and opens a listing of them:
    /// matching jobs, oldest `queue_time` first (ties by id, then queue), each once.
    pub fn listing(&mut self, store: &Store, filter: &JobFilter) -> Listing {
        self.open_listing(store, filter, false)
    }

    /// [`listing`](Self::listing), with each job's document as a JSON listing prints it
    /// ([`Listed::doc`]) from a cache beside the index (see `listing_docs`).
    pub fn listing_with_documents(&mut self, store: &Store, filter: &JobFilter) -> Listing {
        self.open_listing(store, filter, true)
    }

    pub(super) fn open_listing(
        &mut self,
        store: &Store,
        filter: &JobFilter,
        docs: bool,
    ) -> Listing {
        let dir = self.dir_for(store);
        let queues = match &filter.queue {
            Some(q) => vec![q.clone()],
            None => store.queue_ids().unwrap_or_default(),
        };
        let states: Vec<JobStatus> = match filter.status {
            Some(s) => vec![s],
            None => JobStatus::ALL.to_vec(),
        };
        let mut listing = Listing {
            sources: Vec::new(),
            project: filter.project.clone(),
            unreadable: Vec::new(),
            unreadable_dirs: Vec::new(),
            last: None,
            pending: None,
            signature: Some(String::new()),
        };
        for q in &queues {
            // In the order jobs move, so a job moving meanwhile is seen at least once.
            for &s in &states {
                // Taken before the folder is read: a change after it changes the stamp.
                listing.signature = sign(listing.signature.take(), &store.jobs_dir(q, s));
                let cache = dir
                    .as_ref()
                    .map(|d| d.join(q).join(format!("{}.idx", s.dir())));
                let folder = store.jobs_dir(q, s);
                let with = docs.then_some(store);
                match open_folder(&folder, q, s, None, cache.as_deref(), with) {
                    Ok((src, bad)) => {
                        listing
                            .unreadable
                            .extend(bad.into_iter().map(|id| (q.clone(), s, id)));
                        listing.sources.push(src);
                    }
                    Err(e) => {
                        tracing::warn!("cannot list {}: {e}", store.jobs_dir(q, s).display())
                    }
                }
                if s == JobStatus::Queued {
                    // Between queued_jobs/ and running_jobs/ a job being started is, for a
                    // few milliseconds, only a start claim: read after queued_jobs/ and
                    // before running_jobs/, a job moving meanwhile is seen at least once
                    // (listed as queued; a copy also in a later state is listed there).
                    let claims = claims_source(store, q);
                    if !claims.is_empty() {
                        // Claims come and go without a settled stamp: no cached total.
                        listing.signature = None;
                        listing.sources.push(Source::mem(q, s, None, claims));
                    }
                }
            }
        }
        for s in &mut listing.sources {
            s.advance();
        }
        listing
    }

    /// Brings the archive folders (`Queues/<q>/Jobs/archive/<month>/<state>_jobs/`) of
    /// `queue` (every queue when `None`) up to date in the index, the same way as the live
    /// folders, and opens a listing of them: oldest `queue_time` first, each job once.
    pub fn archived_listing(
        &mut self,
        store: &Store,
        queue: Option<&str>,
        project: Option<&str>,
        docs: bool,
    ) -> Listing {
        let dir = self.dir_for(store);
        let queues = match queue {
            Some(q) => vec![q.to_string()],
            None => store.queue_ids().unwrap_or_default(),
        };
        let mut listing = Listing {
            sources: Vec::new(),
            project: project.map(str::to_string),
            unreadable: Vec::new(),
            unreadable_dirs: Vec::new(),
            last: None,
            pending: None,
            signature: None,
        };
        for q in &queues {
            let root = super::super::archive::archive_root(store, q);
            let months = match scan_subdirs(&root) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("cannot list {}: {e}", root.display());
                    continue;
                }
            };
            for month in &months {
                for s in super::super::archive::ARCHIVED_STATES {
                    let folder = root.join(month).join(s.dir());
                    let cache = dir.as_ref().map(|d| {
                        d.join(q)
                            .join("archive")
                            .join(month)
                            .join(format!("{}.idx", s.dir()))
                    });
                    let with = docs.then_some(store);
                    match open_folder(&folder, q, s, Some(month), cache.as_deref(), with) {
                        Ok((src, bad)) => {
                            listing
                                .unreadable_dirs
                                .extend(bad.iter().map(|_| folder.clone()));
                            listing
                                .unreadable
                                .extend(bad.into_iter().map(|id| (q.clone(), s, id)));
                            listing.sources.push(src);
                        }
                        Err(e) => tracing::warn!("cannot list {}: {e}", folder.display()),
                    }
                }
            }
        }
        for s in &mut listing.sources {
            s.advance();
        }
        listing
    }

    /// Takes the open cursor left for `key` not long ago at `offset`, or (with `after`) just
    /// past that place.
    pub fn take_cursor(
        &mut self,
        key: &str,
        offset: usize,
        after: Option<&Bound>,
    ) -> Option<Cursor> {
        self.cursors.retain(|c| c.at.elapsed() < CURSOR_TTL);
        let i = self.cursors.iter().position(|c| {
            c.key == key
                && match after {
                    Some(b) => c.last.as_ref() == Some(b),
                    None => c.next == offset,
                }
        })?;
        Some(self.cursors.swap_remove(i))
    }

    /// Keeps `cursor` for the next page (dropping the oldest beyond [`MAX_CURSORS`]).
    pub fn keep_cursor(&mut self, cursor: Cursor) {
        self.cursors.retain(|c| c.at.elapsed() < CURSOR_TTL);
        if self.cursors.len() >= MAX_CURSORS
            && let Some(oldest) = (0..self.cursors.len()).min_by_key(|&i| self.cursors[i].at)
        {
            self.cursors.swap_remove(oldest);
        }
        self.cursors.push(cursor);
    }

    /// The total counted for `key` when `listing`'s folders were exactly as they are now.
    pub fn cached_total(&self, key: &str, listing: &Listing) -> Option<&CachedTotal> {
        self.totals.get(key, listing.signature.as_deref())
    }

    /// Keeps `total` for `key` while `listing`'s folders stay unchanged and `rights` stay
    /// what they are.
    pub fn keep_total(
        &mut self,
        key: &str,
        listing: &Listing,
        rights: Vec<(String, bool)>,
        total: usize,
        marks: std::sync::Arc<Vec<Bound>>,
    ) {
        let signature = listing.signature.clone();
        self.totals.keep(key, signature, rights, total, marks);
    }
}

/// A listing left open between pages: who asked for what, how far it got, and how many
/// jobs it has in all.
#[derive(Debug)]
pub struct Cursor {
    /// The caller and filter it was opened for.
    pub key: String,
    /// The listing, positioned at `next`.
    pub listing: Listing,
    /// Jobs consumed so far (what the caller passes as the next offset).
    pub next: usize,
    /// The place of the last job handed out (what the caller passes as `after`).
    pub last: Option<Bound>,
    /// Jobs in the whole listing.
    pub total: usize,
    /// When it was last used.
    pub at: Instant,
}

/// A streaming listing: the merge of the folders' sorted records.
#[derive(Debug)]
pub struct Listing {
    pub(super) sources: Vec<Source>,
    project: Option<String>,
    unreadable: Vec<(String, JobStatus, String)>,
    /// The folders of archive listings' unreadable files, next to `unreadable`.
    unreadable_dirs: Vec<PathBuf>,
    pub(super) last: Option<(String, String)>,
    pub(super) pending: Option<Listed>,
    /// The listed folders' stamps, each taken before the folder was read; `None` when one
    /// changed too recently (or could not be read) to tell a later change by its stamp.
    signature: Option<String>,
}

impl Listing {
    /// Files in the listed folders that did not read as jobs: (queue, state, id).
    pub fn unreadable(&self) -> &[(String, JobStatus, String)] {
        &self.unreadable
    }

    /// The unreadable files of an archive listing: (folder, id).
    pub fn unreadable_paths(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.unreadable_dirs
            .iter()
            .zip(&self.unreadable)
            .map(|(d, (_, _, id))| (d.as_path(), id.as_str()))
    }

    /// Starts again from the first job, over the same folder contents.
    pub fn rewind(&mut self) -> std::io::Result<()> {
        for s in &mut self.sources {
            s.start()?;
            s.advance();
        }
        self.last = None;
        self.pending = None;
        Ok(())
    }

    /// Puts back the job `next` returned last, so the next call returns it again.
    pub fn put_back(&mut self, l: Listed) {
        self.pending = Some(l);
    }
}

impl Iterator for Listing {
    type Item = Listed;

    fn next(&mut self) -> Option<Listed> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        loop {
            // A few folders: a linear pick is cheaper than a heap. Ties: the later state
            // first (a job seen in two folders is where it went).
            let mut best: Option<usize> = None;
            for (i, s) in self.sources.iter().enumerate() {
                let Some(r) = &s.current else { continue };
                best = match best {
                    None => Some(i),
                    Some(b) => {
                        let (bs, br) = (&self.sources[b], self.sources[b].current.as_ref()?);
                        let ord = r
                            .key()
                            .cmp(&br.key())
                            .then_with(|| s.queue.cmp(&bs.queue))
                            .then_with(|| rank(bs.status).cmp(&rank(s.status)));
                        if ord.is_lt() { Some(i) } else { Some(b) }
                    }
                };
            }
            let b = best?;
            let src = &mut self.sources[b];
            let rec = src.current.take()?;
            let doc = src.current_doc.take();
            let (queue, status, month) = (src.queue.clone(), src.status, src.month.clone());
            src.advance();
            if self
                .last
                .as_ref()
                .is_some_and(|(q, id)| *q == queue && **id == *rec.id)
            {
                continue;
            }
            self.last = Some((queue.clone(), rec.id.to_string()));
            let Some(mut l) = rec.listed(&queue, status, month.as_deref()) else {
                continue;
            };
            l.doc = doc;
            if self.project.as_deref().is_some_and(|p| p != l.head.project) {
                continue;
            }
            return Some(l);
        }
    }
}

/// Reads a listed job's document. When the job has moved on since its folder was listed, it
/// is read from the folder it moved to: the merge hands out only a job's latest sighting, so
/// this never lists it twice. `Ok(None)`: gone from the queue (deleted).
pub fn read_listed(
    store: &Store,
    l: &Listed,
) -> super::super::Result<Option<(super::super::JobLocation, crate::model::Job)>> {
    for &s in &JobStatus::ALL[rank(l.status)..] {
        let mut paths = vec![store.job_path(&l.queue, s, &l.id)];
        if s == JobStatus::Queued && l.month.is_none() {
            // A job being started: its claim, before running_jobs/ (the way it moves).
            paths.extend(store.claim_of(std::slice::from_ref(&l.queue), &l.id));
        }
        for path in paths {
            let loc = super::super::JobLocation {
                queue: l.queue.clone(),
                status: s,
                id: l.id.clone(),
                path,
            };
            match store.job(&loc) {
                Ok(job) => return Ok(Some((loc, job))),
                Err(super::super::StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(None)
}

pub(super) fn rank(s: JobStatus) -> usize {
    JobStatus::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

/// Gives freed heap back to the system after a large listing (glibc keeps it otherwise).
pub fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    pub(super) fn trim() {
        // SAFETY: malloc_trim only returns free heap pages to the kernel; no pointer is
        // touched.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    pub(super) fn trim() {}
    trim();
}
