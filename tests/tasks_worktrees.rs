//! Issue 30 end to end: a real git repository, a PRD whose tasks form a diamond (A; B and C
//! after A; D after B and C). create-tasks runs the stand-in agent, which answers with the
//! task list; implement-tasks queues one job per task; each job works in its own git
//! worktree on branch agentstore/<prd>/<task> (the real `git`), B and C run at the same time
//! (each waits, boundedly, to see the other started: no overlap fails the test), each commits
//! on its own branch, D starts from B's branch with C's merged, and the PRD ends complete
//! with a report naming every task's commit. Bad input on the worker's side: a path in the
//! way of a task's worktree, a dirty base.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::{KillOnDrop, PrivateBus, wait_for_name, wait_until};
use crate::common::{Researcher, TestEnv};
use crate::daemons::Daemon;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub(crate) const LONG: Duration = Duration::from_secs(240);

/// The stand-in agent (speaks `claude -p --output-format json`): for create-tasks it answers
/// with the diamond's task list; for a pipeline's other steps (their prompt names the
/// "pipeline-goal") a short text; told to crash (`crash-<task>`, once), it leaves a
/// half-written `<task>.partial` and waits to be killed; for a task it writes `<task>.txt` in its working directory
/// and, for B and C, waits (bounded, 120 s) until the other one has started.
const AGENT: &str = r#"#!/bin/bash
prompt=$(cat)
log="__LOG__"
answer() { printf '{"type":"result","subtype":"success","is_error":false,"result":%s,"num_turns":1,"total_cost_usd":0,"session_id":"s"}\n' "$1"; }
if [[ "$prompt" == *"Create implementation tasks"* ]]; then
  [ -f "$log/tasks.txt" ] && { answer "$(cat "$log/tasks.txt")"; exit 0; }
  answer '"Plan:\n```json\n{\"tasks\": [{\"id\": \"A\", \"title\": \"base\", \"description\": \"A\", \"depends_on\": []}, {\"id\": \"B\", \"title\": \"left\", \"depends_on\": [\"A\"]}, {\"id\": \"C\", \"title\": \"right\", \"depends_on\": [\"A\"]}, {\"id\": \"D\", \"title\": \"top\", \"depends_on\": [\"B\", \"C\"]}]}\n```"'
  exit 0
fi
if [[ "$prompt" == *"pipeline-goal"* && "$prompt" != *"Implement task "* ]]; then
  answer '"A PRD for the pipeline-goal: four files, one per task."'
  exit 0
fi
task=$(printf '%s' "$prompt" | sed -n 's/^Implement task \([A-Za-z0-9_.-]*\) of PRD.*/\1/p' | head -1)
[ -n "$task" ] || { echo "no task in the prompt" >&2; exit 3; }
[ -f "$log/fail-$task" ] && { echo "told to fail" >&2; exit 5; }
if [ -f "$log/hold-$task" ]; then
  touch "$log/held-$task"
  for _ in $(seq 1 1200); do [ -f "$log/hold-$task" ] || break; read -t 0.1 < /dev/zero 2>/dev/null || true; done
fi
if [ -f "$log/crash-$task" ]; then
  rm -f "$log/crash-$task"
  echo "half of it" > "$task.partial"
  touch "$log/crashing-$task"
  for _ in $(seq 1 1200); do read -t 0.1 < /dev/zero 2>/dev/null || true; done
  exit 7
fi
touch "$log/start-$task"
echo "$task was here" > "$task.txt"
[ -f "$log/edit-README" ] && echo "$task rewrote this line" > README
if [ "$task" = B ] || [ "$task" = C ]; then
  other=$([ "$task" = B ] && echo C || echo B)
  for _ in $(seq 1 1200); do [ -e "$log/start-$other" ] && break; read -t 0.1 < /dev/zero 2>/dev/null || true; done
  [ -e "$log/start-$other" ] || { echo "task $other never ran beside $task (in $log: $(ls "$log" 2>&1 | tr "\n" " "))" >&2; exit 4; }
  touch "$log/overlap-$task"
fi
answer "\"task $task done in $(pwd)\""
"#;

pub(crate) struct Rig {
    pub(crate) r: Researcher,
    bus: PrivateBus,
    pub(crate) log: PathBuf,
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@x"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

impl Rig {
    pub(crate) fn new() -> Rig {
        Rig::with_sandbox(false)
    }

