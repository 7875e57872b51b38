//! A job of `jobtype: "agent"` run by queue-manager + agent-worker with the REAL `agentshell`
//! binary (`agentshell exec --json -`) against the fake Anthropic Messages server: the model
//! asks for a read-only command, the policy allows it unattended, the command runs in the
//! job's working directory as the job account, and the final answer lands in the job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{approvals_env, fake_model, queue_env};

use approvals_env::agentshell_queue;
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
        let (_agent_home, worker_env) = agentshell_queue(&env, &server);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let mut cfg = env.manager_config(&bus);
        cfg.worker_env = worker_env;
        let m = RunningManager::start(cfg).await;

        let mut j = job(
            "agent",
            json!({"claude_command": "code-researcher", "task_description": "What files are here?",
                   "working_directory": env.work, "timeout_seconds": 170}),
        );
        j["config"]["model"] = json!("anthropic/claude-test");
        env.queue_job("agent-1", &j);
        let c = changes.ended("agent-1").await;
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
