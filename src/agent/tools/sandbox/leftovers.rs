//! What a confined process may leave behind in its writable project that would make the
//! user's later, unconfined git or coding agent run a program (issue 28, sandbox4): a nested
//! repository (`sub/.git`, a bare-shaped directory, a submodule's or linked worktree's git
//! directory under `.git/`) whose `config` names a program (`core.fsmonitor`, `diff.external`,
//! an alias, an include…), hooks, a `commondir` or a `.git` file leading out, a symlink to a
//! repository in another writable tree; a nested agent settings file (`.claude/settings.json`
//! with hooks, `.codex/config.toml`) or Mercurial `hgrc`. The user's plain `git status` in the
//! project runs the `core.fsmonitor` of every submodule the index names (a gitlink the
//! command added), and any git in a subdirectory reads the nearest repository.
//!
//! Landlock grants by tree and cannot refuse a name, so these are found after each command
//! (and session, and job): [`Snapshot::take`] records what is there at the start, and
//! [`Snapshot::sweep`] moves aside (`NAME.refused-by-sandbox`) each such file that is new or
//! changed since and names a program (a git config is read with an allow-list of the keys
//! `git init`, `clone`, `remote`, `branch`, `submodule` and `worktree` write: any other key
//! counts as naming one). The project's own `.git` (hooks, config: read-only by bind mount;
//! `commondir`, `config.worktree`: [`super::session::absent_steering`]) is left to those.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Most directory entries looked at in one walk; a larger project is swept up to it and the
/// sweep says so.
const MAX_ENTRIES: usize = 1_000_000;

/// The suffix of what a sweep moved aside.
pub const ASIDE: &str = ".refused-by-sandbox";

/// Git config keys that run nothing: `section.key` or `section.*.key` (lower case).
const SAFE_GIT_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.worktree",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.longpaths",
    "core.sharedrepository",
    "core.checkstat",
    "core.trustctime",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.push",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.mirror",
    "remote.*.promisor",
    "remote.*.partialclonefilter",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.pushremote",
    "branch.*.description",
    "submodule.*.url",
    "submodule.*.active",
    "submodule.*.branch",
    "extensions.objectformat",
    "extensions.worktreeconfig",
    "extensions.refstorage",
    "extensions.partialclone",
    "extensions.preciousobjects",
    "extensions.noop",
    "user.name",
    "user.email",
    "init.defaultbranch",
    "lfs.repositoryformatversion",
    "gc.auto",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "fetch.prune",
];

/// Agent and Mercurial settings a later session obeys, by the directory they are in.
const AGENT_FILES: &[(&str, &str)] = &[
    (".claude", "settings.json"),
    (".claude", "settings.local.json"),
    (".codex", "config.toml"),
    (".hg", "hgrc"),
];

/// An inode's identity and last change, to tell a file the command made or changed from one
/// that was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn stamp(p: &Path) -> Option<Stamp> {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// `read_dir`, also of a directory made unlistable but left searchable (mode 0311): git
/// still reaches `d/sub/.git` or `hooks/post-checkout` through it by name, so the sweep must
/// see in. Such a directory of this process's own user (the confined process runs as that
/// user) is made readable for the moment it is opened, then given its mode back. Root reads
/// it anyway; one of another user is left (the confined process could not have made it).
fn read_dir_unhidden(d: &Path) -> std::io::Result<std::fs::ReadDir> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::read_dir(d) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let m = std::fs::symlink_metadata(d)?;
            if !m.is_dir() || m.uid() != nix::unistd::geteuid().as_raw() {
                return Err(e);
            }
            let mode = m.permissions();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode.mode() | 0o500))?;
            let entries = std::fs::read_dir(d);
            if let Err(e) = std::fs::set_permissions(d, mode) {
                tracing::warn!("cannot give {} its mode back: {e}", d.display());
            }
            entries
        }
        r => r,
    }
}

/// Why a file would steer a later session, or `None` when it is harmless.
type Verdict = Option<String>;

/// The steering files under a project as they were at the start.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    root: PathBuf,
    own_git: PathBuf,
    /// The other trees the confined process may write (its scratch directory, an agent's
    /// state): a link into one of them leads to what it may have planted; a link anywhere
    /// else leads to what it could not change, which the sweep never touches.
    writable: Vec<PathBuf>,
    seen: HashMap<PathBuf, Stamp>,
}