    pub(crate) fn with_sandbox(sandbox: bool) -> Rig {
        let r = Researcher::new();
        let bin = r.env.dir.path().join("bin");
        let log = r.env.dir.path().join("log");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&log).unwrap();
        let agent = bin.join("claude");
        std::fs::write(&agent, AGENT.replace("__LOG__", log.to_str().unwrap())).unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        // The jobs may run as another account (the owner's unix_user): they mark the log.
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o777)).unwrap();
        Rig::around(r, &agent, sandbox, log)
    }

    /// The rig with `claude` (the real Claude Code CLI) as the queue's agent, the queue's
    /// default sandbox and permissions kept: see [`Rig::serve_poplar_with`].
    pub(crate) fn with_claude(claude: &Path) -> Rig {
        let r = Researcher::new();
        let log = r.env.dir.path().join("log");
        std::fs::create_dir_all(&log).unwrap();
        Rig::around(r, claude, true, log)
    }

    fn around(r: Researcher, agent: &Path, sandbox: bool, log: PathBuf) -> Rig {
        r.env.allow_claude(agent);
        r.env.ok(&[
            "set-queue",
            "poplar",
            "--worker-count",
            "4",
            "--claude-cli-path",
            agent.to_str().unwrap(),
        ]);
        // The stand-ins of B and C meet in a folder outside their trees: the queue's kernel
        // sandbox (on by default) would keep them apart, so it is off for this queue.
        if !sandbox {
            let qpath = r.env.root.join("Queues/poplar/queue.json");
            let mut q = read(&qpath);
            q["config"]["sandbox"] = serde_json::json!({"enabled": false});
            std::fs::write(&qpath, q.to_string()).unwrap();
        }
        // The project: a real repository with one commit on main.
        git(&r.project_dir, &["init", "-q", "-b", "main"]);
        std::fs::write(r.project_dir.join("README"), "project\n").unwrap();
        git(&r.project_dir, &["add", "README"]);
        git(&r.project_dir, &["commit", "-q", "-m", "start"]);
        Rig {
            r,
            bus: PrivateBus::start(),
            log,
        }
    }

    pub(crate) fn env(&self) -> &TestEnv {
        &self.r.env
    }

    fn scope(&self, c: &mut Command) {
        self.r.scope(c, Some(&self.bus.address));
        c.env("AGENT_STORE_ROOT", &self.env().root)
            .env(
                "AGENTSTORE_COMMANDS_DIR",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("share/commands"),
            )
            .env("GIT_CONFIG_NOSYSTEM", "1");
    }

    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        self.scope(&mut c);
        c.args(args).output().unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "orchestrator {args:?}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    /// [`Rig::daemon`] started through `wrapper` (its program and arguments, then `bin`).
    pub(crate) fn daemon_in(
        &self,
        wrapper: &[&str],
        envs: &[(&str, &str)],
        d: Daemon,
        args: &[&str],
        name: &str,
    ) -> KillOnDrop {
        let daemon = crate::daemons::unit_like(d).args(args).command();
        let mut c = Command::new(wrapper[0]);
        self.scope(&mut c);
        c.args(&wrapper[1..])
            .arg(daemon.get_program())
            .args(daemon.get_args())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            c.env(k, v);
        }
        let d = KillOnDrop(c.spawn().unwrap());
        wait_for_name(&self.bus, name);
        d
    }

    pub(crate) fn daemon(&self, d: Daemon, args: &[&str], name: &str) -> KillOnDrop {
        let mut c = crate::daemons::unit_like(d).args(args).command();
        self.scope(&mut c);
        let d = KillOnDrop(c.spawn().unwrap());
        wait_for_name(&self.bus, name);
        d
    }

    /// [`Rig::serve_poplar`] with the queue manager's jobs pointed at the model endpoint
    /// `base_url` (Claude Code's settings, as a unit's `Environment=` would give them).
    pub(crate) fn serve_poplar_with(&self, base_url: &str) -> [KillOnDrop; 2] {
        let orch = self.daemon(
            Daemon::Orchestratord,
            &["--idle-exit", "0"],
            "org.agentstore.Orchestrator1",
        );
        let mut envs: Vec<(String, String)> =
            crate::claude_env::claude_env(&self.env().home, base_url)
                .into_iter()
                .filter(|(k, _)| !matches!(k.as_str(), "PATH" | "HOME" | "SHELL" | "LANG"))
                .collect();
        // Claude Code's own `HEAD /` and model requests reach the fake server unproxied.
        envs.push(("NO_PROXY".into(), "127.0.0.1,localhost".into()));
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let qm = self.daemon_in(
            &["env"],
            &envs,
            Daemon::QueueManager,
            &["--queue", "poplar", "--launcher", "direct"],
            "org.agentstore.Queue.poplar",
        );
        [orch, qm]
    }

    /// orchestratord and queue poplar's manager (direct launcher), each once its bus name
    /// is held; both stop when the guards drop.
    pub(crate) fn serve_poplar(&self) -> [KillOnDrop; 2] {
        [
            self.daemon(
                Daemon::Orchestratord,
                &["--idle-exit", "0"],
                "org.agentstore.Orchestrator1",
            ),
            self.daemon(
                Daemon::QueueManager,
                &["--queue", "poplar", "--launcher", "direct"],
                "org.agentstore.Queue.poplar",
            ),
        ]
    }

    pub(crate) fn prd(&self, id: &str) {
        self.env().write(
            &format!("projects/P/queued_prds/{id}.json"),
            &serde_json::json!({
                "id": id, "project": "P", "title": "Diamond", "version": "1.0",
                "owner": "chenry", "status": "queued", "created_time": "2025-10-25T10:00:00Z",
                "update_time": "2025-10-25T10:00:00Z", "content": {"goal": "four files"},
                "jobs": []
            })
            .to_string(),
        );
    }

    /// Sets the project's check command.
    pub(crate) fn check_command(&self, argv: &[&str]) {
        let p = self.env().root.join("projects/P/project.json");
        let mut doc = read(&p);
        doc["check_command"] = serde_json::json!(argv);
        std::fs::write(&p, doc.to_string()).unwrap();
    }

    pub(crate) fn task(&self, prd: &str, t: &str) -> Value {
        read(
            &self
                .env()
                .root
                .join(format!("projects/P/tasks/{prd}/{t}.json")),
        )
    }

    pub(crate) fn job(&self, id: &str) -> Value {
        for s in ["finished", "failed", "running", "queued"] {
            let p = self
                .env()
                .root
                .join(format!("Queues/poplar/Jobs/{s}_jobs/{id}.json"));
            if let Ok(b) = std::fs::read(&p)
                && let Ok(v) = serde_json::from_slice(&b)
            {
                return v;
            }
        }
        Value::Null
    }
}

