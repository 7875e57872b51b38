//! A PRD's integration job (issue 30): when every task of the PRD is done, its branches are
//! merged in dependency order into one integration branch `agentstore/<prd>/integration`, by
//! the worker on the compute host as the job's user with the real `git`, in a worktree of
//! its own (`<git dir>/agentstore-integration/<prd>`, removed afterwards; the branch stays).
//! Then the project's check command (if configured) runs in that tree. Nothing is pushed;
//! the tasks' branches are left as they were.
//!
//! The result is the job's output, a JSON object ([`Report`]) the orchestrator reads: merged
//! and green, a conflict (which task, which files; the integration branch is put back where
//! it started, never half-merged), or a red check (its exit status and the end of its
//! output). A job that could not try at all (no git, a broken repository) fails instead.

use super::process::{AgentCommand, run_agent};
use super::runas::RunAs;
use super::worktree::Git;
use crate::model::Job;
use crate::model::integration::{INTEGRATE_KEY, Plan, Report};
use std::path::{Path, PathBuf};

/// The plan of an integration job; `None` for any other job.
pub fn plan_of(job: &Job) -> Option<Result<Plan, String>> {
    let v = job.config.supporting_data.get(INTEGRATE_KEY)?;
    Some(
        serde_json::from_value(v.clone())
            .map_err(|e| format!("supporting_data.integrate of the integration job: {e}")),
    )
}

/// Most bytes of the check's output kept in the report.
const CHECK_TAIL: usize = 4000;

/// Runs the integration of `plan` in the project folder `dir`.
pub fn run(git: &Git, plan: &Plan, dir: &Path, check: &CheckRunner) -> Result<Report, String> {
    let mut report = Report {
        branch: plan.branch.clone(),
        ..Report::default()
    };
    let top = match git.run(dir, &["rev-parse", "--show-toplevel"]) {
        Ok(t) => PathBuf::from(t.trim()),
        Err(_) => {
            report.status = "not_git".into();
            report.summary = format!(
                "{} is not a git repository: the tasks worked in its single tree; nothing to merge",
                dir.display()
            );
            return Ok(report);
        }
    };
    let common = git.run(
        &top,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )?;
    let path = PathBuf::from(common.trim())
        .join("agentstore-integration")
        .join(&plan.prd);
    let path_s = path.display().to_string();
    // Every task's branch holds the commit its job recorded: a branch moved since (or gone)
    // is said, not merged blindly.
    for t in &plan.tasks {
        let head = git
            .run(
                &top,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    &format!("refs/heads/{}^{{commit}}", t.branch),
                ],
            )
            .map_err(|_| format!("task {}: its branch {} is gone", t.task, t.branch))?;
        if let Some(c) = &t.commit
            && git
                .run(&top, &["merge-base", "--is-ancestor", c, head.trim()])
                .is_err()
        {
            return Err(format!(
                "task {}: its branch {} no longer holds the commit its job recorded ({c})",
                t.task, t.branch
            ));
        }
    }
    git.run(&top, &["worktree", "prune"])?;
    let registered = git
        .run(&top, &["worktree", "list", "--porcelain"])?
        .lines()
        .any(|l| l.strip_prefix("worktree ").map(Path::new) == Some(path.as_path()));
    if registered {
        // An earlier attempt's tree (a crash): its branch keeps only whole merges.
        git.run(&top, &["worktree", "remove", "--force", &path_s])?;
    } else if std::fs::symlink_metadata(&path).is_ok() {
        return Err(format!(
            "the integration worktree path {} exists and is not a worktree of this repository; move it away and retry",
            path.display()
        ));
    }
    let branch_ref = format!("refs/heads/{}", plan.branch);
    let existed = git
        .run(&top, &["rev-parse", "--verify", "--quiet", &branch_ref])
        .is_ok();
    // `git worktree add` makes the folders on the way, as the job's user.
    // The branch goes on from where it is (a person's fixes after a review are kept);
    // a new one starts from the project's current commit.
    let made = if existed {
        git.run(&top, &["worktree", "add", "--quiet", &path_s, &plan.branch])
    } else {
        git.run(
            &top,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &plan.branch,
                &path_s,
                "HEAD",
            ],
        )
    };
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&path);
        let _ = git.run(&top, &["worktree", "prune"]);
        return Err(format!(
            "cannot make the integration worktree {}: {e}{}",
            path.display(),
            super::worktree::disk_note(path.parent().unwrap_or(&path))
        ));
    }
    let result = merge_and_check(git, plan, &path, check, &mut report);
    // The tree goes; the branch stays (a new branch that merged nothing goes too).
    let _ = git.run(&top, &["worktree", "remove", "--force", &path_s]);
    let _ = std::fs::remove_dir_all(&path);
    let _ = git.run(&top, &["worktree", "prune"]);
    if !existed && report.merged.is_empty() && report.status != "merged" {
        let _ = git.run(&top, &["branch", "-D", &plan.branch]);
    }
    result.map(|()| report)
}

