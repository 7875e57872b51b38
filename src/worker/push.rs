//! Pushing a PRD's branches when the project says where (issue 30): "nothing is pushed
//! anywhere unless configured". The project's `push_remote` (a remote's name, a URL or a path
//! such as a bare repository) gets each task's branch after its job commits and the
//! integration branch after the integration merges, pushed by the worker as the job's user
//! with the real `git`. A push that fails is said (the job's `runtime.push`, the report's
//! `push`, the journal) and loses nothing: the commit stays on the local branch, and the
//! job's work is kept. A task retried on a machine whose clone lacks its branch fetches it
//! from there first, so it starts from the commits an earlier attempt pushed
//! (`worktree::fetch_missing`).

use super::worktree::Git;
use crate::model::Job;
use crate::store::Store;
use std::path::Path;

/// The project's `push_remote`, if it names one.
pub(super) fn remote_of(store: &Store, job: &Job) -> Option<String> {
    store
        .project(&job.config.project)
        .ok()?
        .push_remote
        .filter(|r| !r.trim().is_empty())
}

/// Pushes `branch` of the repository at `dir` to `remote` (never forced): what happened, in
/// one line.
pub(super) fn branch(git: &Git, dir: &Path, remote: &str, branch: &str) -> String {
    let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
    match git.run(dir, &["push", "--quiet", "--", remote, &spec]) {
        Ok(_) => format!("pushed {branch} to {remote}"),
        Err(e) => {
            tracing::warn!("push of {branch} to {remote} failed: {e}");
            format!(
                "push of {branch} to {remote} FAILED (the commit stays on the local branch): {e}"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let o = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@x"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A task retried on a machine whose clone lacks its branch: the worktree starts from the
    /// commit an earlier attempt pushed (real git, a bare repository, two clones).
    #[test]
    fn a_retry_elsewhere_starts_from_the_branch_its_first_attempt_pushed() {
        let d = tempfile::tempdir().unwrap();
        let (one, two, bare) = (
            d.path().join("one"),
            d.path().join("two"),
            d.path().join("s.git"),
        );
        git(
            d.path(),
            &["init", "-q", "-b", "main", "--bare", bare.to_str().unwrap()],
        );
        git(
            d.path(),
            &["init", "-q", "-b", "main", one.to_str().unwrap()],
        );
        std::fs::write(one.join("README"), "x\n").unwrap();
        git(&one, &["add", "README"]);
        git(&one, &["commit", "-q", "-m", "start"]);
        git(&one, &["push", "-q", bare.to_str().unwrap(), "main"]);
        git(
            d.path(),
            &["clone", "-q", bare.to_str().unwrap(), two.to_str().unwrap()],
        );
        // The first attempt, on machine one: a commit on the task's branch, pushed.
        let env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k == "PATH" || k == "HOME")
            .chain([("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string())])
            .collect();
        let g = Git::new(env, d.path(), None).unwrap();
        let b = "agentstore/p/A";
        git(&one, &["checkout", "-q", "-b", b]);
        std::fs::write(one.join("A.txt"), "A was here\n").unwrap();
        git(&one, &["add", "A.txt"]);
        git(&one, &["commit", "-q", "-m", "A"]);
        let first = git(&one, &["rev-parse", "HEAD"]).trim().to_string();
        let said = branch(&g, &one, bare.to_str().unwrap(), b);
        assert_eq!(said, format!("pushed {b} to {}", bare.display()));
        // Machine two has no such branch; the retry fetches it and goes on from it.
        let mut job = crate::model::Job {
            schema_version: None,
            id: Some("j".into()),
            config: crate::model::JobConfig::new(
                "P",
                two.to_str().unwrap(),
                crate::model::JobType::Claude,
                "task-implementer",
                "A",
            ),
            runtime: crate::model::JobRuntime::queued(),
        };
        job.config.supporting_data.insert(
            "task".into(),
            serde_json::json!({"id": "A", "prd": "p", "branch": b, "bases": []}),
        );
        let ws = super::super::worktree::prepare(&g, &job, &two, Some(bare.to_str().unwrap()))
            .unwrap()
            .unwrap();
        assert!(ws.note.contains("fetched from"), "{}", ws.note);
        assert_eq!(git(&ws.cwd, &["rev-parse", "HEAD"]).trim(), first);
        assert_eq!(
            std::fs::read_to_string(ws.cwd.join("A.txt")).unwrap(),
            "A was here\n"
        );
        // A branch the remote does not have: made from the base as before.
        let other = "agentstore/p/B";
        let mut job_b = job.clone();
        job_b.config.supporting_data.insert(
            "task".into(),
            serde_json::json!({"id": "B", "prd": "p", "branch": other, "bases": []}),
        );
        let ws = super::super::worktree::prepare(&g, &job_b, &two, Some(bare.to_str().unwrap()))
            .unwrap()
            .unwrap();
        assert!(!ws.note.contains("fetched"), "{}", ws.note);
        // A remote that cannot be read: said.
        let gone = d.path().join("gone.git");
        let said = branch(&g, &one, gone.to_str().unwrap(), b);
        assert!(said.contains("FAILED"), "{said}");
    }
}
