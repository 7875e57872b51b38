//! The real `agentshell` binary, headless: `exec --json -` against the fake server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agentshell_common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use agentshell_common::*;
use serde_json::{Value, json};

const KEY: &str = "sk-exec-test-key-9876543210";

fn exec(
    root: &Path,
    home: &Path,
    server: &FakeServer,
    prompt: &str,
    extra: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentshell"));
    cmd.args(["exec", "--json", "-"])
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home)
        .env("AGENTSHELL_HOME", home.join(".agentshell"))
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(prompt.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `agentshell trust` in `root`, as the user whose HOME is `home` (the real binary).
fn trust(root: &Path, home: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentshell"))
        .arg("trust")
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "trust: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn parse(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one JSON line on stdout, got {stdout:?} / stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(lines[0]).unwrap()
}

/// Drop the fields that vary run to run after checking their types.
fn stable(mut v: Value) -> Value {
    assert!(v["duration_ms"].is_u64());
    assert!(v["duration_api_ms"].is_u64());
    let id = v["session_id"].as_str().unwrap();
    assert_eq!(id.len(), 36, "uuid: {id}");
    let o = v.as_object_mut().unwrap();
    o.remove("duration_ms");
    o.remove("duration_api_ms");
    o.remove("session_id");
    // What the kernel enforces depends on the machine (tests/agentshell_sandbox.rs checks it).
    let sandbox = o.remove("sandbox").unwrap();
    assert!(sandbox["level"].is_string(), "{sandbox}");
    v
}

fn project() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("job");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    (dir, root, home)
}

#[test]
fn exec_json_success_with_an_allowed_and_a_denied_command() {
    let (_dir, root, home) = project();
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    std::fs::write(
        root.join(".agentshell/config.json"),
        r#"{"auto_allow": ["touch made-by-agent"],
            "prices": {"openai/test-model": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}}"#,
    )
    .unwrap();
    trust(&root, &home);
    std::fs::create_dir_all(root.join("build")).unwrap();
    let touch = json!({"command": "touch made-by-agent"}).to_string();
    let rm = json!({"command": "rm -rf build"}).to_string();
    let server = FakeServer::start(vec![
        oa_tool_calls(
            &[("c1", "run_command", &touch), ("c2", "run_command", &rm)],
            100,
            20,
        ),
        oa_text(&["All ", "done."], 300, 30),
    ]);
    let out = exec(&root, &home, &server, "tidy up the project\n", &[]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stable(parse(&out)),
        json!({
            "type": "result",
            "subtype": "success",
            "is_error": false,
            "result": "All done.",
            "num_turns": 2,
            "usage": {"input_tokens": 400, "output_tokens": 50},
            "total_cost_usd": 0.0013,
            "model": "openai/test-model",
            "permission_denials": [{
                "tool_name": "run_command",
                "tool_use_id": "c2",
                "tool_input": {"command": "rm -rf build"},
                "reason": "needs confirmation (`rm` is not known to be read-only), denied: unattended run: no human to confirm"
            }]
        })
    );
    assert!(root.join("made-by-agent").exists());
    assert!(
        root.join("build").is_dir(),
        "the denied command did not run"
    );
    assert_eq!(
        server.requests()[0].body["messages"][1]["content"],
        "tidy up the project\n"
    );
    let log = std::fs::read_to_string(root.join(".agentshell/logs/agent.log")).unwrap();
    assert!(log.contains("policy decision"), "{log}");
    assert!(log.contains("denied: nobody to confirm"), "{log}");
}

#[test]
fn exec_json_reports_provider_errors_and_exits_non_zero() {
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![Reply::Status(500, "upstream down".into()); 4]);
    let out = exec(&root, &home, &server, "hello", &[]);
    assert_eq!(out.status.code(), Some(1));
    let v = stable(parse(&out));
    assert_eq!(v["subtype"], "error_during_execution");
    assert_eq!(v["is_error"], true);
    let result = v["result"].as_str().unwrap();
    assert!(result.starts_with("HTTP 500 from "), "{result}");
    assert!(result.ends_with("upstream down"), "{result}");
    assert_eq!(v["num_turns"], 1);
    assert_eq!(server.requests().len(), 4, "1 try + 3 retries (default)");
}