pub(crate) fn job_id(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("Job queued: "))
        .unwrap_or_else(|| panic!("no job in {out}"))
        .to_string()
}

#[test]
fn a_diamond_runs_in_parallel_worktrees_and_each_task_commits_on_its_branch() {
    let rig = Rig::new();
    let _daemons = rig.serve_poplar();
    rig.prd("prd-x");
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-x"]));
    let running = rig.env().root.join("projects/P/running_prds/prd-x.json");
    wait_until(LONG, "create-tasks handled, the PRD running", || {
        running.is_file()
    });
    assert_eq!(rig.job(&ct)["runtime"]["status"], "finished");
    assert_eq!(
        read(&running)["content"]["tasks"],
        serde_json::json!(["A", "B", "C", "D"])
    );

    // The project's check runs on the integration branch, as the job's user; a remote is
    // configured, and nothing may be pushed to it.
    rig.check_command(&[
        "sh",
        "-c",
        &format!(
            "cat A.txt B.txt C.txt D.txt > {}/check-ran",
            rig.log.display()
        ),
    ]);
    let remote = rig.env().dir.path().join("remote.git");
    git(
        rig.env().dir.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );
    git(
        &rig.r.project_dir,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-x"]);
    let done = rig.env().root.join("projects/P/finished_prds/prd-x.json");
    wait_until(LONG, "every task done, the PRD complete", || {
        if let Some(t) = ["A", "B", "C", "D"]
            .iter()
            .map(|t| rig.task("prd-x", t))
            .find(|t| t["status"] == "failed")
        {
            panic!("a task failed: {t}");
        }
        for t in ["A", "B", "C", "D"] {
            let j = rig.task("prd-x", t)["jobs"][0].as_str().map(|j| rig.job(j));
            if let Some(j) = j.filter(|j| j["runtime"]["status"] == "failed") {
                panic!("task {t}'s job failed: {}", j["runtime"]["error"]);
            }
        }
        done.is_file()
    });
    // B and C ran at the same time.
    assert!(rig.log.join("overlap-B").exists() && rig.log.join("overlap-C").exists());

    let repo = &rig.r.project_dir;
    let main = git(repo, &["rev-parse", "main"]).trim().to_string();
    let mut commits = Vec::new();
    for (t, files) in [
        ("A", vec!["A.txt"]),
        ("B", vec!["A.txt", "B.txt"]),
        ("C", vec!["A.txt", "C.txt"]),
        ("D", vec!["A.txt", "B.txt", "C.txt", "D.txt"]),
    ] {
        let doc = rig.task("prd-x", t);
        assert_eq!(doc["status"], "done", "{doc}");
        let branch = format!("agentstore/prd-x/{t}");
        assert_eq!(doc["branch"], branch.as_str());
        let head = git(repo, &["rev-parse", &branch]).trim().to_string();
        assert_eq!(
            doc["commit"],
            head.as_str(),
            "the task records its branch's commit"
        );
        assert_ne!(head, main);
        let tree = git(repo, &["ls-tree", "--name-only", &branch]);
        for f in &files {
            assert!(tree.lines().any(|l| l == *f), "{branch} lacks {f}: {tree}");
        }
        assert!(
            !tree
                .lines()
                .any(|l| l.ends_with(".txt") && !files.contains(&l)),
            "{branch} holds another task's work: {tree}"
        );
        let job = rig.job(doc["jobs"][0].as_str().unwrap());
        assert_eq!(job["runtime"]["commit"], head.as_str());
        assert!(
            job["runtime"]["worktree"]
                .as_str()
                .unwrap()
                .contains(&branch),
            "{job}"
        );
        commits.push(head);
    }
    // Every task had its own tree; the project's own tree was never touched.
    assert_eq!(git(repo, &["status", "--porcelain"]), "");
    assert_eq!(git(repo, &["rev-parse", "HEAD"]).trim(), main);
    let report = read(&done)["implementation_report"].clone();
    for (i, t) in ["A", "B", "C", "D"].iter().enumerate() {
        let item = report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["task"] == *t)
            .unwrap_or_else(|| panic!("{t} not in {report}"));
        assert_eq!(item["commit"], commits[i].as_str());
    }
    // The integration: every branch merged in dependency order into one branch, the check
    // green on it, the tasks' branches left where they were, nothing pushed.
    let integ = &report["integration"];
    assert_eq!(integ["status"], "merged", "{report}");
    let order: Vec<&str> = integ["merged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(order.len(), 4, "{integ}");
    assert_eq!(
        (order[0], order[3]),
        ("A", "D"),
        "dependency order: {order:?}"
    );
    let ib = "agentstore/prd-x/integration";
    assert_eq!(integ["branch"], ib);
    let head = git(repo, &["rev-parse", ib]).trim().to_string();
    assert_eq!(integ["commit"], head.as_str());
    let tree = git(repo, &["ls-tree", "--name-only", ib]);
    for f in ["A.txt", "B.txt", "C.txt", "D.txt", "README"] {
        assert!(tree.lines().any(|l| l == f), "{ib} lacks {f}: {tree}");
    }
    for (i, t) in ["A", "B", "C", "D"].iter().enumerate() {
        let b = format!("agentstore/prd-x/{t}");
        assert_eq!(
            git(repo, &["rev-parse", &b]).trim(),
            commits[i],
            "{b} moved"
        );
        git(repo, &["merge-base", "--is-ancestor", &commits[i], &head]);
    }
    assert_eq!(integ["check"]["exit_code"], 0, "{integ}");
    let ran = std::fs::read_to_string(rig.log.join("check-ran")).unwrap();
    for t in ["A", "B", "C", "D"] {
        assert!(ran.contains(&format!("{t} was here")), "{ran}");
    }
    assert!(
        !repo
            .join(".agentstore-worktrees/prd-x/.integration")
            .exists()
    );
    assert_eq!(git(repo, &["rev-parse", "HEAD"]).trim(), main);
    assert_eq!(git(repo, &["ls-remote", "origin"]), "", "nothing pushed");
    let ij = rig.job(report["integration_job"].as_str().unwrap());
    assert_eq!(ij["config"]["command"], "integrate");
    assert_eq!(ij["runtime"]["status"], "finished");
    // Notices (issue 31): the tasks written, then all of them done, once each.
    let created = crate::notify::notices(&rig.env().root, "tasks_created");
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["title"], "PRD prd-x: 4 task(s) created");
    let done = crate::notify::notices(&rig.env().root, "graph_done");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0]["title"], "PRD prd-x: all 4 task(s) done");
}

