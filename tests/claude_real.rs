//! The REAL Claude Code CLI, offline, against the fake Anthropic Messages server.
//!
//! `claude` must be installed (`.ci/run` does it with `.ci/install-claude.sh`); without it
//! these tests fail with that hint, they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{claude_env, fake_model};

use claude_env::{
    ClaudeHome, RUN_LIMIT, TestUser, chown_recursive, claude_command, headless_args, parse_result,
    permission_args, require_claude, run_with_stdin, unprivileged_user,
};
use fake_model::{FakeModel, Script, tool_result_text};
use serde_json::Value;

const GREET: &str = "---\ndescription: Greet someone\n---\n\
Greet $ARGUMENTS warmly. Use the Bash tool to print the greeting.\n";

struct Run {
    output: std::process::Output,
    result: Value,
    server: FakeModel,
}

/// Run `/greet World` through the real CLI with a script of one Bash call and a final text.
fn run_greet(bash: &str, final_text: &str, user: Option<&TestUser>, perm: Vec<String>) -> Run {
    let claude = require_claude();
    let server = FakeModel::start(Script::new().bash(bash).text(final_text));
    let home = ClaudeHome::new();
    home.add_command("greet", GREET);
    let work = tempfile::tempdir().unwrap();
    if let Some(u) = user {
        chown_recursive(home.path(), u.uid, u.gid);
        chown_recursive(work.path(), u.uid, u.gid);
    }
    let mut args = headless_args();
    args.extend(perm);
    let cmd = claude_command(
        &claude,
        home.path(),
        &server.base_url(),
        work.path(),
        &args,
        user,
    );
    let output = run_with_stdin(cmd, "/greet World", RUN_LIMIT);
    eprintln!(
        "claude exit {:?}; endpoints called: {:?}\nstderr: {}",
        output.status.code(),
        server.endpoints(),
        String::from_utf8_lossy(&output.stderr)
    );
    let result = parse_result(&output);
    Run {
        output,
        result,
        server,
    }
}

/// The result JSON is a successful `claude -p --output-format json` result.
fn assert_success(run: &Run, final_text: &str) {
    let r = &run.result;
    assert!(run.output.status.success(), "claude failed: {r}");
    assert_eq!(r["type"], "result", "{r}");
    assert_eq!(r["subtype"], "success", "{r}");
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(r["result"], final_text, "{r}");
    assert_eq!(
        r["num_turns"].as_u64(),
        Some(2),
        "one tool turn, one answer: {r}"
    );
    let session = r["session_id"].as_str().unwrap_or_default();
    assert_eq!(session.len(), 36, "session_id is a UUID: {r}");
    assert!(r["total_cost_usd"].is_number(), "{r}");
    assert!(r["usage"]["input_tokens"].is_number(), "{r}");
}

/// The custom command was expanded into the prompt the model saw.
fn assert_command_expanded(server: &FakeModel) {
    let first = server
        .message_requests()
        .into_iter()
        .find(|r| r.has_tools())
        .unwrap();
    let text = first.text();
    assert!(
        text.contains("Greet World warmly"),
        "greet.md was not expanded with its argument: {text}"
    );
    assert!(
        text.contains("<command-name>/greet</command-name>"),
        "{text}"
    );
}

/// The Bash call really ran and its output came back as a tool_result.
fn bash_output(server: &FakeModel) -> String {
    let uses = server.issued_tool_uses();
    assert_eq!(uses.len(), 1, "{uses:?}");
    let block = server
        .tool_result_for(&uses[0].id)
        .unwrap_or_else(|| panic!("no tool_result for {}", uses[0].id));
    assert_ne!(block["is_error"], true, "Bash failed: {block}");
    tool_result_text(&block)
}

#[test]
fn real_claude_runs_custom_command_with_bash_tool() {
    let run = run_greet(
        "echo hello-from-bash",
        "Greeted World.",
        None,
        permission_args(nix::unistd::geteuid().as_raw()),
    );
    assert_success(&run, "Greeted World.");
    assert_command_expanded(&run.server);
    assert_eq!(bash_output(&run.server).trim(), "hello-from-bash");
    // Every scripted reply was used, and the CLI spoke only to the fake server's messages API
    // (plus its connection warm-up).
    assert_eq!(run.server.remaining_replies(), 0);
    for e in run.server.endpoints() {
        assert!(
            e == "POST /v1/messages" || e == "HEAD /",
            "unexpected endpoint {e}"
        );
    }
    let first = &run.server.message_requests()[0];
    assert_eq!(first.header("x-api-key"), Some("sk-ant-fake-test-key"));
    assert_eq!(first.body["stream"], true);
}

#[test]
fn real_claude_skip_permissions_needs_an_unprivileged_user() {
    let claude = require_claude();
    let user = unprivileged_user();
    if user.is_some() {
        // As root the CLI refuses the flag, even before it talks to the server.
        let server = FakeModel::start(Script::new().text("never"));
        let home = ClaudeHome::new();
        let work = tempfile::tempdir().unwrap();
        let mut args = headless_args();
        args.push("--dangerously-skip-permissions".to_owned());
        let cmd = claude_command(
            &claude,
            home.path(),
            &server.base_url(),
            work.path(),
            &args,
            None,
        );
        let out = run_with_stdin(cmd, "hello", RUN_LIMIT);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot be used with root/sudo privileges"),
            "{stderr}"
        );
        assert!(server.message_requests().is_empty());
    }
    // As an unprivileged user (created when we are root) the flag works, and the tool runs
    // as that user.
    let expected_user = match &user {
        Some(u) => u.name.clone(),
        None => {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .unwrap()
                .unwrap()
                .name
        }
    };
    let run = run_greet(
        "id -un",
        "Greeted World as a user.",
        user.as_ref(),
        vec!["--dangerously-skip-permissions".to_owned()],
    );
    assert_success(&run, "Greeted World as a user.");
    assert_command_expanded(&run.server);
    assert_eq!(bash_output(&run.server).trim(), expected_user);
}

