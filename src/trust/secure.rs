//! The secure-path check (as sudo and OpenSSH check what they trust): a file a privileged
//! process reads as configuration or executes is trusted only when it, every folder above
//! it, and every folder above the file a link leads to are owned by root or by an account
//! allowed for that use, and none of them can be changed by anyone else (no group or world
//! write; a world-writable folder only with the sticky bit, like `/tmp`, where nobody may
//! replace another account's entry).

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why a path is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {why}")]
pub struct Insecure {
    /// The file or folder at fault.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

/// What one path element looks like, for [`judge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element {
    /// Owner uid.
    pub uid: u32,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
}

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

/// The rule for one element (pure): owned by one of `owners`, and not writable by group or
/// others — except a folder with the sticky bit (its entries cannot be replaced by others;
/// the next element's owner is checked on its own).
pub fn judge(e: Element, owners: &[u32]) -> Result<(), String> {
    if !owners.contains(&e.uid) {
        return Err(format!(
            "is owned by uid {}, not by {}",
            e.uid,
            owners
                .iter()
                .map(|u| format!("uid {u}"))
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    let kind = e.mode & S_IFMT;
    if kind == S_IFLNK {
        // A link's own mode bits mean nothing; the folder holding it is checked.
        return Ok(());
    }
    if e.mode & 0o022 != 0 && !(kind == S_IFDIR && e.mode & 0o1000 != 0) {
        return Err(format!(
            "is writable by {} (mode {:o})",
            if e.mode & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            },
            e.mode & 0o7777
        ));
    }
    Ok(())
}

fn element(p: &Path) -> Result<Element, Insecure> {
    let m = std::fs::symlink_metadata(p).map_err(|e| Insecure {
        path: p.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    Ok(Element {
        uid: m.uid(),
        mode: m.mode(),
    })
}

/// Checks `path` (absolute, without `..`) and every folder above it, element by element as
/// written (a link is checked where it stands), then the same for the path the links lead
/// to. Returns that resolved path: the one to open or execute.
pub fn check(path: &Path, owners: &[u32]) -> Result<PathBuf, Insecure> {
    let bad = |why: &str| Insecure {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    if !path.is_absolute() {
        return Err(bad("is not an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(bad("has a . or .. element"));
    }
    check_chain(path, owners)?;
    let real = std::fs::canonicalize(path).map_err(|e| bad(&format!("cannot be resolved: {e}")))?;
    if real != path {
        check_chain(&real, owners)?;
    }
    Ok(real)
}

fn check_chain(path: &Path, owners: &[u32]) -> Result<(), Insecure> {
    let mut prefix = PathBuf::new();
    for c in path.components() {
        prefix.push(c);
        judge(element(&prefix)?, owners).map_err(|why| Insecure {
            path: prefix.clone(),
            why,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn el(uid: u32, mode: u32) -> Element {
        Element { uid, mode }
    }

    #[test]
    fn owners_and_write_bits() {
        let owners = [0, 1000];
        assert!(judge(el(0, 0o100_755), &owners).is_ok());
        assert!(judge(el(1000, 0o100_700), &owners).is_ok());
        assert!(judge(el(0, 0o040_755), &owners).is_ok());
        // Someone else's file or folder.
        let e = judge(el(1001, 0o100_755), &owners).unwrap_err();
        assert!(e.contains("uid 1001"), "{e}");
        // Group- or world-writable.
        assert!(
            judge(el(0, 0o100_775), &owners)
                .unwrap_err()
                .contains("group")
        );
        assert!(
            judge(el(0, 0o040_777), &owners)
                .unwrap_err()
                .contains("everyone")
        );
        assert!(judge(el(1000, 0o100_757), &owners).is_err());
        // A sticky folder (like /tmp) may be world-writable; a sticky file may not.
        assert!(judge(el(0, 0o041_777), &owners).is_ok());
        assert!(judge(el(0, 0o101_777), &owners).is_err());
        // A link is judged by its owner only (the folder holding it is checked too).
        assert!(judge(el(0, 0o120_777), &owners).is_ok());
        assert!(judge(el(1001, 0o120_777), &owners).is_err());
    }

    #[test]
    fn chains_of_real_files() {
        let me = nix::unistd::geteuid().as_raw();
        let owners = [0, me];
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("bin");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let prog = dir.join("prog");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(check(&prog, &owners).unwrap(), prog);
        // Relative paths and `..` are refused as such.
        assert!(check(Path::new("bin/prog"), &owners).is_err());
        assert!(check(&dir.join("../bin/prog"), &owners).is_err());
        // Owned by an account not allowed.
        let e = check(&prog, &[u32::MAX - 7]).unwrap_err();
        assert!(e.why.contains("owned by uid"), "{e}");
        // A group-writable folder above it.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = check(&prog, &owners).unwrap_err();
        assert_eq!(e.path, dir);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A link in a trusted folder to a program in a world-writable one: the target's
        // folders are checked too.
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let planted = open.join("evil");
        std::fs::write(&planted, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = dir.join("claude");
        std::os::unix::fs::symlink(&planted, &link).unwrap();
        let e = check(&link, &owners).unwrap_err();
        assert_eq!(e.path, open, "{e}");
        // A missing file.
        assert!(check(&dir.join("nothing"), &owners).is_err());
    }
}
