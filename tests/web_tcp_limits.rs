//! Issue 27 (round 2, item 4): TCP callers of agentstore-web shared one bucket. Every loopback
//! TCP connection counted as one caller, so any local account opening 64 half-sent requests
//! on 127.0.0.1 (no token needed for that) got the token holder's every request answered
//! `503` for as long as it held them. Now a connection counts in its account's share once a
//! request on it shows the token, and the token-less share gives way oldest first.
//!
//! Real parts: a private dbus-daemon, orchestratord and agentstore-web from the built binaries,
//! listeners passed as systemd passes them; the attacker is this process (no token), the token
//! holder curl and a raw kept-alive connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, web_env};

use common::TestEnv;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// Half a request line on a new loopback connection, or `None` when it could not connect
/// (every connect bounded: a full backlog never blocks the test).
fn slow_connection(port: u16) -> Option<TcpStream> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    // A connection closed before this is written is fine (its place was taken over).
    let _ = s.write_all(b"GET /api/v1/who");
    Some(s)
}

/// True when `s` is still open and silent.
fn still_held(s: &TcpStream) -> bool {
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

/// `GET /api/v1/whoami` over TCP with the token, by curl: (status, time taken).
fn whoami_with_token(served: &web_env::Served) -> (u16, Duration) {
    let t0 = Instant::now();
    let o = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "--max-time",
            "10",
            "-w",
            "%{http_code}",
        ])
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", served.token))
        .arg(format!("http://127.0.0.1:{}/api/v1/whoami", served.port))
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, t0.elapsed())
}

/// One whole answer read from a kept-alive connection: its status line.
fn request(s: &mut TcpStream, token: &str) -> String {
    s.write_all(
        format!("GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s
            .read(&mut buf)
            .expect("the answer, before the connection ends");
        assert!(n > 0, "closed; got {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .expect("Content-Length");
            if body.len() >= len {
                return head.lines().next().unwrap().to_string();
            }
        }
    }
}

#[test]
fn token_less_tcp_connections_do_not_starve_the_token_holder() {
    for tool in ["curl", "dbus-daemon"] {
        assert!(common::bus::have(tool), "{tool} is not installed");
    }
    let env = TestEnv::initialised();
    // A kept-alive connection waits up to the header timeout for its next request: room for
    // a loaded machine between its two requests.
    let served = web_env::serve_with(
        &env.root,
        &env.home,
        env.dir.path(),
        &["--header-timeout", "60"],
        "",
    );
    assert_eq!(whoami_with_token(&served).0, 200);

    // The token holder's kept-alive connection, then a flood of half-sent requests without
    // the token, five times the per-caller bound (64).
    let mut kept = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    assert!(request(&mut kept, &served.token).starts_with("HTTP/1.1 200 "));
    let mut flood: Vec<TcpStream> = (0..320)
        .map_while(|_| slow_connection(served.port))
        .collect();
    assert!(flood.len() >= 300, "only {} connections made", flood.len());

    // New requests with the token are answered at once while the flood is held...
    for i in 0..5 {
        let (code, took) = whoami_with_token(&served);
        assert_eq!(code, 200, "request {i} with the token during the flood");
        assert!(took < Duration::from_secs(5), "request {i} waited {took:?}");
    }
    // ... and so is the next request on the connection that showed the token before.
    assert!(request(&mut kept, &served.token).starts_with("HTTP/1.1 200 "));

    // The flood holds at most its share; the places it lost were closed, not kept.
    let held = flood.iter().filter(|s| still_held(s)).count();
    assert!(held <= 64, "{held} token-less connections held");
    assert!(held > 0, "the token-less share was not held at all");
    for s in flood.iter_mut().filter(|s| !still_held(s)) {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            rest.is_empty() || rest.starts_with("HTTP/1.1 "),
            "a closed connection got {rest:?}"
        );
    }
    // A request without the token on a new connection is still read and answered (401),
    // not refused: the oldest token-less place gave way.
    let o = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "--max-time",
            "10",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("http://127.0.0.1:{}/api/v1/whoami", served.port))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "401");
    drop(flood);
}
