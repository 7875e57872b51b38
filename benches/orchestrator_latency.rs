//! Benchmark (issue 3): inbox file written → outbox answer present, p50/p99 over 1,000
//! messages, with inotify (this design) and with the PRD's 10 s polling (same daemon,
//! `--no-inotify --sweep-interval 10`, fewer samples); D-Bus Submit round trip for a direct
//! command; daemon RSS idle and after the run.
//!
//! Run: `cargo bench --bench orchestrator_latency` (needs dbus-daemon).
//! `BENCH_MESSAGES` (default 1000) and `BENCH_POLL_MESSAGES` (default 12) change the counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Bus(Child, String);

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bus() -> Bus {
    let mut c = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    Bus(c, line.trim().to_string())
}

fn daemon(bus: &Bus, root: &Path, extra: &[&str]) -> Child {
    let c = Command::new(env!("CARGO_BIN_EXE_orchestratord"))
        .args(["--bus", "session", "--idle-exit", "0", "--root"])
        .arg(root)
        .args(extra)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.1)
        .env("RUST_LOG", "error")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !root.join(".orchestrator.lock").exists() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    c
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn message(id: &str) -> String {
    format!(
        r#"{{"correlation_id":"{id}","source":"user","project":null,"queue_time":"2025-10-25T10:00:00Z","processed_time":null,"command":"list-queues","content":{{}},"status":"queued","error":null}}"#
    )
}

/// Writes each message atomically (temp + rename, as the CLI and Dropbox do) and waits for
/// its answer; returns the latencies.
fn inbox_latencies(root: &Path, prefix: &str, n: usize, spacing: Duration) -> Vec<Duration> {
    let inbox = root.join("messaging/inbox");
    let outbox = root.join("messaging/outbox");
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("{prefix}-{i:05}");
        let tmp = inbox.join(format!(".{id}.tmp"));
        std::fs::write(&tmp, message(&id)).unwrap();
        let answer: PathBuf = outbox.join(format!("{id}.json"));
        let t0 = Instant::now();
        std::fs::rename(&tmp, inbox.join(format!("{id}.json"))).unwrap();
        while !answer.exists() {
            std::thread::sleep(Duration::from_micros(100));
            assert!(t0.elapsed() < Duration::from_secs(60), "no answer for {id}");
        }
        out.push(t0.elapsed());
        std::thread::sleep(spacing);
    }
    out
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let np: usize = std::env::var("BENCH_POLL_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    agentstore::store::Store::init(&root).unwrap();
    let b = bus();

    let mut d = daemon(&b, &root, &[]);
    let idle = rss_kib(d.id());
    let mut inotify = inbox_latencies(&root, "ino", n, Duration::ZERO);
    let after = rss_kib(d.id());

    // D-Bus round trip: busctl would measure its own start-up; use zbus in-process.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut dbus: Vec<Duration> = rt.block_on(async {
        let conn = zbus::connection::Builder::address(b.1.as_str())
            .build()
            .await
            .unwrap();
        let p = agentstore::bus::orchestrator::Orchestrator1Proxy::new(&conn)
            .await
            .unwrap();
        let mut v = Vec::new();
        for _ in 0..n {
            let t0 = Instant::now();
            p.submit(r#"{"command":"help"}"#).await.unwrap();
            v.push(t0.elapsed());
        }
        v
    });
    d.kill().unwrap();
    d.wait().unwrap();

    // The PRD's design: a sweep every 10 s. Messages arrive at arbitrary times relative to
    // the sweep (spaced by an odd interval so they land all over the cycle).
    let mut d = daemon(&b, &root, &["--no-inotify", "--sweep-interval", "10"]);
    let mut poll = inbox_latencies(&root, "poll", np, Duration::from_millis(3_300));
    d.kill().unwrap();
    d.wait().unwrap();

    println!(
        "orchestratord latency ({} CPUs)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!("| path | samples | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (name, v) in [
        (
            "inbox file → outbox answer, inotify (this design)",
            &mut inotify,
        ),
        (
            "inbox file → outbox answer, 10 s polling (PRD design)",
            &mut poll,
        ),
        ("D-Bus Submit round trip, direct command `help`", &mut dbus),
    ] {
        let max = *v.iter().max().unwrap();
        println!(
            "| {name} | {} | {} | {} | {} |",
            v.len(),
            ms(pct(v, 0.5)),
            ms(pct(v, 0.99)),
            ms(max)
        );
    }
    println!("orchestratord RSS: idle {idle} KiB, after {n} inbox messages {after} KiB");
}
