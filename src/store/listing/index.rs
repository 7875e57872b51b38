//! The index files: opening a folder's index, refreshing it from the folder, writing it.

use super::*;

/// Reads a folder's index, bringing it up to date first when the folder changed. Returns the
/// folder's records as a sorted source and the ids of files that are not readable jobs.
pub(super) fn open_folder(
    dir: &Path,
    queue: &str,
    status: JobStatus,
    month: Option<&str>,
    cache: Option<&Path>,
    docs: Option<&Store>,
) -> std::io::Result<(Source, Vec<String>)> {
    let (mut src, bad, stamp) = open_index(dir, queue, status, month, cache)?;
    if let (Some(store), Some(stamp), Some(cache)) = (docs, stamp, cache) {
        let path = cache.with_extension("docs");
        let (folder, fields) = stamp.fields();
        let mut ids = std::iter::from_fn(|| {
            src.advance();
            let r = src.current.take()?;
            let head = r.head.map(|(_, _, p, u, ..)| (p.into(), u.map(Into::into)));
            Some((r.id.into(), head))
        });
        let opened = listing_docs::open(
            store,
            dir,
            (&folder, &fields, stamp.settled()),
            &mut ids,
            &path,
        );
        src.start()?;
        src.docs = opened;
    }
    Ok((src, bad))
}

/// [`open_folder`] without documents; also the folder's stamp (`None`: no folder).
pub(super) fn open_index(
    dir: &Path,
    queue: &str,
    status: JobStatus,
    month: Option<&str>,
    cache: Option<&Path>,
) -> std::io::Result<(Source, Vec<String>, Option<Stamp>)> {
    let new_line = |folder: &build::Folder<'_>, entry: Scanned<'_>| {
        let Scanned::Document(name) = entry else {
            return None;
        };
        let id = name.strip_suffix(".json")?;
        let head = match folder.read(name) {
            Some(bytes) => head_of(&bytes),
            None => read_head(&folder.path.join(name)),
        };
        let mut bytes = Vec::new();
        Rec::from_head(id, head).write(&mut bytes).ok()?;
        String::from_utf8(bytes).ok()
    };
    let (records, bad, stamp) = records::open_records::<Rec>(dir, cache, &new_line)?;
    let bad = bad.into_iter().map(|r| r.id.into()).collect();
    Ok((Source::new(queue, status, month, records), bad, stamp))
}

/// The start claims of `queue` (`Queues/<q>/.claimed/<host>/<id>.json`, every machine's),
/// sorted as a folder's records. Few and short-lived: read each time, never indexed.
pub(super) fn claims_source(store: &Store, queue: &str) -> Vec<Rec> {
    let root = super::super::jobfile::claims_root(store, queue);
    let mut recs = Vec::new();
    for host in scan_subdirs(&root).unwrap_or_default() {
        for (id, p) in super::super::jobfile::claims_of(store, queue, &host) {
            if !crate::model::is_safe_id(&id) {
                continue;
            }
            // An unreadable claim (mid-write) is left out, not reported: it is never a
            // document of its own.
            if let Some(head) = read_head(&p) {
                recs.push(Rec::from_head(&id, Some(head)));
            }
        }
    }
    recs.sort_by(|a, b| a.key().cmp(&b.key()));
    recs
}