#[test]
fn a_path_in_the_way_or_a_dirty_base_fails_the_task_naming_it() {
    let rig = Rig::with_sandbox(true);
    let _orch = rig.daemon(
        Daemon::Orchestratord,
        &["--idle-exit", "0"],
        "org.agentstore.Orchestrator1",
    );
    rig.prd("prd-y");
    let ct = job_id(&rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-y"]));
    // No queue manager yet: finish create-tasks by running the queue's worker for it.
    let _qm = rig.daemon(
        Daemon::QueueManager,
        &["--queue", "poplar", "--launcher", "direct"],
        "org.agentstore.Queue.poplar",
    );
    let running = rig.env().root.join("projects/P/running_prds/prd-y.json");
    wait_until(LONG, "the PRD running", || running.is_file());
    assert_eq!(rig.job(&ct)["runtime"]["status"], "finished");
    // A folder where A's worktree goes, and uncommitted work in the project.
    let gitdir = rig.r.project_dir.join(".agentstore-worktrees/prd-y/A");
    std::fs::create_dir_all(&gitdir).unwrap();
    std::fs::write(gitdir.join("keep"), "mine").unwrap();
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-y"]);
    let a_job = rig.task("prd-y", "A")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(LONG, "A's job failed", || {
        rig.job(&a_job)["runtime"]["status"] == "failed"
    });
    let err = rig.job(&a_job)["runtime"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        err.contains(gitdir.to_str().unwrap()) && err.contains("exists"),
        "{err}"
    );
    // The owner is told the graph is blocked at A (issue 31), with how to go on.
    let at_a = format!("PRD prd-y: blocked at task A/{a_job}");
    let blocked_at_a = || -> Vec<serde_json::Value> {
        crate::notify::notices(&rig.env().root, "graph_blocked")
            .into_iter()
            .filter(|n| n["title"] == at_a.as_str())
            .collect()
    };
    wait_until(LONG, "the graph_blocked notice", || {
        !blocked_at_a().is_empty()
    });
    let blocked = blocked_at_a();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    let body = blocked[0]["body"].as_str().unwrap();
    assert!(
        body.contains("retry-task prd-y/A") && body.contains("exists"),
        "{body}"
    );
    // B waited on A and is failed with it: the notice at A is the one that says where the
    // graph stopped, none is added for B.
    let b_job = rig.task("prd-y", "B")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(LONG, "B's job failed with A", || {
        rig.job(&b_job)["runtime"]["status"] == "failed"
    });
    let all: Vec<String> = crate::notify::notices(&rig.env().root, "graph_blocked")
        .iter()
        .map(|n| n["title"].as_str().unwrap().to_string())
        .filter(|t| t.starts_with("PRD prd-y:"))
        .collect();
    assert_eq!(all, [at_a], "one notice, at A");
    assert_eq!(
        std::fs::read_to_string(gitdir.join("keep")).unwrap(),
        "mine",
        "nothing of what was in the way is lost"
    );
    assert!(
        git(&rig.r.project_dir, &["branch", "--list", "agentstore/*"]).is_empty(),
        "no branch was made"
    );
    // The dirty base: B's worktree cannot be made from it (B waits for A, which failed, so
    // the worker side is checked with a second PRD whose only task has no dependency).
    std::fs::remove_dir_all(rig.r.project_dir.join(".agentstore-worktrees")).unwrap();
    std::fs::write(rig.r.project_dir.join("README"), "changed, not committed\n").unwrap();
    rig.prd("prd-z");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-z"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-z.json");
    wait_until(LONG, "the PRD running", || running.is_file());
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-z"]);
    let a_job = rig.task("prd-z", "A")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(LONG, "A's job failed", || {
        rig.job(&a_job)["runtime"]["status"] == "failed"
    });
    let err = rig.job(&a_job)["runtime"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        err.contains("uncommitted changes") && err.contains("README"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(rig.r.project_dir.join("README")).unwrap(),
        "changed, not committed\n",
        "the uncommitted work is left as it was"
    );
}

/// Cross-project dependencies (issue 30): task E of project Q's PRD depends on task D of
/// project P's diamond. E's job waits for D's (its `after`), runs once D is done, works in
/// its own worktree of Q's repository (Q's base branch: a branch of another repository is no
/// base), and both PRDs end complete.
#[test]
fn a_task_of_another_project_waits_for_the_task_it_depends_on() {
    let rig = Rig::new();
    let _daemons = rig.serve_poplar();
    rig.prd("prd-x");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-x"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-x.json");
    wait_until(LONG, "P's tasks written", || running.is_file());
    // D holds (its stand-in waits for the file to go) until E has been queued behind it.
    std::fs::write(rig.log.join("hold-D"), "").unwrap();
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-x"]);
    wait_until(LONG, "D started and holding", || {
        rig.log.join("held-D").exists()
    });

    // Project Q: a second real repository, a PRD whose one task depends on P's D.
    let qdir = rig.env().dir.path().join("project-q");
    std::fs::create_dir_all(&qdir).unwrap();
    git(&qdir, &["init", "-q", "-b", "main"]);
    std::fs::write(qdir.join("README"), "project q\n").unwrap();
    git(&qdir, &["add", "README"]);
    git(&qdir, &["commit", "-q", "-m", "start"]);
    rig.ok(&[
        "add-project",
        "Q",
        "--directory",
        qdir.to_str().unwrap(),
        "--owner",
        "chenry",
        "--default-queue",
        "poplar",
    ]);
    rig.env().write(
        "projects/Q/queued_prds/prd-y.json",
        &serde_json::json!({
            "id": "prd-y", "project": "Q", "title": "After the diamond", "version": "1.0",
            "owner": "chenry", "status": "queued", "created_time": "2025-10-25T10:00:00Z",
            "update_time": "2025-10-25T10:00:00Z", "content": {"goal": "one file"}, "jobs": []
        })
        .to_string(),
    );
    let plan = "Plan:\n```json\n{\"tasks\": [{\"id\": \"E\", \"title\": \"after D\", \"description\": \"E\", \"depends_on\": [\"prd-x/D\"]}]}\n```";
    std::fs::write(
        rig.log.join("tasks.txt"),
        serde_json::to_string(plan).unwrap(),
    )
    .unwrap();
    rig.ok(&["create-tasks", "--project", "Q", "--prd", "prd-y"]);
    let q_running = rig.env().root.join("projects/Q/running_prds/prd-y.json");
    wait_until(LONG, "Q's task written", || q_running.is_file());
    std::fs::remove_file(rig.log.join("tasks.txt")).unwrap();
    let e_doc = || read(&rig.env().root.join("projects/Q/tasks/prd-y/E.json"));
    assert_eq!(e_doc()["depends_on"], serde_json::json!(["prd-x/D"]));

    rig.ok(&["implement-tasks", "--project", "Q", "--prd", "prd-y"]);
    wait_until(LONG, "E's job queued", || e_doc()["jobs"][0].is_string());
    let e_job = e_doc()["jobs"][0].as_str().unwrap().to_string();
    let d_job = rig.task("prd-x", "D")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        rig.job(&e_job)["config"]["after"]
            .as_array()
            .is_some_and(|a| a.iter().any(|j| j == d_job.as_str())),
        "E's job waits for D's ({d_job}): {}",
        rig.job(&e_job)
    );
    assert!(
        !rig.log.join("start-E").exists(),
        "E started while D was still running"
    );

    // D goes on; then E runs, and both PRDs end complete.
    std::fs::remove_file(rig.log.join("hold-D")).unwrap();
    let p_done = rig.env().root.join("projects/P/finished_prds/prd-x.json");
    let q_done = rig.env().root.join("projects/Q/finished_prds/prd-y.json");
    wait_until(LONG, "both PRDs complete", || {
        for (prd, t) in [("prd-x", "D"), ("prd-y", "E")] {
            let doc = if prd == "prd-y" {
                e_doc()
            } else {
                rig.task(prd, t)
            };
            if doc["status"] == "failed" {
                panic!("task {t} failed: {doc}");
            }
        }
        if let Some(j) = Some(rig.job(&e_job)).filter(|j| j["runtime"]["status"] == "failed") {
            panic!("E's job failed: {}", j["runtime"]["error"]);
        }
        p_done.is_file() && q_done.is_file()
    });
    let (d, e) = (rig.job(&d_job), rig.job(&e_job));
    let d_end: chrono::DateTime<chrono::Utc> = d["runtime"]["finish_time"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let e_start: chrono::DateTime<chrono::Utc> = e["runtime"]["start_time"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        e_start >= d_end,
        "E started {e_start}, before D ended {d_end}"
    );
    let doc = e_doc();
    assert_eq!(doc["status"], "done", "{doc}");
    assert_eq!(doc["branch"], "agentstore/prd-y/E");
    let head = git(&qdir, &["rev-parse", "agentstore/prd-y/E"]);
    assert_eq!(doc["commit"], head.trim());
    let tree = git(&qdir, &["ls-tree", "--name-only", "agentstore/prd-y/E"]);
    assert!(tree.lines().any(|l| l == "E.txt"), "{tree}");
    assert!(
        !tree.lines().any(|l| l == "D.txt"),
        "Q's branch holds P's work: {tree}"
    );
    assert_eq!(git(&qdir, &["status", "--porcelain"]), "");
}

