//! The web service holds against hostile callers (issue 27): one account's slow connections
//! cannot starve another's (timeouts, a per-caller and a total bound), a wrong method is 405
//! with `Allow`, and `/login?next=` never sends a browser off the server.
//!
//! Real parts: a private dbus-daemon, orchestratord and agentstore-web started from the built
//! binaries with listeners passed as systemd passes them; the attacker is this process (root),
//! the other caller `nobody` through `runuser` + curl. Needs root (CI runs as root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, web_env};

use common::TestEnv;
use common::bus::skip;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

struct Web {
    _env: TestEnv,
    served: web_env::Served,
}

/// A store where `nobody` is user `nob`, served with `extra` arguments after `before`.
fn start(what: &str, extra: &[&str], before: &str) -> Option<Web> {
    if !nix::unistd::getuid().is_root() {
        skip(what, "needs root to call as user nobody (runuser)");
        return None;
    }
    for tool in ["curl", "runuser", "dbus-daemon"] {
        if !common::bus::have(tool) {
            skip(what, &format!("{tool} is not installed"));
            return None;
        }
    }
    let env = TestEnv::initialised();
    env.ok(&[
        "add-user",
        "nob",
        "--name",
        "N",
        "--email",
        "n@x",
        "--unix-user",
        "nobody",
    ]);
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o750)).unwrap();
    let served = web_env::serve_with(&env.root, &env.home, env.dir.path(), extra, before);
    Some(Web { _env: env, served })
}

impl Web {
    /// `curl` over the Unix socket as `user` (None: root): (status, headers and body).
    fn curl(&self, user: Option<&str>, args: &[&str], path: &str) -> (u16, String) {
        let mut c = match user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--", "curl"]);
                c
            }
            None => Command::new("curl"),
        };
        c.args(["-sS", "-i", "--max-time", "10", "-w", "\n%{http_code}"])
            .args(args)
            .arg("--unix-socket")
            .arg(&self.served.sock)
            .arg(format!("http://localhost{path}"));
        let o = c.output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// A raw connection to the Unix socket (as this process, root), `sent` written.
    fn raw(&self, sent: &[u8]) -> UnixStream {
        let mut s = UnixStream::connect(&self.served.sock).unwrap();
        // A refused connection may be closed before this is written; its answer is read.
        let _ = s.write_all(sent);
        s
    }
}