#[test]
fn real_claude_reports_an_api_error_as_is_error() {
    let claude = require_claude();
    let server =
        FakeModel::start(Script::new().error(400, "invalid_request_error", "scripted failure"));
    let home = ClaudeHome::new();
    let work = tempfile::tempdir().unwrap();
    let cmd = claude_command(
        &claude,
        home.path(),
        &server.base_url(),
        work.path(),
        &headless_args(),
        None,
    );
    let out = run_with_stdin(cmd, "hello", RUN_LIMIT);
    let r = parse_result(&out);
    assert_eq!(out.status.code(), Some(1), "{r}");
    assert_eq!(r["is_error"], true, "{r}");
    assert!(
        r["result"]
            .as_str()
            .unwrap_or_default()
            .contains("scripted failure"),
        "{r}"
    );
}

#[test]
fn real_claude_unknown_command_is_not_an_error() {
    // Why the worker checks `<command>.md` itself before it starts the CLI.
    let claude = require_claude();
    let server = FakeModel::start(Script::new().text("never"));
    let home = ClaudeHome::new();
    let work = tempfile::tempdir().unwrap();
    let cmd = claude_command(
        &claude,
        home.path(),
        &server.base_url(),
        work.path(),
        &headless_args(),
        None,
    );
    let out = run_with_stdin(cmd, "/no-such-command World", RUN_LIMIT);
    let r = parse_result(&out);
    assert!(out.status.success(), "{r}");
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(r["num_turns"].as_u64(), Some(0), "{r}");
    assert!(
        r["result"]
            .as_str()
            .unwrap_or_default()
            .contains("Unknown command"),
        "{r}"
    );
    assert!(server.message_requests().is_empty());
}

// The fixtures themselves (no real CLI needed).

#[tokio::test]
async fn fake_anthropic_answers_plain_json_and_side_requests() {
    let server = FakeModel::start(
        Script::new()
            .tool_use("Read", serde_json::json!({ "file_path": "/etc/hostname" }))
            .text("done"),
    );
    let client = reqwest::Client::new();
    let url = format!("{}/v1/messages", server.base_url());
    let post = |body: Value| client.post(&url).json(&body).send();
    let tools = serde_json::json!([{ "name": "Read", "input_schema": { "type": "object" } }]);

    // A side request without tools does not consume the script.
    let side: Value = post(serde_json::json!({ "model": "m", "messages": [] }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(side["content"][0]["text"], "OK");

    let first: Value = post(serde_json::json!({ "model": "m", "messages": [], "tools": tools }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["stop_reason"], "tool_use");
    assert_eq!(first["content"][0]["id"], "toolu_fake_1");
    assert_eq!(first["content"][0]["input"]["file_path"], "/etc/hostname");

    let second: Value = post(serde_json::json!({ "model": "m", "tools": tools, "messages": [
        { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "toolu_fake_1", "content": "host" }] }
    ]}))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(second["content"][0]["text"], "done");
    assert_eq!(second["stop_reason"], "end_turn");
    let result = server.tool_result_for("toolu_fake_1").unwrap();
    assert_eq!(tool_result_text(&result), "host");

    // After the script: fallback, never a hang.
    let after: Value = post(serde_json::json!({ "model": "m", "messages": [], "tools": tools }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(after["content"][0]["text"], "OK");
    assert_eq!(server.remaining_replies(), 0);
    let answers: Vec<_> = server.requests().into_iter().map(|r| r.answer).collect();
    use fake_model::Answer;
    assert_eq!(
        answers,
        vec![
            Answer::Side,
            Answer::Script(0),
            Answer::Script(1),
            Answer::Exhausted
        ]
    );
}

#[test]
fn fake_anthropic_script_reads_from_json() {
    let script: Script = serde_json::from_str(
        r#"{"replies":[{"tool_use":{"name":"Bash","input":{"command":"echo hi"}}},
                       {"error":{"status":529,"error_type":"overloaded_error","message":"busy"}},
                       "hang",{"text":"Done"}],
            "fallback_text":"fine"}"#,
    )
    .unwrap();
    assert_eq!(script.replies.len(), 4);
    assert_eq!(script.fallback_text, "fine");
    assert!(script.answer_toolless_with_fallback);
    assert_eq!(script.replies[3], fake_model::Reply::text("Done"));
}

#[test]
fn fake_claude_fixture_echoes_and_exits_as_told() {
    let work = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(crate::common::fake_claude());
    cmd.args(["-p", "--output-format", "json"])
        .current_dir(work.path());
    let out = run_with_stdin(cmd, "/greet World\n{\"k\": \"v\"}", RUN_LIMIT);
    assert!(out.status.success());
    let r = parse_result(&out);
    assert_eq!(r["type"], "result");
    assert_eq!(r["is_error"], false);
    assert_eq!(r["result"], "/greet World\n{\"k\": \"v\"}");
    assert_eq!(r["num_turns"], 1);
    assert_eq!(r["session_id"].as_str().unwrap().len(), 36);
    assert!(r["total_cost_usd"].is_number());
    assert_eq!(
        std::path::Path::new(r["fake"]["cwd"].as_str().unwrap()),
        work.path().canonicalize().unwrap()
    );

    let mut cmd = std::process::Command::new(crate::common::fake_claude());
    cmd.arg("-p");
    let out = run_with_stdin(cmd, "/greet EXIT=3", RUN_LIMIT);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(parse_result(&out)["is_error"], true);
}
