//! A standalone fake Anthropic Messages API server (the same code the tests use), for the
//! real-systemd suite: the container shares the host network, so a `claude` inside it can
//! use `ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`.
//!
//! ```text
//! cargo run --example fake_anthropic -- --listen 127.0.0.1:18555 --script script.json --log requests.jsonl
//! ```
//!
//! `script.json` is a `Script`, e.g.
//! `{"replies":[{"tool_use":{"name":"Bash","input":{"command":"echo hi"}}},{"text":"Done"}]}`
//! (reply kinds: `text`, `tool_use` {name, input, text?}, `error` {status, error_type?,
//! message}, `hang`; options `fallback_text`, `answer_toolless_with_fallback`).
//! The first stdout line is `listening http://ADDR`; every request is then written as one
//! JSON line to `--log` (default: stdout). It runs until killed.

// The tests' fake model server, of which this example uses a part.
#[allow(dead_code)]
#[path = "../tests/support/fake_model.rs"]
mod fake_model;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::Context;
use clap::Parser;
use fake_model::{FakeModel, Observer, RecordedRequest, Script};

#[derive(Parser)]
#[command(about = "Fake Anthropic Messages API server driven by a JSON script")]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Script file (JSON). Without it every request gets the fallback text.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Append one JSON line per request here instead of stdout.
    #[arg(long)]
    log: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let script: Script = match &args.script {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => Script::default(),
    };
    let sink: Box<dyn Write + Send> = match &args.log {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    let sink = Mutex::new(sink);
    let observer: Observer = Box::new(move |r: &RecordedRequest| {
        let mut out = sink.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(line) = serde_json::to_string(r) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    });
    let server = FakeModel::start_on(args.listen, script, Some(observer))
        .with_context(|| format!("listening on {}", args.listen))?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening {}", server.base_url())?;
    stdout.flush()?;
    server.wait();
    Ok(())
}
