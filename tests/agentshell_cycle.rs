//! The L2 cycle with real L3 tools against a scripted fake OpenAI server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agentshell_common;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentshell_common::*;
use agentstore::agent::bootstrap::{self, AgentHome, Project};
use agentstore::agent::core::accounting::RequestStats;
use agentstore::agent::core::provider::{ProviderError, StreamEvent};
use agentstore::agent::core::{Agent, CoreError, CoreEvents, TurnReport, TurnStop};
use agentstore::agent::tools::{Ask, AskAnswer, BoxFuture, ToolCall, ToolResult};
use agentstore::agent::wiring;
use serde_json::{Value, json};

/// Answers questions from a script and records them.
#[derive(Default)]
struct ScriptedAsk {
    answers: Mutex<VecDeque<&'static str>>,
    questions: Mutex<Vec<String>>,
}

impl ScriptedAsk {
    fn new(answers: &[&'static str]) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.iter().copied().collect()),
            questions: Mutex::default(),
        })
    }
    fn questions(&self) -> Vec<String> {
        self.questions.lock().unwrap().clone()
    }
}

impl Ask for ScriptedAsk {
    fn ask<'a>(&'a self, question: &'a str, _options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        self.questions.lock().unwrap().push(question.to_string());
        let a = self.answers.lock().unwrap().pop_front();
        Box::pin(async move {
            match a {
                Some("CANCEL") => AskAnswer::Cancelled,
                Some(a) => AskAnswer::Answer(a.to_string()),
                None => AskAnswer::Unavailable("script exhausted".into()),
            }
        })
    }
}

#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl CoreEvents for Log {
    fn stream(&self, e: &StreamEvent) {
        self.0.lock().unwrap().push(format!("{e:?}"));
    }
    fn request_done(&self, _s: &RequestStats) {
        self.0.lock().unwrap().push("request_done".into());
    }
    fn tool_call(&self, c: &ToolCall) {
        self.0.lock().unwrap().push(format!("call {}", c.id));
    }
    fn tool_result(&self, c: &ToolCall, r: &ToolResult) {
        self.0
            .lock()
            .unwrap()
            .push(format!("result {} {:?}", c.id, r.status));
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    server: FakeServer,
    ask: Arc<ScriptedAsk>,
    agent: Agent,
}