impl Snapshot {
    /// Record the steering files under `root` now.
    pub fn take(root: &Path, writable: &[PathBuf]) -> Snapshot {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let mut s = Snapshot {
            own_git: root.join(".git"),
            root,
            writable: writable
                .iter()
                .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
                .collect(),
            seen: HashMap::new(),
        };
        let mut found = Vec::new();
        s.walk(&mut |p, _| found.push(p));
        s.seen = found
            .into_iter()
            .filter_map(|p| Some((p.clone(), stamp(&p)?)))
            .collect();
        s
    }

    /// Move aside every steering file new or changed since [`Snapshot::take`] that would run
    /// a program; one line each, for the command's result or the job's record.
    pub fn sweep(&self) -> Vec<String> {
        let mut bad: Vec<(PathBuf, String)> = Vec::new();
        let complete = self.walk(&mut |p, why| {
            if let Some(why) = why
                && stamp(&p).is_some_and(|st| self.seen.get(&p) != Some(&st))
            {
                bad.push((p, why));
            }
        });
        let mut lines: Vec<String> = bad
            .into_iter()
            .map(|(p, why)| match move_aside(&p) {
                Ok(to) => format!(
                    "{} was made or changed here and moved aside to {}: {why}",
                    p.display(),
                    to.display()
                ),
                Err(e) => format!(
                    "{} was made or changed here and could not be moved aside ({e}): {why}",
                    p.display()
                ),
            })
            .collect();
        if !complete {
            lines.push(format!(
                "{} has more than {MAX_ENTRIES} entries: only that many were checked for files \
                 that would steer git or an agent",
                self.root.display()
            ));
        }
        lines
    }

    /// Visit every steering file under the root with its verdict; false when the walk
    /// stopped at [`MAX_ENTRIES`].
    fn walk(&self, visit: &mut dyn FnMut(PathBuf, Verdict)) -> bool {
        let mut stack = vec![self.root.clone()];
        let mut seen = 0usize;
        while let Some(d) = stack.pop() {
            let Ok(entries) = read_dir_unhidden(&d) else {
                self.check_dir(&d, visit);
                continue;
            };
            // Only a directory with a `HEAD` or `.git` in it, or an agent's settings
            // directory, has anything to check (no further look-ups for the others).
            let mut steers = d
                .file_name()
                .is_some_and(|n| AGENT_FILES.iter().any(|(dir, _)| n == *dir));
            for e in entries.flatten() {
                seen += 1;
                if seen > MAX_ENTRIES {
                    return false;
                }
                let name = e.file_name();
                steers |= name == "HEAD" || name == ".git";
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(e.path());
                } else if ft.is_symlink() {
                    // A link to a repository in another writable tree (a Claude job's
                    // ~/.claude, the scratch directory): git follows it.
                    if let Ok(t) = e.path().canonicalize()
                        && t.is_dir()
                        && !t.starts_with(&self.root)
                        && self.writable.iter().any(|w| t.starts_with(w))
                    {
                        self.check_dir(&t, visit);
                        self.check_dir(&t.join(".git"), visit);
                    }
                }
            }
            if steers {
                self.check_dir(&d, visit);
            }
        }
        true
    }

    /// The steering files of one directory: its own if it is a git directory (it holds
    /// `HEAD`), a `.git` file or link in it, the agent settings it holds.
    fn check_dir(&self, d: &Path, visit: &mut dyn FnMut(PathBuf, Verdict)) {
        if d.join("HEAD").symlink_metadata().is_ok() && d != self.own_git {
            for name in ["config", "config.worktree"] {
                let p = d.join(name);
                if p.symlink_metadata().is_ok() {
                    let v = git_config_verdict(&p);
                    visit(p, v);
                }
            }
            let p = d.join("commondir");
            if p.symlink_metadata().is_ok() {
                let v = self.commondir_verdict(d, &p);
                visit(p, v);
            }
            let hooks = d.join("hooks");
            match hooks.symlink_metadata() {
                Ok(m) if m.file_type().is_symlink() => {
                    visit(hooks, Some("a link for git's hooks".into()));
                }
                Ok(m) if m.is_dir() => {
                    for e in read_dir_unhidden(&hooks).into_iter().flatten().flatten() {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        // Git runs neither its samples nor what an earlier sweep moved aside.
                        if !name.ends_with(".sample") && !name.contains(ASIDE) {
                            visit(e.path(), Some("a git hook runs as a program".into()));
                        }
                    }
                }
                _ => {}
            }
        }
        let dotgit = d.join(".git");
        if let Ok(m) = dotgit.symlink_metadata()
            && !m.is_dir()
            && dotgit != self.own_git
        {
            let v = self.pointer_verdict(d, &dotgit, m.file_type().is_symlink());
            visit(dotgit, v);
        }
        if d == self.root {
            // The project's own agent settings: bound read-only or swept by `session`.
            return;
        }
        if let Some(name) = d.file_name().and_then(|n| n.to_str()) {
            for (dir, file) in AGENT_FILES {
                if name == *dir {
                    let p = d.join(file);
                    if p.symlink_metadata().is_ok() {
                        visit(
                            p,
                            Some("a later session in that directory obeys it".to_string()),
                        );
                    }
                }
            }
        }
    }

    /// A `commondir` is harmless only where it leads to the project's own git directory (a
    /// linked worktree's).
    fn commondir_verdict(&self, gitdir: &Path, p: &Path) -> Verdict {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let target = gitdir.join(text.trim_end_matches(['\n', '\r']));
        let own = self.own_git.canonicalize().ok();
        if target.canonicalize().ok().is_some_and(|t| Some(t) == own) {
            None
        } else {
            Some("a commondir makes git read another repository's config".into())
        }
    }

    /// A `.git` file (`gitdir: PATH`) or link is harmless where it leads into the project
    /// (whose git directories this sweep reads).
    fn pointer_verdict(&self, d: &Path, p: &Path, link: bool) -> Verdict {
        let target = if link {
            p.canonicalize().ok()
        } else {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| {
                    t.strip_prefix("gitdir:")
                        .map(|t| d.join(t.trim_end_matches(['\n', '\r']).trim_start()))
                })
                .and_then(|t| t.canonicalize().ok())
        };
        match target {
            Some(t) if t.starts_with(&self.root) => None,
            None => None,
            Some(_) => {
                Some("a .git leading out of the project makes git read a repository there".into())
            }
        }
    }
}

