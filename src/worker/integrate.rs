//! A PRD's integration job (issue 30): when every task of the PRD is done, its branches are
//! merged in dependency order into one integration branch `agentstore/<prd>/integration`, by
//! the worker on the compute host as the job's user with the real `git`, in a worktree of
//! its own (`<project>/.agentstore-worktrees/<prd>/.integration`, beside the tasks' trees and
//! like them not under `.git/`; removed afterwards, the branch stays). Then the project's
//! check command (if configured) runs in that tree. The branch is pushed only to the
//! project's `push_remote`, when it has one; the tasks' branches are left as they were.
//!
//! With the queue's `integration: agent`, a merge that conflicts is handed to the job's agent
//! in that tree (a prompt naming the files, the task and what was merged before); its result
//! is taken only when no conflict marker is left in what the merge changes and the merge
//! commits; otherwise the integration ends in conflict as a plain merge would, saying what the
//! agent left.
//!
//! The result is the job's output, a JSON object ([`Report`]) the orchestrator reads: merged
//! and green, a conflict (which task, which files; the integration branch is put back where
//! it started, never half-merged), or a red check (its exit status and the end of its
//! output). A job that could not try at all (no git, a broken repository) fails instead.

use super::Outcome;
use super::process::{AgentCommand, run_agent};
use super::runas::RunAs;
use super::worktree::Git;
use crate::model::integration::{INTEGRATE_KEY, Plan, PlannedTask, Report, Resolution};
use crate::model::{IntegrationMode, Job};
use std::path::{Path, PathBuf};