fn fixture(
    script: Vec<Reply>,
    answers: &[&'static str],
    config: Value,
    extra_env: &[(&str, &str)],
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    let home = AgentHome::resolve(
        Some(dir.path().join("home/.agentshell")),
        Some(dir.path().join("home")),
    )
    .unwrap();
    let mut project: Project = bootstrap::open_project(&root, None, &home).unwrap();
    project.config = bootstrap::config::merge(project.config, config);
    let server = FakeServer::start(script);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("AGENTSHELL_MODEL".into(), "openai/test-model".into());
    env.insert("AGENTSHELL_BASE_URL".into(), format!("{}/v1", server.url));
    env.insert("OPENAI_API_KEY".into(), "sk-test-key-0123456789".into());
    for (k, v) in extra_env {
        env.insert(k.to_string(), v.to_string());
    }
    let ask = ScriptedAsk::new(answers);
    let agent = wiring::build_agent(&project, &env, ask.clone() as Arc<dyn Ask>).unwrap();
    Fixture {
        _dir: dir,
        root,
        server,
        ask,
        agent,
    }
}

async fn turn(f: &mut Fixture, input: &str, log: &Log) -> TurnReport {
    tokio::time::timeout(Duration::from_secs(60), f.agent.run_turn(input, log))
        .await
        .expect("hang guard")
}

/// The tool messages the model received in request `n`, parsed.
fn tool_results(server: &FakeServer, n: usize) -> Vec<Value> {
    server.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_tool_call_then_an_answer() {
    let mut f = fixture(
        vec![oa_command("c1", "ls -a"), oa_text(&["Found ", "it"], 20, 4)],
        &[],
        json!({"prices": {"openai/test-model": {"input_per_mtok": 1000000.0, "output_per_mtok": 0.0}}}),
        &[],
    );
    let log = Log::default();
    let report = turn(&mut f, "list", &log).await;
    assert!(matches!(report.result, Ok(TurnStop::Answered)));
    assert_eq!(report.text, "Found it");
    assert_eq!(report.model_calls, 2);
    assert_eq!(report.totals.usage.input_tokens, 30);
    assert_eq!(report.totals.usage.output_tokens, 9);
    assert!((report.totals.cost_usd - 30.0).abs() < 1e-9);
    assert_eq!(
        *log.0.lock().unwrap(),
        vec![
            "request_done",
            "call c1",
            "result c1 Ok",
            "Text(\"Found \")",
            "Text(\"it\")",
            "request_done"
        ]
    );
    let results = tool_results(&f.server, 1);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["status"], "ok");
    assert_eq!(results[0]["exit_code"], 0);
    assert!(
        results[0]["stdout"]
            .as_str()
            .unwrap()
            .contains(".agentshell")
    );
    assert!(f.ask.questions().is_empty(), "ls is read-only: no question");
    // history: user, assistant+call, tool, assistant
    assert_eq!(f.agent.history().len(), 4);
}

#[tokio::test]
async fn ask_answered_yes_runs_and_no_declines() {
    let mut f = fixture(
        vec![
            oa_command("c1", "touch yes.txt"),
            oa_command("c2", "touch no.txt"),
            oa_text(&["ok"], 1, 1),
        ],
        &["yes", "no"],
        json!({}),
        &[],
    );
    let report = turn(&mut f, "make files", &Log::default()).await;
    assert!(matches!(report.result, Ok(TurnStop::Answered)));
    assert!(f.root.join("yes.txt").exists());
    assert!(!f.root.join("no.txt").exists());
    assert_eq!(
        f.ask.questions(),
        vec![
            "Run sh -c `touch yes.txt`? (`touch` is not known to be read-only)",
            "Run sh -c `touch no.txt`? (`touch` is not known to be read-only)"
        ]
    );
    let r = &tool_results(&f.server, 2)[1];
    assert_eq!(r["status"], "denied");
    assert_eq!(
        r["stderr"],
        "declined by the user (policy: `touch` is not known to be read-only)"
    );
}

#[tokio::test]
async fn denied_commands_never_run() {
    let mut f = fixture(
        vec![oa_command("c1", "cat .env"), oa_text(&["ok"], 1, 1)],
        &[],
        json!({}),
        &[],
    );
    std::fs::write(f.root.join(".env"), "X=1\n").unwrap();
    turn(&mut f, "x", &Log::default()).await;
    let r = &tool_results(&f.server, 1)[0];
    assert_eq!(r["status"], "denied");
    assert_eq!(
        r["stderr"],
        "denied by policy: touches a .env file (credentials)"
    );
    assert!(f.ask.questions().is_empty());
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently() {
    // The first call only finishes once the second has run: sequential execution would time out.
    let waits = json!({"command": "until [ -f flag ]; do sleep 0.01; done; echo one"}).to_string();
    let touches = json!({"command": "touch flag && echo two"}).to_string();
    let mut f = fixture(
        vec![
            oa_tool_calls(
                &[
                    ("c1", "run_command", &waits),
                    ("c2", "run_command", &touches),
                ],
                1,
                1,
            ),
            oa_text(&["both"], 1, 1),
        ],
        &["yes", "yes"],
        json!({"command_timeout_secs": 20}),
        &[],
    );
    let log = Log::default();
    turn(&mut f, "go", &log).await;
    let results = tool_results(&f.server, 1);
    assert_eq!(results[0]["status"], "ok");
    assert_eq!(results[0]["stdout"], "one\n");
    assert_eq!(results[1]["stdout"], "two\n");
    let log = log.0.lock().unwrap().clone();
    assert_eq!(
        &log[1..5],
        &["call c1", "call c2", "result c1 Ok", "result c2 Ok"]
    );
}

#[tokio::test]
async fn the_iteration_budget_asks_to_continue() {
    let mut f = fixture(
        vec![
            oa_command("c1", "pwd"),
            oa_command("c2", "pwd"),
            oa_text(&["never"], 1, 1),
        ],
        &["yes", "no"],
        json!({"max_iterations": 1}),
        &[],
    );
    let report = turn(&mut f, "loop", &Log::default()).await;
    assert!(matches!(report.result, Ok(TurnStop::BudgetDeclined)));
    assert_eq!(report.model_calls, 2);
    assert_eq!(
        f.ask.questions(),
        vec!["1 iterations. Continue?", "1 iterations. Continue?"]
    );
    assert_eq!(f.server.requests().len(), 2);
}

#[tokio::test]
async fn provider_errors_are_errors_not_model_text() {
    let mut f = fixture(
        vec![Reply::Status(401, "{\"error\":\"bad key\"}".into())],
        &[],
        json!({}),
        &[],
    );
    let log = Log::default();
    let report = turn(&mut f, "hi", &log).await;
    match report.result {
        Err(CoreError::Provider(ProviderError::Http { status: 401, .. })) => {}
        other => panic!("expected HTTP 401, got {other:?}"),
    }
    assert_eq!(report.text, "");
    assert_eq!(
        f.agent.history().len(),
        1,
        "only the request; no invented reply"
    );
}

#[tokio::test]
async fn secrets_are_substituted_into_the_environment_and_redacted_from_outputs() {
    let token = "ghp_0123456789abcdefSECRET";
    let printenv = json!({"command": "printenv GITHUB_TOKEN", "env": {"GITHUB_TOKEN": "{{secret:GITHUB_TOKEN}}"}}).to_string();
    let mut f = fixture(
        vec![
            oa_tool_calls(&[("c1", "run_command", &printenv)], 1, 1),
            oa_command("c2", "cat notes.txt"),
            oa_command("c3", "echo {{secret:GITHUB_TOKEN}} | wc -c"),
            oa_text(&["done"], 1, 1),
        ],
        // both commands that pass the secret need confirmation (echo is not in secret_programs),
        // and so does reading a file that holds one
        &["yes", "yes", "yes"],
        json!({}),
        &[("GITHUB_TOKEN", token)],
    );
    std::fs::write(
        f.root.join("notes.txt"),
        format!("token={token}\nkey=sk-test-key-0123456789\n"),
    )
    .unwrap();
    let report = turn(&mut f, "show secrets", &Log::default()).await;
    assert!(matches!(report.result, Ok(TurnStop::Answered)));
    let results = tool_results(&f.server, 3);
    assert_eq!(results[0]["stdout"], "{{secret:GITHUB_TOKEN}}\n");
    assert_eq!(
        results[1]["stdout"],
        "token={{secret:GITHUB_TOKEN}}\nkey={{secret:OPENAI_API_KEY}}\n"
    );
    // the placeholder was substituted at launch: the token (26 bytes + newline) reached the child
    assert_eq!(results[2]["stdout"].as_str().unwrap().trim(), "27");
    for req in f.server.requests() {
        let body = req.body.to_string();
        assert!(!body.contains(token), "the token leaked into a request");
        assert!(
            !body.contains("sk-test-key-0123456789"),
            "the key leaked into a request"
        );
    }
    let system = f.server.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("{{secret:GITHUB_TOKEN}}"), "{system}");
}

#[tokio::test]
async fn memory_tools_write_search_read_and_index_in_the_prompt() {
    let write = json!({"name": "build", "summary": "how to build", "content": "Run make all.\nThen make test."}).to_string();
    let mut f = fixture(
        vec![
            oa_tool_calls(&[("c1", "memory_write", &write)], 1, 1),
            oa_tool_calls(&[("c2", "memory_search", r#"{"query":"MAKE TEST"}"#)], 1, 1),
            oa_tool_calls(&[("c3", "memory_read", r#"{"name":"build"}"#)], 1, 1),
            oa_tool_calls(&[("c4", "memory_read", r#"{"name":"../secret"}"#)], 1, 1),
            oa_text(&["noted"], 1, 1),
        ],
        &[],
        json!({"allow_tools": ["memory_write"]}),
        &[],
    );
    turn(&mut f, "remember", &Log::default()).await;
    let results = tool_results(&f.server, 4);
    assert_eq!(results[0]["stdout"], "note `build` written");
    assert_eq!(results[1]["stdout"], "build:2: Then make test.");
    assert_eq!(results[2]["stdout"], "Run make all.\nThen make test.");
    assert_eq!(results[3]["status"], "error");
    let index_line = "- [build](memory/build.md) — how to build";
    let first = f.server.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let second = f.server.requests()[1].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!first.contains(index_line));
    assert!(second.contains(index_line), "{second}");
    assert_eq!(
        std::fs::read_to_string(f.root.join(".agentshell/MEMORY.md")).unwrap(),
        format!("{index_line}\n")
    );
}

#[tokio::test]
async fn memory_write_asks_by_default() {
    let write = json!({"name": "n", "summary": "s", "content": "c"}).to_string();
    let mut f = fixture(
        vec![
            oa_tool_calls(&[("c1", "memory_write", &write)], 1, 1),
            oa_text(&["ok"], 1, 1),
        ],
        &["no"],
        json!({}),
        &[],
    );
    turn(&mut f, "x", &Log::default()).await;
    assert_eq!(
        f.ask.questions(),
        vec![
            "Write note `n`? (memory_write writes note `n` into .agentshell/ (its MEMORY.md index steers the agent: it is in every later system prompt))"
        ]
    );
    assert!(!f.root.join(".agentshell/memory/n.md").exists());
}

#[tokio::test]
async fn the_history_is_fitted_before_every_call() {
    let big = "x".repeat(4000);
    let mut f = fixture(
        vec![
            oa_text(&[&big], 1, 1),
            oa_text(&[&big], 1, 1),
            oa_text(&["short"], 1, 1),
        ],
        &[],
        json!({"context_budget_tokens": 1500}),
        &[],
    );
    for q in ["one", "two", "three"] {
        turn(&mut f, q, &Log::default()).await;
    }
    let messages = f.server.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(messages[0]["role"], "system");
    let texts: Vec<String> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        texts[1].starts_with("[context manager: "),
        "{:?}",
        &texts[1]
    );
    assert_eq!(texts.last().unwrap(), "three");
    assert_eq!(f.agent.history().len(), 6, "the full history stays with L2");
}

#[tokio::test]
async fn ctrl_c_at_a_question_ends_the_turn_and_keeps_the_history_consistent() {
    let mut f = fixture(
        vec![oa_command("c1", "touch x"), oa_text(&["not reached"], 1, 1)],
        &["CANCEL"],
        json!({}),
        &[],
    );
    let report = turn(&mut f, "make x", &Log::default()).await;
    assert!(matches!(report.result, Ok(TurnStop::Cancelled)));
    assert_eq!(f.server.requests().len(), 1, "no call after the cancel");
    assert!(!f.root.join("x").exists());
    // user, assistant with the call, the cancelled result: the next request is well formed
    assert_eq!(f.agent.history().len(), 3);
    assert!(
        f.agent.history()[2]
            .content
            .contains("\"status\":\"cancelled\"")
    );
}

#[tokio::test]
async fn delegate_runs_a_sub_agent_with_a_fresh_context() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "").unwrap();
    let home = AgentHome::resolve(
        Some(dir.path().join("home/.agentshell")),
        Some(dir.path().join("home")),
    )
    .unwrap();
    let project = bootstrap::open_project(&root, None, &home).unwrap();
    let task = json!({"task": "Count the files in the project root and answer with the number."})
        .to_string();
    let server = FakeServer::start(vec![
        oa_tool_calls(&[("p1", "delegate", &task)], 1, 1), // parent
        oa_command("s1", "ls | wc -l"),                    // sub-agent
        oa_text(&["2 files"], 1, 1),                       // sub-agent answers
        oa_text(&["The sub-agent counted 2 files."], 1, 1), // parent answers
    ]);
    let env: BTreeMap<String, String> = [
        ("AGENTSHELL_MODEL", "openai/test-model".to_string()),
        ("AGENTSHELL_BASE_URL", format!("{}/v1", server.url)),
        ("OPENAI_API_KEY", "sk-test-key-0123456789".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let sub_log = Arc::new(Log::default());
    let mut agent = wiring::build_agent_with_subagents(
        &project,
        &env,
        ScriptedAsk::new(&[]) as Arc<dyn Ask>,
        sub_log.clone() as Arc<dyn CoreEvents>,
    )
    .unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        agent.run_turn("how many files?", &Log::default()),
    )
    .await
    .unwrap();
    assert_eq!(report.text, "The sub-agent counted 2 files.");
    let requests = server.requests();
    let tool_names = |n: usize| -> Vec<String> {
        requests[n].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(tool_names(0).contains(&"delegate".to_string()));
    assert!(
        !tool_names(1).contains(&"delegate".to_string()),
        "sub-agents cannot delegate"
    );
    // the sub-agent saw only its task
    let sub_msgs = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(sub_msgs.len(), 2);
    assert_eq!(
        sub_msgs[1]["content"],
        "Count the files in the project root and answer with the number."
    );
    let parent_result = &tool_results(&server, 3)[0];
    assert_eq!(parent_result["stdout"], "2 files");
    assert_eq!(
        *sub_log.0.lock().unwrap(),
        vec![
            "request_done",
            "call s1",
            "result s1 Ok",
            "Text(\"2 files\")",
            "request_done"
        ]
    );
}

#[tokio::test]
async fn a_secret_cut_by_the_capture_limit_leaks_no_fragment() {
    let token = "ghp_0123456789abcdefSECRET";
    // 524 280 bytes, then the token, so the 512 KiB capture head ends 8 bytes into it.
    // (the token comes from the environment: a command whose own text held it would be a
    // probe, refused with the session ended)
    let cmd = json!({
        "command": "head -c 524280 /dev/zero | tr '\\0' a; printf %s \"$T\"; head -c 2000000 /dev/zero | tr '\\0' b",
        "env": {"T": "{{secret:GITHUB_TOKEN}}"},
    })
    .to_string();
    let mut f = fixture(
        vec![
            oa_tool_calls(&[("c1", "run_command", &cmd)], 1, 1),
            oa_text(&["ok"], 1, 1),
        ],
        &["yes"],
        json!({"max_output_bytes": 4000000}),
        &[("GITHUB_TOKEN", token)],
    );
    turn(&mut f, "big output", &Log::default()).await;
    let r = &tool_results(&f.server, 1)[0];
    let out = r["stdout"].as_str().unwrap();
    assert_eq!(r["truncated"], true);
    assert!(
        out.contains("aaaa{{secret:GITHUB_TOKEN}}\n[... "),
        "{}",
        &out[524_000..524_400]
    );
    assert!(!out.contains("ghp_0123"));
}

#[tokio::test]
async fn a_resumed_history_never_ends_in_a_call_without_its_result() {
    use agentstore::agent::core::message::Message;
    let mut f = fixture(vec![oa_text(&["fine"], 1, 1)], &[], json!({}), &[]);
    let call = ToolCall {
        id: "c9".into(),
        name: "run_command".into(),
        arguments: r#"{"command":"ls"}"#.into(),
    };
    // a saved session cut right after the model asked for a call (a crash mid-step)
    f.agent.set_history(vec![
        Message::user("first"),
        Message::assistant("answer", vec![]),
        Message::user("second"),
        Message::assistant("", vec![call]),
    ]);
    assert_eq!(f.agent.history().len(), 3);
    let log = Log::default();
    let report = turn(&mut f, "third", &log).await;
    assert!(matches!(report.result, Ok(TurnStop::Answered)));
    let sent = f.server.requests()[0].body["messages"].to_string();
    assert!(!sent.contains("c9"), "{sent}");
}

#[tokio::test]
async fn compact_replaces_the_older_turns_by_the_models_summary() {
    let mut f = fixture(
        vec![
            oa_text(&["a1"], 1, 1),
            oa_text(&["a2"], 1, 1),
            oa_text(&["a3"], 1, 1),
            oa_text(&["the summary"], 7, 3),
        ],
        &[],
        json!({}),
        &[],
    );
    let log = Log::default();
    for q in ["q1", "q2", "q3"] {
        turn(&mut f, q, &log).await;
    }
    let done = f.agent.compact(1, &log).await.unwrap();
    assert_eq!(done, Some((6, 4)));
    let h = f.agent.history();
    assert!(h[0].content.contains("the summary") && h[0].content.contains("/compact"));
    assert_eq!(h[2].content, "q3");
    // the summary call has no tools and sees the older turns only
    let req = &f.server.requests()[3].body;
    assert!(
        req.get("tools")
            .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty()))
    );
    let asked = req["messages"].to_string();
    assert!(
        asked.contains("q1") && asked.contains("a2") && !asked.contains("q3"),
        "{asked}"
    );
    assert_eq!(
        f.agent.session_totals().requests,
        4,
        "the summary call is accounted"
    );
    // nothing older than the kept turns (the summary and q3): nothing to do, no call
    assert_eq!(f.agent.compact(2, &log).await.unwrap(), None);
    assert_eq!(f.server.requests().len(), 4);
}
