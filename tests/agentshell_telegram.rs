//! `agentshell telegram`, the real binary against the fake model server and a local fake Bot
//! API: a whole session with a confirmation by button, a long output as a document, a long
//! answer split at 4096 characters, a 429 honoured, and chats not on the list ignored; a
//! typed answer to a question without options; a session per chat (history, /stop), their
//! number bounded and idle ones dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agentshell_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentshell_common::*;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "123456789:AAF-fake_bot_token_for_tests_xyz";

/// One call the bot made.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    /// The JSON body (`Null` for multipart).
    body: Value,
    /// The raw body (multipart documents).
    raw: String,
    at: Instant,
    /// Whether the fake refused it with a 429.
    throttled: bool,
    /// The id of the message it sent (sendMessage, sendDocument).
    message_id: i64,
}

#[derive(Default)]
struct BotState {
    updates: Mutex<Vec<Value>>,
    /// Told of each new update (a long poll awaits it).
    arrived: tokio::sync::Notify,
    calls: Mutex<Vec<Call>>,
    throttle_next_send: AtomicBool,
    next_message: AtomicI64,
}

/// A fake Telegram Bot API on 127.0.0.1.
struct FakeBot {
    url: String,
    state: Arc<BotState>,
}

async fn bot_handler(
    State(state): State<Arc<BotState>>,
    UrlPath((bot, method)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, axum::Json<Value>) {
    if bot != format!("bot{TOKEN}") {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"ok": false, "error_code": 401, "description": "Unauthorized"})),
        );
    }
    let is_json = headers
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("application/json"));
    let parsed: Value = if is_json {
        serde_json::from_slice(&body).unwrap()
    } else {
        Value::Null
    };
    let throttled =
        method == "sendMessage" && state.throttle_next_send.swap(false, Ordering::SeqCst);
    let message_id = if matches!(method.as_str(), "sendMessage" | "sendDocument") && !throttled {
        state.next_message.fetch_add(1, Ordering::SeqCst) + 100
    } else {
        0
    };
    if method != "getUpdates" {
        state.calls.lock().unwrap().push(Call {
            method: method.clone(),
            body: parsed.clone(),
            raw: String::from_utf8_lossy(&body).to_string(),
            at: Instant::now(),
            throttled,
            message_id,
        });
    }
    if throttled {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({"ok": false, "error_code": 429,
                "description": "Too Many Requests: retry after 1",
                "parameters": {"retry_after": 1}})),
        );
    }
    let result = match method.as_str() {
        "getUpdates" => {
            let offset = parsed["offset"].as_i64().unwrap_or(0);
            let wait = parsed["timeout"].as_u64().unwrap_or(0).min(1);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
            loop {
                // Asked to be told before looking, so an update in between is not missed.
                let arrived = state.arrived.notified();
                let ready: Vec<Value> = state
                    .updates
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|u| u["update_id"].as_i64().unwrap() >= offset)
                    .cloned()
                    .collect();
                if !ready.is_empty() || tokio::time::timeout_at(deadline, arrived).await.is_err() {
                    break json!(ready);
                }
            }
        }
        "getMe" => json!({"id": 1, "is_bot": true, "username": "fake_bot"}),
        "sendMessage" => {
            json!({"message_id": message_id, "chat": {"id": parsed["chat_id"]}, "text": parsed["text"]})
        }
        "sendDocument" => json!({"message_id": message_id}),
        "answerCallbackQuery" => json!(true),
        "editMessageText" => json!({"message_id": parsed["message_id"]}),
        _ => {
            return (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"ok": false, "error_code": 404, "description": "Not Found"})),
            );
        }
    };
    (
        StatusCode::OK,
        axum::Json(json!({"ok": true, "result": result})),
    )
}

impl FakeBot {
    fn start() -> FakeBot {
        let state = Arc::new(BotState::default());
        let shared = Arc::clone(&state);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let app = axum::Router::new()
                    .route("/{bot}/{method}", axum::routing::post(bot_handler))
                    .with_state(shared);
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        FakeBot {
            url: format!("http://{addr}"),
            state,
        }
    }

    fn push(&self, mut update: Value) {
        let mut updates = self.state.updates.lock().unwrap();
        update["update_id"] = json!(updates.len() as i64 + 1);
        updates.push(update);
        self.state.arrived.notify_waiters();
    }

    fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    fn sent(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method && !c.throttled)
            .collect()
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&Call) -> bool) -> Call {
        let mut found = None;
        wait_until(LOADED, what, || {
            found = self.calls().into_iter().find(|c| !c.throttled && pred(c));
            found.is_some()
        });
        found.unwrap()
    }
}

fn message(chat: i64, text: &str) -> Value {
    json!({"message": {"message_id": 1, "date": 0, "chat": {"id": chat, "type": "private"},
                       "from": {"id": chat, "is_bot": false, "first_name": "T"}, "text": text}})
}

fn press(id: &str, chat: i64, message_id: i64, data: &str) -> Value {
    json!({"callback_query": {"id": id, "from": {"id": chat, "is_bot": false, "first_name": "T"},
        "message": {"message_id": message_id, "date": 0, "chat": {"id": chat, "type": "private"}},
        "data": data}})
}

struct Bot {
    child: Child,
    stderr: PathBuf,
}

impl Drop for Bot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn setup(config: Value) -> (tempfile::TempDir, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    let home = dir.path().join("home");
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    let agent_home = home.join(".agentshell");
    std::fs::create_dir_all(&agent_home).unwrap();
    let env = agent_home.join(".env");
    std::fs::write(&env, format!("TELEGRAM_BOT_TOKEN={TOKEN}\n")).unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(agent_home.join("config.json"), config.to_string()).unwrap();
    (dir, root, home)
}

fn command(root: &Path, home: &Path, model: &FakeServer, bot: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentshell"));
    cmd.args(["telegram", "--api-url", bot, "--poll-timeout", "1"])
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home)
        .env("AGENTSHELL_HOME", home.join(".agentshell"))
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", model.url))
        .env("OPENAI_API_KEY", "sk-telegram-test-key-12345")
        .stdin(Stdio::null());
    cmd
}

fn start(root: &Path, home: &Path, model: &FakeServer, bot: &FakeBot, dir: &Path) -> Bot {
    let stderr = dir.join("stderr.txt");
    let child = command(root, home, model, &bot.url)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    Bot { child, stderr }
}

