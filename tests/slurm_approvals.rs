//! Issue 27 (round 2, item 2): a Slurm job got no approval key (a local worker gets it on
//! its gate, a batch step has none), so every person-approval it asked for was denied at
//! once ("started without the key"). The manager now hands the job's key in sbatch's own
//! environment, which Slurm gives the batch step — never on a command line or in the store —
//! and the answer still counts only when the manager that owns the request signed it.
//!
//! Under root (as CI runs it) the manager runs the Slurm job as its own account (the relay):
//! the step cannot reach the store and holds no key that signs answers; its requests reach
//! the store through the manager, and only the manager's answers (signed with a key whose
//! public half alone the step holds) are taken from the account's answers file, never one the
//! account wrote there (before, every person-approval of such a job was denied at once).
//!
//! Real parts: queue-manager, agent-worker and agentshell binaries, a private dbus-daemon,
//! the fake Slurm of tests/slurm.rs (its batch step runs here with sbatch's environment, as
//! slurmd gives it), a fake model endpoint speaking the Anthropic protocol.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::slurm::{manager_with, setup, slurm_queue};
use crate::{approvals_env, fake_model, queue_env};

use agentstore::model::{Timestamp, approval::ApprovalAnswer};
use approvals_env::{add_users, agentshell_queue, owner_uid, requests};
use fake_model::{FakeModel, Script};
use queue_env::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_job_asks_a_person_and_only_its_managers_answer_counts() {
    guarded(async {
        let (env, bus, fake) = setup();
        slurm_queue(&env, json!({"poll_seconds": 1}));
        let server = FakeModel::start(
            Script::new()
                .tool_use("run_command", json!({ "command": "touch forged.txt" }))
                .tool_use("run_command", json!({ "command": "touch allowed.txt" }))
                .text("Done."),
        );
        let (_agent_home, worker_env) = agentshell_queue(&env, &server);
        add_users(&env);
        env.edit_queue(|q| {
            q.config.approvals =
                Some(serde_json::from_value(json!({"deadline_seconds": 120})).unwrap());
        });
        // The manager's master key in this test's own folder (not the machine's).
        let state = env.dir.path().join("manager-state");
        let mut extra: Vec<(&str, &str)> = worker_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let state_s = state.display().to_string();
        extra.push(("STATE_DIRECTORY", &state_s));
        let _m = manager_with(&env, &bus, &fake, &extra);
        wait_for_name(&bus, &agentstore::bus::queue_bus_name(&env.queue));
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let mut reqs = requests(&bus, &env).await;

        let mut j = job(
            "agent",
            json!({"claude_command": "code-researcher", "task_description": "Make the files.",
                   "working_directory": env.work, "timeout_seconds": 170}),
        );
        j["config"]["model"] = json!("anthropic/claude-test");
        j["config"]["user"] = json!("chenry");
        env.queue_job("slurm-ask", &j);
        // The first call is asked of a person (before: denied at once, never published).
        let (job_id, req, tool, ..) = tokio::time::timeout(Duration::from_secs(90), reqs.recv())
            .await
            .expect("the Slurm job's approval request was never published")
            .unwrap();
        assert_eq!(
            (job_id.as_str(), tool.as_str()),
            ("slurm-ask", "run_command")
        );
        // An answer planted in the store (anyone who can write it) is not the manager's:
        // signed with another key, it is removed and never taken.
        let store = env.store();
        let forged = ApprovalAnswer {
            request_id: req.clone(),
            allow: true,
            always: true,
            message: String::new(),
            by: "chenry".into(),
            at: Timestamp::now(),
            proof: String::new(),
        }
        .sign(&agentstore::model::approval::new_approval_key());
        assert!(store.write_approval_answer(&env.queue, &forged).unwrap());
        let planted = store.approval_answer_path(&env.queue, &req);
        wait_until(
            Duration::from_secs(60),
            "the planted answer removed",
            || !planted.exists(),
        );
        if crate::slurm::relayed() {
            // Run as its own account, the step reads its answers from that account's file,
            // which the account (and so its agent) may write: answers it writes there itself
            // — signed with the job's key or a key of its own, or unsigned — come before the
            // manager's in the file and must not be taken.
            let file = env
                .dir
                .path()
                .join("slurm-output")
                .join(format!("{}-slurm-ask.answers", env.queue));
            let forge = |a: ApprovalAnswer| serde_json::to_string(&a).unwrap() + "\n";
            let mut lines = forge(forged.clone());
            lines += &forge(
                ApprovalAnswer {
                    by: "forged".into(),
                    ..forged.clone()
                }
                .sign_for_relay(&agentstore::model::approval::new_approval_key()),
            );
            lines += &forge(ApprovalAnswer {
                proof: String::new(),
                ..forged.clone()
            });
            std::fs::write(&file, lines).unwrap();
            let u = crate::claude_env::unprivileged_user().unwrap();
            std::os::unix::fs::chown(&file, Some(u.uid), Some(u.gid)).unwrap();
        }
        // The project owner's answer through the manager: a deny, which the job records.
        let (ok, err) =
            approvals_env::answer_as(&bus, &env, owner_uid(), &req, false, false, "not this");
        assert!(ok, "the project owner may answer: {err}");
        // The second call: allowed by the owner, so the key really reached the batch step
        // (the worker takes only answers signed with it).
        let (_, req2, ..) = tokio::time::timeout(Duration::from_secs(90), reqs.recv())
            .await
            .expect("the second request was never published")
            .unwrap();
        let (ok, err) = approvals_env::answer_as(&bus, &env, owner_uid(), &req2, true, false, "");
        assert!(ok, "{err}");

        let c = changes.ended("slurm-ask").await;
        let doc = env.job(&c.new, "slurm-ask");
        let rt = &doc["runtime"];
        assert_eq!(c.new, "finished", "{rt}");
        assert!(rt["slurm_job_id"].is_string(), "ran through Slurm: {rt}");
        assert!(
            !env.work.join("forged.txt").exists(),
            "a planted answer ran the command"
        );
        assert!(env.work.join("allowed.txt").exists(), "{rt}");
        let a = rt["approvals"].as_array().unwrap();
        assert_eq!(a.len(), 2, "{rt}");
        assert_eq!(
            (&a[0]["request_id"], &a[0]["allow"], &a[0]["by"]),
            (&json!(req), &json!(false), &json!("chenry")),
            "{rt}"
        );
        assert_eq!(
            (&a[1]["request_id"], &a[1]["allow"], &a[1]["by"]),
            (&json!(req2), &json!(true), &json!("chenry")),
            "{rt}"
        );
        if crate::slurm::relayed() {
            // The relay's files (the step's output, the answers, forged ones among them) go
            // once the job's end is recorded (before, they stayed for ever).
            let dir = env.dir.path().join("slurm-output");
            let gone = |ext: &str| {
                let f = dir.join(format!("{}-slurm-ask.{ext}", env.queue));
                std::fs::symlink_metadata(f).is_err()
            };
            wait_until(
                Duration::from_secs(30),
                "the relay's .out and .answers removed",
                || gone("out") && gone("answers"),
            );
        }
        // No key went on sbatch's command line (any local user reads those): neither the
        // variable nor the manager's master key.
        let calls = fake.calls();
        let key_file = std::fs::read_to_string(state.join("approval-key")).unwrap();
        assert!(!calls.contains(key_file.trim()), "{calls}");
        assert!(!calls.contains("AGENTSTORE_APPROVAL_KEY"), "{calls}");
    })
    .await
}
