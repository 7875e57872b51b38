//! agentshell benchmarks (harness = false): `cargo bench --bench agentshell`.
//!
//! Figures printed, not asserted:
//! 1. start-up to prompt — spawn `agentshell run` until the prompt appears on stdout;
//! 2. per-iteration overhead excluding the model — a fake server that answers instantly, for
//!    text-only turns (fit + request + SSE parse + accounting) and for tool iterations
//!    (plus policy, `sh -c true`, redaction, bounding);
//! 3. `fit` on a 1 MB history;
//! 4. peak RSS (`/usr/bin/time -v`) of `exec` against the fake server, and of `run` to its prompt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The tests' support, of which this bench uses a part.
#[allow(dead_code)]
#[path = "../tests/agentshell_common/mod.rs"]
mod common;
#[path = "../tests/support/fake_model.rs"]
pub mod fake_model;
#[path = "../tests/support/harness.rs"]
pub mod harness;
#[path = "../tests/support/wait.rs"]
pub mod wait;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentstore::agent::bootstrap::{self, AgentHome};
use agentstore::agent::core::CoreEvents;
use agentstore::agent::core::accounting::RequestStats;
use agentstore::agent::core::message::Message;
use agentstore::agent::core::provider::StreamEvent;
use agentstore::agent::tools::subsystems::context::fit;
use agentstore::agent::tools::{ToolCall, ToolResult, Unattended};
use agentstore::agent::wiring;
use common::*;
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_agentshell");

struct Quiet;
impl CoreEvents for Quiet {
    fn stream(&self, _: &StreamEvent) {}
    fn request_done(&self, _: &RequestStats) {}
    fn tool_call(&self, _: &ToolCall) {}
    fn tool_result(&self, _: &ToolCall, _: &ToolResult) {}
}

fn stats(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let n = samples.len();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<48} n={n:<4} min {:>8.3} ms  median {:>8.3} ms  p90 {:>8.3} ms",
        ms(samples[0]),
        ms(samples[n / 2]),
        ms(samples[(n * 9 / 10).min(n - 1)])
    );
}

fn temp_project() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    let home = dir.path().join("home");
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    (dir, root, home)
}

fn startup_to_prompt() {
    let (_dir, root, home) = temp_project();
    let mut samples = Vec::new();
    for _ in 0..30 {
        let start = Instant::now();
        let mut child = Command::new(BIN)
            .arg("run")
            .current_dir(&root)
            .env("HOME", &home)
            .env("AGENTSHELL_API_KEY", "sk-bench")
            .env("AGENTSHELL_MODEL", "openai/bench")
            .env("AGENTSHELL_BASE_URL", "http://127.0.0.1:9/v1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains('›') {
            let n = out.read(&mut buf).unwrap();
            assert!(n > 0, "agentshell exited before the prompt");
            seen.extend_from_slice(&buf[..n]);
        }
        samples.push(start.elapsed());
        drop(child.stdin.take());
        child.wait().unwrap();
    }
    stats("start-up to prompt (agentshell run)", samples);
}