#[test]
fn telegram_session_with_a_confirmation_a_document_and_a_split_answer() {
    let (dir, root, home) = setup(json!({"telegram": {"allowed_chats": [42, 7]}}));
    let answer: String = (0..250)
        .map(|i| format!("line {i:03} of a long answer\n"))
        .collect();
    assert!(answer.len() > 4096 && answer.len() < 3 * 4096);
    let model = FakeServer::start(vec![
        oa_command("c1", "touch tg-file"),
        oa_command("c2", "seq 1 3000"),
        oa_text(&[&answer[..2000], &answer[2000..]], 30, 7),
    ]);
    let bot = FakeBot::start();
    bot.state.throttle_next_send.store(true, Ordering::SeqCst);
    bot.push(message(666, "rm -rf everything"));
    bot.push(message(42, "make a file, then count"));
    let shell = start(&root, &home, &model, &bot, dir.path());

    // The call is shown before it runs (after a 429 honoured), then the question as buttons.
    let shown = bot.wait_for("the tool call shown", |c| {
        c.method == "sendMessage" && c.body["text"].as_str().unwrap().contains("touch tg-file")
    });
    assert_eq!(shown.body["chat_id"], 42);
    assert!(
        shown.body["text"]
            .as_str()
            .unwrap()
            .starts_with("▶ run_command")
    );
    let throttled = bot.calls().into_iter().find(|c| c.throttled).unwrap();
    assert!(
        shown.at.duration_since(throttled.at) >= Duration::from_millis(950),
        "retry_after 1 s honoured: retried after {:?}",
        shown.at.duration_since(throttled.at)
    );
    let ask = bot.wait_for("the question", |c| {
        c.method == "sendMessage" && c.body.get("reply_markup").is_some()
    });
    assert!(ask.body["text"].as_str().unwrap().contains("touch tg-file"));
    let buttons = ask.body["reply_markup"]["inline_keyboard"][0]
        .as_array()
        .unwrap()
        .clone();
    let labels: Vec<&str> = buttons
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["Allow", "Deny", "Always allow"]);
    assert!(
        !root.join("tg-file").exists(),
        "nothing runs before the answer"
    );
    let allow = buttons[0]["callback_data"].as_str().unwrap().to_string();
    let message_id = ask.message_id;
    // A press from a chat not on the list does nothing; the listed chat's press answers.
    bot.push(press("cb-evil", 666, message_id, &allow));
    bot.push(press("cb-1", 42, message_id, &allow));
    let acked = bot.wait_for("the press acknowledged", |c| {
        c.method == "answerCallbackQuery"
    });
    assert_eq!(acked.body["callback_query_id"], "cb-1");
    assert_eq!(acked.body["text"], "Allow");
    let edited = bot.wait_for("the question edited", |c| c.method == "editMessageText");
    assert_eq!(edited.body["chat_id"], 42);
    assert_eq!(edited.body["message_id"], message_id);
    assert!(
        edited.body["text"].as_str().unwrap().ends_with("→ Allow"),
        "{}",
        edited.body
    );
    wait_until(LOADED, "the file", || root.join("tg-file").exists());

    // The long output goes as a document.
    let doc = bot.wait_for("the document", |c| c.method == "sendDocument");
    assert!(
        doc.raw.contains("filename=\"output.txt\""),
        "{}",
        &doc.raw[..300]
    );
    assert!(doc.raw.contains("name=\"chat_id\"\r\n\r\n42\r\n"));
    assert!(doc.raw.contains("2999\n3000"));
    assert!(doc.raw.contains("↳ run_command ok"));

    // The answer, split at the limit, whole.
    wait_until(LOADED, "the answer", || {
        bot.sent("sendMessage").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap()
                .ends_with("line 249 of a long answer\n")
        })
    });
    let texts: Vec<String> = bot
        .sent("sendMessage")
        .iter()
        .map(|c| c.body["text"].as_str().unwrap().to_string())
        .collect();
    let first = texts
        .iter()
        .position(|t| t.starts_with("line 000"))
        .unwrap();
    let parts = &texts[first..];
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert!(parts.iter().all(|p| p.encode_utf16().count() <= 4096));
    assert_eq!(parts.concat(), answer);

    // Chat 666 got nothing, and its text never reached the model.
    assert!(bot.calls().iter().all(|c| c.body["chat_id"] != 666));
    assert!(
        bot.calls()
            .iter()
            .all(|c| c.body["callback_query_id"] != "cb-evil")
    );
    assert_eq!(model.requests().len(), 3);
    assert!(
        model
            .requests()
            .iter()
            .all(|r| !r.body.to_string().contains("rm -rf everything"))
    );
    let stderr_path = shell.stderr.clone();
    drop(shell);
    // Logged, and the token nowhere in the output or the log.
    let stderr = std::fs::read_to_string(stderr_path).unwrap();
    let log = std::fs::read_to_string(root.join(".agentshell/logs/agent.log")).unwrap();
    assert!(log.contains("not in telegram.allowed_chats"), "{log}");
    assert!(!stderr.contains(TOKEN) && !log.contains(TOKEN));
    assert!(!stderr.contains("AAF-fake_bot_token") && !log.contains("AAF-fake_bot_token"));
}

fn group_message(chat: i64, from: i64, text: &str) -> Value {
    json!({"message": {"message_id": 1, "date": 0, "chat": {"id": chat, "type": "group"},
                       "from": {"id": from, "is_bot": false, "first_name": "M"}, "text": text}})
}

fn group_press(id: &str, chat: i64, from: i64, message_id: i64, data: &str) -> Value {
    json!({"callback_query": {"id": id, "from": {"id": from, "is_bot": false, "first_name": "M"},
        "message": {"message_id": message_id, "date": 0, "chat": {"id": chat, "type": "group"}},
        "data": data}})
}

