//! `agentshell web`, the real binary against the fake model server: the HTTP interface (token,
//! limits, prompt, streamed events to several tabs, answers, Stop), the Unix socket, and the
//! page itself driven by headless Chromium over the DevTools protocol (real clicks).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agentshell_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness;
use agentshell_common::*;
use serde_json::{Value, json};

const KEY: &str = "sk-web-test-key-0123456789";

/// A running `agentshell web`; killed on drop.
struct WebShell {
    child: Child,
    /// `127.0.0.1:PORT` (empty on a Unix socket).
    addr: String,
    token: String,
}

impl Drop for WebShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    let home = dir.path().join("home");
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    (dir, root, home)
}

fn start(root: &Path, home: &Path, server: &FakeServer, extra: &[&str]) -> WebShell {
    start_after(root, home, server, extra, "")
}

/// [`start`] after the shell command `before` (e.g. `ulimit -n 128;`).
fn start_after(
    root: &Path,
    home: &Path,
    server: &FakeServer,
    extra: &[&str],
    before: &str,
) -> WebShell {
    let mut child = Command::new("sh")
        .args(["-c", &format!("{before} exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_agentshell"))
        .arg("web")
        .args(extra)
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home)
        .env("AGENTSHELL_HOME", home.join(".agentshell"))
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("agentshell web: open ")
        .unwrap_or_else(|| panic!("first line names the URL: {line:?}"))
        .to_string();
    let (addr, token) = if let Some(rest) = url.strip_prefix("http://127.0.0.1:") {
        let (port, token) = rest.split_once("/?token=").unwrap();
        (format!("127.0.0.1:{port}"), token.to_string())
    } else {
        let rest = url.strip_prefix("http://localhost/?token=").unwrap();
        (String::new(), rest.split(' ').next().unwrap().to_string())
    };
    assert_eq!(token.len(), 64, "256-bit hex token: {token}");
    WebShell { child, addr, token }
}

/// One raw HTTP/1.1 exchange: (status, head, body).
fn exchange(mut s: impl Read + Write, request: &str) -> (u16, String, String) {
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    r
}

impl WebShell {
    fn http(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String) {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (status, _, body) = exchange(s, &request(method, path, headers, body));
        (status, body)
    }

    /// A POST with the token header.
    fn post(&self, path: &str, body: Value) -> (u16, String) {
        self.http(
            "POST",
            path,
            &[("X-Agentshell-Token", &self.token)],
            &body.to_string(),
        )
    }

    /// A "tab": an event stream read on its own thread.
    fn tab(&self) -> Tab {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.write_all(
            request(
                "GET",
                "/events",
                &[("Cookie", &format!("agentshell_token={}", self.token))],
                "",
            )
            .as_bytes(),
        )
        .unwrap();
        Tab::read(s)
    }
}

/// The events one event stream received.
#[derive(Clone)]
struct Tab(Arc<Mutex<Vec<Value>>>);

impl Tab {
    fn read(s: impl Read + Send + 'static) -> Tab {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(s).lines();
            let first = lines.next().unwrap().unwrap();
            assert!(first.contains(" 200 "), "event stream: {first}");
            for line in lines {
                let Ok(line) = line else { return };
                if let Some(data) = line.strip_prefix("data: ") {
                    sink.lock()
                        .unwrap()
                        .push(serde_json::from_str(data).unwrap());
                }
            }
        });
        Tab(events)
    }

    fn events(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    fn types(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect()
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut found = None;
        wait_until(LOADED, what, || {
            found = self.events().into_iter().find(|e| pred(e));
            found.is_some()
        });
        found.unwrap()
    }

    fn text(&self) -> String {
        self.events()
            .iter()
            .filter(|e| e["type"] == "text")
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect()
    }
}

fn is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["type"] == kind
}