fn agent_for(
    script: Vec<Reply>,
    config: serde_json::Value,
) -> (
    tempfile::TempDir,
    FakeServer,
    agentstore::agent::core::Agent,
) {
    let (dir, root, home) = temp_project();
    let home = AgentHome::resolve(Some(home.join(".agentshell")), Some(home)).unwrap();
    let mut project = bootstrap::open_project(&root, None, &home).unwrap();
    project.config = bootstrap::config::merge(project.config, config);
    let server = FakeServer::start(script);
    let env: BTreeMap<String, String> = [
        ("AGENTSHELL_MODEL", "openai/bench".to_string()),
        ("AGENTSHELL_BASE_URL", format!("{}/v1", server.url)),
        ("AGENTSHELL_API_KEY", "sk-bench-000000".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let agent = wiring::build_agent(&project, &env, Arc::new(Unattended)).unwrap();
    (dir, server, agent)
}

fn iteration_overhead(rt: &tokio::runtime::Runtime) {
    const N: usize = 200;
    let answer = "The build fails because line 42 returns String where &str is expected.";
    let script = (0..N).map(|_| oa_text(&[answer], 100, 20)).collect();
    let (_d, _s, mut agent) = agent_for(script, json!({}));
    let mut samples = Vec::new();
    rt.block_on(async {
        for i in 0..N {
            let t = Instant::now();
            agent.run_turn(&format!("question {i}"), &Quiet).await;
            samples.push(t.elapsed());
        }
    });
    stats("iteration, text answer (fake model: instant)", samples);

    const M: usize = 100;
    let mut script: Vec<Reply> = (0..M)
        .map(|i| oa_command(&format!("c{i}"), "true"))
        .collect();
    script.push(oa_text(&["done"], 1, 1));
    let (_d, _s, mut agent) = agent_for(script, json!({"max_iterations": 1000}));
    let t = Instant::now();
    rt.block_on(agent.run_turn("loop", &Quiet));
    let per = t.elapsed() / (M as u32 + 1);
    stats("iteration, run_command `true` (mean of 101)", vec![per]);
}

fn fit_1mb() {
    let chunk = "fn main() { println!(\"hello\"); } // some build log line\n".repeat(18);
    let mut messages = vec![Message::system("system prompt ".repeat(50))];
    let mut i = 0;
    let mut bytes = 0;
    while bytes < 1024 * 1024 {
        let m = match i % 3 {
            0 => Message::user(chunk.clone()),
            1 => Message::assistant(
                chunk.clone(),
                vec![ToolCall {
                    id: format!("c{i}"),
                    name: "run_command".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                }],
            ),
            _ => Message::tool(format!("c{}", i - 1), chunk.clone()),
        };
        bytes += m.content.len();
        messages.push(m);
        i += 1;
    }
    let mut samples = Vec::new();
    let mut kept = 0;
    for _ in 0..50 {
        let t = Instant::now();
        let out = fit(&messages, 100_000);
        samples.push(t.elapsed());
        kept = out.len();
    }
    stats(
        &format!(
            "fit 1 MB ({} msgs) into 100k tokens -> {kept} msgs",
            messages.len()
        ),
        samples,
    );
    let mut samples = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let out = fit(&messages, 10_000_000);
        samples.push(t.elapsed());
        assert_eq!(out.len(), messages.len());
    }
    stats("fit 1 MB, already fits (copy only)", samples);
}

fn max_rss_kb(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn peak_rss() {
    if !std::path::Path::new("/usr/bin/time").exists() {
        println!("peak RSS: /usr/bin/time not installed (apt-get install time)");
        return;
    }
    let (_dir, root, home) = temp_project();
    let server = FakeServer::start(vec![
        oa_command("c1", "ls -la"),
        oa_command("c2", "cat .agentshell/config.json"),
        oa_text(&["done"], 1, 1),
    ]);
    let mut child = Command::new("/usr/bin/time")
        .args(["-v", BIN, "exec", "--json", "-"])
        .current_dir(&root)
        .env("HOME", &home)
        .env("AGENTSHELL_API_KEY", "sk-bench")
        .env("AGENTSHELL_MODEL", "openai/bench")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"look around")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let result = String::from_utf8_lossy(&out.stdout);
    assert!(result.contains("\"subtype\":\"success\""), "{result}");
    println!(
        "{:<48} {} KiB",
        "peak RSS, exec with 2 tool calls",
        max_rss_kb(&String::from_utf8_lossy(&out.stderr))
    );

    let out = Command::new("/usr/bin/time")
        .args(["-v", BIN, "run"])
        .current_dir(&root)
        .env("HOME", &home)
        .env("AGENTSHELL_API_KEY", "sk-bench")
        .env("AGENTSHELL_MODEL", "openai/bench")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    println!(
        "{:<48} {} KiB",
        "peak RSS, run to prompt and exit",
        max_rss_kb(&String::from_utf8_lossy(&out.stderr))
    );
}

fn main() {
    // `cargo nextest run --all-targets` lists the bench's tests: there are none.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes --bench; a filter argument is not supported: everything runs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "agentshell benchmarks ({})",
        if cfg!(debug_assertions) {
            "debug build"
        } else {
            "release build"
        }
    );
    startup_to_prompt();
    iteration_overhead(&rt);
    fit_1mb();
    peak_rss();
}
