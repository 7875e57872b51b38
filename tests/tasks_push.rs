//! Issue 30's "nothing is pushed anywhere unless configured", with real git and a real bare
//! repository as the project's shared location. A PRD run with no `push_remote`: the bare
//! repository gets no ref at all. Then `edit-project P --push-remote <bare>`: each task's
//! branch is pushed after its job commits (the job's `runtime.push` says so) and the
//! integration branch after the merge — the bare repository holds every branch at the
//! commit the PRD's report names. Then a remote that cannot be reached: the push failure is
//! said on the job and in the integration's report, the commits stay on the local branches
//! and the PRD still completes (nothing lost).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::wait_until;
use crate::tasks_worktrees::{LONG, Rig, git, job_id, read};

fn one_task() -> String {
    let list =
        "```json\n{\"tasks\": [{\"id\": \"solo\", \"title\": \"alone\", \"depends_on\": []}]}\n```";
    serde_json::to_string(list).unwrap()
}

/// Runs PRD `id` (one task, `solo`) to its end; its document.
fn run_prd(rig: &Rig, id: &str) -> serde_json::Value {
    rig.prd(id);
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", id]));
    let root = rig.env().root.clone();
    let running = root.join(format!("projects/P/running_prds/{id}.json"));
    wait_until(LONG, "create-tasks handled", || running.is_file());
    assert_eq!(rig.job(&ct)["runtime"]["status"], "finished");
    rig.ok(&["implement-tasks", "--project", "P", "--prd", id]);
    let done = root.join(format!("projects/P/finished_prds/{id}.json"));
    let review = root.join(format!("projects/P/review_prds/{id}.json"));
    wait_until(LONG, &format!("{id} ended"), || {
        if let Some(j) = rig.task(id, "solo")["jobs"][0].as_str().map(|j| rig.job(j))
            && j["runtime"]["status"] == "failed"
        {
            panic!("the task's job failed: {}", j["runtime"]["error"]);
        }
        done.is_file() || review.is_file()
    });
    assert!(
        done.is_file(),
        "{}",
        std::fs::read_to_string(&review).unwrap_or_default()
    );
    read(&done)
}

#[test]
fn branches_are_pushed_only_where_the_project_says_and_a_failed_push_loses_nothing() {
    let rig = Rig::new();
    let _daemons = rig.serve_poplar();
    let repo = rig.r.project_dir.clone();
    std::fs::write(rig.log.join("tasks.txt"), one_task()).unwrap();
    let bare = rig.env().dir.path().join("shared.git");
    git(
        rig.env().dir.path(),
        &["init", "-q", "--bare", bare.to_str().unwrap()],
    );
    let refs = || {
        git(
            &bare,
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
    };

    // Nothing configured: nothing pushed.
    let prd = run_prd(&rig, "prd-quiet");
    assert_eq!(refs(), "", "pushed with no push_remote");
    let job = rig.job(rig.task("prd-quiet", "solo")["jobs"][0].as_str().unwrap());
    assert!(job["runtime"].get("push").is_none(), "{job}");
    assert!(
        prd["implementation_report"]["integration"]
            .get("push")
            .is_none(),
        "{prd}"
    );

    // Configured: the task's branch and the integration branch, at their commits.
    let out = rig.ok(&["edit-project", "P", "--push-remote", bare.to_str().unwrap()]);
    assert!(out.contains("push_remote"), "{out}");
    let p = read(&rig.env().root.join("projects/P/project.json"));
    assert_eq!(p["push_remote"], bare.to_str().unwrap());
    let refused = rig.cli(&["edit-project", "P", "--push-remote", "--mirror"]);
    assert!(!refused.status.success());
    let prd = run_prd(&rig, "prd-loud");
    let task = rig.task("prd-loud", "solo");
    let commit = task["commit"].as_str().unwrap();
    let job = rig.job(task["jobs"][0].as_str().unwrap());
    let said = job["runtime"]["push"].as_str().unwrap();
    assert!(
        said.starts_with("pushed agentstore/prd-loud/solo to "),
        "{said}"
    );
    let integ = &prd["implementation_report"]["integration"];
    assert!(
        integ["push"]
            .as_str()
            .unwrap()
            .starts_with("pushed agentstore/prd-loud/integration"),
        "{integ}"
    );
    let listed = refs();
    assert!(
        listed.contains(&format!("refs/heads/agentstore/prd-loud/solo {commit}")),
        "{listed}"
    );
    let ib = integ["commit"].as_str().unwrap();
    assert!(
        listed.contains(&format!("refs/heads/agentstore/prd-loud/integration {ib}")),
        "{listed}"
    );
    assert_eq!(
        listed.lines().count(),
        2,
        "only this PRD's branches: {listed}"
    );

    // A remote that is not there: said, and the commits stay; the PRD completes.
    let gone = rig.env().dir.path().join("no-such.git");
    rig.ok(&["edit-project", "P", "--push-remote", gone.to_str().unwrap()]);
    let prd = run_prd(&rig, "prd-lost");
    let task = rig.task("prd-lost", "solo");
    let commit = task["commit"].as_str().unwrap();
    let job = rig.job(task["jobs"][0].as_str().unwrap());
    assert_eq!(job["runtime"]["status"], "finished");
    assert_eq!(job["runtime"]["commit"], commit);
    let note = job["runtime"]["worktree"].as_str().unwrap();
    assert!(note.contains("cannot read the push remote"), "{note}");
    let said = job["runtime"]["push"].as_str().unwrap();
    assert!(
        said.contains("FAILED")
            && said.contains("no-such.git")
            && said.contains("stays on the local branch"),
        "{said}"
    );
    assert_eq!(
        git(&repo, &["rev-parse", "agentstore/prd-lost/solo"]).trim(),
        commit
    );
    let integ = &prd["implementation_report"]["integration"];
    assert!(
        integ["push"].as_str().unwrap().contains("FAILED"),
        "{integ}"
    );
    assert_eq!(integ["status"], "merged");
    git(
        &repo,
        &[
            "merge-base",
            "--is-ancestor",
            commit,
            "agentstore/prd-lost/integration",
        ],
    );
    // Unset: nothing more is pushed.
    let out = rig.ok(&["edit-project", "P", "--push-remote", ""]);
    assert!(out.contains("nothing is pushed"), "{out}");
    assert!(
        read(&rig.env().root.join("projects/P/project.json"))
            .get("push_remote")
            .is_none()
    );
}