/// Issue 28: a Telegram approval of a 7 KB command showed only its head and tail (so `touch
/// PWN` in the middle ran unseen), and any member of an allowed group could approve.
#[test]
fn telegram_shows_a_long_command_whole_and_hears_only_allowed_users() {
    let (dir, root, home) =
        setup(json!({"telegram": {"allowed_chats": [-100], "allowed_users": [42]}}));
    let long = format!(
        "echo {} ; touch tg-pwn ; echo {}",
        "a".repeat(3500),
        "b".repeat(3500)
    );
    let model = FakeServer::start(vec![oa_command("c1", &long), oa_text(&["declined"], 1, 1)]);
    let bot = FakeBot::start();
    bot.push(group_message(-100, 99, "a request from another member"));
    bot.push(group_message(-100, 42, "run the long one"));
    let _shell = start(&root, &home, &model, &bot, dir.path());
    let ask = bot.wait_for("the question", |c| {
        c.method == "sendMessage" && c.body.get("reply_markup").is_some()
    });
    // the whole command went first, as a document
    let calls = bot.calls();
    let doc = calls
        .iter()
        .find(|c| c.method == "sendDocument" && c.raw.contains("question.txt"))
        .expect("the whole question as a document");
    assert!(doc.at <= ask.at, "the document comes before the question");
    assert!(doc.raw.contains("touch tg-pwn"), "the middle is shown");
    assert!(doc.raw.contains(&"b".repeat(3500)), "all of it");
    assert!(
        ask.body["text"].as_str().unwrap().contains("question.txt"),
        "{}",
        ask.body
    );
    let buttons = ask.body["reply_markup"]["inline_keyboard"][0]
        .as_array()
        .unwrap()
        .clone();
    let allow = buttons[0]["callback_data"].as_str().unwrap().to_string();
    let deny = buttons[1]["callback_data"].as_str().unwrap().to_string();
    // another member of the allowed group presses Allow: not heard
    bot.push(group_press("cb-member", -100, 99, ask.message_id, &allow));
    let refused = bot.wait_for("the member's press answered", |c| {
        c.method == "answerCallbackQuery" && c.body["callback_query_id"] == "cb-member"
    });
    assert!(
        refused.body["text"]
            .as_str()
            .unwrap()
            .contains("not allowed"),
        "{}",
        refused.body
    );
    assert!(!root.join("tg-pwn").exists());
    // the allowed user denies
    bot.push(group_press("cb-owner", -100, 42, ask.message_id, &deny));
    model.wait_for_requests(2);
    assert!(!root.join("tg-pwn").exists());
    // the other member's request never reached the model
    assert!(
        model
            .requests()
            .iter()
            .all(|r| !r.body.to_string().contains("another member"))
    );
}

