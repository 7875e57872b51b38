//! PRD M5 (§12) with the fake `claude` script (tests/fixtures/fake-claude) and a fake
//! `agentshell`, through queue-manager + agent-worker: success fields, unknown command,
//! non-zero exit, API error, >10 MB output, timeout, invalid job files, non-JSON output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{claude_env, common, queue_env};

use agentstore::queue::pidwatch::is_worker_of;
use queue_env::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

struct Setup {
    /// This machine's own configuration (the programs the queue may name).
    machine: tempfile::TempDir,
    bus: PrivateBus,
    env: QueueEnv,
    changes: Changes,
    manager: RunningManager,
}

async fn setup(extra_env: Vec<(String, String)>) -> Setup {
    setup_sandboxed(extra_env, true).await
}

/// `sandbox`: whether the queue confines its jobs (new queues do; a test whose fake agent
/// records into a file outside the project turns it off).
async fn setup_sandboxed(extra_env: Vec<(String, String)>, sandbox: bool) -> Setup {
    let bus = PrivateBus::start();
    let env = QueueEnv::new(4);
    env.edit_queue(|q| {
        q.config.claude_cli_path = fake_claude().display().to_string();
        q.config.claude_default_args = vec!["-p".into()];
        if !sandbox {
            q.config.sandbox = None;
        }
    });
    std::fs::write(
        env.work.join(".claude/commands/greet.md"),
        "Greet $ARGUMENTS\n",
    )
    .unwrap();
    let changes = Changes::subscribe(&bus, &env.queue).await;
    let mut cfg = env.manager_config(&bus);
    let (machine, var) = machine_config(&[&fake_claude()], &[]);
    // The fake agentshell a test may write there is listed too.
    std::fs::write(
        machine.path().join("agentstore/config.yaml"),
        format!(
            "programs:\n  claude: [{:?}]\n  agentshell: [{:?}]\n",
            fake_claude().display().to_string(),
            machine.path().join("fake-agentshell").display().to_string()
        ),
    )
    .unwrap();
    cfg.worker_env = extra_env;
    cfg.worker_env.push(var);
    let manager = RunningManager::start(cfg).await;
    Setup {
        machine,
        bus,
        env,
        changes,
        manager,
    }
}

fn claude_job(s: &Setup, task: &str, over: Value) -> Value {
    let mut j = job(
        "claude",
        json!({"claude_command": "greet", "task_description": task,
               "working_directory": s.env.work}),
    );
    for (k, v) in over.as_object().unwrap() {
        j["config"][k] = v.clone();
    }
    j
}

/// Runs one job; returns (final state, job document).
async fn run_one(s: &mut Setup, id: &str, job: &Value) -> (String, Value) {
    s.env.queue_job(id, job);
    let c = s.changes.ended(id).await;
    (c.new.clone(), s.env.job(&c.new, id))
}

