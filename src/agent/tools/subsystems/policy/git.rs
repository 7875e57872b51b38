//! git under the policy: which subcommands and options read only, while the config files git
//! reads name no program, and what `REV:path` operands and history may show.

use super::*;

/// The keys of a repository's git config that make read-only git commands run programs.
const GIT_CONFIG_DANGER: &[&str] = &[
    "fsmonitor",
    "external",
    "textconv",
    "pager",
    "editor",
    "sshcommand",
    "hookspath",
    "filter",
    "process",
    "command",
    "program",
    "helper",
    "include",
    "askpass",
    "alias",
    "worktree",
    "proxy",
    "exec",
];

impl Policy {
    pub(super) fn judge_git(&self, args: &[String]) -> Result<(), String> {
        let Some(sub) = args.first() else {
            return Ok(());
        };
        if sub.starts_with('-') && sub != "--version" {
            return Err(format!(
                "`git` with global option `{sub}` (-c, -C, --git-dir, --exec-path, -p …) is not judged read-only"
            ));
        }
        self.git_config_is_plain()?;
        let rest = &args[1..];
        self.judge_git_sub(sub, rest)?;
        // `git grep` reads every tracked file, like `grep -r`: unless it is limited to named
        // files, no file under the root may hold a secret or be a `.env`.
        if sub == "grep" && prints_history(&self.root, sub, rest) {
            self.scan_tree(&self.root, true)
                .map_err(|why| format!("`git grep` {why}"))?;
        }
        if prints_history(&self.root, sub, rest) && self.history_has_credentials() {
            return Err(format!(
                "`git {sub}` prints content from the repository's history, which holds a \
                 credentials file (.env); name the paths after `--` to read others"
            ));
        }
        Ok(())
    }

    fn judge_git_sub(&self, sub: &str, rest: &[String]) -> Result<(), String> {
        let only = |allowed: &[&str]| -> Result<(), String> {
            match rest.iter().find(|a| !allowed.contains(&a.as_str())) {
                Some(a) => Err(format!(
                    "`git {sub}` with `{a}` is not known to be read-only"
                )),
                None => Ok(()),
            }
        };
        match sub {
            "branch" => {
                return only(&["-a", "-r", "-v", "-vv", "--list", "-l", "--show-current"]);
            }
            "tag" => return only(&["-l", "--list"]),
            "remote" => return only(&["-v"]),
            "stash" => {
                return match rest.first().map(String::as_str) {
                    Some("list") if rest.len() == 1 => Ok(()),
                    Some("show") => self.git_args(sub, &rest[1..]),
                    _ => Err(format!(
                        "`git stash` {} is not known to be read-only",
                        rest.join(" ")
                    )),
                };
            }
            "config" => {
                return match rest {
                    [a] if a == "--list" || a == "-l" => Ok(()),
                    [a, _] if a == "--get" || a == "--get-all" || a == "--get-regexp" => Ok(()),
                    _ => Err("`git config` is read-only only as --list or --get NAME".into()),
                };
            }
            _ => {}
        }
        self.git_args(sub, rest)
    }

    fn git_args(&self, sub: &str, rest: &[String]) -> Result<(), String> {
        let Some((flags, values)) = commands::git_options(sub) else {
            return Err(format!("`git {sub}` is not known to be read-only"));
        };
        let mut i = 0;
        let mut after_dashes = false;
        while i < rest.len() {
            let a = rest[i].as_str();
            i += 1;
            if after_dashes || !a.starts_with('-') {
                self.confine_git_operand(a)?;
                continue;
            }
            if a == "--" {
                after_dashes = true;
                continue;
            }
            if flags.contains(&a) {
                continue;
            }
            // -5 (a count) for the log family
            if matches!(sub, "log" | "shortlog" | "rev-list" | "whatchanged")
                && a.len() > 1
                && a[1..].chars().all(|c| c.is_ascii_digit())
            {
                continue;
            }
            if let Some((name, _)) = a.split_once('=')
                && a.starts_with("--")
                && values.contains(&name)
            {
                continue;
            }
            if values.contains(&a) {
                if i >= rest.len() {
                    return Err(format!("`git {sub}` option {a} needs a value"));
                }
                i += 1;
                continue;
            }
            // An attached short value: -n5, -Sfoo, -U3.
            if !a.starts_with("--") && a.len() > 2 && values.contains(&&a[..2]) {
                continue;
            }
            return Err(format!(
                "`git {sub}` with option `{a}` is not known to be read-only"
            ));
        }
        Ok(())
    }