/// Whether a git config file names nothing but [`SAFE_GIT_KEYS`]; why not.
fn git_config_verdict(p: &Path) -> Verdict {
    let meta = std::fs::symlink_metadata(p).ok()?;
    if !meta.is_file() {
        return Some("a git config that is not a plain file".into());
    }
    let Ok(text) = std::fs::read_to_string(p) else {
        return Some("a git config that is not text".into());
    };
    match unsafe_git_key(&text) {
        Ok(None) => None,
        Ok(Some(key)) => Some(format!("git config `{key}` may run a program")),
        Err(()) => Some("a git config this sweep cannot read (git might)".into()),
    }
}

/// The first key of a git config outside [`SAFE_GIT_KEYS`] (`Err` when the text is not
/// plainly readable: anything unusual counts against it).
fn unsafe_git_key(text: &str) -> Result<Option<String>, ()> {
    let mut section = String::new();
    let mut sub = false;
    let mut lines = text.lines();
    while let Some(raw) = lines.next() {
        let mut line = raw.trim_start();
        if line.starts_with('[') {
            let end = line.find(']').ok_or(())?;
            let header = &line[1..end];
            let (name, rest) = header.split_once([' ', '\t', '.']).unwrap_or((header, ""));
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(());
            }
            section = name.to_ascii_lowercase();
            sub = !rest.is_empty();
            line = line[end + 1..].trim_start();
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let name_len = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(line.len());
        let key = line[..name_len].to_ascii_lowercase();
        let after = line[name_len..].trim_start();
        if key.is_empty()
            || section.is_empty()
            || !(after.is_empty()
                || after.starts_with('=')
                || after.starts_with('#')
                || after.starts_with(';'))
        {
            return Err(());
        }
        let full = if sub {
            format!("{section}.*.{key}")
        } else {
            format!("{section}.{key}")
        };
        if !SAFE_GIT_KEYS.contains(&full.as_str()) {
            return Ok(Some(full));
        }
        // A value continued on the next line (`\` at its end, outside a comment) is not a
        // key there.
        let mut quoted = false;
        let mut cont = continues(after.strip_prefix('=').unwrap_or(""), &mut quoted);
        while cont {
            cont = continues(lines.next().ok_or(())?, &mut quoted);
        }
    }
    Ok(None)
}