#[test]
fn telegram_stop_cancels_a_question() {
    let (dir, root, home) = setup(json!({"telegram": {"allowed_chats": [42]}}));
    let model = FakeServer::start(vec![
        oa_command("c1", "touch never-made"),
        oa_text(&["after ", "the stop"], 3, 2),
    ]);
    let bot = FakeBot::start();
    bot.push(message(42, "make a file"));
    let _shell = start(&root, &home, &model, &bot, dir.path());
    bot.wait_for("the question", |c| c.body.get("reply_markup").is_some());
    bot.push(message(42, "/stop"));
    bot.wait_for("the stop noted", |c| {
        c.body["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("request stopped"))
    });
    // Too late: the question is closed.
    let ask = bot
        .sent("sendMessage")
        .into_iter()
        .find(|c| c.body.get("reply_markup").is_some())
        .unwrap();
    let data = ask.body["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_string();
    bot.push(press("cb-late", 42, ask.message_id, &data));
    let acked = bot.wait_for("late press acknowledged", |c| {
        c.method == "answerCallbackQuery"
    });
    assert_eq!(acked.body["text"], "this question is closed");
    assert!(!root.join("never-made").exists());
    bot.push(message(42, "still there?"));
    bot.wait_for("the next answer", |c| c.body["text"] == "after the stop");
    assert!(bot.sent("editMessageText").is_empty());
}

#[test]
fn telegram_a_question_without_options_is_answered_by_the_next_message() {
    let (dir, root, home) = setup(json!({"telegram": {"allowed_chats": [42, 7]}}));
    let question = json!({"question": "Which colour should the file be named after?"}).to_string();
    let model = FakeServer::start(vec![
        oa_tool_calls(&[("q1", "ask_user", &question)], 10, 5),
        oa_text(&["Naming it ", "after teal."], 20, 4),
    ]);
    let bot = FakeBot::start();
    bot.push(message(42, "name a file"));
    let _shell = start(&root, &home, &model, &bot, dir.path());
    let asked = bot.wait_for("the typed question", |c| {
        c.method == "sendMessage" && c.body["reply_markup"]["force_reply"] == true
    });
    assert_eq!(asked.body["chat_id"], 42);
    assert!(
        asked.body["text"]
            .as_str()
            .unwrap()
            .contains("Which colour should the file be named after?"),
        "{}",
        asked.body
    );
    // A button press or another chat's message would not answer it; the chat's next does.
    bot.push(message(42, "teal"));
    bot.wait_for("the answer after the typed reply", |c| {
        c.body["chat_id"] == 42 && c.body["text"] == "Naming it after teal."
    });
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let second = requests[1].body.to_string();
    assert!(
        second.contains("teal"),
        "the model got the typed answer: {second}"
    );
}

fn texts_to(bot: &FakeBot, chat: i64) -> Vec<String> {
    bot.sent("sendMessage")
        .iter()
        .filter(|c| c.body["chat_id"] == chat)
        .map(|c| c.body["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn telegram_each_chat_has_its_own_session_and_their_number_is_bounded() {
    let (dir, root, home) = setup(json!({"telegram": {"allowed_chats": [42, 7, 9],
                                                      "max_sessions": 2}}));
    let model = FakeServer::start(vec![
        oa_command("c1", "touch chat-42-file"),
        oa_text(&["Seven's ", "answer."], 10, 3),
        oa_text(&["Nine's ", "answer."], 10, 3),
        oa_text(&["Made ", "it."], 10, 3),
    ]);
    let bot = FakeBot::start();
    bot.push(message(42, "make a file for forty-two"));
    let _shell = start(&root, &home, &model, &bot, dir.path());
    // Chat 42 waits on a question...
    let ask = bot.wait_for("42's question", |c| c.body.get("reply_markup").is_some());
    assert_eq!(ask.body["chat_id"], 42);
    // ...while chat 7 is answered by a session of its own, which knows nothing of 42's.
    bot.push(message(7, "hello from seven"));
    bot.wait_for("7's answer", |c| {
        c.body["chat_id"] == 7 && c.body["text"] == "Seven's answer."
    });
    let second = model.requests()[1].body.to_string();
    assert!(second.contains("hello from seven"), "{second}");
    assert!(
        !second.contains("forty-two"),
        "history is per chat: {second}"
    );
    // A /stop in chat 7 stops nothing of chat 42.
    bot.push(message(7, "/stop"));
    // A third chat past the bound (2) takes the place of the idle session (7), never of the
    // busy one (42).
    bot.push(message(9, "hello from nine"));
    bot.wait_for("9's answer", |c| {
        c.body["chat_id"] == 9 && c.body["text"] == "Nine's answer."
    });
    assert!(
        texts_to(&bot, 7)
            .iter()
            .any(|t| t.starts_with("session closed to make room")),
        "{:?}",
        texts_to(&bot, 7)
    );
    let third = model.requests()[2].body.to_string();
    assert!(
        !third.contains("seven") && !third.contains("forty-two"),
        "{third}"
    );
    // 42's question is still open: its Allow runs the command and its turn goes on.
    let allow = ask.body["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_string();
    bot.push(press("cb-42", 42, ask.message_id, &allow));
    bot.wait_for("42's answer", |c| {
        c.body["chat_id"] == 42 && c.body["text"] == "Made it."
    });
    assert!(root.join("chat-42-file").exists());
    let fourth = model.requests()[3].body.to_string();
    assert!(
        fourth.contains("forty-two") && !fourth.contains("seven") && !fourth.contains("nine"),
        "{fourth}"
    );
    assert!(
        !texts_to(&bot, 42)
            .iter()
            .any(|t| t.starts_with("request stopped")),
        "{:?}",
        texts_to(&bot, 42)
    );
}

#[test]
fn telegram_an_idle_session_is_dropped_with_its_history() {
    let (dir, root, home) = setup(json!({"telegram": {"allowed_chats": [42], "idle_seconds": 1}}));
    let model = FakeServer::start(vec![
        oa_text(&["Noted."], 10, 3),
        oa_text(&["What word?"], 10, 3),
    ]);
    let bot = FakeBot::start();
    bot.push(message(42, "remember the word kiwi"));
    let _shell = start(&root, &home, &model, &bot, dir.path());
    bot.wait_for("the first answer", |c| c.body["text"] == "Noted.");
    bot.wait_for("the session dropped", |c| {
        c.body["chat_id"] == 42
            && c.body["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("session closed after 1 s idle"))
    });
    bot.push(message(42, "which word was it?"));
    bot.wait_for("the second answer", |c| c.body["text"] == "What word?");
    let second = model.requests()[1].body.to_string();
    assert!(second.contains("which word was it?"), "{second}");
    assert!(!second.contains("kiwi"), "a new session: {second}");
}

#[test]
fn telegram_refuses_to_start_without_chats_or_token_and_ignores_an_untrusted_project_list() {
    let model = FakeServer::start(vec![]);
    let bot = FakeBot::start();
    let run = |root: &Path, home: &Path| {
        let out = command(root, home, &model, &bot.url).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    // No list in the user's config; the (untrusted) project's own list does not count.
    let (_d1, root, home) = setup(json!({}));
    std::fs::write(
        root.join(".agentshell/config.json"),
        json!({"telegram": {"allowed_chats": [666]}}).to_string(),
    )
    .unwrap();
    let err = run(&root, &home);
    assert!(
        err.contains("telegram.allowed_chats (in ~/.agentshell/config.json")
            && err.contains("is not set"),
        "{err}"
    );
    assert!(
        err.contains("ignored telegram from"),
        "the project's list is named: {err}"
    );
    // A bad session bound names the field.
    let (_d5, root, home) = setup(json!({"telegram": {"allowed_chats": [42], "max_sessions": 0}}));
    let err = run(&root, &home);
    assert!(
        err.contains("telegram.max_sessions") && err.contains("0 is not a whole number from 1"),
        "{err}"
    );
    // A malformed list names the field and the value.
    let (_d2, root, home) = setup(json!({"telegram": {"allowed_chats": ["42"]}}));
    let err = run(&root, &home);
    assert!(
        err.contains("telegram.allowed_chats") && err.contains("\"42\" is not a chat id"),
        "{err}"
    );
    let (_d3, root, home) = setup(json!({"telegram": {"allowed_chats": []}}));
    assert!(run(&root, &home).contains("is empty"));
    // No token.
    let (_d4, root, home) = setup(json!({"telegram": {"allowed_chats": [42]}}));
    std::fs::write(home.join(".agentshell/.env"), "OTHER=1\n").unwrap();
    let err = run(&root, &home);
    assert!(
        err.contains("TELEGRAM_BOT_TOKEN") && err.contains("setup-keys"),
        "{err}"
    );
    assert!(bot.calls().is_empty() && model.requests().is_empty());
}

#[test]
fn the_token_can_come_from_a_systemd_credential_alone() {
    let (dir, root, home) = setup(json!({"telegram": {"allowed_chats": [42]}}));
    // No token in the user's secrets: only in $CREDENTIALS_DIRECTORY, as LoadCredential= gives it.
    std::fs::write(home.join(".agentshell/.env"), "OTHER=1\n").unwrap();
    let creds = dir.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(creds.join("TELEGRAM_BOT_TOKEN"), format!("{TOKEN}\n")).unwrap();
    let model = FakeServer::start(vec![oa_text(&["pong"], 3, 1)]);
    let bot = FakeBot::start();
    bot.push(message(42, "ping"));
    let stderr = dir.path().join("stderr.txt");
    let child = command(&root, &home, &model, &bot.url)
        .env("CREDENTIALS_DIRECTORY", &creds)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let _shell = Bot { child, stderr };
    // The fake bot API answers only the right token: an answer sent is the credential's.
    bot.wait_for("an answer sent with the credential's token", |c| {
        c.method == "sendMessage" && c.body["text"] == "pong"
    });
    // An empty credential is an error naming it.
    std::fs::write(creds.join("TELEGRAM_BOT_TOKEN"), "").unwrap();
    let out = command(&root, &home, &model, &bot.url)
        .env("CREDENTIALS_DIRECTORY", &creds)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("credential TELEGRAM_BOT_TOKEN") && err.contains("is empty"),
        "{err}"
    );
}
