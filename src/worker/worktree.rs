//! A task job's own git worktree (issue 30), made and committed by the worker on the compute
//! host as the job's user (the project's owner), with the real `git` binary: branch
//! `agentstore/<prd>/<task>` from the project's current branch (or the branch of the task it
//! depends on, the other dependencies' branches merged in), in
//! `<project>/.agentstore-worktrees/<prd>/<task>`, so it lives where the repository lives
//! (the shared project path); a `.gitignore` of `*` in that folder keeps it out of the
//! project's own `git status`. Not under `.git/`: Claude Code treats
//! every path with a `.git` component as sensitive and, even with `acceptEdits`, asks before
//! each edit there, so an unattended task could change nothing. Concurrent tasks never share
//! a tree. A project that is not a git repository keeps the single tree, and the job says so.

use super::process::{AgentCommand, run_agent};
use super::runas::RunAs;
use crate::model::Job;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where a task job works.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The agent's working directory.
    pub cwd: PathBuf,
    /// The task's branch, when it has a worktree.
    pub branch: Option<String>,
    /// What was done, for `runtime.worktree`.
    pub note: String,
}

/// Runs git as the job's user.
pub struct Git {
    program: String,
    env: Vec<(String, String)>,
    switch_to: Option<RunAs>,
}

/// The task a job names: (prd, task id, branch, bases), from `supporting_data.task`.
fn task_fields(job: &Job) -> Option<(String, String, String, Vec<String>)> {
    let t = job.config.supporting_data.get("task")?;
    let s = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_string);
    let bases = t
        .get("bases")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Some((s("prd")?, s("id")?, s("branch")?, bases))
}

impl Git {
    /// git from the job's `PATH`, run as `switch_to` (else this account).
    pub fn new(
        env: Vec<(String, String)>,
        home: &Path,
        switch_to: Option<RunAs>,
    ) -> Result<Git, String> {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let program = super::project_side::find_program("git", path.as_deref(), home)
            .ok_or("git is not installed on this host (not on the job's PATH)")?;
        Ok(Git {
            program: program.display().to_string(),
            env,
            switch_to,
        })
    }