/// The pipeline's last step fans out too (issue 30): `orchestrator pipeline` queues
/// research-code → create-prd → create-tasks → implement-tasks; once create-tasks wrote the
/// diamond's task documents, the implement-tasks step does not implement them all in one tree:
/// it ends finished naming one job per task, the tasks run in their worktrees (B and C
/// together), and the PRD ends complete through their integration.
#[test]
fn the_pipelines_last_step_fans_out_into_one_job_per_task() {
    let rig = Rig::new();
    let _daemons = rig.serve_poplar();
    let out = rig.ok(&["pipeline", "--project", "P", "--task", "pipeline-goal"]);
    let ids: Vec<String> = out
        .lines()
        .find_map(|l| l.strip_prefix("Pipeline: "))
        .unwrap_or_else(|| panic!("no pipeline in {out}"))
        .split(" → ")
        .map(|s| s.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 4, "{out}");
    let (prd, step) = (ids[1].clone(), ids[3].clone());
    let done = rig
        .env()
        .root
        .join(format!("projects/P/finished_prds/{prd}.json"));
    wait_until(LONG, "the pipeline's PRD complete", || {
        for id in &ids {
            let j = rig.job(id);
            if j["runtime"]["status"] == "failed" {
                panic!("step {id} failed: {}", j["runtime"]["error"]);
            }
        }
        done.is_file()
    });
    let step_job = rig.job(&step);
    assert_eq!(step_job["runtime"]["status"], "finished", "{step_job}");
    assert!(
        step_job["runtime"]["start_time"] == step_job["runtime"]["finish_time"]
            && step_job["runtime"]["process_id"].is_null(),
        "the step ran as one job: {step_job}"
    );
    let said = step_job["runtime"]["output"].as_str().unwrap();
    assert!(said.starts_with("Fanned out into 4 task job(s)"), "{said}");
    let repo = &rig.r.project_dir;
    for t in ["A", "B", "C", "D"] {
        let doc = rig.task(&prd, t);
        assert_eq!(doc["status"], "done", "{doc}");
        let job = rig.job(doc["jobs"][0].as_str().unwrap());
        assert!(said.contains(job["id"].as_str().unwrap()), "{said}");
        assert_eq!(job["config"]["command"], "implement-task");
        assert!(job["config"]["supporting_data"].get("pipeline").is_none());
        let branch = format!("agentstore/{prd}/{t}");
        assert_eq!(doc["commit"], git(repo, &["rev-parse", &branch]).trim());
    }
    assert!(rig.log.join("overlap-B").exists() && rig.log.join("overlap-C").exists());
    let report = read(&done)["implementation_report"].clone();
    assert_eq!(report["integration"]["status"], "merged", "{report}");
    // The research step's document is the project's only new file; no task's tree shows.
    assert_eq!(
        git(repo, &["status", "--porcelain"]),
        "?? CODE_RESEARCH.md\n"
    );
}