#[test]
fn web_refuses_requests_without_the_token_and_bounds_them() {
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![]);
    let web = start(&root, &home, &server, &[]);
    // No token, a wrong one (URL, cookie, header; same length and not), nothing gets through.
    let wrong = "0".repeat(64);
    for (path, headers) in [
        ("/", vec![]),
        ("/events", vec![]),
        ("/?token=nope", vec![]),
        (&*format!("/?token={wrong}"), vec![]),
        ("/", vec![("Cookie", format!("agentshell_token={wrong}"))]),
        ("/events", vec![("X-Agentshell-Token", wrong.clone())]),
        (
            "/",
            vec![("X-Agentshell-Token", web.token[..63].to_string())],
        ),
    ] {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, body) = web.http("GET", path, &h, "");
        assert_eq!(status, 403, "GET {path} {headers:?}: {body}");
        assert!(body.contains("token"), "{body}");
    }
    let (status, _) = web.http("POST", "/prompt", &[], r#"{"text":"hi"}"#);
    assert_eq!(status, 403);
    // The printed URL trades the token for a cookie and redirects to a token-free address.
    let s = TcpStream::connect(&web.addr).unwrap();
    let (status, head, _) = exchange(
        s,
        &request("GET", &format!("/?token={}", web.token), &[], ""),
    );
    assert_eq!(status, 303, "{head}");
    let cookie_line = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap();
    assert!(cookie_line.contains(&format!("agentshell_token={}", web.token)));
    assert!(cookie_line.contains("HttpOnly") && cookie_line.contains("SameSite=Strict"));
    assert!(head.contains("Location: /\r") || head.ends_with("Location: /"));
    // With the cookie: the page, with its controls, framed by no one.
    let s = TcpStream::connect(&web.addr).unwrap();
    let cookie = format!("agentshell_token={}", web.token);
    let (status, head, page) = exchange(s, &request("GET", "/", &[("Cookie", &cookie)], ""));
    assert_eq!(status, 200);
    assert!(head.contains("frame-ancestors 'none'"), "{head}");
    for id in [
        "id=\"prompt\"",
        "id=\"send\"",
        "id=\"stop\"",
        "new EventSource(\"/events\")",
    ] {
        assert!(page.contains(id), "page has {id}");
    }
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no CDN"
    );
    // Bad input gets a clear error and changes nothing.
    let (status, body) = web.post("/prompt", json!({"prompt": "x"}));
    assert_eq!(
        (status, body.contains("field \\\"text\\\"")),
        (400, true),
        "{body}"
    );
    let (status, body) = web.post("/prompt", json!({"text": "   "}));
    assert_eq!((status, body.contains("empty")), (400, true), "{body}");
    let (status, _) = web.post("/answer", json!({"id": 7, "answer": "yes"}));
    assert_eq!(status, 404);
    let (status, _) = web.http(
        "GET",
        "/nothing-here",
        &[("X-Agentshell-Token", &web.token)],
        "",
    );
    assert_eq!(status, 404);
    let big = "x".repeat(70 * 1024);
    let (status, _) = web.http(
        "POST",
        "/prompt",
        &[("X-Agentshell-Token", &web.token)],
        &big,
    );
    assert_eq!(status, 413);
    let s = TcpStream::connect(&web.addr).unwrap();
    let huge_head = format!("GET / HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(20 * 1024));
    let (status, _, _) = exchange(s, &huge_head);
    assert_eq!(status, 431);
    assert!(server.requests().is_empty(), "nothing reached the model");
}