/// What the server sends on `s` until it closes (or `limit`): (bytes, time to the close).
fn until_closed(s: &mut UnixStream, limit: Duration) -> (String, Duration) {
    let t0 = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server kept the connection open past {limit:?} ({e}); got {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    (String::from_utf8_lossy(&out).to_string(), t0.elapsed())
}

/// True when `s` is still open and silent (nothing to read, no end), read without taking.
fn still_held(s: &UnixStream) -> bool {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    matches!(
        recv(
            s.as_raw_fd(),
            &mut b,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT
        ),
        Err(nix::errno::Errno::EAGAIN)
    )
}

#[test]
fn one_account_holding_many_slow_connections_does_not_starve_another() {
    // The service's own descriptor limit as systemd's default (1024) would be for 1,100: here
    // 256 against 300, with the default bounds.
    let Some(w) = start("slow connections", &[], "ulimit -n 256;") else {
        return;
    };
    assert_eq!(w.curl(Some("nobody"), &[], "/api/v1/whoami").0, 200);
    let kinds: [&[u8]; 3] = [
        b"GET /api/v1/who",
        b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\nX-Dribbled: ab",
        b"POST /api/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{",
    ];
    // Connect without ever blocking on a full backlog (the server before the fix stopped
    // accepting): each connect is bounded.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut held = Vec::new();
    for i in 0..300 {
        let sock = w.served.sock.clone();
        let kind = kinds[i % kinds.len()];
        let s = rt.block_on(async move {
            let mut s = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::net::UnixStream::connect(&sock),
            )
            .await
            .ok()?
            .ok()?;
            // A refused connection may be closed before this is written: that is fine.
            let _ = tokio::io::AsyncWriteExt::write_all(&mut s, kind).await;
            s.into_std().ok()
        });
        match s {
            Some(s) => {
                s.set_nonblocking(false).unwrap();
                held.push(s)
            }
            None => break,
        }
    }
    // Another account is answered while the attacker's connections are open.
    let t0 = Instant::now();
    let (status, text) = w.curl(Some("nobody"), &[], "/api/v1/whoami");
    assert_eq!(
        status, 200,
        "nobody was not answered during the attack: {text}"
    );
    assert!(text.contains("\"nob\""), "{text}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "nobody waited {:?}",
        t0.elapsed()
    );
    // The attacker got its share and was told so for the rest: 503 at once.
    let mut refused = 0;
    let mut open = 0;
    for s in &mut held {
        if still_held(s) {
            open += 1;
        } else {
            let (got, _) = until_closed(s, Duration::from_secs(5));
            assert!(got.starts_with("HTTP/1.1 503 "), "{got:?}");
            assert!(got.contains("per-caller bound"), "{got:?}");
            refused += 1;
        }
    }
    assert!(open <= 64, "{open} of one account's connections held");
    assert_eq!(open + refused, 300, "every connection was answered or held");
    // Root (the attacker's own account) is refused while it holds its share; nobody is not.
    let mut again = w.raw(b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n");
    let (got, _) = until_closed(&mut again, Duration::from_secs(5));
    assert!(got.starts_with("HTTP/1.1 503 "), "{got:?}");
    assert!(got.contains("Retry-After: 1\r\n"), "{got:?}");
    assert_eq!(w.curl(Some("nobody"), &[], "/api/v1/whoami").0, 200);
    drop(held);
}

#[test]
fn slow_requests_are_cut_off_by_their_timeouts() {
    let Some(w) = start(
        "request timeouts",
        &[
            "--header-timeout",
            "1",
            "--body-timeout",
            "1",
            "--idle-timeout",
            "3",
            "--max-connections-per-caller",
            "4",
        ],
        "",
    ) else {
        return;
    };
    let bound = Duration::from_secs(6);
    // Half a request line: closed at the header deadline.
    let mut s = w.raw(b"GET /api/v1/who");
    let (_, took) = until_closed(&mut s, bound);
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // Headers dribbled a byte at a time: the deadline is for the whole head, not each byte.
    let mut s = w.raw(b"GET /api/v1/whoami HTTP/1.1\r\n");
    let t0 = Instant::now();
    s.set_write_timeout(Some(bound)).unwrap();
    let mut cut = false;
    for b in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if s.write_all(&[*b]).is_err() || !still_held(&s) {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        cut,
        "dribbled headers kept the connection {:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < bound, "{:?}", t0.elapsed());
    // A whole request, then silence on the kept-alive connection: answered, then closed.
    let mut s = w.raw(b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n");
    let (got, took) = until_closed(&mut s, bound);
    assert!(got.starts_with("HTTP/1.1 200 "), "{got:?}");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // A body that does not come: 408 at the body deadline.
    let mut s = w.raw(
        b"POST /api/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"comm",
    );
    let (got, _) = until_closed(&mut s, bound);
    assert!(got.starts_with("HTTP/1.1 408 "), "{got:?}");
    // The bound per caller: four held, the fifth refused at once, another account served.
    // Timed from before the first is opened: each one's 1 s deadline runs from its accept,
    // and opening four may itself take a while on a loaded machine. A connection the client
    // has seen closed (the 408 above) no longer counts: the server gives its share back
    // before it closes the socket. When the four were opened too late (the deadline passed
    // before the checks), they are closed, seen closed, and opened again.
    for attempt in 1.. {
        let held_since = Instant::now();
        let held: Vec<UnixStream> = (0..4).map(|_| w.raw(b"GET /")).collect();
        let mut fifth = w.raw(b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n");
        let (got, took) = until_closed(&mut fifth, bound);
        assert!(got.starts_with("HTTP/1.1 503 "), "{got:?}");
        assert!(took < Duration::from_millis(900), "{took:?}");
        // None of the four got a 503 (at any speed: a refusal is written at once).
        let refused = held.iter().filter(|h| refused_at_once(h)).count();
        assert_eq!(
            refused, 0,
            "a connection of the four was refused: one the client saw closed still counted (attempt {attempt})"
        );
        // The four are cut at their own header deadline (1 s), never by the others: still
        // held when this is reached before it. Too late to tell (a loaded machine): they are
        // closed, seen closed, and opened again.
        if held_since.elapsed() < Duration::from_millis(900) {
            assert!(
                held.iter().all(still_held),
                "a held connection was closed before its deadline (attempt {attempt})"
            );
        } else if attempt < 5 {
            for mut h in held {
                let _ = h.shutdown(std::net::Shutdown::Write);
                until_closed(&mut h, bound);
            }
            continue;
        } else {
            eprintln!("attempt {attempt}: the checks came after the deadline; not judged");
        }
        assert_eq!(w.curl(Some("nobody"), &[], "/api/v1/whoami").0, 200);
        break;
    }
}

/// True when the server answered `s` with 503 (a refusal, written at once) without waiting
/// for its request.
fn refused_at_once(s: &UnixStream) -> bool {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 12];
    matches!(
        recv(s.as_raw_fd(), &mut b, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
        Ok(12) if &b == b"HTTP/1.1 503"
    )
}

#[test]
fn a_method_a_path_does_not_answer_is_405_naming_the_ones_it_does() {
    let Some(w) = start("methods", &[], "") else {
        return;
    };
    for (path, allow) in [
        ("/api/v1/whoami", "GET, HEAD"),
        ("/api/v1/jobs", "GET, HEAD"),
        ("/api/v1/jobs/job-1", "GET, HEAD"),
        ("/api/v1/messages", "GET, HEAD, POST"),
        ("/api/v1/jobs/job-1/cancel", "POST"),
        ("/api/v1/events", "GET, HEAD"),
        ("/api/openapi.json", "GET, HEAD"),
        ("/", "GET, HEAD"),
        ("/jobs", "GET, HEAD"),
        ("/login", "GET, HEAD"),
        ("/jobs/job-1/cancel", "POST"),
    ] {
        for method in ["TRACE", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT"] {
            if allow.contains(method) {
                continue;
            }
            let (status, text) = w.curl(None, &["-X", method], path);
            assert_eq!(status, 405, "{method} {path}: {text}");
            let wanted = format!("allow: {}\r\n", allow.to_ascii_lowercase());
            assert!(
                text.to_ascii_lowercase().contains(&wanted),
                "{method} {path}: no {wanted:?} in {text}"
            );
        }
        if allow == "POST" {
            let (status, text) = w.curl(None, &[], path);
            assert_eq!(status, 405, "GET {path}: {text}");
        }
    }
    // A path that does not exist is 404 whatever the method.
    for method in ["GET", "TRACE", "POST"] {
        let (status, text) = w.curl(None, &["-X", method], "/api/v1/nothing");
        assert_eq!(status, 404, "{method}: {text}");
        let (status, text) = w.curl(None, &["-X", method], "/nothing/here");
        assert_eq!(status, 404, "{method}: {text}");
    }
}

/// `GET /login?token=…&next=<next>` over TCP: the Location it answers.
fn login_location(w: &Web, next: &str) -> String {
    let url = format!(
        "http://127.0.0.1:{}/login?token={}&next={next}",
        w.served.port, w.served.token
    );
    let o = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "--max-time",
            "10",
            "-w",
            "%{http_code} %header{location}",
        ])
        .arg(&url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let (code, location) = text.split_once(' ').unwrap_or((&text, ""));
    assert_eq!(code, "303", "{next}: {text}");
    location.to_string()
}

#[test]
fn login_sends_a_browser_only_to_a_path_on_this_server() {
    let Some(w) = start("login redirects", &[], "") else {
        return;
    };
    for (next, to) in [
        ("/jobs", "/jobs"),
        ("/jobs/job-1%3Fas%3Dnob", "/jobs/job-1?as=nob"),
        ("%2Fapprovals", "/approvals"),
    ] {
        assert_eq!(login_location(&w, next), to, "{next}");
    }
    // As sent in a URL: each decodes (once, by the server) to something a browser reads as
    // another host, or to what something decoding it again would.
    for next in [
        "/%09/evil.example/",
        "/%0A/evil.example/",
        "/%0D%0A/evil.example/",
        "%09//evil.example/",
        "//evil.example/",
        "%2F%2Fevil.example%2F",
        "/%5Cevil.example/",
        "%5C%5Cevil.example",
        "/%2F%2Fevil.example",
        "/%252F%252Fevil.example",
        "/%2509/evil.example",
        "/.//evil.example/",
        "/a/..//evil.example/",
        "https://evil.example/",
        "https:evil.example",
        "%20//evil.example",
        "/%E3%80%80/evil.example",
        "javascript:alert(1)",
        "evil.example",
    ] {
        assert_eq!(login_location(&w, next), "/", "{next}");
    }
}

#[test]
fn a_nul_in_a_request_does_not_cut_the_server_off_the_bus() {
    let Some(w) = start("NUL in requests", &[], "") else {
        return;
    };
    // A D-Bus string cannot hold a NUL and the bus daemon drops a connection that sends one:
    // before the fix one such request left the server answering 502 to everyone.
    for path in [
        "/api/v1/jobs?status=a%00b",
        "/api/v1/jobs?project=a%00b",
        "/api/v1/jobs/job%00x",
        "/jobs?queue=%00",
    ] {
        let (status, text) = w.curl(None, &[], path);
        assert!(status == 400 || status == 404, "{path}: {text}");
    }
    let (status, text) = w.curl(
        None,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            r#"{"allow": true, "message": "a\u0000b"}"#,
        ],
        "/api/v1/approvals/q/job-1-a1/answer",
    );
    assert_eq!(status, 400, "{text}");
    let (status, text) = w.curl(Some("nobody"), &[], "/api/v1/queues");
    assert_eq!(status, 200, "the server lost the bus: {text}");
}