/// A crash (issue 30: "a task whose machine is lost is retried elsewhere from its branch; a
/// half-written worktree is detected and reset, never reused blindly"): A's agent leaves a
/// half-written file and its worker is killed (-9, the whole process group). The queue's
/// retry policy runs A again as a new attempt, in the same worktree, which is reset first (the
/// job says so); the task follows the new attempt to `done`, with both jobs recorded; B and C
/// (waiting for A's first job) follow the attempts, and the PRD ends complete with no trace of
/// the half-written file.
#[test]
fn a_task_whose_worker_died_is_retried_in_its_worktree_reset() {
    let rig = Rig::new();
    let qpath = rig.env().root.join("Queues/poplar/queue.json");
    let mut q = read(&qpath);
    q["config"]["retry"] = serde_json::json!({"max_attempts": 2});
    std::fs::write(&qpath, q.to_string()).unwrap();
    std::fs::write(rig.log.join("crash-A"), "").unwrap();
    let _daemons = rig.serve_poplar();
    rig.prd("prd-k");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-k"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-k.json");
    wait_until(LONG, "the tasks written", || running.is_file());
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-k"]);
    let first = rig.task("prd-k", "A")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(LONG, "A's agent half-way", || {
        rig.log.join("crashing-A").exists()
    });
    let pid = rig.job(&first)["runtime"]["process_id"].as_i64().unwrap();
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let done = rig.env().root.join("projects/P/finished_prds/prd-k.json");
    wait_until(LONG, "the PRD complete after A's second attempt", || {
        for t in ["B", "C", "D"] {
            let doc = rig.task("prd-k", t);
            if let Some(j) = doc["jobs"][0].as_str().map(|j| rig.job(j))
                && j["runtime"]["status"] == "failed"
            {
                panic!("task {t}'s job failed: {}", j["runtime"]["error"]);
            }
        }
        done.is_file()
    });
    let failed = rig.job(&first);
    assert_eq!(failed["runtime"]["status"], "failed", "{failed}");
    let a = rig.task("prd-k", "A");
    assert_eq!(a["status"], "done", "{a}");
    let jobs: Vec<&str> = a["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap())
        .collect();
    assert_eq!(jobs.len(), 2, "both attempts recorded: {a}");
    assert_eq!(jobs[0], first);
    let second = rig.job(jobs[1]);
    assert_eq!(second["config"]["retry_of"], first.as_str());
    let note = second["runtime"]["worktree"].as_str().unwrap();
    assert!(note.contains("half-written"), "{note}");
    let repo = &rig.r.project_dir;
    let head = git(repo, &["rev-parse", "agentstore/prd-k/A"]);
    assert_eq!(a["commit"], head.trim());
    let tree = git(repo, &["ls-tree", "--name-only", "agentstore/prd-k/A"]);
    assert!(tree.lines().any(|l| l == "A.txt"), "{tree}");
    assert!(
        !tree.contains("partial"),
        "the half-written file was kept: {tree}"
    );
    let integ = &read(&done)["implementation_report"]["integration"];
    assert_eq!(integ["status"], "merged", "{integ}");
}