/// Issue 28: the page accepted `POST /prompt` and `/answer` from another localhost port (the
/// same-site cookie is sent; Origin was never checked) and any `Host`.
#[test]
fn web_refuses_state_changes_from_other_sites_and_foreign_hosts() {
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![oa_text(&["hello"], 1, 1)]);
    let web = start(&root, &home, &server, &[]);
    let cookie = format!("agentshell_token={}", web.token);
    let own = format!("http://{}", web.addr);
    let raw = |method: &str, path: &str, host: &str, headers: &[(&str, &str)], body: &str| {
        let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n");
        for (k, v) in headers {
            r.push_str(&format!("{k}: {v}\r\n"));
        }
        r.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        let s = TcpStream::connect(&web.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (status, _, body) = exchange(s, &r);
        (status, body)
    };
    let prompt = r#"{"text":"hi"}"#;
    let answer = r#"{"id":1,"answer":"yes"}"#;
    for (method, path, host, headers, body) in [
        (
            "POST",
            "/prompt",
            web.addr.as_str(),
            vec![("Origin", "http://127.0.0.1:9")],
            prompt,
        ),
        (
            "POST",
            "/prompt",
            web.addr.as_str(),
            vec![("Origin", "null")],
            prompt,
        ),
        (
            "POST",
            "/prompt",
            web.addr.as_str(),
            vec![("Sec-Fetch-Site", "same-site")],
            prompt,
        ),
        (
            "POST",
            "/prompt",
            web.addr.as_str(),
            vec![("Sec-Fetch-Site", "cross-site")],
            prompt,
        ),
        (
            "POST",
            "/answer",
            web.addr.as_str(),
            vec![("Origin", "http://localhost:8080")],
            answer,
        ),
        (
            "POST",
            "/stop",
            web.addr.as_str(),
            vec![("Origin", "http://evil.example")],
            "",
        ),
        ("POST", "/prompt", "evil.example", vec![], prompt),
        ("GET", "/", "evil.example:80", vec![], ""),
        ("GET", "/events", "rebind.evil.example", vec![], ""),
    ] {
        let (status, text) = raw(method, path, host, &headers, body);
        assert_eq!(
            status, 403,
            "{method} {path} Host {host} {headers:?}: {text}"
        );
    }
    assert!(server.requests().is_empty(), "nothing reached the model");
    // the page's own requests still work
    let (status, text) = raw(
        "POST",
        "/prompt",
        &web.addr,
        &[("Origin", &own), ("Sec-Fetch-Site", "same-origin")],
        prompt,
    );
    assert_eq!(status, 202, "{text}");
    server.wait_for_requests(1);
}

/// Issue 28: "Always allow" on `cp seed.txt backup.txt` let `cp ../outside_secret.txt
/// stolen.txt` run unasked. "Always" covers the same command only.
#[test]
fn web_always_allow_covers_the_same_command_only() {
    let (dir, root, home) = project();
    std::fs::write(root.join("seed.txt"), "seed\n").unwrap();
    std::fs::write(dir.path().join("outside_secret.txt"), "secret\n").unwrap();
    let server = FakeServer::start(vec![
        oa_command("c1", "cp seed.txt backup.txt"),
        oa_command("c2", "cp ../outside_secret.txt stolen.txt"),
        oa_text(&["done"], 1, 1),
    ]);
    let web = start(&root, &home, &server, &[]);
    let tab = web.tab();
    let (status, body) = web.post("/prompt", json!({"text": "copy"}));
    assert_eq!(status, 202, "{body}");
    let first = tab.wait_for("the first question", is("ask"));
    assert_eq!(first["options"], json!(["yes", "no", "always"]));
    let (status, _) = web.post("/answer", json!({"id": first["id"], "answer": "always"}));
    assert_eq!(status, 200);
    let second = tab.wait_for("the second command asked about", |e| {
        e["type"] == "ask" && e["id"] != first["id"]
    });
    assert!(
        second["question"]
            .as_str()
            .unwrap()
            .contains("outside_secret.txt"),
        "{second}"
    );
    assert!(root.join("backup.txt").exists());
    assert!(!root.join("stolen.txt").exists());
    let (status, _) = web.post("/answer", json!({"id": second["id"], "answer": "no"}));
    assert_eq!(status, 200);
    tab.wait_for("the turn's end", is("turn_end"));
    assert!(!root.join("stolen.txt").exists());
}