fn merge_and_check(
    git: &Git,
    plan: &Plan,
    tree: &Path,
    check: &CheckRunner,
    report: &mut Report,
) -> Result<(), String> {
    let start = git.run(tree, &["rev-parse", "HEAD"])?.trim().to_string();
    report.base = Some(start.clone());
    for t in &plan.tasks {
        let msg = format!(
            "agentstore: merge task {}/{} ({})",
            plan.prd, t.task, t.branch
        );
        let mut args = super::worktree::identity(git, tree);
        args.extend([
            "merge",
            "--no-ff",
            "--no-edit",
            "--quiet",
            "-m",
            msg.as_str(),
            t.branch.as_str(),
        ]);
        if let Err(e) = git.run(tree, &args) {
            let files: Vec<String> = git
                .run(tree, &["diff", "--name-only", "--diff-filter=U"])
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect();
            let _ = git.run(tree, &["merge", "--abort"]);
            // Never a half-merge: the branch goes back to where this integration started.
            git.run(tree, &["reset", "--hard", "--quiet", &start])?;
            report.status = "conflict".into();
            report.commit = Some(start.clone());
            report.conflict_task = Some(t.task.clone());
            report.summary = if files.is_empty() {
                format!(
                    "task {}'s branch {} does not merge into {}: {e}",
                    t.task, t.branch, plan.branch
                )
            } else {
                format!(
                    "task {}'s branch {} conflicts with {} in {}",
                    t.task,
                    t.branch,
                    describe_merged(&report.merged, &plan.branch),
                    files.join(", ")
                )
            };
            report.conflict_files = files;
            report.merged.clear();
            return Ok(());
        }
        report.merged.push(t.task.clone());
    }
    let head = git.run(tree, &["rev-parse", "HEAD"])?.trim().to_string();
    report.commit = Some(head);
    report.status = "merged".into();
    report.summary = format!(
        "merged {} task branch(es) into {}",
        report.merged.len(),
        plan.branch
    );
    if let Some(cmd) = plan.check_command.as_ref().filter(|c| !c.is_empty()) {
        let (code, tail) = check(cmd, tree)?;
        report.check = Some(serde_json::json!({
            "command": cmd,
            "exit_code": code,
            "output": tail,
        }));
        if code == Some(0) {
            report
                .summary
                .push_str(&format!("; check {} passed", cmd.join(" ")));
        } else {
            report.status = "check_failed".into();
            report.summary.push_str(&format!(
                "; check {} failed ({}): {}",
                cmd.join(" "),
                code.map_or("killed".to_string(), |c| format!("exit status {c}")),
                tail.lines().last().unwrap_or("")
            ));
        }
    }
    Ok(())
}

fn describe_merged(merged: &[String], branch: &str) -> String {
    if merged.is_empty() {
        branch.to_string()
    } else {
        format!("{branch} (after merging {})", merged.join(", "))
    }
}

/// Runs the check command (argv) in a folder: (exit status, end of stdout+stderr).
pub type CheckRunner<'a> = dyn Fn(&[String], &Path) -> Result<(Option<i32>, String), String> + 'a;

/// The check as the job's user: the program found on the job's `PATH` (or a path), started
/// with the job's environment in the integration tree.
pub fn check_as(
    env: Vec<(String, String)>,
    home: PathBuf,
    switch_to: Option<RunAs>,
) -> impl Fn(&[String], &Path) -> Result<(Option<i32>, String), String> {
    move |cmd: &[String], dir: &Path| {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let program = super::project_side::find_program(&cmd[0], path.as_deref(), &home)
            .ok_or_else(|| {
                format!(
                    "the project's check command {:?} is not an executable program here (not on the job's PATH)",
                    cmd[0]
                )
            })?;
        let c = AgentCommand {
            program: program.display().to_string(),
            args: cmd[1..].to_vec(),
            prompt: String::new(),
            cwd: dir.to_path_buf(),
            env: env.clone(),
            switch_to: switch_to.clone(),
            sandbox: None,
        };
        let out = run_agent(&c, |_| {}, |_, _| {})
            .map_err(|e| format!("the check command {}: {e}", cmd.join(" ")))?;
        let mut text = String::from_utf8_lossy(out.stdout.end()).into_owned();
        text.push_str(&String::from_utf8_lossy(out.stderr.end()));
        let cut = text.len().saturating_sub(CHECK_TAIL);
        let cut = (cut..=text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        Ok((out.status.code(), text[cut..].to_string()))
    }
}

/// Runs a PRD's integration job as the job's user: its report is the job's output.
pub(super) fn outcome(
    job: &Job,
    plan: Result<crate::model::integration::Plan, String>,
    env: &[(String, String)],
    home: &std::path::Path,
    switch_to: Option<RunAs>,
) -> super::Outcome {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return super::Outcome::fail(e),
    };
    let git = match Git::new(env.to_vec(), home, switch_to.clone()) {
        Ok(g) => g,
        Err(e) => return super::Outcome::fail(e),
    };
    let check = check_as(env.to_vec(), home.to_path_buf(), switch_to);
    let dir = PathBuf::from(&job.config.working_directory);
    match run(&git, &plan, &dir, &check) {
        Ok(report) => {
            println!("{}", report.summary);
            super::Outcome {
                output: Some(serde_json::to_string(&report).unwrap_or_default()),
                exit_code: Some(0),
                ..super::Outcome::default()
            }
        }
        Err(e) => super::Outcome::fail(format!("integration of PRD {}: {e}", plan.prd)),
    }
}