/// A project that is not a git repository keeps the single tree (issue 30), and says so: the
/// tasks run in the project's folder, each job and task records why there is no branch, and
/// the PRD ends complete with nothing to merge, its report saying why for each task.
#[test]
fn a_project_without_git_keeps_its_single_tree_and_says_so() {
    let rig = Rig::new();
    std::fs::remove_dir_all(rig.r.project_dir.join(".git")).unwrap();
    let _daemons = rig.serve_poplar();
    rig.prd("prd-n");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-n"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-n.json");
    wait_until(LONG, "the tasks written", || running.is_file());
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-n"]);
    let done = rig.env().root.join("projects/P/finished_prds/prd-n.json");
    wait_until(LONG, "the PRD complete", || {
        for t in ["A", "B", "C", "D"] {
            if let Some(j) = rig.task("prd-n", t)["jobs"][0].as_str().map(|j| rig.job(j))
                && j["runtime"]["status"] == "failed"
            {
                panic!("task {t}'s job failed: {}", j["runtime"]["error"]);
            }
        }
        done.is_file()
    });
    for t in ["A", "B", "C", "D"] {
        let doc = rig.task("prd-n", t);
        assert_eq!(doc["status"], "done", "{doc}");
        assert!(doc["branch"].is_null() && doc["commit"].is_null(), "{doc}");
        let note = doc["error"].as_str().unwrap_or_default();
        assert!(note.contains("not a git repository"), "{doc}");
        let job = rig.job(doc["jobs"][0].as_str().unwrap());
        let wt = job["runtime"]["worktree"].as_str().unwrap();
        assert!(wt.contains("single tree"), "{wt}");
        assert!(rig.r.project_dir.join(format!("{t}.txt")).is_file());
    }
    assert!(!rig.r.project_dir.join(".agentstore-worktrees").exists());
    // Nothing to merge: no integration job; the report says why for each task.
    let report = &read(&done)["implementation_report"];
    assert!(report["integration"].is_null(), "{report}");
    for item in report["tasks"].as_array().unwrap() {
        assert!(
            item["note"]
                .as_str()
                .unwrap()
                .contains("not a git repository"),
            "{report}"
        );
    }
}