/// Hands a conflicted merge to the job's agent: (prompt, the integration tree) → its run.
pub(super) type Resolver<'a> = dyn FnMut(String, &Path) -> Outcome + 'a;

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
/// `resolve`: the agent that resolves conflicts (the queue's `integration: agent`), else none.
pub(super) fn run(
    git: &Git,
    plan: &Plan,
    dir: &Path,
    check: &CheckRunner,
    mut resolve: Option<&mut Resolver>,
) -> Result<Report, String> {
    let mut report = Report {
        branch: plan.branch.clone(),
        mode: Some(if resolve.is_some() { "agent" } else { "merge" }.into()),
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
    // Not under `.git/`: the agent may have to edit there (see worktree.rs). Task ids start
    // with a letter or digit, so `.integration` is no task's tree.
    let path = top
        .join(super::worktree::WORKTREES)
        .join(&plan.prd)
        .join(".integration");
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
    super::worktree::ignored_folder(git, &top)?;
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
    let result = merge_and_check(git, plan, &path, check, &mut resolve, &mut report);
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
    resolve: &mut Option<&mut Resolver>,
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
            let files = unmerged(git, tree);
            let mut agent_failed = None;
            if !files.is_empty()
                && let Some(resolve) = resolve.as_mut()
            {
                let asked = ask_agent(git, plan, t, tree, &files, &report.merged, &msg, resolve);
                match asked {
                    Ok(commit) => {
                        report.resolved.push(Resolution {
                            task: t.task.clone(),
                            files,
                            commit,
                        });
                        report.merged.push(t.task.clone());
                        continue;
                    }
                    Err(why) => agent_failed = Some(why),
                }
            }
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
            if let Some(why) = agent_failed {
                report
                    .summary
                    .push_str(&format!("; the agent's resolution was not taken: {why}"));
            }
            report.conflict_files = files;
            report.merged.clear();
            report.resolved.clear();
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
    for r in &report.resolved {
        report.summary.push_str(&format!(
            "; the agent resolved task {}'s conflict in {}",
            r.task,
            r.files.join(", ")
        ));
    }
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

/// The files a merge in `tree` left in conflict.
fn unmerged(git: &Git, tree: &Path) -> Vec<String> {
    git.run(tree, &["diff", "--name-only", "--diff-filter=U"])
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// What the agent is asked when task `t`'s branch conflicts.
fn conflict_prompt(plan: &Plan, t: &PlannedTask, files: &[String], merged: &[String]) -> String {
    let title = |p: &PlannedTask| match &p.title {
        Some(x) => format!("task {} ({x}, branch {})", p.task, p.branch),
        None => format!("task {} (branch {})", p.task, p.branch),
    };
    let before: Vec<String> = plan
        .tasks
        .iter()
        .filter(|p| merged.contains(&p.task))
        .map(title)
        .collect();
    let check = match plan.check_command.as_ref().filter(|c| !c.is_empty()) {
        Some(c) => format!(
            "Afterwards the project's check (`{}`) runs on the result and must pass.",
            c.join(" ")
        ),
        None => String::new(),
    };
    format!(
        "Resolve the merge conflict of PRD {prd}'s integration.

         This folder is the integration branch {branch} in the middle of `git merge`: merging          {this} into it conflicts in these files: {files}.
         Merged into it before: {before}.

         Edit each conflicted file so that it keeps what both sides meant, and remove every          conflict marker (lines starting with <<<<<<<, ======= or >>>>>>>). Change nothing else.          Do not run git (no commit, no merge --abort): the worker commits the merge when no          marker is left. {check}
",
        prd = plan.prd,
        branch = plan.branch,
        this = title(t),
        files = files.join(", "),
        before = if before.is_empty() {
            "nothing (the project's commit)".to_string()
        } else {
            before.join("; ")
        },
    )
}

/// Hands the conflicted merge of `t` in `tree` to the agent; Ok(the merge commit) when its
/// result is taken, Err(why not) otherwise (the caller aborts the merge).
#[allow(clippy::too_many_arguments)]
fn ask_agent(
    git: &Git,
    plan: &Plan,
    t: &PlannedTask,
    tree: &Path,
    files: &[String],
    merged: &[String],
    msg: &str,
    resolve: &mut Resolver,
) -> Result<String, String> {
    let start = git.run(tree, &["rev-parse", "HEAD"])?.trim().to_string();
    let ran = resolve(conflict_prompt(plan, t, files, merged), tree);
    if ran.failed {
        return Err(format!(
            "the agent failed: {}",
            ran.error.as_deref().unwrap_or("no reason given")
        ));
    }
    git.run(tree, &["add", "-A"])?;
    let mid_merge = git
        .run(tree, &["rev-parse", "--verify", "--quiet", "MERGE_HEAD"])
        .is_ok();
    let changed: Vec<String> = if mid_merge {
        git.run(tree, &["diff", "--cached", "--name-only", "HEAD"])?
    } else {
        // The agent committed (or abandoned) the merge itself: judge what it made.
        git.run(tree, &["diff", "--name-only", &start, "HEAD"])?
    }
    .lines()
    .map(str::to_string)
    .collect();
    let marked = with_markers(git, tree, &changed)?;
    if !marked.is_empty() {
        return Err(format!(
            "conflict markers are left in {}",
            marked.join(", ")
        ));
    }
    let still = unmerged(git, tree);
    if !still.is_empty() {
        return Err(format!("{} still in conflict", still.join(", ")));
    }
    if mid_merge {
        let mut args = super::worktree::identity(git, tree);
        args.extend(["commit", "--quiet", "--no-verify", "--no-edit", "-m", msg]);
        git.run(tree, &args)
            .map_err(|e| format!("the resolved merge does not commit: {e}"))?;
    }
    let head = git.run(tree, &["rev-parse", "HEAD"])?.trim().to_string();
    // The task's work and what was there before must both be in the result.
    for (what, c) in [
        ("task's branch", t.branch.as_str()),
        ("integration", &start),
    ] {
        if git
            .run(tree, &["merge-base", "--is-ancestor", c, &head])
            .is_err()
        {
            return Err(format!(
                "the agent's result does not hold the {what} ({c}): the merge was not made"
            ));
        }
    }
    Ok(head)
}

/// Of `files` (relative to `tree`), those holding a conflict marker line, read as the job's
/// user (a file the agent removed holds none).
fn with_markers(git: &Git, tree: &Path, files: &[String]) -> Result<Vec<String>, String> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let dir = tree.display().to_string();
    let mut args = vec![dir.as_str()];
    args.extend(files.iter().map(String::as_str));
    let out = git.sh(
        r#"cd -- "$1" || exit 3; shift
for f; do [ -f "$f" ] && grep -qE '^(<<<<<<<|>>>>>>>)( |$)' -- "$f" && printf '%s
' "$f"; done
exit 0"#,
        &args,
    )?;
    Ok(out.lines().map(str::to_string).collect())
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

/// Runs a PRD's integration job as the job's user: its report is the job's output. With the
/// queue's `integration: agent`, conflicts go to the job's agent (`cx`); what it spent is the
/// job's.
pub(super) fn outcome(
    cx: &super::agents::Cx,
    job: &mut Job,
    plan: Result<crate::model::integration::Plan, String>,
) -> Outcome {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return Outcome::fail(e),
    };
    let switch_to = cx.switch.then(|| cx.run_as.clone());
    let git = match Git::new(cx.env.to_vec(), cx.home, switch_to.clone()) {
        Ok(g) => g,
        Err(e) => return Outcome::fail(e),
    };
    let check = check_as(cx.env.to_vec(), cx.home.to_path_buf(), switch_to);
    let dir = PathBuf::from(&job.config.working_directory);
    let push = super::push::remote_of(cx.store, job);
    let agent = cx.queue.integration == Some(IntegrationMode::Agent);
    let mut spent = Outcome::default();
    let mut resolver = |prompt: String, tree: &Path| {
        let ran = super::agents::run(cx, job, tree.to_path_buf(), Some(prompt));
        spent.cost_usd = match (spent.cost_usd, ran.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        spent.num_turns = match (spent.num_turns, ran.num_turns) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        spent.usage = ran.usage.or(spent.usage);
        spent.session_id = ran.session_id.clone().or(spent.session_id.take());
        ran
    };
    let resolve: Option<&mut Resolver> = if agent { Some(&mut resolver) } else { None };
    let ran = run(&git, &plan, &dir, &check, resolve);
    let mut out = match ran {
        Ok(mut report) => {
            if let Some(remote) = &push
                && matches!(report.status.as_str(), "merged" | "check_failed")
            {
                let pushed = super::push::branch(&git, &dir, remote, &plan.branch);
                report.push = Some(pushed.clone());
                report.summary.push_str(&format!("; {pushed}"));
            }
            println!("{}", report.summary);
            Outcome {
                output: Some(serde_json::to_string(&report).unwrap_or_default()),
                exit_code: Some(0),
                ..Outcome::default()
            }
        }
        Err(e) => Outcome::fail(format!("integration of PRD {}: {e}", plan.prd)),
    };
    out.cost_usd = spent.cost_usd;
    out.num_turns = spent.num_turns;
    out.usage = spent.usage;
    out.session_id = spent.session_id;
    out
}
