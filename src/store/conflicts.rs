//! Conflict copies made by the sync engine a store lives in (issue 13): which engine made a
//! copy and of which file ([`parse_conflict_name`]), every copy in the store — in place or set
//! aside under `conflicts/` — ([`list_conflicts`]), and resolving one
//! ([`resolve_conflict`]): keep the original (the copy is set aside) or keep the copy (it
//! replaces the original with one rename; the replaced original is kept first). Nothing is
//! deleted: losers go to `conflicts/resolved/`.

use super::{Store, is_conflict_copy, safe, sync_parent};
use serde::Serialize;
use std::io;
use std::path::{Component, Path, PathBuf};

/// The sync engine that made a conflict copy, told from the copy's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// `name.sync-conflict-20251023-101010-DEVICE.ext`
    Syncthing,
    /// `name (Host's conflicted copy 2025-10-23).ext` (or without the host, older clients)
    Dropbox,
    /// `name (conflicted copy 2025-10-23 101010).ext` (Nextcloud and ownCloud ≥ 2.5 clients)
    Nextcloud,
    /// `name_conflict-20251023-101010.ext` (ownCloud's classic client)
    Owncloud,
    /// `name (conflict …).ext`: a conflict copy whose engine the name does not tell.
    Unknown,
}

impl Engine {
    /// The engine's name as people write it.
    pub fn label(self) -> &'static str {
        match self {
            Engine::Syncthing => "Syncthing",
            Engine::Dropbox => "Dropbox",
            Engine::Nextcloud => "Nextcloud",
            Engine::Owncloud => "ownCloud",
            Engine::Unknown => "sync engine",
        }
    }
}

/// What a conflict copy's name tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictName {
    /// Which engine made it.
    pub engine: Engine,
    /// The name of the file it is a copy of (same folder).
    pub original: String,
    /// The device or host whose edit lost, when the name says (Syncthing's short device id,
    /// Dropbox's host).
    pub device: Option<String>,
}

/// "Syncthing conflict copy" and the like: how daemons report a copy they set aside.
pub fn conflict_label(name: &str) -> String {
    let engine = parse_conflict_name(name).map_or(Engine::Unknown, |c| c.engine);
    format!("{} conflict copy", engine.label())
}

/// Splits `rest` (what follows a marker) at its first `.`: the marker's own text and the
/// extension (with its dot, or empty).
fn split_ext(rest: &str) -> (&str, &str) {
    match rest.find('.') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    }
}

/// Reads a conflict copy's name; `None` when the name is not one ([`is_conflict_copy`]).
pub fn parse_conflict_name(name: &str) -> Option<ConflictName> {
    if !is_conflict_copy(name) {
        return None;
    }
    // The markers are ASCII, so byte offsets in the lower-cased name are offsets in `name`.
    let lower = name.to_ascii_lowercase();
    if let Some(i) = lower.find(".sync-conflict-") {
        let (mark, ext) = split_ext(&name[i + ".sync-conflict-".len()..]);
        let device = mark.splitn(3, '-').nth(2).filter(|d| !d.is_empty());
        return Some(ConflictName {
            engine: Engine::Syncthing,
            original: format!("{}{ext}", &name[..i]),
            device: device.map(str::to_string),
        });
    }
    if let Some(at) = lower.find("conflicted copy")
        && let Some(open) = lower[..at].rfind(" (")
    {
        // The closing parenthesis of " (…conflicted copy …)", which may hold "(1)".
        let mut depth = 1usize;
        let mut close = None;
        for (j, ch) in name[open + 2..].char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + 2 + j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let close = close.unwrap_or(name.len().saturating_sub(1));
        let inner = &name[open + 2..close.max(open + 2)];
        let original = format!("{}{}", &name[..open], name.get(close + 1..).unwrap_or(""));
        let inner_lower = inner.to_ascii_lowercase();
        if let Some(h) = inner_lower.find("'s conflicted copy") {
            return Some(ConflictName {
                engine: Engine::Dropbox,
                original,
                device: Some(inner[..h].to_string()).filter(|d| !d.is_empty()),
            });
        }
        // Nextcloud/ownCloud ≥ 2.5 put a time after the date: "2025-10-23 101010".
        let after = inner_lower
            .split_once("conflicted copy")
            .map_or("", |(_, a)| a.trim());
        let timed = after
            .split_whitespace()
            .nth(1)
            .is_some_and(|t| t.len() == 6 && t.bytes().all(|b| b.is_ascii_digit()));
        return Some(ConflictName {
            engine: if timed {
                Engine::Nextcloud
            } else {
                Engine::Dropbox
            },
            original,
            device: None,
        });
    }
    if let Some(i) = lower.find("_conflict-") {
        let (_, ext) = split_ext(&name[i + "_conflict-".len()..]);
        return Some(ConflictName {
            engine: Engine::Owncloud,
            original: format!("{}{ext}", &name[..i]),
            device: None,
        });
    }
    let i = lower
        .find(" (conflict")
        .or_else(|| lower.find("(conflict)"))?;
    let close = name[i..].find(')').map_or(name.len(), |c| i + c + 1);
    Some(ConflictName {
        engine: Engine::Unknown,
        original: format!("{}{}", &name[..i], &name[close..]),
        device: None,
    })
}