/// Whether a git config value goes on past this line: a `\` at its end, not in a comment
/// (`#`, `;` outside quotes end the line's value); `quoted` carries an open quote.
fn continues(value: &str, quoted: &mut bool) -> bool {
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.next().is_none() => return true,
            '"' => *quoted = !*quoted,
            '#' | ';' if !*quoted => return false,
            _ => {}
        }
    }
    false
}

/// Rename `p` to `p.refused-by-sandbox` (`.1`, `.2`… when taken), never following a link.
pub fn move_aside(p: &Path) -> std::io::Result<PathBuf> {
    let mut aside = p.as_os_str().to_owned();
    aside.push(ASIDE);
    let mut target = PathBuf::from(&aside);
    let mut n = 0;
    while std::fs::symlink_metadata(&target).is_ok() && n < 100 {
        n += 1;
        target = PathBuf::from(format!("{}.{n}", aside.to_string_lossy()));
    }
    std::fs::rename(p, &target).map(|()| target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_config_keys_that_run_nothing_pass_and_all_else_does_not() {
        let init = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                    \tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://x/y\n\
                    \tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\
                    \tremote = origin\n\tmerge = refs/heads/main\n";
        assert_eq!(unsafe_git_key(init), Ok(None));
        for (text, key) in [
            ("[core]\n\tfsmonitor = \"touch x\"\n", "core.fsmonitor"),
            ("[core] fsmonitor = x\n", "core.fsmonitor"),
            ("[CORE]\n\tFsMonitor\n", "core.fsmonitor"),
            ("[diff]\n\texternal = x\n", "diff.external"),
            ("[diff \"a\"]\n\ttextconv = x\n", "diff.*.textconv"),
            ("[include]\n\tpath = ../x\n", "include.path"),
            ("[alias]\n\tst = !touch x\n", "alias.st"),
            ("[core.x]\n\tpager = x\n", "core.*.pager"),
            (
                "[user]\n\tname = a \\\n\tfsmonitor\n[core]\n\thookspath=h\n",
                "core.hookspath",
            ),
            ("[remote \"o\"]\n\tuploadpack = x\n", "remote.*.uploadpack"),
            (
                "[core]\n\tbare = true ;\\\n\tfsmonitor = x\n",
                "core.fsmonitor",
            ),
            (
                "[user]\n\tname = \"a;\\\n\tb\"\n\teditor = x\n",
                "user.editor",
            ),
        ] {
            assert_eq!(unsafe_git_key(text), Ok(Some(key.to_string())), "{text}");
        }
        for odd in [
            "[core\n\tbare = true\n",
            "bare = true\n",
            "[core]\n\t\"x\" = 1\n",
        ] {
            assert_eq!(unsafe_git_key(odd), Err(()), "{odd}");
        }
    }

    /// Issue 28, sandbox4 (found trying the sweep as an attacker): a link from the project to
    /// a repository the confined process could not write (the user's other project) must
    /// not make the sweep — which runs unconfined, as root in the worker — move that
    /// repository's config or hooks; one in a tree the process could write (its scratch
    /// directory) is swept.
    #[test]
    fn a_link_to_a_repository_the_sandbox_could_not_write_moves_nothing_there() {
        let t = tempfile::tempdir().unwrap();
        let (root, other, scratch) = (
            t.path().join("p"),
            t.path().join("other"),
            t.path().join("s"),
        );
        for (d, _) in [(&other, 0), (&scratch.join("evil"), 1)] {
            std::fs::create_dir_all(d.join(".git/hooks")).unwrap();
            std::fs::write(d.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(d.join(".git/config"), "[alias]\n\tx = !true\n").unwrap();
            std::fs::write(d.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        }
        std::fs::create_dir_all(&root).unwrap();
        let snap = Snapshot::take(&root, std::slice::from_ref(&scratch));
        std::os::unix::fs::symlink(&other, root.join("mine")).unwrap();
        std::os::unix::fs::symlink(scratch.join("evil"), root.join("planted")).unwrap();
        let lines = snap.sweep();
        for f in [".git/config", ".git/hooks/pre-commit"] {
            assert!(
                other.join(f).exists(),
                "{f} of the user's other repository moved: {lines:?}"
            );
            assert!(
                !scratch.join("evil").join(f).exists(),
                "{f} in scratch left: {lines:?}"
            );
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
    }
}
