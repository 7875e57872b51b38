//! Issue 35: `jobtype: codex` with the REAL Codex CLI, offline, against the fake model's
//! Responses API, through queue-manager and agent-worker, in a sandboxed queue: a
//! research-code job (its result written to the project's research document) and a free
//! task (a prompt with no agent command, whose shell command really runs). Each job's
//! JSONL events are its output; the tokens and the cost land in the same fields as
//! Claude's, and `view-job` and the dashboard show them beside a Claude job's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::codex_env::{codex_home, require_codex};
use crate::fake_model::{FakeModel, Reply, Script};
use crate::queue_env::*;
use crate::web_env;
use serde_json::{Value, json};
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_research_and_free_task_through_the_queue() {
    guarded(async {
        let codex = require_codex();
        let server = FakeModel::start(Script {
            replies: vec![
                Reply::text("Findings: the entry point is main.rs."),
                Reply::ToolUse {
                    name: "exec_command".into(),
                    input: json!({"cmd": "echo codex-was-here > free.txt", "login": false}),
                    text: None,
                },
                Reply::text("Wrote free.txt."),
                Reply::text("Hello from the default model."),
            ],
            answer_toolless_with_fallback: false,
            fail_when_exhausted: true,
            ..Script::default()
        });
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let owner = crate::claude_env::unprivileged_user()
            .filter(|_| nix::unistd::geteuid().is_root())
            .map(|u| (u.uid, u.gid));
        if let Some((uid, gid)) = owner {
            crate::claude_env::chown_recursive(&env.work, uid, gid);
        }
        let home = codex_home(env.dir.path(), &server.base_url(), owner);
        let port = server.addr().port();
        env.edit_queue(|q| {
            q.config.codex_cli_path = Some(codex.display().to_string());
            // The fake endpoint's port, as a queue reaching a local model names it.
            if let Some(s) = q.config.sandbox.as_mut() {
                s.connect_ports.push(port);
            }
        });
        assert!(env.queue_json()["config"]["sandbox"]["enabled"] == true);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let mut cfg = env.manager_config(&bus);
        cfg.worker_env = vec![
            ("CODEX_HOME".into(), home.display().to_string()),
            ("OPENAI_API_KEY".into(), "sk-fake-codex-key".into()),
            ("HOME".into(), env.dir.path().display().to_string()),
        ];
        let m = RunningManager::start(cfg).await;

        // research-code: the shipped code-researcher command, its result into the document.
        let doc = env.work.join("research.md");
        let j = job(
            "codex",
            json!({"claude_command": "code-researcher", "command": "research-code",
                   "task_description": "Find the entry point", "model": "gpt-5",
                   "working_directory": env.work, "timeout_seconds": 170,
                   "supporting_data": {"code_research_document": doc}}),
        );
        env.queue_job("codex-research", &j);
        let c = changes.ended("codex-research").await;
        let rt = env.job(&c.new, "codex-research")["runtime"].clone();
        assert_eq!(c.new, "finished", "{rt:#}");
        assert_eq!(rt["exit_code"], json!(0));
        let output = rt["output"].as_str().unwrap();
        let first: Value = serde_json::from_str(output.lines().next().unwrap()).unwrap();
        assert_eq!(
            first["type"], "thread.started",
            "the JSONL events are the output"
        );
        assert_eq!(rt["session_id"], first["thread_id"]);
        assert_eq!(rt["num_turns"], json!(1));
        let usage = &rt["usage"];
        assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{rt:#}");
        assert_eq!(
            usage["output_tokens"],
            json!(5),
            "what the fake server reported"
        );
        assert!(
            rt["cost_usd"].as_f64().unwrap() > 0.0,
            "gpt-5 has a price: {rt:#}"
        );
        assert_eq!(
            std::fs::read_to_string(&doc).unwrap(),
            "Findings: the entry point is main.rs."
        );
        // The shipped command's text reached the model, with the task, through stdin.
        let first_request = &server.requests()[0];
        assert_eq!(first_request.endpoint(), "POST /v1/responses");
        let sent = first_request.body.to_string();
        assert!(sent.contains("Find the entry point"), "{sent}");
        assert!(!sent.contains("$ARGUMENTS"), "{sent}");
        assert_eq!(first_request.body["model"], "gpt-5");
        assert_eq!(
            first_request.header("authorization"),
            Some("Bearer sk-fake-codex-key")
        );

        // A free task: no agent command, the task is the prompt; its command really runs.
        // It names no model: the account's Codex config.toml does, and prices it.
        let config = home.join("config.toml");
        let provider_only = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("model = \"gpt-5-mini\"\n{provider_only}")).unwrap();
        let asked = server.requests().len();
        let j = job(
            "codex",
            json!({"claude_command": "", "task_description": "Write free.txt",
                   "working_directory": env.work, "timeout_seconds": 170}),
        );
        env.queue_job("codex-free", &j);
        let c = changes.ended("codex-free").await;
        let rt = env.job(&c.new, "codex-free")["runtime"].clone();
        assert_eq!(c.new, "finished", "{rt:#}");
        // What Codex told the model its command did.
        let outputs: Vec<Value> = server
            .requests()
            .iter()
            .flat_map(|r| r.body["input"].as_array().cloned().unwrap_or_default())
            .filter(|i| i["type"] == "function_call_output")
            .collect();
        assert_eq!(
            std::fs::read_to_string(env.work.join("free.txt"))
                .ok()
                .as_deref(),
            Some("codex-was-here\n"),
            "{outputs:#?}\n{rt:#}"
        );
        assert!(rt["usage"]["input_tokens"].as_u64().unwrap() > 0, "{rt:#}");
        assert_eq!(server.requests()[asked].body["model"], "gpt-5-mini");
        let usage: agentstore::model::TokenUsage =
            serde_json::from_value(rt["usage"].clone()).unwrap();
        let mini = agentstore::worker::accounting::priced(Some("gpt-5-mini"), usage);
        assert!(mini.is_some_and(|c| c > 0.0), "{mini:?}");
        assert_eq!(rt["cost_usd"], json!(mini), "priced as the config's model: {rt:#}");
        assert!(rt["sandbox"].is_string(), "{rt:#}");

        // Neither the job nor the config names a model: Codex's default, priced as such
        // (unknown, never 0, while the price table has no entry for it).
        std::fs::write(&config, &provider_only).unwrap();
        let asked = server.requests().len();
        let j = job(
            "codex",
            json!({"claude_command": "", "task_description": "Say hello",
                   "working_directory": env.work, "timeout_seconds": 170}),
        );
        env.queue_job("codex-default", &j);
        let c = changes.ended("codex-default").await;
        let rt = env.job(&c.new, "codex-default")["runtime"].clone();
        assert_eq!(c.new, "finished", "{rt:#}");
        assert_eq!(
            server.requests()[asked].body["model"],
            agentstore::worker::codex::DEFAULT_MODEL,
            "the real CLI's default model is worker::codex::DEFAULT_MODEL (change it with the pinned version)"
        );
        let usage: agentstore::model::TokenUsage =
            serde_json::from_value(rt["usage"].clone()).unwrap();
        let default_cost =
            agentstore::worker::accounting::priced(Some(agentstore::worker::codex::DEFAULT_MODEL), usage);
        assert_eq!(rt["cost_usd"], json!(default_cost), "{rt:#}");
        m.stop().await;

        // A Claude job's figures beside it, as the worker records them.
        let store = env.store();
        let claude_path = store.job_path(
            &env.queue,
            agentstore::model::JobStatus::Finished,
            "claude-beside",
        );
        let mut claude = job("claude", json!({"claude_command": "code-researcher"}));
        claude["runtime"]["status"] = json!("finished");
        claude["runtime"]["cost_usd"] = json!(0.5);
        claude["runtime"]["usage"] = json!({"input_tokens": 10, "output_tokens": 2});
        claude["runtime"]["finish_time"] = json!(agentstore::model::Timestamp::now().to_string());
        std::fs::write(&claude_path, claude.to_string()).unwrap();

        // view-job shows the cost and the tokens of the Codex jobs.
        let view_job = |id: &str| -> String {
            let o = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
                .env("AGENT_STORE_ROOT", &env.root)
                .env("COLUMNS", "200")
                .args(["--bus", "none", "view-job", id])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                o.status.success(),
                "{text}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            text
        };
        let free = view_job("codex-free");
        let mini_cost = mini.unwrap();
        assert!(
            free.contains(&format!("${mini_cost:.4}")),
            "the config's model's price: {free}"
        );
        let text = view_job("codex-research");
        let research = env.job("finished", "codex-research");
        let cost = research["runtime"]["cost_usd"].as_f64().unwrap();
        assert!(text.contains(&format!("${cost:.4}")), "{text}");
        assert!(
            text.contains(&format!(
                "{} tokens in, 5 out",
                research["runtime"]["usage"]["input_tokens"]
            )),
            "{text}"
        );
        assert!(text.contains("codex code-researcher"), "{text}");

        // The dashboard: the job's page, and the agents side by side on the charts page.
        let web_home = tempfile::tempdir().unwrap();
        let served = web_env::serve(&env.root, web_home.path(), env.dir.path());
        let get = |path: &str| -> String {
            let o = Command::new("curl")
                .args(["-sS", "--max-time", "20", "-H"])
                .arg(format!("Authorization: Bearer {}", served.token))
                .arg(format!("http://127.0.0.1:{}{path}", served.port))
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let page = get("/jobs/codex-research");
        assert!(
            page.contains(&format!(r#"<td id="f-cost">${cost:.4}</td>"#)),
            "{page}"
        );
        assert!(page.contains(r#"id="f-tokens""#), "{page}");
        let page = get("/jobs/codex-free");
        assert!(
            page.contains(&format!(r#"<td id="f-cost">${mini_cost:.4}</td>"#)),
            "{page}"
        );
        let charts = get("/charts");
        assert!(
            charts.contains(r#"<tr id="agent-claude"><td>claude</td><td>1</td><td>$0.5000</td>"#),
            "{charts}"
        );
        let codex_row = format!(
            r#"<tr id="agent-codex"><td>codex</td><td>3</td><td>${:.4}{}</td>"#,
            cost + mini.unwrap_or(0.0) + default_cost.unwrap_or(0.0),
            if default_cost.is_none() { " (1 without a price)" } else { "" }
        );
        assert!(charts.contains(&codex_row), "{codex_row}\n{charts}");
    })
    .await
}