/// One conflict copy in the store.
#[derive(Debug, Clone, Serialize)]
pub struct Conflict {
    /// The copy, relative to the store root.
    pub path: String,
    /// The file it is a copy of, relative to the store root (`None`: not known, a copy set
    /// aside by an older version).
    pub original: Option<String>,
    /// Which engine made it.
    pub engine: Engine,
    /// The device or host whose edit lost, when the name says.
    pub device: Option<String>,
    /// The copy's modification time (RFC 3339, UTC).
    pub mtime: String,
    /// The copy's size in bytes.
    pub size: u64,
    /// Whether the original exists now.
    pub original_exists: bool,
    /// Whether a daemon set the copy aside under `conflicts/` (else it is where the engine
    /// put it).
    pub set_aside: bool,
}

/// Where resolved conflicts' losers are kept, under `conflicts/`.
const RESOLVED: &str = "resolved";
/// How deep the store is walked (its deepest documents are 5 folders down).
const MAX_DEPTH: usize = 16;

/// The folder (relative to the store) a copy set aside in `conflicts/<rel>` came from:
/// `messaging-inbox` is the inbox; other set-aside copies keep their folder's path.
fn origin_dir(set_aside_dir: &Path) -> Option<PathBuf> {
    if set_aside_dir.as_os_str().is_empty() {
        return None; // set aside flat by an older version: the folder is not known
    }
    if set_aside_dir == Path::new("messaging-inbox") {
        return Some(PathBuf::from("messaging/inbox"));
    }
    Some(set_aside_dir.to_path_buf())
}

/// The original of the copy at `rel` (relative to the store), relative to the store.
fn original_of(rel: &Path, parsed: &ConflictName) -> Option<PathBuf> {
    let dir = rel.parent().unwrap_or(Path::new(""));
    match dir.strip_prefix("conflicts") {
        Ok(inner) => origin_dir(inner).map(|d| d.join(&parsed.original)),
        Err(_) => Some(dir.join(&parsed.original)),
    }
}

fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Every conflict copy in the store, sorted by path: in place anywhere below the root, and
/// set aside under `conflicts/` (except `conflicts/resolved/`). Dot-folders (the engines' own,
/// `.stfolder`, `.dropbox.cache`) and links are not entered; files that cannot be read are
/// reported in the second list.
pub fn list_conflicts(store: &Store) -> (Vec<Conflict>, Vec<String>) {
    let root = store.root();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut stack = vec![(PathBuf::new(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        let dir = root.join(&rel);
        let entries = match safe::list_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        for entry in entries {
            let Some(name) = entry.name.to_str() else {
                continue;
            };
            let child = rel.join(name);
            match entry.kind {
                safe::EntryKind::Dir => {
                    let skip = name.starts_with('.')
                        || child == Path::new("conflicts").join(RESOLVED)
                        || depth + 1 >= MAX_DEPTH;
                    if !skip {
                        stack.push((child, depth + 1));
                    }
                }
                safe::EntryKind::File => {
                    let Some(parsed) = parse_conflict_name(name) else {
                        continue;
                    };
                    let meta = match safe::symlink_metadata(&root.join(&child)) {
                        Ok(m) => m,
                        Err(e) => {
                            problems.push(format!("{}: {e}", root.join(&child).display()));
                            continue;
                        }
                    };
                    let original = original_of(&child, &parsed);
                    let original_exists = original
                        .as_ref()
                        .is_some_and(|o| safe::symlink_metadata(&root.join(o)).is_ok());
                    out.push(Conflict {
                        path: child.to_string_lossy().into_owned(),
                        original: original.map(|o| o.to_string_lossy().into_owned()),
                        engine: parsed.engine,
                        device: parsed.device,
                        mtime: meta.modified().map(rfc3339).unwrap_or_default(),
                        size: meta.len(),
                        original_exists,
                        set_aside: child.starts_with("conflicts"),
                    });
                }
                safe::EntryKind::Symlink | safe::EntryKind::Other => {}
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    (out, problems)
}

/// Which side of a conflict to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The original stays; the copy is set aside in `conflicts/resolved/`.
    Original,
    /// The copy replaces the original (one rename); the original is kept in
    /// `conflicts/resolved/` first.
    Copy,
}

/// What [`resolve_conflict`] did.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    /// The file that now holds the kept content, relative to the store.
    pub kept: String,
    /// Where the losing content is kept, relative to the store (`None`: there was no
    /// original to lose).
    pub set_aside: Option<String>,
}

/// A refusal or failure of [`resolve_conflict`], naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(pub String);

/// `path` (absolute, or relative to the store root) as a path relative to the store root
/// with only normal components; anything outside the store is refused.
fn store_relative(store: &Store, path: &Path) -> Result<PathBuf, ResolveError> {
    let root = store.root();
    let rel = if path.is_absolute() {
        let canon_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        path.strip_prefix(root)
            .or_else(|_| path.strip_prefix(&canon_root))
            .map_err(|_| {
                ResolveError(format!(
                    "{}: not inside the store {}; refused",
                    path.display(),
                    root.display()
                ))
            })?
            .to_path_buf()
    } else {
        path.to_path_buf()
    };
    if rel.as_os_str().is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(ResolveError(format!(
            "{}: not a plain path inside the store (no `..`, `.` or root); refused",
            path.display()
        )));
    }
    Ok(rel)
}

/// A free name for `rel`'s content under `conflicts/resolved/`, stamped with the time.
fn resolved_name(store: &Store, rel: &Path, what: &str) -> PathBuf {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let base = store.conflicts_dir().join(RESOLVED).join(rel);
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 0u32;
    loop {
        let suffix = if n == 0 {
            String::new()
        } else {
            format!(".{n}")
        };
        let candidate = base.with_file_name(format!("{name}.{what}-{stamp}{suffix}"));
        if !safe::exists(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

fn io_error(path: &Path, what: &str, e: io::Error) -> ResolveError {
    ResolveError(format!("{}: {what}: {e}", path.display()))
}

/// Moves `from` to a free name under `conflicts/resolved/` (never replacing anything).
fn set_aside_resolved(
    store: &Store,
    from: &Path,
    rel: &Path,
    what: &str,
) -> Result<PathBuf, ResolveError> {
    let to = resolved_name(store, rel, what);
    if let Some(dir) = to.parent() {
        safe::create_dir_all(dir).map_err(|e| io_error(dir, "cannot create", e))?;
    }
    super::move_no_replace(from, &to).map_err(|e| io_error(from, "cannot set aside", e))?;
    Ok(to)
}

/// Where a daemon sets aside the conflict copy `path`: `conflicts/<its folder in the store>/`,
/// so `conflicts` and `conflicts resolve` know its original.
pub fn set_aside_path(store: &Store, path: &Path) -> PathBuf {
    let dir = store.conflicts_dir();
    let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
    match path
        .parent()
        .and_then(|p| p.strip_prefix(store.root()).ok())
    {
        Some(rel) => dir.join(rel).join(name),
        None => dir.join(name),
    }
}

fn relative(store: &Store, p: &Path) -> String {
    p.strip_prefix(store.root())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// Resolves the conflict copy at `path` (absolute or relative to the store root).
///
/// Refused: a path outside the store or with `..`; a link anywhere on the way, or the copy or
/// the original being a link; something that is not a regular file or not a conflict copy; a
/// copy already under `conflicts/resolved/`; `--keep copy` for a copy whose original is not
/// known. Keeping the copy: the copy is flushed to disk, the original (if any) is hard-linked
/// into `conflicts/resolved/` (so it exists under one name or the other at every moment),
/// then the copy is renamed over the original and both folders are flushed.
pub fn resolve_conflict(store: &Store, path: &Path, keep: Keep) -> Result<Resolved, ResolveError> {
    let rel = store_relative(store, path)?;
    let abs = store.root().join(&rel);
    let meta = safe::symlink_metadata(&abs).map_err(|e| io_error(&abs, "cannot read", e))?;
    if meta.file_type().is_symlink() {
        return Err(ResolveError(format!(
            "{}: a symbolic link; refused (a conflict copy is a regular file)",
            abs.display()
        )));
    }
    if !meta.is_file() {
        return Err(ResolveError(format!(
            "{}: not a regular file; refused",
            abs.display()
        )));
    }
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(parsed) = parse_conflict_name(&name) else {
        return Err(ResolveError(format!(
            "{}: not a conflict copy (no engine's conflict marker in its name)",
            abs.display()
        )));
    };
    if rel.starts_with(Path::new("conflicts").join(RESOLVED)) {
        return Err(ResolveError(format!(
            "{}: already resolved (kept under conflicts/{RESOLVED}/)",
            abs.display()
        )));
    }
    let original = original_of(&rel, &parsed);
    match keep {
        Keep::Original => {
            let to = set_aside_resolved(store, &abs, &rel, "discarded")?;
            Ok(Resolved {
                kept: original
                    .map(|o| o.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                set_aside: Some(relative(store, &to)),
            })
        }
        Keep::Copy => {
            let Some(orig_rel) = original else {
                return Err(ResolveError(format!(
                    "{}: the file it is a copy of is not known (set aside by an older version); move it by hand",
                    abs.display()
                )));
            };
            let orig = store.root().join(&orig_rel);
            let loser = match safe::symlink_metadata(&orig) {
                Ok(m) if m.file_type().is_symlink() || !m.is_file() => {
                    return Err(ResolveError(format!(
                        "{}: the original is not a regular file (a link, folder or device); refused",
                        orig.display()
                    )));
                }
                Ok(_) => Some(resolved_name(store, &orig_rel, "replaced")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_error(&orig, "cannot read", e)),
            };
            // The winner is durable before anything else changes.
            safe::open_read(&abs)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_error(&abs, "cannot flush", e))?;
            if let Some(dir) = orig.parent() {
                safe::create_dir_all(dir).map_err(|e| io_error(dir, "cannot create", e))?;
            }
            if let Some(l) = &loser {
                if let Some(dir) = l.parent() {
                    safe::create_dir_all(dir).map_err(|e| io_error(dir, "cannot create", e))?;
                }
                safe::hard_link(&orig, l)
                    .and_then(|()| sync_parent(l))
                    .map_err(|e| io_error(&orig, "cannot keep the original", e))?;
            }
            // With no original, never replace one that appeared meanwhile.
            let put = if loser.is_some() {
                safe::rename(&abs, &orig)
            } else {
                safe::rename_noreplace(&abs, &orig)
            };
            put.and_then(|()| sync_parent(&orig))
                .and_then(|()| sync_parent(&abs))
                .map_err(|e| io_error(&abs, "cannot put the copy in place", e))?;
            Ok(Resolved {
                kept: orig_rel.to_string_lossy().into_owned(),
                set_aside: loser.map(|l| relative(store, &l)),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> (Engine, String, Option<String>) {
        let c = parse_conflict_name(name).unwrap_or_else(|| panic!("{name} not a copy"));
        (c.engine, c.original, c.device)
    }

    #[test]
    fn each_engines_copy_names_its_original_and_device() {
        assert_eq!(
            p("m1.sync-conflict-20251023-101010-ABCDEFG.json"),
            (Engine::Syncthing, "m1.json".into(), Some("ABCDEFG".into()))
        );
        assert_eq!(
            p("a.b.sync-conflict-20251023-101010-XYZ1234.log"),
            (Engine::Syncthing, "a.b.log".into(), Some("XYZ1234".into()))
        );
        assert_eq!(
            p("m1 (chenry's conflicted copy 2025-10-23).json"),
            (Engine::Dropbox, "m1.json".into(), Some("chenry".into()))
        );
        assert_eq!(
            p("m1 (laptop's conflicted copy 2025-10-23 (1)).json"),
            (Engine::Dropbox, "m1.json".into(), Some("laptop".into()))
        );
        assert_eq!(
            p("m1 (conflicted copy 2025-10-23 101010).json"),
            (Engine::Nextcloud, "m1.json".into(), None)
        );
        assert_eq!(
            p("m1_conflict-20251023-101010.json"),
            (Engine::Owncloud, "m1.json".into(), None)
        );
        assert_eq!(
            p("m1 (conflict 2025-10-23 101010).json"),
            (Engine::Unknown, "m1.json".into(), None)
        );
        assert!(parse_conflict_name("m1.json").is_none());
        assert_eq!(
            conflict_label("x.sync-conflict-20251023-101010-ABCDEFG.json"),
            "Syncthing conflict copy"
        );
    }
}