#[test]
fn exec_never_waits_at_the_iteration_budget() {
    let (_dir, root, home) = project();
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    std::fs::write(
        root.join(".agentshell/config.json"),
        r#"{"max_iterations": 2}"#,
    )
    .unwrap();
    let server = FakeServer::start(vec![
        oa_command("c1", "pwd"),
        oa_command("c2", "pwd"),
        oa_command("c3", "pwd"),
    ]);
    let out = exec(&root, &home, &server, "loop forever", &[]);
    assert_eq!(out.status.code(), Some(1));
    let v = parse(&out);
    assert_eq!(v["subtype"], "error_max_turns");
    assert_eq!(v["num_turns"], 2);
}

#[test]
fn env_and_files_leak_no_secret_through_the_real_binary() {
    let (_dir, root, home) = project();
    let other = "xoxb-slack-token-abcdef123456";
    std::fs::write(
        root.join("config.txt"),
        format!("slack={other}\nopenai={KEY}\n"),
    )
    .unwrap();
    let server = FakeServer::start(vec![
        oa_command("c1", "env"),
        oa_command("c2", "cat config.txt"),
        oa_command("c3", "printenv"),
        oa_text(&["nothing to see"], 1, 1),
    ]);
    let out = exec(
        &root,
        &home,
        &server,
        "print the environment",
        &[("SLACK_BOT_TOKEN", other)],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for r in &requests {
        let body = r.body.to_string();
        assert!(!body.contains(KEY), "OPENAI_API_KEY leaked: {body}");
        assert!(!body.contains(other), "SLACK_BOT_TOKEN leaked: {body}");
    }
    let last = requests[3].body["messages"].to_string();
    // a file that holds secrets is not read unasked (issue 28: programs can print it in forms
    // redaction does not know)
    assert!(last.contains("`config.txt` holds the secret"), "{last}");
    // `env` ran (allowed: read-only) but the child's environment had no secrets in it
    assert!(last.contains("PATH="), "{last}");
    assert!(!last.contains("OPENAI_API_KEY="), "{last}");
}

#[test]
fn a_project_env_cannot_replace_the_users_key() {
    let (_dir, root, home) = project();
    std::fs::create_dir_all(home.join(".agentshell")).unwrap();
    std::fs::write(root.join(".env"), "OPENAI_API_KEY=sk-project-evil-000000\n").unwrap();
    let server = FakeServer::start(vec![oa_text(&["hi"], 1, 1)]);
    // the key comes only from the user's side (here: the process environment)
    let out = exec(&root, &home, &server, "hi", &[]);
    assert!(out.status.success());
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[test]
fn exec_reads_the_key_from_the_users_env_file() {
    let (_dir, root, home) = project();
    std::fs::create_dir_all(home.join(".agentshell")).unwrap();
    std::fs::write(
        home.join(".agentshell/.env"),
        "DEEPSEEK_API_KEY=\"sk-from-dotenv-123456\"\n",
    )
    .unwrap();
    let server = FakeServer::start(vec![oa_text(&["hi"], 1, 1)]);
    let out = exec(
        &root,
        &home,
        &server,
        "hi",
        &[("AGENTSHELL_MODEL", "deepseek/deepseek-chat")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let req = &server.requests()[0];
    assert_eq!(
        req.header("authorization"),
        Some("Bearer sk-from-dotenv-123456")
    );
    assert_eq!(req.body["model"], "deepseek-chat");
    assert_eq!(req.body["max_tokens"], 8192);
}

#[test]
fn version_init_and_setup_keys() {
    let (_dir, root, home) = project();
    let bin = env!("CARGO_BIN_EXE_agentshell");
    let out = Command::new(bin).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("agentshell {}\n", env!("CARGO_PKG_VERSION"))
    );

    let out = Command::new(bin)
        .arg("init")
        .current_dir(&root)
        .env("HOME", &home)
        .env_remove("AGENTSHELL_HOME")
        .output()
        .unwrap();
    assert!(out.status.success());
    for p in ["config.json", "CLAUDE.md", "MEMORY.md", "memory", "logs"] {
        assert!(root.join(".agentshell").join(p).exists(), "{p}");
    }
    // init in home is refused
    let out = Command::new(bin)
        .arg("init")
        .current_dir(&home)
        .env("HOME", &home)
        .env_remove("AGENTSHELL_HOME")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!home.join(".agentshell/config.json").exists());

    let mut child = Command::new(bin)
        .arg("setup-keys")
        .env("HOME", &home)
        .env_remove("AGENTSHELL_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"DEEPSEEK_API_KEY=sk-abc\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    use std::os::unix::fs::PermissionsExt;
    let env_file = home.join(".agentshell/.env");
    assert_eq!(
        std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        std::fs::read_to_string(&env_file)
            .unwrap()
            .contains("DEEPSEEK_API_KEY=\"sk-abc\"")
    );
}

#[test]
fn sigterm_ends_the_run_with_a_result_and_kills_running_commands() {
    let (_dir, root, home) = project();
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    std::fs::write(
        root.join(".agentshell/config.json"),
        r#"{"auto_allow": ["sleep"]}"#,
    )
    .unwrap();
    trust(&root, &home);
    let marker = format!("300.{}2", std::process::id()); // a unique `sleep` argument
    let server = FakeServer::start(vec![oa_command("c1", &format!("sleep {marker}"))]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentshell"))
        .args(["exec", "--json", "wait a bit"])
        .current_dir(&root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", &home)
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", KEY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(LOADED, "the sleep command", || {
        !pids_running(&["sleep", &marker]).is_empty()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(1));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["subtype"], "error_during_execution");
    assert_eq!(v["result"], "interrupted by SIGTERM");
    assert_eq!(v["num_turns"], 1);
    assert_eq!(v["usage"]["input_tokens"], 10);
    wait_until(LOADED, "the sleep command to be killed", || {
        pids_running(&["sleep", &marker]).is_empty()
    });
}

#[test]
fn exec_cost_comes_from_the_builtin_price_table_and_is_null_when_unknown() {
    let (_dir, root, home) = project();
    // a known model, no prices in any config: the built-in list price
    let server = FakeServer::start(vec![oa_text(&["priced"], 1000, 100)]);
    let out = exec(
        &root,
        &home,
        &server,
        "hi\n",
        &[("AGENTSHELL_MODEL", "openai/gpt-4o-2024-08-06")],
    );
    let v = parse(&out);
    let cost = v["total_cost_usd"].as_f64().unwrap_or(-1.0);
    assert!((cost - 0.0035).abs() < 1e-12, "{v}");
    // a model nobody priced: unknown (null), never a false 0
    let server = FakeServer::start(vec![oa_text(&["unpriced"], 1000, 100)]);
    let out = exec(&root, &home, &server, "hi\n", &[]);
    let v = parse(&out);
    assert!(v["total_cost_usd"].is_null(), "{v}");
    assert_eq!(v["usage"]["input_tokens"], 1000);
}

/// Issue 28: `agentshell --help` began with the queue's package description.
#[test]
fn help_describes_the_agent_not_the_queue() {
    for flag in ["--help", "-h"] {
        let out = Command::new(env!("CARGO_BIN_EXE_agentshell"))
            .arg(flag)
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("agentshell: a coding agent in your terminal"),
            "{flag}: {text}"
        );
        assert!(!text.contains("Systemd-native queue"), "{flag}: {text}");
    }
}
