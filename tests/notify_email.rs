//! E-mail notices against a REAL SMTP server (issue 31): aiosmtpd (Debian's
//! python3-aiosmtpd, installed by .ci/run; `tests/support/smtp_sink.py`) on loopback, plain
//! SMTP. The notifier's message has the headers and the body it should; a recipient the
//! server refuses for good is recorded undeliverable and the others go on; a server down
//! while notices pile up gets the backlog, each once, in order, when it is back on its port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::bus::skip;
use crate::harness::KillOnDrop;
use crate::wait::wait_until;
use agentstore::store::Store;
use agentstore::store::notices::{Notice, NoticeKind};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const PYTHON: &str = "/usr/bin/python3";

/// The aiosmtpd server, killed on drop.
struct Smtp {
    child: std::process::Child,
    port: u16,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server on `port` (0: any), appending what it accepts to `out`.
fn smtp(out: &Path, port: u16) -> Smtp {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/smtp_sink.py");
    let mut child = Command::new(PYTHON)
        .arg(script)
        .arg(out)
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .strip_prefix("listening ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the SMTP server did not start: {line:?}"));
    Smtp { child, port }
}

fn mails(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn emit(store: &Store, i: usize, user: &str) {
    let id = format!("job-{i:03}");
    let mut n = Notice::new(
        NoticeKind::JobFailed,
        &format!("q1/{id}"),
        Some(user),
        &format!("Job {id} failed"),
    )
    .job("q1", &id)
    .body("the agent gave up");
    n.error = Some(format!("exit 1 (run {i})"));
    n.cost_usd = Some(1.5);
    assert!(store.emit_notice(&n).unwrap());
}

fn notifier(dir: &Path, root: &Path, log: &Path) -> KillOnDrop {
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_agentstore-notify"))
            .arg("--root")
            .arg(root)
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env("HOME", dir)
            .env("RUST_LOG", "info")
            .env_remove("AGENTSTORE_MODE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn email_reaches_a_real_smtp_server_and_a_backlog_arrives_in_order_after_an_outage() {
    if !Path::new(PYTHON).exists()
        || !Command::new(PYTHON)
            .args(["-c", "import aiosmtpd"])
            .status()
            .is_ok_and(|s| s.success())
    {
        skip("e-mail notices", "python3-aiosmtpd is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().join("AgentStore");
    let (store, _) = Store::init(&root).unwrap();
    for (id, email) in [
        ("alice", "alice@example.org"),
        ("rita", "refused.rita@example.org"),
    ] {
        std::fs::write(
            store.user_path(id),
            json!({"id": id, "name": format!("{id} Example"), "email": email,
                   "permissions": "user", "notify": {"sinks": ["email"]}})
            .to_string(),
        )
        .unwrap();
    }
    let out = dir.path().join("mail.jsonl");
    let server = smtp(&out, 0);
    let port = server.port;
    std::fs::create_dir_all(dir.path().join("xdg/agentstore")).unwrap();
    std::fs::write(
        dir.path().join("xdg/agentstore/config.yaml"),
        format!(
            "notify:\n  poll_interval_ms: 200\n  retry: {{first_backoff_ms: 50, max_backoff_ms: 400}}\n  email:\n    smtp_host: 127.0.0.1\n    smtp_port: {port}\n    security: none\n    from: \"agentstore <agentstore@example.org>\"\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("notifier.log");
    let n = notifier(dir.path(), &root, &log);

    // One notice: its headers and body as the server received them.
    emit(&store, 0, "alice");
    emit(&store, 1, "rita");
    wait_until(LIMIT, "the first mail", || !mails(&out).is_empty());
    let m = &mails(&out)[0];
    assert_eq!(m["from"], "agentstore@example.org");
    assert_eq!(m["to"], json!(["alice@example.org"]));
    let data = m["data"].as_str().unwrap().replace("\r\n", "\n");
    let (head, body) = data.split_once("\n\n").unwrap();
    for h in [
        "From: agentstore <agentstore@example.org>",
        "To: alice@example.org",
        "Subject: [agentstore] Job job-000 failed",
        "Content-Type: text/plain; charset=utf-8",
    ] {
        assert!(head.lines().any(|l| l == h), "header {h:?} in:\n{head}");
    }
    assert!(head.lines().any(|l| l.starts_with("Date: ")), "{head}");
    assert!(
        head.lines().any(|l| l.starts_with("Message-ID: ")),
        "{head}"
    );
    for part in [
        "Job job-000 failed",
        "the agent gave up",
        "job job-000 (queue q1)",
        "error: exit 1 (run 0)",
        "cost: $1.5000",
    ] {
        assert!(body.contains(part), "{part:?} in the body:\n{body}");
    }
    // rita's address is refused for good (550): recorded, not retried, not blocking alice.
    wait_until(LIMIT, "rita's refusal recorded", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("550"))
    });

    // The server goes down; ten notices pile up; it comes back on its port.
    drop(server);
    for i in 2..12 {
        emit(&store, i, "alice");
    }
    wait_until(LIMIT, "a failed attempt while down", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("tried again later"))
    });
    let _server = smtp(&out, port);
    wait_until(LIMIT, "the backlog delivered", || mails(&out).len() >= 11);
    drop(n);
    let subjects: Vec<String> = mails(&out)
        .iter()
        .map(|m| {
            let d = m["data"].as_str().unwrap().replace("\r\n", "\n");
            d.lines()
                .find_map(|l| l.strip_prefix("Subject: [agentstore] Job "))
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<String> = [0]
        .into_iter()
        .chain(2..12)
        .map(|i| format!("job-{i:03}"))
        .collect();
    assert_eq!(subjects, want, "each once, in order");
    assert!(
        mails(&out)
            .iter()
            .all(|m| m["to"] == json!(["alice@example.org"]))
    );
    // The records say the same: 11 sent, rita's undeliverable with the server's words.
    let o = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["notifications", "--failed", "--format", "json", "--root"])
        .arg(&root)
        .args(["--bus", "none"])
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .env_remove("AGENTSTORE_MODE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["notifications"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["sink"], "email");
    assert_eq!(rows[0]["state"], "undeliverable");
    assert!(
        rows[0]["error"].as_str().unwrap().contains("550"),
        "{}",
        rows[0]
    );
}