/// A task whose machine is lost is retried elsewhere from its branch (issue 30): machine beta
/// runs A, its agent half-way, when beta dies (its queue manager and its worker, -9). Machine
/// alpha serves the queue afterwards, judges beta lost (fast heartbeats: stale after 2 s,
/// jobs failed after 6 s of silence), and the queue's retry policy runs A again on alpha, in
/// the same worktree on the shared project path, reset of beta's half-written file; the task
/// follows the new attempt and the PRD ends complete.
#[test]
fn a_task_whose_machine_is_lost_is_retried_on_another() {
    let rig = Rig::new();
    let cfg = rig.env().root.join("config.yaml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(
        "machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 2\n  lost_job_grace_seconds: 6\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let qpath = rig.env().root.join("Queues/poplar/queue.json");
    let mut q = read(&qpath);
    q["config"]["retry"] = serde_json::json!({"max_attempts": 2});
    std::fs::write(&qpath, q.to_string()).unwrap();
    std::fs::write(rig.log.join("crash-A"), "").unwrap();
    let _orch = rig.daemon(
        Daemon::Orchestratord,
        &["--idle-exit", "0"],
        "org.agentstore.Orchestrator1",
    );
    let qm = |host: &str| {
        rig.daemon_in(
            &["env"],
            &[("AGENTSTORE_HOSTNAME", host)],
            Daemon::QueueManager,
            &["--queue", "poplar", "--launcher", "direct"],
            "org.agentstore.Queue.poplar",
        )
    };
    let beta = qm("beta");
    rig.prd("prd-l");
    rig.ok(&["create-tasks", "--project", "P", "--prd", "prd-l"]);
    let running = rig.env().root.join("projects/P/running_prds/prd-l.json");
    wait_until(LONG, "the tasks written", || running.is_file());
    rig.ok(&["implement-tasks", "--project", "P", "--prd", "prd-l"]);
    let first = rig.task("prd-l", "A")["jobs"][0]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(LONG, "A's agent half-way on beta", || {
        rig.log.join("crashing-A").exists()
    });
    let job = rig.job(&first);
    assert_eq!(job["runtime"]["host"], "beta", "{job}");
    let worker = job["runtime"]["process_id"].as_i64().unwrap() as i32;
    // beta dies: its manager, its worker and the agent, at once.
    let signal = nix::sys::signal::Signal::SIGKILL;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(beta.0.id() as i32), signal).unwrap();
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(worker), signal).unwrap();
    drop(beta);
    let _alpha = qm("alpha");
    let done = rig.env().root.join("projects/P/finished_prds/prd-l.json");
    wait_until(LONG, "the PRD complete after A ran again on alpha", || {
        for t in ["B", "C", "D"] {
            if let Some(j) = rig.task("prd-l", t)["jobs"][0].as_str().map(|j| rig.job(j))
                && j["runtime"]["status"] == "failed"
            {
                panic!("task {t}'s job failed: {}", j["runtime"]["error"]);
            }
        }
        done.is_file()
    });
    let lost = rig.job(&first);
    let error = lost["runtime"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("Machine beta stopped reporting"),
        "{lost}"
    );
    let a = rig.task("prd-l", "A");
    assert_eq!(a["status"], "done", "{a}");
    let second = rig.job(a["jobs"][1].as_str().unwrap());
    assert_eq!(second["config"]["retry_of"], first.as_str(), "{second}");
    assert_eq!(second["runtime"]["host"], "alpha", "{second}");
    let note = second["runtime"]["worktree"].as_str().unwrap();
    assert!(note.contains("half-written"), "{note}");
    let tree = git(
        &rig.r.project_dir,
        &["ls-tree", "--name-only", "agentstore/prd-l/A"],
    );
    assert!(tree.lines().any(|l| l == "A.txt"), "{tree}");
    assert!(!tree.contains("partial"), "{tree}");
    let integ = &read(&done)["implementation_report"]["integration"];
    assert_eq!(integ["status"], "merged", "{integ}");
}
