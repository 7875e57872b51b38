//! Issue 27, the root holes: whoever can write the store chooses neither the account a job
//! runs as nor the program it executes (DESIGN §9, docs/trust-model.md). Through an
//! in-process queue manager and real agent-workers. Run as root (as CI here is), the manager
//! switches accounts and the run-as rule is exercised; not root, nothing is switched and the
//! jobs run as the test's own account. The system services' side (root daemons, the root
//! account itself, /etc/agentstore/config.yaml) is tests/system/t_trust.sh.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{claude_env, queue_env};

use queue_env::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

struct Setup {
    machine: tempfile::TempDir,
    _bus: PrivateBus,
    env: QueueEnv,
    changes: Changes,
    _manager: RunningManager,
}

/// A queue running jobs with the fake claude; this machine's own configuration lists
/// `listed` as claude programs besides the fixture.
async fn setup(listed: &[&Path]) -> Setup {
    let bus = PrivateBus::start();
    let env = QueueEnv::new(2);
    env.edit_queue(|q| {
        q.config.claude_cli_path = fake_claude().display().to_string();
        q.config.claude_default_args = vec!["-p".into()];
    });
    std::fs::write(
        env.work.join(".claude/commands/greet.md"),
        "Greet $ARGUMENTS\n",
    )
    .unwrap();
    let mut programs = vec![fake_claude()];
    programs.extend(listed.iter().map(|p| p.to_path_buf()));
    let refs: Vec<&Path> = programs.iter().map(|p| p.as_path()).collect();
    let (machine, var) = machine_config(&refs, &[]);
    let changes = Changes::subscribe(&bus, &env.queue).await;
    let mut cfg = env.manager_config(&bus);
    cfg.worker_env = vec![var];
    let manager = RunningManager::start(cfg).await;
    Setup {
        machine,
        _bus: bus,
        env,
        changes,
        _manager: manager,
    }
}

async fn run_one(s: &mut Setup, id: &str, job: &Value) -> (String, Value) {
    s.env.queue_job(id, job);
    let c = s.changes.ended(id).await;
    (c.new.clone(), s.env.job(&c.new, id))
}

fn claude_job(s: &Setup) -> Value {
    job(
        "claude",
        json!({"claude_command": "greet", "task_description": "World",
               "working_directory": s.env.work}),
    )
}

fn set_owner_login(s: &Setup, login: &str) {
    let p = s.env.root.join("users/chenry.json");
    let mut u: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    u["unix_user"] = json!(login);
    std::fs::write(&p, u.to_string()).unwrap();
}

