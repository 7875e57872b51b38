//! `approvals [--follow N]`, `approve JOB REQ [--always]`, `deny JOB REQ [--reason …]`:
//! the approval requests of running jobs (issue 15), read from and answered through each
//! queue manager's `org.agentstore.Queue1` (`ListApprovals`, which shows each caller the
//! requests PRD §10 lets them see, `Answer`, and the id-only signals
//! `ApprovalRequested`/`ApprovalAnswered`).

use super::jobs::{BUS_LIMIT, connect, queue_call, runtime};
use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, open_store};
use crate::bus::queue::{PendingApproval, queue_proxy};
use crate::model::JobStatus;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::io::Write;
use std::time::Duration;

fn row_json(queue: &str, r: &PendingApproval) -> Value {
    let input: Value = serde_json::from_str(&r.4).unwrap_or_else(|_| Value::String(r.4.clone()));
    json!({"queue": queue, "job_id": r.0, "request_id": r.1, "tool": r.2,
           "summary": r.3, "input": input, "deadline": r.5})
}

/// `approvals`: every request waiting, in every queue whose manager answers; with
/// `--follow N`, then each request and answer as it happens, for N seconds.
pub(super) fn list(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let queues = store.queue_ids()?;
    let bus = g.first_bus();
    let rt = runtime()?;
    rt.block_on(async {
        let conn = tokio::time::timeout(BUS_LIMIT, connect(&bus))
            .await
            .map_err(|_| CliError::new(format!("the {bus} bus did not answer")))?
            .map_err(|e| CliError::new(format!("D-Bus ({bus} bus): {e}")))?;
        let mut rows = Vec::new();
        for q in &queues {
            let read = async { queue_proxy(&conn, q).await?.list_approvals().await };
            if let Ok(Ok(list)) = tokio::time::timeout(BUS_LIMIT, read).await {
                rows.extend(list.into_iter().map(|r| (q.clone(), r)));
            }
        }
        match g.format {
            Format::Json if g.follow.is_none() => {
                let v: Vec<Value> = rows.iter().map(|(q, r)| row_json(q, r)).collect();
                write_json(out, &Value::Array(v))?;
            }
            Format::Json => {
                for (q, r) in &rows {
                    let mut v = row_json(q, r);
                    v["event"] = json!("pending");
                    writeln!(out, "{v}")?;
                }
            }
            Format::Text if rows.is_empty() && g.follow.is_none() => {
                writeln!(out, "No approval requests waiting.")?
            }
            Format::Text => {
                let width = super::render::terminal_width();
                for (q, r) in &rows {
                    write_pending(out, q, r, width)?;
                }
            }
        }
        out.flush()?;
        if let Some(secs) = g.follow {
            follow(&conn, &queues, g.format, out, Duration::from_secs(secs)).await?;
        }
        Ok(())
    })
}

/// A waiting request as a person reads it, wrapped to `width`: which job asks what, until
/// when, and the two commands that answer it, with the request's short number (`a1`).
fn write_pending(
    out: &mut dyn Write,
    queue: &str,
    r: &PendingApproval,
    width: usize,
) -> std::io::Result<()> {
    let (job, req) = (&r.0, &r.1);
    let short = short_request_id(job, req);
    let summary = super::job_view::tool_and_summary(&r.2, &r.3);
    let lines = [
        (
            format!("Job {job} (queue {queue}) asks {short}: {summary}"),
            "",
        ),
        (format!("denied at {} if nobody answers", r.5), "  "),
        (
            format!("orchestrator approve {job} {short} [--always]"),
            "  ",
        ),
        (
            format!("orchestrator deny {job} {short} [--reason TEXT]"),
            "  ",
        ),
    ];
    for (text, indent) in lines {
        let w = width.saturating_sub(indent.len() + 2).max(20);
        for (i, l) in super::render::wrap(&text, w).iter().enumerate() {
            let pad = if i == 0 {
                indent.to_string()
            } else {
                format!("{indent}  ")
            };
            writeln!(out, "{pad}{l}")?;
        }
    }
    Ok(())
}

/// What `approve` takes for a request: `aN` when the id is `JOB-aN-<hex>` (the form workers
/// give), else the whole id.
pub fn short_request_id(job: &str, req: &str) -> String {
    let numbered = req
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix("-a"))
        .and_then(|r| r.split_once('-'))
        .filter(|(n, hex)| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
    match numbered {
        Some((n, _)) => format!("a{n}"),
        None => req.to_string(),
    }
}