#[test]
fn web_session_streams_to_every_tab_and_answers_questions_with_buttons() {
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![
        oa_command("c1", "touch allowed-file"),
        oa_command("c2", "touch denied-file"),
        oa_text(&["All ", "done", "."], 30, 7),
    ]);
    let web = start(&root, &home, &server, &[]);
    let a = web.tab();
    let b = web.tab();
    a.wait_for("the banner", is("info"));
    b.wait_for("the banner", is("info"));
    let (status, body) = web.post("/prompt", json!({"text": "make two files"}));
    assert_eq!(status, 202, "{body}");
    // The call is shown before it runs, and the question comes as options for buttons.
    let ask = a.wait_for("first question", is("ask"));
    let call = a
        .events()
        .into_iter()
        .find(|e| e["type"] == "tool_call")
        .unwrap();
    assert_eq!(call["arguments"]["command"], "touch allowed-file");
    assert!(
        ask["question"]
            .as_str()
            .unwrap()
            .contains("touch allowed-file"),
        "{ask}"
    );
    assert_eq!(ask["options"], json!(["yes", "no", "always"]));
    assert!(
        !root.join("allowed-file").exists(),
        "nothing runs before the answer"
    );
    // A second prompt while one runs is refused; an answer outside the options too.
    let (status, _) = web.post("/prompt", json!({"text": "another"}));
    assert_eq!(status, 409);
    let (status, body) = web.post("/answer", json!({"id": ask["id"], "answer": "maybe"}));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("yes, no, always"), "{body}");
    // Tab B answers the question tab A also shows.
    b.wait_for("the same question in tab B", |e| {
        e["type"] == "ask" && e["id"] == ask["id"]
    });
    let (status, _) = web.post("/answer", json!({"id": ask["id"], "answer": "yes"}));
    assert_eq!(status, 200);
    let second = a.wait_for("second question", |e| {
        e["type"] == "ask" && e["id"] != ask["id"]
    });
    assert!(root.join("allowed-file").exists());
    let (status, _) = web.post("/answer", json!({"id": second["id"], "answer": "no"}));
    assert_eq!(status, 200);
    let end = a.wait_for("end of the turn", is("turn_end"));
    assert_eq!(end["outcome"], "answered", "{end}");
    assert!(!root.join("denied-file").exists());
    b.wait_for("end of the turn in tab B", is("turn_end"));
    assert_eq!(a.text(), "All done.");
    assert_eq!(a.events(), b.events(), "both tabs see the same session");
    let results: Vec<Value> = a
        .events()
        .into_iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["status"], "ok");
    assert_eq!(results[1]["status"], "denied");
    // The order of what happened: call shown, asked, answered, result.
    let types = a.types();
    let pos = |t: &str| types.iter().position(|x| x == t).unwrap();
    assert!(pos("user") < pos("tool_call") && pos("tool_call") < pos("ask"));
    assert!(pos("ask") < pos("answered") && pos("answered") < pos("tool_result"));
    // A tab opened later replays the session.
    let c = web.tab();
    c.wait_for("replayed end", is("turn_end"));
    assert_eq!(c.text(), "All done.");
    assert_eq!(c.events()[0]["type"], "reset");
}

#[test]
fn web_a_question_without_options_takes_a_typed_answer() {
    let (_dir, root, home) = project();
    let question = json!({"question": "Which colour?"}).to_string();
    let server = FakeServer::start(vec![
        oa_tool_calls(&[("q1", "ask_user", &question)], 10, 5),
        oa_text(&["Teal ", "it is."], 20, 4),
    ]);
    let web = start(&root, &home, &server, &[]);
    let a = web.tab();
    web.post("/prompt", json!({"text": "pick a colour"}));
    let ask = a.wait_for("the typed question", is("ask"));
    assert_eq!(ask["question"], "Which colour?");
    assert_eq!(ask["options"], json!([]));
    let (status, body) = web.post(
        "/answer",
        json!({"id": ask["id"], "answer": "teal, please"}),
    );
    assert_eq!(status, 200, "{body}");
    let end = a.wait_for("end of the turn", is("turn_end"));
    assert_eq!(end["outcome"], "answered", "{end}");
    assert_eq!(a.text(), "Teal it is.");
    let second = server.requests()[1].body.to_string();
    assert!(
        second.contains("teal, please"),
        "the model got the answer: {second}"
    );
}

