//! PRD M5 with the REAL Claude Code CLI, offline: a custom command in the run-as user's
//! `~/.claude/commands/` runs through queue-manager + agent-worker against the fake Anthropic
//! Messages server, and its result lands in the job. Running as root, the job runs as the
//! unprivileged test user, mapped through `users/chenry.json` `unix_user`, as the product
//! would. `claude` must be installed (`.ci/install-claude.sh`); without it this test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{claude_env, fake_model, queue_env};

use claude_env::{ClaudeHome, chown_recursive, claude_env, require_claude, unprivileged_user};
use fake_model::{FakeModel, Script, tool_result_text};
use queue_env::*;
use serde_json::{Value, json};
use std::path::PathBuf;

const GREET: &str = "---\ndescription: Greet someone\n---\n\
Greet $ARGUMENTS warmly. Use the Bash tool to print the greeting.\n";

/// Removes the command file on drop (the test user's home is shared between runs).
struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_custom_command_through_the_queue() {
    guarded(async {
        let claude = require_claude();
        let server = FakeModel::start(
            Script::new()
                .bash("echo hello-from-bash")
                .text("Greeted World."),
        );
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let command = format!("greet-{}", uuid::Uuid::new_v4().simple());
        let user = unprivileged_user();
        let temp_home;
        let (home, _cleanup) = match &user {
            Some(u) => {
                // The job runs as this user with its passwd home, as in production.
                let pw = nix::unistd::User::from_name(&u.name).unwrap().unwrap();
                let cmds = pw.dir.join(".claude/commands");
                std::fs::create_dir_all(&cmds).unwrap();
                chown_recursive(&pw.dir, u.uid, u.gid);
                let file = cmds.join(format!("{command}.md"));
                std::fs::write(&file, GREET).unwrap();
                chown_recursive(&pw.dir, u.uid, u.gid);
                chown_recursive(&env.work, u.uid, u.gid);
                (pw.dir.clone(), Some(RemoveOnDrop(file)))
            }
            None => {
                temp_home = ClaudeHome::new();
                temp_home.add_command(&command, GREET);
                (temp_home.path().to_path_buf(), None)
            }
        };
        env.edit_queue(|q| {
            q.config.claude_cli_path = claude.display().to_string();
            // The job account is unprivileged either way.
            q.config.claude_default_args =
                vec!["-p".into(), "--dangerously-skip-permissions".into()];
        });
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let mut cfg = env.manager_config(&bus);
        // The daemon's environment: endpoint settings (allow-listed through to claude) plus
        // noise the worker must drop (IS_SANDBOX would disable claude's root check).
        cfg.worker_env = claude_env(&home, &server.base_url())
            .into_iter()
            .chain([("IS_SANDBOX".to_string(), "yes".to_string())])
            .collect();
        let (_machine, var) = machine_config(&[&claude], &[]);
        cfg.worker_env.push(var);
        let m = RunningManager::start(cfg).await;

        let j = job(
            "claude",
            json!({"claude_command": command, "task_description": "World",
                   "working_directory": env.work, "timeout_seconds": 170}),
        );
        env.queue_job("real-1", &j);
        let c = changes.ended("real-1").await;
        let doc = env.job(&c.new, "real-1");
        let rt = &doc["runtime"];
        assert_eq!(
            c.new, "finished",
            "job failed: {}\noutput: {}",
            rt["error"], rt["output"]
        );
        assert_eq!(rt["error"], Value::Null);
        assert_eq!(rt["exit_code"], json!(0));
        let out: Value = serde_json::from_str(rt["output"].as_str().unwrap().trim()).unwrap();
        assert_eq!(out["type"], "result", "{out}");
        assert_eq!(out["is_error"], false, "{out}");
        assert_eq!(out["result"], "Greeted World.", "{out}");
        assert_eq!(rt["num_turns"], json!(2), "one tool turn and the answer");
        assert!(rt["cost_usd"].is_number(), "{rt}");
        assert_eq!(rt["session_id"], out["session_id"]);
        assert_eq!(rt["session_id"].as_str().unwrap().len(), 36);
        assert!(rt["llm_process_id"].is_u64());

        // The custom command was expanded into what the model saw.
        let first = server
            .message_requests()
            .into_iter()
            .find(|r| r.has_tools())
            .unwrap();
        let text = first.text();
        assert!(text.contains("Greet World warmly"), "{text}");
        assert!(
            text.contains(&format!("<command-name>/{command}</command-name>")),
            "{text}"
        );
        // The Bash tool really ran, as the job account.
        let uses = server.issued_tool_uses();
        assert_eq!(uses.len(), 1, "{uses:?}");
        let block = server.tool_result_for(&uses[0].id).unwrap();
        assert!(
            tool_result_text(&block).contains("hello-from-bash"),
            "{block}"
        );
        m.stop().await;
    })
    .await
}