fn expected_uid() -> u64 {
    match claude_env::unprivileged_user() {
        Some(u) => u64::from(u.uid),
        None => u64::from(nix::unistd::geteuid().as_raw()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_job_records_result_fields() {
    guarded(async {
        let envfile = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        std::fs::set_permissions(envfile.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let envpath = envfile.path().join("env.txt");
        // The fake records its environment in /tmp, outside the project: no sandbox here.
        let mut s = setup_sandboxed(
            vec![
                ("AGENTSTORE_PASS_ENV".into(), "FAKE_CLAUDE_ENVFILE".into()),
                ("FAKE_CLAUDE_ENVFILE".into(), envpath.display().to_string()),
                ("IS_SANDBOX".into(), "yes".into()),
            ],
            false,
        )
        .await;
        let j = claude_job(
            &s,
            "World",
            json!({"claude_extra_args": ["--model", "m1"], "supporting_data": {"dir": "/src", "n": 2}}),
        );
        let (state, doc) = run_one(&mut s, "c-ok", &j).await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert_eq!(rt["error"], Value::Null);
        assert_eq!(rt["exit_code"], json!(0));
        assert_eq!(rt["cost_usd"], json!(0.0012));
        assert_eq!(rt["num_turns"], json!(1));
        assert_eq!(rt["session_id"].as_str().unwrap().len(), 36);
        let out: Value = serde_json::from_str(rt["output"].as_str().unwrap().trim()).unwrap();
        assert_eq!(out["result"], "/greet World\n\nSupporting Data:\n- dir: /src\n- n: 2");
        // The queue's and the job's arguments, then (the job may ask for permissions) the
        // approvals MCP server as the permission prompt tool (issue 15).
        let args = out["fake"]["args"].as_array().unwrap();
        assert_eq!(
            args[..5],
            json!(["-p", "--model", "m1", "--output-format", "json"]).as_array().unwrap()[..]
        );
        assert_eq!(args[5], "--mcp-config", "{args:?}");
        let mcp: Value = serde_json::from_str(args[6].as_str().unwrap()).unwrap();
        assert_eq!(mcp["mcpServers"]["agentstore"]["args"][0], "mcp-approvals");
        assert_eq!(
            args[7..],
            json!(["--permission-prompt-tool", "mcp__agentstore__approve"]).as_array().unwrap()[..]
        );
        assert_eq!(out["fake"]["cwd"], json!(s.env.work));
        assert_eq!(out["fake"]["uid"], json!(expected_uid()));
        assert_eq!(rt["llm_process_id"], out["fake"]["pid"]);
        let env = std::fs::read_to_string(&envpath).unwrap();
        assert!(!env.contains("IS_SANDBOX"), "environment is an allow-list:\n{env}");
        assert!(env.lines().any(|l| l.starts_with("HOME=")), "{env}");
        s.manager.stop().await;
        drop(s.bus);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_command_fails_early() {
    guarded(async {
        let mut s = setup(vec![]).await;
        let j = claude_job(
            &s,
            "World",
            json!({"claude_command": "code-researcher-missing"}),
        );
        let (state, doc) = run_one(&mut s, "c-unknown", &j).await;
        assert_eq!(state, "failed");
        assert_eq!(
            doc["runtime"]["error"],
            "Unknown Claude command: code-researcher-missing"
        );
        assert_eq!(
            doc["runtime"]["llm_process_id"],
            Value::Null,
            "claude never started"
        );
        s.manager.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonzero_exit_and_api_error_fail() {
    guarded(async {
        let mut s = setup(vec![]).await;
        let (state, doc) = {
            let j = claude_job(&s, "EXIT=3", json!({}));
            run_one(&mut s, "c-exit", &j).await
        };
        assert_eq!(state, "failed");
        assert_eq!(doc["runtime"]["exit_code"], json!(3));
        assert_eq!(
            doc["runtime"]["error"],
            "Claude exited with code 3: fake-claude: exiting with 3 as asked"
        );
        let (state, doc) = {
            let j = claude_job(&s, "ISERROR", json!({}));
            run_one(&mut s, "c-api", &j).await
        };
        assert_eq!(state, "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.starts_with("Claude exited with code 1: API Error: 500"),
            "{err}"
        );
        let (state, doc) = {
            let j = claude_job(&s, "BADJSON", json!({}));
            run_one(&mut s, "c-bad", &j).await
        };
        assert_eq!(state, "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.starts_with("Claude output is not a JSON result"),
            "{err}"
        );
        assert_eq!(doc["runtime"]["output"], "this is not JSON\n");
        s.manager.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_over_10_mb_is_truncated() {
    guarded(async {
        let mut s = setup(vec![]).await;
        let (state, doc) = {
            let j = claude_job(&s, "BIG=11", json!({}));
            run_one(&mut s, "c-big", &j).await
        };
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{}", rt["error"]);
        assert_eq!(rt["output"].as_str().unwrap().len(), 10 * 1024 * 1024);
        let err = rt["error"].as_str().unwrap();
        assert!(
            err.starts_with("Output truncated to 10485760 bytes (Claude wrote 11"),
            "{err}"
        );
        assert_eq!(
            rt["num_turns"],
            json!(1),
            "result line still parsed from the tail"
        );
        s.manager.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_timeout_kills_the_tree() {
    guarded(async {
        let mut s = setup(vec![]).await;
        let j = claude_job(&s, "SLEEP=300", json!({"timeout_seconds": 2}));
        let (state, doc) = run_one(&mut s, "c-slow", &j).await;
        assert_eq!(state, "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.starts_with("Job timeout after ") && err.ends_with("s (limit: 2s)"),
            "{err}"
        );
        let llm = u32::try_from(doc["runtime"]["llm_process_id"].as_u64().unwrap()).unwrap();
        assert!(
            !is_worker_of(llm, "-p"),
            "claude (pid {llm}) was killed with its worker"
        );
        s.manager.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_job_files_fail() {
    guarded(async {
        let mut s = setup(vec![]).await;
        let bad = json!({"config": {"project": "TestProject", "jobtype": "bogus"},
                         "runtime": {"status": "queued"}});
        let (state, doc) = run_one(&mut s, "bad-1", &bad).await;
        assert_eq!(state, "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(err.starts_with("Invalid job file: "), "{err}");
        assert!(err.contains("jobtype") || err.contains("required"), "{err}");
        let log = common::errors_out(&s.env.root);
        assert!(log.contains("bad-1"), "validator logged it: {log}");

        s.env.queue_job("bad-2", &json!("not an object"));
        let c = s.changes.until("bad-2", "failed").await;
        assert_eq!(c.old, "queued");
        let doc = s.env.job("failed", "bad-2");
        assert_eq!(doc["runtime"]["status"], "failed");
        s.manager.stop().await;

        // The worker validates too: a file broken after the manager started it.
        let path = s.env.job_file("running", "bad-3");
        std::fs::write(&path, r#"{"config": {}, "runtime": {"status": "running"}}"#).unwrap();
        let st = std::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
            .args([
                "--root",
                s.env.root.to_str().unwrap(),
                "--queue",
                &s.env.queue,
                "bad-3",
            ])
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(1));
        let doc = s.env.job("failed", "bad-3");
        assert!(
            doc["runtime"]["error"]
                .as_str()
                .unwrap()
                .starts_with("Invalid job file: ")
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_job_runs_agentshell_exec() {
    guarded(async {
        let mut s = setup(vec![]).await;
        // Stand-in for `agentshell` (built in parallel, not merged yet): prints one JSON
        // result like `agentshell exec --json -`.
        let bin = s.machine.path().join("fake-agentshell");
        std::fs::write(
            &bin,
            "#!/bin/bash\nprompt=$(cat)\nprintf '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"%s\",\"num_turns\":3,\"total_cost_usd\":0.02,\"session_id\":\"agent-1\",\"model\":\"%s\",\"args\":\"%s\"}\\n' \"$prompt\" \"$AGENTSHELL_MODEL\" \"$*\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        s.env.edit_queue(|q| q.config.agentshell_path = Some(bin.display().to_string()));
        let j = claude_job(&s, "Summarise", json!({"jobtype": "agent", "model": "test-model"}));
        let (state, doc) = run_one(&mut s, "a-1", &j).await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        let out: Value = serde_json::from_str(rt["output"].as_str().unwrap().trim()).unwrap();
        assert_eq!(out["result"], "Summarise");
        assert_eq!(out["model"], "test-model");
        // `--` before the positional `-` (issue 9 item 6); the job's approval channel and
        // its deadline (issue 15).
        let args = out["args"].as_str().unwrap();
        assert!(
            args.starts_with("exec --json --approvals agentstore-approvals-")
                && args.ends_with(" --approval-deadline 300 -- -"),
            "{args}"
        );
        assert_eq!((rt["num_turns"].clone(), rt["cost_usd"].clone()), (json!(3), json!(0.02)));
        s.manager.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_working_directory_fails_gracefully() {
    guarded(async {
        let mut s = setup(vec![]).await;
        let j = claude_job(
            &s,
            "World",
            json!({"working_directory": "/nonexistent/project"}),
        );
        let (state, doc) = run_one(&mut s, "c-nodir", &j).await;
        assert_eq!(state, "failed");
        let error = doc["runtime"]["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("Working directory does not exist: /nonexistent/project (on "),
            "{error}"
        );
        // Issue 32: the fix, named.
        assert!(
            error.contains("--directory NEW_DIR`, then `orchestrator retry` the job"),
            "{error}"
        );
        s.manager.stop().await;
    })
    .await
}

/// A claude that is not installed: the job fails once, naming the program, where it was
/// looked for and the setting that chooses another (issue 32: it used to say only "No such
/// file or directory").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_agent_program_is_explained() {
    guarded(async {
        // The allowed name `claude`, on a PATH where it is not.
        let mut s = setup(vec![("PATH".into(), "/nonexistent-agentstore-bin".into())]).await;
        s.env.edit_queue(|q| {
            q.config.claude_cli_path = "claude".into();
        });
        let j = claude_job(&s, "World", json!({}));
        let (state, doc) = run_one(&mut s, "c-noclaude", &j).await;
        assert_eq!(state, "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        for part in [
            "\"claude\"",
            "not found on PATH (/nonexistent-agentstore-bin)",
            "--claude-cli-path",
            "claude_cli_path",
        ] {
            assert!(err.contains(part), "{part:?} missing from {err:?}");
        }
        s.manager.stop().await;
    })
    .await
}

/// A gated worker (as a manager starts it) runs with the queue settings the manager hands it
/// on the gate's second line, not queue.json's; with `go` alone it reads queue.json itself.
#[test]
fn a_gated_worker_runs_with_the_settings_handed_on_its_gate() {
    use std::io::Write;
    let env = QueueEnv::new(1);
    env.edit_queue(|q| {
        q.config.claude_cli_path = "/nonexistent/claude".into();
        q.config.claude_default_args = vec!["-p".into()];
    });
    std::fs::write(
        env.work.join(".claude/commands/greet.md"),
        "Greet $ARGUMENTS\n",
    )
    .unwrap();
    let mut handed = env.store().queue_file(&env.queue).unwrap().config;
    handed.claude_cli_path = fake_claude().display().to_string();
    let (_machine, (var, value)) = machine_config(&[&fake_claude()], &[]);
    let run = |id: &str, gate: String| {
        let mut j = job(
            "claude",
            json!({"claude_command": "greet", "task_description": "hi",
                   "working_directory": env.work}),
        );
        j["runtime"]["status"] = json!("running");
        agentstore::store::write_json_atomic(&env.job_file("running", id), &j).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
            .args([
                "--gate",
                "--root",
                env.root.to_str().unwrap(),
                "--queue",
                &env.queue,
                id,
            ])
            .env(&var, &value)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(gate.as_bytes()).unwrap();
        drop(stdin);
        child.wait().unwrap();
    };
    run(
        "handed",
        format!("go\n{}\n", serde_json::to_string(&handed).unwrap()),
    );
    let doc = env.job("finished", "handed");
    assert_eq!(doc["runtime"]["status"], "finished", "{doc:#}");
    run("plain", "go\n".into());
    let doc = env.job("failed", "plain");
    let err = doc["runtime"]["error"].as_str().unwrap();
    assert!(err.contains("/nonexistent/claude"), "{err}");
}