#[test]
fn web_stop_cancels_the_question_and_the_turn_and_the_session_goes_on() {
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![
        oa_command("c1", "touch never-made"),
        oa_text(&["still ", "here"], 30, 7),
    ]);
    let web = start(&root, &home, &server, &[]);
    let a = web.tab();
    web.post("/prompt", json!({"text": "make a file"}));
    let ask = a.wait_for("question", is("ask"));
    let (status, _) = web.post("/stop", json!({}));
    assert_eq!(status, 200);
    let end = a.wait_for("end of the turn", is("turn_end"));
    assert_eq!(end["outcome"], "cancelled", "{end}");
    let answered = a.wait_for("question closed", is("answered"));
    assert_eq!(
        (answered["id"].clone(), answered["answer"].clone()),
        (ask["id"].clone(), Value::Null)
    );
    let (status, _) = web.post("/answer", json!({"id": ask["id"], "answer": "yes"}));
    assert_eq!(status, 404, "a cancelled question takes no answer");
    assert!(!root.join("never-made").exists());
    let (status, body) = web.post("/prompt", json!({"text": "are you there"}));
    assert_eq!(status, 202, "{body}");
    wait_until(LOADED, "second turn", || {
        a.events()
            .iter()
            .filter(|e| e["type"] == "turn_end")
            .count()
            == 2
    });
    assert_eq!(a.text(), "still here");
}

#[test]
fn web_on_a_unix_socket_is_private_and_checks_the_token() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let (dir, root, home) = project();
    let server = FakeServer::start(vec![oa_text(&["over ", "the socket"], 3, 2)]);
    let socket = dir.path().join("web.sock");
    let web = start(
        &root,
        &home,
        &server,
        &["--socket", socket.to_str().unwrap()],
    );
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let (status, _, _) = exchange(
        UnixStream::connect(&socket).unwrap(),
        &request("GET", "/", &[], ""),
    );
    assert_eq!(status, 403);
    let mut s = UnixStream::connect(&socket).unwrap();
    s.write_all(request("GET", "/events", &[("X-Agentshell-Token", &web.token)], "").as_bytes())
        .unwrap();
    let tab = Tab::read(s);
    let body = json!({"text": "hello"}).to_string();
    let (status, _, _) = exchange(
        UnixStream::connect(&socket).unwrap(),
        &request(
            "POST",
            "/prompt",
            &[("X-Agentshell-Token", &web.token)],
            &body,
        ),
    );
    assert_eq!(status, 202);
    tab.wait_for("end", is("turn_end"));
    assert_eq!(tab.text(), "over the socket");
    // A socket path taken by another file is an error naming it, and the file stays.
    let taken = dir.path().join("taken");
    std::fs::write(&taken, "keep me").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentshell"))
        .args(["web", "--socket", taken.to_str().unwrap()])
        .current_dir(&root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", &home)
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", KEY)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(taken.to_str().unwrap()) && stderr.contains("not a socket"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "keep me");
    drop(web);
}

