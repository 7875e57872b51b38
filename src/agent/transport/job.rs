//! The `ask()` of an agentshell JOB: the job worker's approval channel.
//!
//! `agent-worker` listens, for the life of one job, on a private abstract Unix socket (only the
//! job's account may connect) and runs `agentshell exec --approvals NAME --approval-deadline
//! SECS`. Each tool call the policy would ASK about is sent there, one JSON line
//! `{"tool": …, "input": …}`, and the worker answers one line `{"allow": bool, "message": …}`:
//! by the job's `always` rules, the queue's rules or default, or a person answering over
//! D-Bus, and a deny at the queue's deadline. The worker records every decision on the job.
//!
//! The wire format is defined here, once: the worker (which may use `agent/`, never the other
//! way round) serves it with [`Request`] and [`Verdict`] and its MCP server for Claude Code
//! asks with [`request`]. A free-text question (`ask_user`, the iteration budget) has no
//! answer on this channel: nobody types text into a job, so it stays unavailable.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::tools::{Ask, AskAnswer, BoxFuture, Confirmation};

/// Seconds the client waits beyond the worker's deadline before it gives up on its own (the
/// worker denies at the deadline; this only covers a worker that died).
pub const GRACE_SECONDS: u64 = 10;

/// One request line: the tool and its input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The tool (`run_command`, Claude Code's `Write`, …).
    pub tool: String,
    /// Its input (the parsed arguments).
    #[serde(default)]
    pub input: Value,
}

/// The answer line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Allowed or denied.
    pub allow: bool,
    /// Why (the agent sees it on a deny).
    #[serde(default)]
    pub message: String,
}

impl Verdict {
    /// A deny with its reason.
    pub fn deny(message: impl Into<String>) -> Verdict {
        Verdict {
            allow: false,
            message: message.into(),
        }
    }
}

/// Asks the worker listening on the abstract socket `socket` about one tool use, waiting at
/// most `limit`; any failure is a deny naming it (an agent never hangs on a dead worker).
pub fn request(socket: &str, tool: &str, input: &Value, limit: Duration) -> Verdict {
    let conn = SocketAddr::from_abstract_name(socket.as_bytes())
        .and_then(|a| UnixStream::connect_addr(&a));
    let conn = match conn {
        Ok(c) => c,
        Err(e) => return Verdict::deny(format!("the approval channel is not there: {e}")),
    };
    let _ = conn.set_read_timeout(Some(limit.max(Duration::from_millis(1))));
    let req = Request {
        tool: tool.to_string(),
        input: input.clone(),
    };
    let mut line = match serde_json::to_vec(&req) {
        Ok(l) => l,
        Err(e) => return Verdict::deny(format!("the approval request cannot be written: {e}")),
    };
    line.push(b'\n');
    let mut w = &conn;
    if let Err(e) = w.write_all(&line) {
        return Verdict::deny(format!("the approval channel failed: {e}"));
    }
    let mut reply = String::new();
    match BufReader::new(&conn).read_line(&mut reply) {
        Ok(n) if n > 0 => serde_json::from_str(reply.trim()).unwrap_or_else(|e| {
            Verdict::deny(format!("the approval channel answered nonsense: {e}"))
        }),
        Ok(_) => Verdict::deny("the approval channel closed without an answer"),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Verdict::deny(format!("no answer within {} s: denied", limit.as_secs()))
        }
        Err(e) => Verdict::deny(format!("the approval channel failed: {e}")),
    }
}

/// The `ask()` of a job: confirmations go to the worker's channel, questions are unavailable.
#[derive(Debug, Clone)]
pub struct JobAsk {
    socket: String,
    limit: Duration,
}

impl JobAsk {
    /// Asks the worker on the abstract socket `socket`, whose requests are denied after
    /// `deadline_secs` (the client waits [`GRACE_SECONDS`] more).
    pub fn new(socket: String, deadline_secs: u64) -> JobAsk {
        JobAsk {
            socket,
            limit: Duration::from_secs(deadline_secs.saturating_add(GRACE_SECONDS)),
        }
    }
}

impl Ask for JobAsk {
    fn ask<'a>(&'a self, _question: &'a str, _options: &'a [&'a str]) -> BoxFuture<'a, AskAnswer> {
        Box::pin(async {
            AskAnswer::Unavailable(
                "unattended job: a question needs a typed answer, and the job's approval \
                 channel only allows or denies tool calls"
                    .to_string(),
            )
        })
    }

    fn confirm<'a>(&'a self, request: &'a Confirmation<'a>) -> BoxFuture<'a, AskAnswer> {
        let socket = self.socket.clone();
        let limit = self.limit;
        let tool = request.tool.to_string();
        let input = request.input.clone();
        Box::pin(async move {
            let asked =
                tokio::task::spawn_blocking(move || self::request(&socket, &tool, &input, limit))
                    .await;
            match asked {
                Ok(v) if v.allow => AskAnswer::Answer("yes".to_string()),
                Ok(v) if v.message.is_empty() => {
                    AskAnswer::Denied("denied by the job's approval channel".to_string())
                }
                Ok(v) => AskAnswer::Denied(v.message),
                Err(e) => AskAnswer::Denied(format!("the approval request failed: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    fn listener() -> (String, UnixListener) {
        let name = format!("agentshell-test-{}", uuid::Uuid::new_v4().simple());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        (name, UnixListener::bind_addr(&addr).unwrap())
    }

    #[test]
    fn a_missing_channel_is_a_deny_naming_it() {
        let v = request(
            "agentshell-test-nobody-listens",
            "run_command",
            &json!({}),
            Duration::from_secs(5),
        );
        assert!(!v.allow);
        assert!(v.message.contains("approval channel is not there"), "{v:?}");
    }

    #[test]
    fn a_silent_channel_is_a_deny_at_the_limit_not_a_hang() {
        let (name, l) = listener();
        let t = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_secs(2));
            drop(c);
        });
        let started = Instant::now();
        let v = request(
            &name,
            "run_command",
            &json!({"command": "ls"}),
            Duration::from_millis(300),
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(!v.allow);
        assert!(v.message.contains("no answer within"), "{v:?}");
        t.join().unwrap();
    }

    #[test]
    fn the_worker_sees_one_request_line_and_its_answer_comes_back() {
        let (name, l) = listener();
        let t = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&c).read_line(&mut line).unwrap();
            let mut w = &c;
            w.write_all(b"{\"allow\":false,\"message\":\"not today\"}\n")
                .unwrap();
            serde_json::from_str::<Request>(line.trim()).unwrap()
        });
        let asker = JobAsk::new(name, 5);
        let input = json!({"command": "touch x"});
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answer = rt.block_on(asker.confirm(&Confirmation {
            tool: "run_command",
            input: &input,
            question: "Run `touch x`?",
            options: &["yes", "no"],
        }));
        assert_eq!(answer, AskAnswer::Denied("not today".into()));
        let got = t.join().unwrap();
        assert_eq!(
            got,
            Request {
                tool: "run_command".into(),
                input
            }
        );
        // A typed question has no answer on this channel.
        let free = rt.block_on(asker.ask("Which branch?", &[]));
        assert!(matches!(free, AskAnswer::Unavailable(_)), "{free:?}");
    }
}