/// Prints ApprovalRequested/ApprovalAnswered of every queue until `limit` passes.
async fn follow(
    conn: &zbus::Connection,
    queues: &[String],
    format: Format,
    out: &mut dyn Write,
    limit: Duration,
) -> CliResult {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface(crate::bus::QUEUE_INTERFACE)
        .build()
        .map_err(|e| CliError::new(e.to_string()))?;
    let mut stream =
        zbus::MessageStream::for_match_rule(rule, conn, std::num::NonZeroUsize::new(64))
            .await
            .map_err(|e| CliError::new(format!("cannot watch approvals: {e}")))?;
    let end = tokio::time::Instant::now() + limit;
    loop {
        let msg = match tokio::time::timeout_at(end, stream.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(_))) => continue,
            Ok(None) | Err(_) => return Ok(()),
        };
        let header = msg.header();
        let member = header.member().map(|m| m.to_string()).unwrap_or_default();
        let body = msg.body();
        let line = match member.as_str() {
            "ApprovalRequested" => {
                let Ok((_, req, _)) = body.deserialize::<(String, String, String)>() else {
                    continue;
                };
                // The signal names the request only: what it asks is read through the
                // manager, which shows this caller only what PRD §10 lets them see.
                let path = header.path().map(|p| p.to_string()).unwrap_or_default();
                let Some(q) = queues
                    .iter()
                    .find(|q| crate::bus::queue_object_path(q) == path)
                else {
                    continue;
                };
                let read = async { queue_proxy(conn, q).await?.list_approvals().await };
                let Ok(Ok(list)) = tokio::time::timeout(BUS_LIMIT, read).await else {
                    continue;
                };
                let Some(r) = list.into_iter().find(|r| r.1 == req) else {
                    continue;
                };
                match format {
                    Format::Json => {
                        let mut v = row_json(q, &r);
                        v["event"] = json!("requested");
                        v.to_string()
                    }
                    Format::Text => format!(
                        "requested: {job} {short}: {} — denied at {} if nobody answers \
                         (orchestrator approve|deny {job} {short})",
                        super::job_view::tool_and_summary(&r.2, &r.3),
                        r.5,
                        job = r.0,
                        short = short_request_id(&r.0, &r.1),
                    ),
                }
            }
            "ApprovalAnswered" => {
                let Ok((job, req)) = body.deserialize::<(String, String)>() else {
                    continue;
                };
                match format {
                    Format::Json => {
                        json!({"event": "answered", "job_id": job, "request_id": req}).to_string()
                    }
                    Format::Text => format!("answered: {job} {req}"),
                }
            }
            _ => continue,
        };
        writeln!(out, "{line}")?;
        out.flush()?;
    }
}

/// The full request id from what was typed: `3`, `a3` or `JOB-a3`.
pub fn request_id(job: &str, req: &str) -> String {
    if req.starts_with(&format!("{job}-a")) {
        req.to_string()
    } else if let Some(n) = req.strip_prefix('a').filter(|n| n.parse::<u64>().is_ok()) {
        format!("{job}-a{n}")
    } else if req.parse::<u64>().is_ok() {
        format!("{job}-a{req}")
    } else {
        req.to_string()
    }
}

/// The id of the waiting request `typed` names: itself, or the one it is the numbered
/// prefix of (`JOB-a3` of `JOB-a3-<random>`).
pub fn full_request_id<'a>(typed: &str, waiting: impl Iterator<Item = &'a str>) -> String {
    let prefix = format!("{typed}-");
    let mut found = None;
    for w in waiting {
        if w == typed {
            return typed.to_string();
        }
        if w.starts_with(&prefix) && w[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit()) {
            found = Some(w.to_string());
        }
    }
    found.unwrap_or_else(|| typed.to_string())
}