fn error_of(doc: &Value) -> String {
    doc["runtime"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The store's users/*.json names a system account, `nobody`, an account that does not
/// exist: a root manager fails each job once, naming the account and the rule, and goes on
/// serving (the next job, of an ordinary account, runs). Before issue 27 a root manager ran
/// the job as whatever account the store named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_cannot_choose_a_system_account() {
    guarded(async {
        let mut s = setup(&[]).await;
        let root = nix::unistd::geteuid().is_root();
        for (i, (login, rule)) in [
            ("daemon", "system account"),
            ("nobody", "system account"),
            ("bin", "system account"),
            ("no-such-user-27x", "does not exist"),
        ]
        .into_iter()
        .enumerate()
        {
            set_owner_login(&s, login);
            let id = format!("acct-{i}");
            let (state, doc) = run_one(&mut s, &id, &noop(0.0)).await;
            if root {
                assert_eq!(state, "failed", "{login}: {doc}");
                let e = error_of(&doc);
                assert!(e.contains(login) && e.contains(rule), "{login}: {e}");
                if rule != "does not exist" {
                    assert!(e.starts_with("Refused to run the job as Unix user"), "{e}");
                }
            } else {
                // Not root: nothing is switched, the job runs as this account.
                assert_eq!(state, "finished", "{login}: {doc}");
            }
        }
        // The manager goes on serving: an ordinary account's job runs.
        set_owner_login(&s, &job_login());
        let (state, doc) = run_one(&mut s, "acct-ok", &noop(0.0)).await;
        assert_eq!(state, "finished", "{doc}");
        // Each refused job failed once, with one job_failed event.
        let failed = events(&s.env.root)
            .into_iter()
            .filter(|e| e["event"] == "job_failed" && e["job_id"] == "acct-0")
            .count();
        assert_eq!(failed, usize::from(root), "one failure for acct-0");
    })
    .await;
}

/// The store's queue.json names a program this machine does not allow: a system program
/// that runs anything with the queue's default arguments (`/bin/sh -c …`), a script inside
/// the project, `env`. The worker refuses each, naming the field, and nothing of it runs.
/// Before issue 27 each was executed (as the job's account; as root in issue 27's report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_cannot_name_a_program() {
    guarded(async {
        let mut s = setup(&[]).await;
        let marker = s.env.dir.path().join("pwned");
        let script = s.env.work.join("evil.sh");
        std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let touch = format!("touch {}", marker.display());
        let cases: Vec<(String, Vec<String>)> = vec![
            ("/bin/sh".into(), vec!["-c".into(), touch.clone()]),
            ("sh".into(), vec!["-c".into(), touch.clone()]),
            (script.display().to_string(), vec![]),
            ("/usr/bin/env".into(), vec!["sh".into(), "-c".into(), touch]),
        ];
        for (i, (program, args)) in cases.into_iter().enumerate() {
            s.env.edit_queue(|q| {
                q.config.claude_cli_path = program.clone();
                q.config.claude_default_args = args.clone();
            });
            let id = format!("prog-{i}");
            let (state, doc) = {
                let j = claude_job(&s);
                run_one(&mut s, &id, &j).await
            };
            assert_eq!(state, "failed", "{program}: {doc}");
            let e = error_of(&doc);
            assert!(
                e.contains("config.claude_cli_path")
                    && e.contains("not a program this machine allows"),
                "{program}: {e}"
            );
            assert!(!marker.exists(), "{program} ran");
        }
        // agentshell_path the same.
        s.env
            .edit_queue(|q| q.config.agentshell_path = Some("/bin/sh".into()));
        let mut j = claude_job(&s);
        j["config"]["jobtype"] = json!("agent");
        let (state, doc) = run_one(&mut s, "prog-agent", &j).await;
        assert_eq!(state, "failed", "{doc}");
        assert!(error_of(&doc).contains("config.agentshell_path"), "{doc}");
        // The program the machine lists runs.
        s.env.edit_queue(|q| {
            q.config.claude_cli_path = fake_claude().display().to_string();
            q.config.claude_default_args = vec!["-p".into()];
        });
        let (state, doc) = {
            let j = claude_job(&s);
            run_one(&mut s, "prog-ok", &j).await
        };
        assert_eq!(state, "finished", "{doc}");
    })
    .await;
}

/// A program the machine's configuration lists, but which someone else can change (its
/// folder writable by everyone, or a link into such a folder): refused by the secure-path
/// check, not executed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_program_others_can_change_is_refused() {
    guarded(async {
        let open = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let planted = open.path().join("claude");
        std::fs::copy(fake_claude(), &planted).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = setup(&[&planted]).await;
        // A link in a trusted folder leading there.
        let link = s.machine.path().join("claude-link");
        std::os::unix::fs::symlink(&planted, &link).unwrap();
        std::fs::write(
            s.machine.path().join("agentstore/config.yaml"),
            format!(
                "programs:\n  claude: [{:?}, {:?}]\n",
                planted.display().to_string(),
                link.display().to_string()
            ),
        )
        .unwrap();
        for (i, p) in [&planted, &link].into_iter().enumerate() {
            s.env
                .edit_queue(|q| q.config.claude_cli_path = p.display().to_string());
            let (state, doc) = {
                let j = claude_job(&s);
                run_one(&mut s, &format!("insecure-{i}"), &j).await
            };
            assert_eq!(state, "failed", "{doc}");
            let e = error_of(&doc);
            assert!(
                e.contains("not a trusted program") && e.contains("writable by everyone"),
                "{e}"
            );
        }
    })
    .await;
}

/// The job runs with its account's own groups (as initgroups sets them), nothing of the
/// daemon's: the fake claude reports `id -G` of the process the worker started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_has_its_accounts_groups_only() {
    guarded(async {
        let mut s = setup(&[]).await;
        let (state, doc) = {
            let j = claude_job(&s);
            run_one(&mut s, "groups", &j).await
        };
        assert_eq!(state, "finished", "{doc}");
        let Some(u) = claude_env::unprivileged_user() else {
            // Not root: the job runs as this account, with this process's groups.
            return;
        };
        let want: std::collections::BTreeSet<u32> = nix::unistd::getgrouplist(
            &std::ffi::CString::new(u.name.clone()).unwrap(),
            nix::unistd::Gid::from_raw(u.gid),
        )
        .unwrap()
        .into_iter()
        .map(|g| g.as_raw())
        .collect();
        let out = doc["runtime"]["output"].as_str().unwrap_or_default();
        let v: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
        let groups = v["fake"]["groups"].as_str().unwrap_or_default();
        let got: std::collections::BTreeSet<u32> = groups
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect();
        assert_eq!(got, want, "{out}");
    })
    .await;
}