    /// `git -C dir args…`: Ok(stdout) on success, Err(stderr's last lines) otherwise.
    pub fn run(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        let mut a = vec!["-C".to_string(), dir.display().to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        self.exec(&self.program, a, &format!("git {}", args.join(" ")))
    }

    /// `/bin/sh -c script sh args…`, as git runs (the job's user, its environment).
    pub fn sh(&self, script: &str, args: &[&str]) -> Result<String, String> {
        let mut a = vec!["-c".to_string(), script.to_string(), "sh".to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        self.exec("/bin/sh", a, "sh")
    }

    fn exec(&self, program: &str, args: Vec<String>, what: &str) -> Result<String, String> {
        let cmd = AgentCommand {
            program: program.to_string(),
            args,
            prompt: String::new(),
            cwd: PathBuf::from("/"),
            env: self.env.clone(),
            switch_to: self.switch_to.clone(),
            sandbox: None,
        };
        let out = run_agent(&cmd, |_| {}, |_, _| {}).map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(out.stdout.end()).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            let err = String::from_utf8_lossy(out.stderr.end());
            let err: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = err[err.len().saturating_sub(6)..].join("; ");
            Err(format!("{what}: {}", tail.trim()))
        }
    }
}

/// The workspace of task job `job` in project folder `dir`; `None` for a job that is not a
/// task's. Errors name what is wrong (a dirty base, a path in the way, a failed checkout)
/// and leave nothing half-made behind.
/// `remote`: the project's `push_remote`, where an earlier attempt may have pushed the branch.
pub fn prepare(
    git: &Git,
    job: &Job,
    dir: &Path,
    remote: Option<&str>,
) -> Option<Result<Workspace, String>> {
    let (prd, task, branch, bases) = task_fields(job)?;
    Some(prepare_task(git, dir, &prd, &task, &branch, &bases, remote))
}

fn prepare_task(
    git: &Git,
    dir: &Path,
    prd: &str,
    task: &str,
    branch: &str,
    bases: &[String],
    remote: Option<&str>,
) -> Result<Workspace, String> {
    let top = match git.run(dir, &["rev-parse", "--show-toplevel"]) {
        Ok(t) => PathBuf::from(t.trim()),
        Err(_) => {
            return Ok(Workspace {
                cwd: dir.to_path_buf(),
                branch: None,
                note: format!(
                    "{} is not a git repository: the task worked in the project's single tree (no branch, no worktree)",
                    dir.display()
                ),
            });
        }
    };
    let path = top.join(WORKTREES).join(prd).join(task);
    // Worktrees whose folders are gone are forgotten first (a lost machine's, a removed one).
    git.run(&top, &["worktree", "prune"])?;
    let registered = git
        .run(&top, &["worktree", "list", "--porcelain"])?
        .lines()
        .any(|l| l.strip_prefix("worktree ").map(Path::new) == Some(path.as_path()));
    let branch_ref = format!("refs/heads/{branch}");
    let mut branch_exists = git
        .run(&top, &["rev-parse", "--verify", "--quiet", &branch_ref])
        .is_ok();
    let mut fetched = String::new();
    if !branch_exists && let Some(r) = remote {
        match fetch_missing(git, &top, r, branch) {
            // Pushed by an earlier attempt elsewhere: this attempt goes on from its commits.
            Ok(true) => {
                branch_exists = true;
                fetched = format!(" (fetched from {r}, where an earlier attempt pushed it)");
            }
            Ok(false) => {}
            // Said, not fatal: the push after the commit is refused rather than forced, so
            // nothing pushed before is overwritten.
            Err(e) => {
                fetched = format!(
                    " (started from the base: {e}; commits an earlier attempt pushed there are not in it)"
                )
            }
        }
    }
    if registered {
        // An earlier attempt's tree (a retry, a restart): whatever it left uncommitted is
        // half-written work; the branch's commits are kept, the rest reset.
        let dirty = git.run(&path, &["status", "--porcelain"])?;
        git.run(&path, &["reset", "--hard", "--quiet", &branch_ref])?;
        git.run(&path, &["clean", "-fdq"])?;
        let note = if dirty.trim().is_empty() {
            format!("reused the task's worktree {} on {branch}", path.display())
        } else {
            format!(
                "the task's worktree {} held half-written work from an earlier attempt ({} file(s)); reset to {branch}",
                path.display(),
                dirty.lines().count()
            )
        };
        return Ok(Workspace {
            cwd: path,
            branch: Some(branch.to_string()),
            note,
        });
    }
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(format!(
            "the task's worktree path {} exists and is not a worktree of this repository; move it away and retry the task",
            path.display()
        ));
    }
    if !branch_exists {
        // The base must be clean: work left uncommitted in the project would silently be
        // missing from every task's branch.
        let dirty = git.run(&top, &["status", "--porcelain", "--untracked-files=no"])?;
        if !dirty.trim().is_empty() {
            let files: Vec<&str> = dirty.lines().map(|l| l.get(3..).unwrap_or(l)).collect();
            return Err(format!(
                "the base branch in {} has uncommitted changes ({}); commit or stash them first",
                top.display(),
                files.join(", ")
            ));
        }
    }
    // The folder is made by the job's user (git makes the rest of the path, as that user).
    ignored_folder(git, &top)?;
    let made = if branch_exists {
        // Retried elsewhere: the branch keeps its commits.
        git.run(
            &top,
            &[
                "worktree",
                "add",
                "--quiet",
                &path.display().to_string(),
                branch,
            ],
        )
    } else {
        let base = bases.first().map(String::as_str).unwrap_or("HEAD");
        git.run(
            &top,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                branch,
                &path.display().to_string(),
                base,
            ],
        )
    };
    if let Err(e) = made {
        // A checkout that failed half-way (a full disk) leaves nothing behind.
        let _ = git.run(
            &top,
            &["worktree", "remove", "--force", &path.display().to_string()],
        );
        let _ = std::fs::remove_dir_all(&path);
        let _ = git.run(&top, &["worktree", "prune"]);
        if !branch_exists {
            let _ = git.run(&top, &["branch", "-D", branch]);
        }
        return Err(format!(
            "cannot make the task's worktree {}: {e}{}",
            path.display(),
            disk_note(path.parent().unwrap_or(&path))
        ));
    }
    if !branch_exists {
        for other in bases.iter().skip(1) {
            let msg = format!("agentstore: merge {other}");
            let mut args = identity(git, &path);
            args.extend([
                "merge",
                "--no-edit",
                "--quiet",
                "-m",
                msg.as_str(),
                other.as_str(),
            ]);
            if let Err(e) = git.run(&path, &args) {
                let conflicts = git
                    .run(&path, &["diff", "--name-only", "--diff-filter=U"])
                    .unwrap_or_default();
                let _ = git.run(&path, &["merge", "--abort"]);
                let files: Vec<&str> = conflicts.lines().collect();
                return Err(if files.is_empty() {
                    format!("the dependencies' branches do not merge: {other} into {branch}: {e}")
                } else {
                    format!(
                        "the dependencies' branches do not merge: {other} into {branch} conflicts in {}",
                        files.join(", ")
                    )
                });
            }
        }
    }
    Ok(Workspace {
        cwd: path.clone(),
        branch: Some(branch.to_string()),
        note: format!("worktree {} on branch {branch}{fetched}", path.display()),
    })
}

