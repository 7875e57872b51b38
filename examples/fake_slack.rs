//! A standalone fake Slack (the Web API and Socket Mode of the tests' `fake_chat.rs` and
//! `fake_slack_socket.rs`, the same code), for the real-systemd suite: the packaged
//! `agentstore-notify` inside the container posts to it and holds its Socket Mode connection
//! (`tests/system/t_approvals.sh`).
//!
//! ```text
//! cargo run --example fake_slack -- --dir /var/tmp/slack --bot-token xoxb-… --app-token xapp-…
//! ```
//!
//! Driven through files in `--dir`: `base` holds the Web API's base URL (written once it
//! listens; `api_url` is `<base>/api`); each `send/*.json` (an envelope, e.g. a button click
//! or a slash command as Slack sends them) is pushed on the live socket and removed; and
//! `state.json` is rewritten every 100 ms with what arrived: the socket connections, the
//! messages (channel, text, ts, metadata, blocks, updates, thread), the acks and the
//! ephemeral replies. It runs until killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The tests' fakes, of which this example uses a part.
#[allow(dead_code)]
#[path = "../tests/support/fake_chat.rs"]
mod fake_chat;
#[allow(dead_code)]
#[path = "../tests/support/fake_slack_socket.rs"]
mod fake_slack_socket;
#[allow(dead_code)]
#[path = "../tests/support/wait.rs"]
mod wait;

use anyhow::Context;
use clap::Parser;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(about = "Fake Slack (Web API and Socket Mode) driven by files in a folder")]
struct Args {
    /// The folder of `base`, `send/` and `state.json`.
    #[arg(long)]
    dir: PathBuf,
    /// The bot token (`xoxb-…`) the Web API takes.
    #[arg(long)]
    bot_token: String,
    /// The app-level token (`xapp-…`) `apps.connections.open` takes.
    #[arg(long)]
    app_token: String,
}

/// Writes `text` to `path` whole (a reader never sees half of it).
fn put(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| tmp.display().to_string())?;
    std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
    Ok(())
}

/// What the fake saw, as JSON.
fn state(chat: &fake_chat::FakeChat) -> Value {
    chat.with(|s| {
        let messages: Vec<Value> = s
            .slack
            .iter()
            .map(|m| {
                json!({"channel": m.channel, "text": m.text, "ts": m.ts, "metadata": m.metadata,
                       "blocks": m.blocks, "updates": m.updates, "thread_ts": m.thread_ts})
            })
            .collect();
        json!({"connections": s.socket.connections, "connected": s.socket.connections > 0,
               "messages": messages, "acks": s.socket.acks, "ephemeral": s.socket.ephemeral})
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let send = args.dir.join("send");
    std::fs::create_dir_all(&send).with_context(|| send.display().to_string())?;
    let chat = fake_chat::FakeChat::start(&args.bot_token, "unused-webhook-secret");
    chat.enable_socket_mode(&args.app_token);
    put(&args.dir.join("base"), &chat.base)?;
    println!("listening {}", chat.base);
    loop {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&send)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        let live = chat.with(|s| s.socket.connections > 0);
        for p in names.into_iter().filter(|_| live) {
            let text = std::fs::read_to_string(&p).with_context(|| p.display().to_string())?;
            let envelope: Value =
                serde_json::from_str(&text).with_context(|| p.display().to_string())?;
            chat.socket_send(&envelope);
            std::fs::remove_file(&p)?;
        }
        put(&args.dir.join("state.json"), &state(&chat).to_string())?;
        std::thread::sleep(Duration::from_millis(100));
    }
}
