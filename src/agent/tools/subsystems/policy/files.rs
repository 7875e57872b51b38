//! Where a read may go: file operands resolved (symlinks followed) inside the project root,
//! `find`'s start points and path predicates, files holding a guarded secret value, and the
//! trees a recursive read would walk.

use super::*;

impl Policy {
    pub(super) fn judge_find(&self, args: &[String]) -> Result<(), String> {
        let mut i = 0;
        // Start points come first, up to the first predicate.
        while i < args.len() && !args[i].starts_with('-') && args[i] != "(" && args[i] != "!" {
            self.confine_str(&args[i])?;
            i += 1;
        }
        while i < args.len() {
            let a = args[i].as_str();
            i += 1;
            if commands::find_path_predicate(a) {
                let Some(v) = args.get(i) else {
                    return Err(format!("{a} needs a file"));
                };
                self.confine_str(v)?;
                i += 1;
                continue;
            }
            match commands::find_predicate(a) {
                Some(n) => i += n,
                None => {
                    return Err(format!(
                        "with `{a}` is not known to be read-only (-exec, -delete, -fprint, -L … run commands, write or leave the tree)"
                    ));
                }
            }
        }
        Ok(())
    }

    pub(super) fn confine_str(&self, word: &str) -> Result<(), String> {
        self.confine(word).map_err(|d| d.reason)
    }

    /// A file operand must resolve (symlinks included) inside the root and must not be a
    /// credentials file.
    pub(super) fn confine(&self, word: &str) -> Result<(), Decision> {
        if word == "-" || word == "/dev/null" || word == "SECRET" {
            return Ok(());
        }
        let path = Path::new(word);
        if let Some(name) = path.file_name().and_then(|n| n.to_str())
            && (name == ".env" || name.starts_with(".env."))
        {
            return Err(Decision::deny(CREDENTIALS));
        }
        let outside = || Decision::ask(format!("`{word}` is outside the project root"));
        let joined = self.root.join(path);
        let resolved = resolve(&joined).ok_or_else(outside)?;
        if !resolved.starts_with(&self.root) {
            return Err(outside());
        }
        if let Some(name) = resolved.file_name().and_then(|n| n.to_str())
            && (name == ".env" || name.starts_with(".env."))
        {
            return Err(Decision::deny(CREDENTIALS));
        }
        if let Some(secret) = self.file_holds_secret(&resolved) {
            return Err(Decision::ask(format!(
                "`{word}` holds the secret {secret}: a program can print it in a form redaction \
                 does not know, or answer guesses about it"
            ))
            .every_time());
        }
        Ok(())
    }

    /// The name of a secret whose value the regular file at `path` holds (files up to
    /// [`SCAN_FILE_BYTES`]; a larger one is read in part).
    fn file_holds_secret(&self, path: &Path) -> Option<String> {
        use std::io::Read;
        if self.secret_values.is_empty() {
            return None;
        }
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let mut buf = Vec::new();
        let file = std::fs::File::open(path).ok()?;
        file.take(SCAN_FILE_BYTES).read_to_end(&mut buf).ok()?;
        self.secret_values
            .iter()
            .find(|(_, v)| {
                buf.windows(v.len())
                    .any(|w| w.eq_ignore_ascii_case(v.as_bytes()))
            })
            .map(|(n, _)| n.clone())
    }

    /// A recursive read (`grep -r`, `rg`) of `dir`: no credentials file and no file holding a
    /// secret may be in it (checked up to [`SCAN_TREE_ENTRIES`] entries; a larger tree is
    /// asked about).
    pub(super) fn scan_tree(&self, dir: &Path, only_tracked: bool) -> Result<(), String> {
        let mut stack = vec![dir.to_path_buf()];
        let mut seen = 0usize;
        let mut bytes = 0u64;
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                seen += 1;
                if seen > SCAN_TREE_ENTRIES {
                    return Err(format!(
                        "reads the tree under `{}` recursively, which is too large to check for credentials files",
                        dir.display()
                    ));
                }
                let path = e.path();
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name == ".env" || name.starts_with(".env.") {
                    return Err(format!(
                        "reads `{}` (credentials) recursively",
                        path.strip_prefix(&self.root).unwrap_or(&path).display()
                    ));
                }
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    // `git grep` reads tracked files only: git's own folder and the usual
                    // build output folders are not among them.
                    if only_tracked && matches!(&*name, ".git" | "target" | "node_modules") {
                        continue;
                    }
                    stack.push(path);
                } else if ft.is_file() && !self.secret_values.is_empty() {
                    bytes += e.metadata().map_or(0, |m| m.len().min(SCAN_FILE_BYTES));
                    if bytes > SCAN_TREE_BYTES {
                        return Err(format!(
                            "reads the tree under `{}` recursively, which is too large to check for secrets",
                            dir.display()
                        ));
                    }
                    let Some(secret) = self.file_holds_secret(&path) else {
                        continue;
                    };
                    return Err(format!(
                        "reads `{}`, which holds the secret {secret}, recursively",
                        path.strip_prefix(&self.root).unwrap_or(&path).display()
                    ));
                }
            }
        }
        Ok(())
    }

    /// For recursive readers, every directory operand (or `.` with none) is scanned.
    pub(super) fn judge_recursive(&self, program: &str, args: &[String]) -> Result<(), String> {
        let recursive = match program {
            "rg" => true,
            "grep" | "egrep" | "fgrep" => args.iter().any(|a| {
                a == "--recursive"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains(['r', 'R']))
            }),
            _ => false,
        };
        if !recursive {
            return Ok(());
        }
        let mut dirs: Vec<PathBuf> = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .filter_map(|a| resolve(&self.root.join(a)))
            .filter(|p| p.starts_with(&self.root) && p.is_dir())
            .collect();
        if dirs.is_empty() {
            dirs.push(self.root.clone());
        }
        for d in dirs {
            self.scan_tree(&d, false)?;
        }
        Ok(())
    }
}

/// Bytes of one file read to look for secret values.
const SCAN_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Bytes of a tree read (for secret values) before a recursive read is asked about.
const SCAN_TREE_BYTES: u64 = 32 * 1024 * 1024;

/// Entries of a tree walked before a recursive read is asked about.
const SCAN_TREE_ENTRIES: usize = 20_000;

/// Resolve `path` like `realpath -m`: symlinks followed (dangling ones too), the missing rest
/// appended; `None` when the missing rest climbs with `..` or links loop.
fn resolve(path: &Path) -> Option<PathBuf> {
    resolve_depth(path, 0)
}

fn resolve_depth(path: &Path, depth: usize) -> Option<PathBuf> {
    if depth > 40 {
        return None;
    }
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(meta) = std::fs::symlink_metadata(existing) {
            let base = if meta.file_type().is_symlink() {
                // A dangling link: resolve its target instead.
                let target = std::fs::read_link(existing).ok()?;
                let joined = existing.parent()?.join(target);
                resolve_depth(&joined, depth + 1)?
            } else {
                existing.canonicalize().ok()?
            };
            let mut out = base;
            for c in missing.iter().rev() {
                out.push(c);
            }
            return Some(out);
        }
        let name = existing.file_name()?;
        if Path::new(name)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return None;
        }
        missing.push(name.to_os_string());
        existing = existing.parent()?;
    }
}