#[test]
fn web_page_in_headless_chromium_streams_and_takes_allow_and_deny_clicks() {
    if crate::browser::binary().is_none() {
        harness::skip("the headless Chromium test", "chromium is not installed");
        return;
    }
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![
        oa_command("c1", "touch allowed-file"),
        oa_command("c2", "touch denied-file"),
        oa_text(
            &["Made ", "one ", "file; ", "the other was refused."],
            30,
            7,
        ),
    ]);
    let web = start(&root, &home, &server, &[]);
    let mut page = crate::browser::Browser::start();
    page.open(&format!("http://{}/?token={}", web.addr, web.token));
    // The token became a cookie and left the address bar; the event stream is connected.
    page.wait_for(
        LOADED,
        "the page connected",
        "document.getElementById('status') !== null && document.getElementById('status').textContent === 'ready' && document.querySelector('.info') !== null",
    );
    assert_eq!(page.eval("location.search"), json!(""));
    page.click("#prompt");
    page.type_text("make two files");
    page.click("#send");
    page.wait_for(
        LOADED,
        "the first question",
        "document.getElementById('ask-1-yes') !== null",
    );
    assert_eq!(
        page.eval("document.getElementById('ask-1-yes').textContent"),
        json!("Allow")
    );
    assert_eq!(
        page.eval("document.getElementById('ask-1-no').textContent"),
        json!("Deny")
    );
    // The call was shown before it ran.
    assert_eq!(
        page.eval("document.querySelector('.tool').textContent.includes('touch allowed-file')"),
        json!(true)
    );
    assert!(!root.join("allowed-file").exists());
    page.click("#ask-1-yes");
    page.wait_for(
        LOADED,
        "the second question",
        "document.getElementById('ask-2-no') !== null",
    );
    assert!(root.join("allowed-file").exists());
    page.click("#ask-2-no");
    page.wait_for(
        LOADED,
        "the end of the turn",
        "document.querySelector('.turn-end') !== null",
    );
    assert!(!root.join("denied-file").exists());
    assert_eq!(
        page.eval("[...document.querySelectorAll('.text')].map(e => e.textContent).join('')"),
        json!("Made one file; the other was refused.")
    );
    assert_eq!(
        page.eval("[...document.querySelectorAll('.result')].map(e => e.className).join(' ')"),
        json!("result ok result denied")
    );
    assert_eq!(
        page.eval("document.getElementById('ask-1-yes').disabled && document.getElementById('ask-2-no').disabled"),
        json!(true)
    );
    let shot = page.screenshot("agentshell-web");
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
}

/// Holds `n` connections to `addr` as user nobody, each sending half a request line and
/// opening again when the server closes it, until its stdin closes; prints `held` first.
const SLOW_CLIENT: &str = r#"
import socket, sys, threading, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stop = threading.Event()
def one():
    while not stop.is_set():
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.sendall(b"GET /even")
            s.settimeout(0.5)
            while not stop.is_set():
                try:
                    if not s.recv(4096):
                        break
                except socket.timeout:
                    continue
            s.close()
        except OSError:
            pass
        time.sleep(0.2)
ts = [threading.Thread(target=one, daemon=True) for _ in range(n)]
for t in ts:
    t.start()
time.sleep(1.5)
print("held", flush=True)
sys.stdin.read()
stop.set()
"#;

#[test]
fn web_one_account_holding_slow_connections_cannot_keep_the_owner_out() {
    let what = "agentshell web under slow connections";
    if !nix::unistd::getuid().is_root() {
        harness::skip(
            what,
            "needs root to run the slow client as user nobody (setpriv)",
        );
        return;
    }
    // A python every account may run (not one under root's home).
    let python = "/usr/bin/python3";
    for tool in ["setpriv", python] {
        if !harness::have(tool) {
            harness::skip(what, &format!("{tool} is not installed"));
            return;
        }
    }
    let (_dir, root, home) = project();
    let server = FakeServer::start(vec![]);
    // A descriptor limit below what the other account opens: without bounds the server stops
    // accepting anyone while the slow connections wait out their request timeout.
    let web = start_after(&root, &home, &server, &[], "ulimit -n 128;");
    let (host, port) = web.addr.split_once(':').unwrap();
    let mut slow = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            python,
            "-c",
        ])
        .arg(SLOW_CLIENT)
        .args([host, port, "200"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(slow.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held");
    // The owner's page and event stream open at once, every time.
    for _ in 0..5 {
        let t0 = std::time::Instant::now();
        let (status, body) = web.http("GET", "/", &[("X-Agentshell-Token", &web.token)], "");
        assert_eq!(status, 200, "{body}");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the owner waited {:?}",
            t0.elapsed()
        );
    }
    drop(slow.stdin.take());
    let _ = slow.wait();
}
