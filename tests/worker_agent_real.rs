//! A job of `jobtype: "agent"` run by queue-manager + agent-worker with the REAL `agentshell`
//! binary (`agentshell exec --json -`) against the fake Anthropic Messages server: the model
//! asks for a read-only command, the policy allows it unattended, the command runs in the
//! job's working directory as the job account, and the final answer lands in the job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/claude_env.rs"]
mod claude_env;
mod common;
#[path = "support/fake_model.rs"]
mod fake_model;
#[path = "support/queue_env.rs"]
mod queue_env;

use claude_env::{chown_recursive, unprivileged_user};
use fake_model::{FakeModel, Script, tool_result_text};
use queue_env::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_job_runs_the_builtin_agent_against_the_fake_model() {
    guarded(async {
        let server = FakeModel::start(
            Script::new()
                .tool_use("run_command", json!({"command": "ls"}))
                .text("The project has one file: NOTES.md."),
        );
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        std::fs::write(env.work.join("NOTES.md"), "notes\n").unwrap();
        let agent_home = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        if let Some(u) = unprivileged_user() {
            chown_recursive(&env.work, u.uid, u.gid);
            chown_recursive(agent_home.path(), u.uid, u.gid);
        }
        env.edit_queue(|q| {
            q.config.agentshell_path = Some(env!("CARGO_BIN_EXE_agentshell").to_string())
        });
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let mut cfg = env.manager_config(&bus);
        cfg.worker_env = vec![
            ("AGENTSHELL_BASE_URL".into(), server.base_url()),
            ("AGENTSHELL_API_KEY".into(), "sk-fake-key-for-tests".into()),
            (
                "AGENTSHELL_HOME".into(),
                agent_home.path().display().to_string(),
            ),
        ];
        let m = RunningManager::start(cfg).await;

        let mut j = job(
            "agent",
            json!({"claude_command": "code-researcher", "task_description": "What files are here?",
                   "working_directory": env.work, "timeout_seconds": 170}),
        );
        j["config"]["model"] = json!("anthropic/claude-test");
        env.queue_job("agent-1", &j);
        let c = loop {
            let c = changes.next().await;
            if c.id == "agent-1" && (c.new == "finished" || c.new == "failed") {
                break c;
            }
        };
        let doc = env.job(&c.new, "agent-1");
        let rt = &doc["runtime"];
        assert_eq!(
            c.new, "finished",
            "job failed: {}\noutput: {}",
            rt["error"], rt["output"]
        );
        let out: Value = serde_json::from_str(rt["output"].as_str().unwrap().trim()).unwrap();
        assert_eq!(out["is_error"], false, "{out}");
        assert_eq!(
            out["result"], "The project has one file: NOTES.md.",
            "{out}"
        );
        assert_eq!(out["model"], "anthropic/claude-test");
        assert_eq!(rt["num_turns"], json!(2), "{rt}");
        assert_eq!(rt["session_id"], out["session_id"]);
        // The command really ran in the job's directory, and the key never reached the model.
        let uses = server.issued_tool_uses();
        assert_eq!(uses.len(), 1, "{uses:?}");
        let block = server.tool_result_for(&uses[0].id).unwrap();
        assert!(tool_result_text(&block).contains("NOTES.md"), "{block}");
        for r in server.message_requests() {
            assert!(!r.text().contains("sk-fake-key-for-tests"));
        }
        m.stop().await;
    })
    .await
}