/// The folder of the project's tree that holds its tasks' worktrees.
pub const WORKTREES: &str = ".agentstore-worktrees";

/// Makes `<top>/.agentstore-worktrees/` (as the job's user, like everything in the
/// project) with a `.gitignore` of `*` in it: the folder and the trees in it never show in
/// the project's `git status` (nor get added by a `git add -A` there), while each task's
/// tree sees its own files. A `.gitignore` already there is left as it is.
pub(super) fn ignored_folder(git: &Git, top: &Path) -> Result<(), String> {
    let dir = top.join(WORKTREES);
    git.sh(
        r#"mkdir -p -- "$1" && { [ -e "$1/.gitignore" ] || [ -L "$1/.gitignore" ] || printf '*\n' > "$1/.gitignore"; }"#,
        &[&dir.display().to_string()],
    )
    .map(|_| ())
    .map_err(|e| format!("cannot make {}: {e}{}", dir.display(), disk_note(top)))
}

/// Commits what the agent left in the task's worktree (nothing new: no commit) and returns
/// the branch's head.
pub fn commit(git: &Git, ws: &Workspace, job: &Job) -> Result<Option<String>, String> {
    if ws.branch.is_none() {
        return Ok(None);
    }
    git.run(&ws.cwd, &["add", "-A"])?;
    let staged = git.run(&ws.cwd, &["diff", "--cached", "--name-only"])?;
    if !staged.trim().is_empty() {
        let (prd, task) = task_fields(job)
            .map(|(p, t, _, _)| (p, t))
            .unwrap_or_default();
        let msg = format!(
            "agentstore task {prd}/{task}\n\njob {}",
            job.id.as_deref().unwrap_or("?")
        );
        let mut full = identity(git, &ws.cwd);
        full.extend(["commit", "--quiet", "--no-verify", "-m", msg.as_str()]);
        git.run(&ws.cwd, &full)?;
    }
    let head = git.run(&ws.cwd, &["rev-parse", "HEAD"])?;
    Ok(Some(head.trim().to_string()))
}

/// `-c user.name=agentstore -c user.email=agentstore@localhost` when the account has no git
/// identity in `dir` (a service account): its commits and merges still get made.
pub(super) fn identity<'a>(git: &Git, dir: &Path) -> Vec<&'a str> {
    if git.run(dir, &["config", "user.email"]).is_ok() {
        Vec::new()
    } else {
        vec![
            "-c",
            "user.name=agentstore",
            "-c",
            "user.email=agentstore@localhost",
        ]
    }
}

/// The git worktree of a task's job (`supporting_data.task`), made as the job's user;
/// `None` for other jobs.
pub(super) fn for_task(
    job: &Job,
    env: &[(String, String)],
    home: &std::path::Path,
    switch_to: Option<super::runas::RunAs>,
    remote: Option<&str>,
) -> Result<Option<(Git, Workspace)>, String> {
    if job.config.jobtype == crate::model::JobType::Venvman
        || !job.config.supporting_data.contains_key("task")
    {
        return Ok(None);
    }
    let git = Git::new(env.to_vec(), home, switch_to)?;
    let dir = PathBuf::from(&job.config.working_directory);
    match prepare(&git, job, &dir, remote) {
        None => Ok(None),
        Some(Ok(ws)) => Ok(Some((git, ws))),
        Some(Err(e)) => Err(e),
    }
}

/// Below this many free bytes a failed checkout is put down to a full disk.
const NEARLY_FULL: u64 = 1 << 20;

/// "; the disk holding DIR is full (N KiB free)" when it nearly is, else nothing: git's own
/// words for a failed write do not always say why.
pub(super) fn disk_note(dir: &Path) -> String {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(s) => {
            let free = s.blocks_available().saturating_mul(s.fragment_size());
            if free < NEARLY_FULL {
                format!(
                    "; the disk holding {} is full ({} KiB free): free space there and retry the task",
                    dir.display(),
                    free / 1024
                )
            } else {
                String::new()
            }
        }
        Err(_) => String::new(),
    }
}

/// Before a task's worktree is made: a branch this clone lacks but `remote` has is fetched
/// (an earlier attempt on another machine pushed it). Whether it was.
fn fetch_missing(git: &Git, top: &Path, remote: &str, branch: &str) -> Result<bool, String> {
    let r = format!("refs/heads/{branch}");
    let listed = git
        .run(top, &["ls-remote", "--heads", "--", remote, &r])
        .map_err(|e| format!("cannot read the push remote {remote}: {e}"))?;
    if listed.trim().is_empty() {
        return Ok(false);
    }
    git.run(
        top,
        &["fetch", "--quiet", "--", remote, &format!("{r}:{r}")],
    )
    .map_err(|e| format!("cannot fetch {branch} from {remote}: {e}"))?;
    Ok(true)
}