    /// Read-only git commands still run programs the repository's own config names
    /// (`diff.external`, textconv and filter drivers, includes) that command-line config
    /// cannot turn off (see `git_guard`): allow them only when the config files git will
    /// read name none, and only when git reads no config from elsewhere.
    fn git_config_is_plain(&self) -> Result<(), String> {
        let files = git_guard::config_files(&self.root).map_err(|why| format!("`git`: {why}"))?;
        for path in files {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t.to_ascii_lowercase(),
                Err(e) => {
                    return Err(format!("`git`: cannot read {}: {e}", path.display()));
                }
            };
            if let Some(key) = GIT_CONFIG_DANGER.iter().find(|k| text.contains(*k)) {
                return Err(format!(
                    "`git`: the repository's {} mentions `{key}`, which can make git run a program",
                    path.display()
                ));
            }
        }
        Ok(())
    }

    /// Whether any commit of the repository touched a `.env` file (asked of git once, with
    /// the hardened environment, bounded in time; an unanswered question counts as yes).
    fn history_has_credentials(&self) -> bool {
        *self.history_credentials.get_or_init(|| {
            let (git_dir, _) = git_guard::repository(&self.root);
            if !git_dir.exists() {
                return false;
            }
            let mut cmd = std::process::Command::new("git");
            cmd.args([
                "log",
                "--all",
                "-1",
                "--format=%H",
                "--",
                ":(glob)**/.env",
                ":(glob)**/.env.*",
            ])
            .current_dir(&self.root)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(git_guard::owns) {
                    cmd.env_remove(name);
                }
            }
            cmd.envs(git_guard::hardening_env(&self.root));
            let Ok(mut child) = cmd.spawn() else {
                // Without git, no git command prints anything.
                return false;
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        let mut out = String::new();
                        if let Some(mut o) = child.stdout.take() {
                            use std::io::Read;
                            let _ = o.read_to_string(&mut out);
                        }
                        // A repository git cannot read has no history to print either.
                        return status.success() && !out.trim().is_empty();
                    }
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return true;
                    }
                }
            }
        })
    }

    /// A git operand: a revision, a path, or `REV:PATH` (`HEAD~1:.env` reads that file as it
    /// was: the same path rules as a plain read). Pathspec magic (`:(top)`, `:/`, `:!`) and
    /// message searches are not judged.
    fn confine_git_operand(&self, word: &str) -> Result<(), String> {
        let path = match word.split_once(':') {
            None => word,
            Some(("", rest)) => {
                // `:PATH`, `:N:PATH` (index stages), or magic
                let rest = match rest.split_once(':') {
                    Some((stage, p))
                        if stage.len() == 1 && stage.chars().all(|c| c.is_ascii_digit()) =>
                    {
                        p
                    }
                    _ => rest,
                };
                if rest.starts_with(['(', '/', '!', '^']) {
                    return Err(format!(
                        "`git` operand `{word}` uses pathspec magic or a message search"
                    ));
                }
                rest
            }
            Some((_rev, p)) => p,
        };
        if path.is_empty() {
            return Ok(());
        }
        self.confine_str(path.strip_prefix("./").unwrap_or(path))
    }
}

/// Whether `git SUB ARGS` prints file content from history (diffs, blobs, matches) or answers
/// questions about it (`-S`, `-G`), for more than explicitly named plain paths.
fn prints_history(root: &Path, sub: &str, args: &[String]) -> bool {
    let content = match sub {
        "show" | "diff" | "grep" | "cat-file" | "stash" => true,
        "log" | "whatchanged" => args.iter().any(|a| {
            let a = a.as_str();
            matches!(
                a,
                "-p" | "--patch"
                    | "-u"
                    | "--patch-with-stat"
                    | "--patch-with-raw"
                    | "--cc"
                    | "--word-diff"
                    | "--color-words"
                    | "--full-diff"
            ) || a.starts_with("-S")
                || a.starts_with("-G")
                || a.starts_with("-U")
                || a.starts_with("-L")
                || a.starts_with("--unified")
                || a.starts_with("--word-diff")
                || a.starts_with("--pickaxe")
        }),
        _ => false,
    };
    if !content {
        return false;
    }
    // Limited to files named after `--` (each an existing regular file of the work tree, not
    // a folder or a pattern, which history may hold a `.env` under): the path rules judge
    // those.
    match args.iter().position(|a| a == "--") {
        Some(i) if i + 1 < args.len() => args[i + 1..].iter().any(|p| {
            p.contains(['*', '?', '[', ':'])
                || !root.join(p).symlink_metadata().is_ok_and(|m| m.is_file())
        }),
        _ => true,
    }
}