/// `approve JOB REQ [--always]` and `deny JOB REQ [--reason …]`.
pub(super) fn answer(
    g: &GlobalArgs,
    out: &mut dyn Write,
    job: &str,
    req: &str,
    allow: bool,
    always: bool,
    reason: &str,
) -> CliResult {
    let store = open_store(g)?;
    let loc = store.find_job(job)?;
    if loc.status != JobStatus::Running {
        return Err(CliError::new(format!(
            "job {job} is {}, not running: it has no approval requests waiting",
            loc.status.name()
        )));
    }
    let typed = request_id(job, req);
    let bus = g.first_bus();
    let rt = runtime()?;
    let id = rt.block_on(async {
        let call = async {
            let conn = connect(&bus).await?;
            let proxy = queue_proxy(&conn, &loc.queue).await?;
            // `3` and `a3` name the job's request number 3, whose id ends in random digits.
            let listed = proxy.list_approvals().await.unwrap_or_default();
            let id = full_request_id(&typed, listed.iter().map(|r| r.1.as_str()));
            proxy.answer(&id, allow, always, reason).await.map(|()| id)
        };
        queue_call(&loc.queue, &bus, call).await
    })?;
    let what = if allow { "Allowed" } else { "Denied" };
    match g.format {
        Format::Json => write_json(
            out,
            &json!({"job_id": job, "request_id": id, "queue": loc.queue, "allow": allow,
                    "always": always, "message": reason}),
        )?,
        Format::Text => {
            let text = answered_text(what, &id, job, always);
            for line in
                super::render::wrap_indented(&text, super::render::terminal_width(), "", "  ")
            {
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

/// What `approve`/`deny` print: the request as `approvals` names it (`a2`, not its 70
/// characters of id; `--format json` has the whole id) and the job.
fn answered_text(what: &str, id: &str, job: &str, always: bool) -> String {
    let short = id
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.split('-').next())
        .filter(|n| n.starts_with('a'))
        .unwrap_or(id);
    format!(
        "{what} request {short} of job {job}{}",
        if always {
            " (and the same tool for the rest of the job)"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::request_id;

    /// Issue 32: `deny` said "Denied request JOB-a2-<24 hex> of job JOB" (146 characters);
    /// it names the request as `approvals` does and fits 80 columns, the always note wrapped.
    #[test]
    fn an_answer_names_the_request_as_approvals_does() {
        let job = "3721e643-7d2c-5f13-9166-f3e587253c8f";
        let id = format!("{job}-a2-f0669d658ea0445cbc973cd4");
        let t = super::answered_text("Denied", &id, job, false);
        assert_eq!(t, format!("Denied request a2 of job {job}"));
        assert!(t.chars().count() <= 80, "{t}");
        let t = super::answered_text("Allowed", &id, job, true);
        for width in [80, 160] {
            let lines = crate::cli::render::wrap_indented(&t, width, "", "  ");
            assert!(
                lines.iter().all(|l| l.chars().count() <= width),
                "{lines:?}"
            );
            assert!(
                lines[0].starts_with("Allowed request a2 of job 3721e643-"),
                "{lines:?}"
            );
            let flat = lines
                .join(" ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            assert!(
                flat.contains("the same tool for the rest of the job"),
                "{lines:?}"
            );
        }
        // An id of another shape is shown whole.
        assert_eq!(
            super::answered_text("Denied", "odd", job, false),
            format!("Denied request odd of job {job}")
        );
    }

    /// Issue 32: the listing says how to answer, with the short number `approve` takes, and
    /// fits the terminal at 80 and 160 columns without cutting the job id or the command.
    #[test]
    fn a_waiting_request_shows_the_commands_that_answer_it() {
        let job = "6616efa1-757c-5a65-a357-ea5021de16c4";
        let r = (
            job.to_string(),
            format!("{job}-a1-09c7f8e5e00c43ebbeaa2f89"),
            "Bash".to_string(),
            "Bash: curl -s https://example.org/data.csv -o /home/rita/data.csv".to_string(),
            "{}".to_string(),
            "2026-12-02T07:34:21Z".to_string(),
        );
        for width in [80, 160] {
            let mut buf = Vec::new();
            super::write_pending(&mut buf, "poplar", &r, width).unwrap();
            let text = String::from_utf8(buf).unwrap();
            for l in text.lines() {
                assert!(l.chars().count() <= width, "{width}: {l:?}\n{text}");
            }
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for want in [
                format!("orchestrator approve {job} a1 [--always]"),
                format!("orchestrator deny {job} a1 [--reason TEXT]"),
                "asks a1: Bash: curl -s https://example.org/data.csv".to_string(),
                "denied at 2026-12-02T07:34:21Z if nobody answers".to_string(),
            ] {
                assert!(flat.contains(&want), "{width}: {want:?} missing:\n{text}");
            }
            assert!(!flat.contains("Bash Bash"), "{text}");
        }
    }

    #[test]
    fn request_ids_may_be_typed_short() {
        assert_eq!(request_id("j1", "3"), "j1-a3");
        assert_eq!(request_id("j1", "a3"), "j1-a3");
        assert_eq!(request_id("j1", "j1-a3"), "j1-a3");
        assert_eq!(request_id("j1", "other"), "other");
        assert_eq!(super::short_request_id("j1", "j1-a3-00ff"), "a3");
        assert_eq!(super::short_request_id("j1", "j1-a31-abcd"), "a31");
        assert_eq!(super::short_request_id("j1", "j1-a3"), "j1-a3");
        assert_eq!(
            super::short_request_id("j1", "other-a3-00ff"),
            "other-a3-00ff"
        );
        assert_eq!(super::short_request_id("j1", "j1-ax-00ff"), "j1-ax-00ff");
        let waiting = ["j1-a3-00ff", "j1-a31-abcd"];
        assert_eq!(
            super::full_request_id("j1-a3", waiting.iter().copied()),
            "j1-a3-00ff"
        );
        assert_eq!(
            super::full_request_id("j1-a31-abcd", waiting.iter().copied()),
            "j1-a31-abcd"
        );
        assert_eq!(
            super::full_request_id("j1-a4", waiting.iter().copied()),
            "j1-a4"
        );
    }
}
