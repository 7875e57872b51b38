//! `view-job` as a person reads it: a status line, the times and what they add up to, what
//! the run cost, the task and the result in full, the error, the approvals decided — wrapped
//! to the terminal, never cut. `--format json` keeps the document itself.

use super::render::{terminal_width, wrap};
use crate::model::flow::priority_name;
use crate::model::{Job, JobStatus, Timestamp};
use std::io::{self, Write};

/// Writes `job` (whose id is `id`) for reading at `width` columns; `hostname` is the name of
/// the machine `runtime.host` keys (m-…), when known.
pub fn write_job(
    out: &mut dyn Write,
    id: &str,
    job: &Job,
    width: usize,
    hostname: Option<&str>,
) -> io::Result<()> {
    let c = &job.config;
    let r = &job.runtime;
    let what = match c.jobtype {
        crate::model::JobType::Claude => format!("claude /{}", c.claude_command),
        crate::model::JobType::Codex if !c.claude_command.is_empty() => {
            format!("codex {}", c.claude_command)
        }
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "job".into()),
    };
    let queue = c.queue.as_deref().unwrap_or("-");
    let head = format!(
        "Job {id}  {}  ({what} on queue {queue}, project {})",
        r.status.name(),
        c.project
    );
    for l in wrap(&head, width) {
        writeln!(out, "{l}")?;
    }
    let label = |out: &mut dyn Write, k: &str, v: &str| -> io::Result<()> {
        for (i, line) in wrap(v, width.saturating_sub(12).max(20)).iter().enumerate() {
            let k = if i == 0 { k } else { "" };
            writeln!(out, "{k:<10}  {line}")?;
        }
        Ok(())
    };
    label(out, "Queued", &when(&c.queue_time))?;
    if let Some(t) = &r.start_time {
        label(
            out,
            "Started",
            &format!("{}  (waited {})", when(t), span(&c.queue_time, t)),
        )?;
    }
    if let Some(t) = &r.finish_time {
        let from = r.start_time.as_ref().unwrap_or(&c.queue_time);
        label(
            out,
            "Ended",
            &format!("{}  (ran {})", when(t), span(from, t)),
        )?;
    }
    let mut facts = Vec::new();
    match (&r.host, hostname) {
        (Some(h), Some(name)) => facts.push(format!("host {name} ({h})")),
        (Some(h), None) => facts.push(format!("host {h}")),
        _ => {}
    }
    if let Some(u) = &r.unit {
        facts.push(format!("unit {u}"));
    }
    if let Some(s) = &r.slurm_job_id {
        facts.push(format!("slurm job {s}"));
    }
    if !facts.is_empty() {
        label(out, "Where", &facts.join(", "))?;
    }
    let mut run = Vec::new();
    if let Some(cost) = r.cost_usd {
        run.push(format!("${cost:.4}"));
    }
    if let Some(u) = &r.usage {
        run.push(format!(
            "{} tokens in, {} out",
            u.input_tokens, u.output_tokens
        ));
    }
    if let Some(n) = r.num_turns {
        run.push(format!("{n} turn{}", if n == 1 { "" } else { "s" }));
    }
    if let Some(code) = r.exit_code {
        run.push(format!("exit {code}"));
    }
    if let Some(s) = &r.session_id {
        run.push(format!("session {s}"));
    }
    if !run.is_empty() {
        label(out, "Run", &run.join(", "))?;
    }
    let mut settings = vec![format!("priority {}", priority_name(c.priority))];
    if let Some(t) = c.timeout_seconds {
        settings.push(format!("timeout {t} s"));
    }
    if let Some(a) = c.attempt {
        settings.push(format!("attempt {a}"));
    }
    if let Some(p) = &c.prd {
        settings.push(format!("PRD {p}"));
    }
    if let Some(after) = c.after.as_ref().filter(|a| !a.is_empty()) {
        settings.push(format!("after {}", after.join(", ")));
    }
    label(out, "Settings", &settings.join(", "))?;
    label(out, "Directory", &c.working_directory)?;
    // Said before the task and the result: what the job was meant to have and did not get.
    for w in &r.warnings {
        section(out, "Warning", w, width)?;
    }
    section(out, "Task", &c.task_description, width)?;
    if let Some(e) = &r.error {
        section(out, "Error", e, width)?;
    }
    match &r.output {
        // A failed agent's result is often its error message, which Error already shows
        // whole ("Claude exited with code 1: <the result>"): said once.
        Some(_)
            if r.error.as_deref().is_some_and(|e| {
                let result = job.result_text();
                !result.trim().is_empty() && e.contains(result.trim())
            }) =>
        {
            section(out, "Result", "(the error above)", width)?
        }
        Some(_) => section(out, "Result", &job.result_text(), width)?,
        None => {
            let why = match r.status {
                JobStatus::Queued => "(not started yet)".to_string(),
                JobStatus::Running => "(still running; its log, as it goes:)".to_string(),
                JobStatus::Finished | JobStatus::Failed => "(the job left no output)".to_string(),
            };
            section(out, "Result", &why, width)?;
            if r.status == JobStatus::Running {
                // A command is printed whole on its own line, to paste (never wrapped).
                writeln!(out, "    orchestrator logs {id} --follow 600")?;
            }
        }
    }
    if let Some(sb) = &r.sandbox {
        writeln!(out)?;
        writeln!(out, "Sandbox")?;
        // What this job's sandbox allowed, and what it refused; the explanation of how
        // refusals are recorded (the same for every job) is left to --format json.
        let allowed: Vec<&str> = sb
            .split("; ")
            .filter(|c| !c.starts_with("sockets:") && !c.starts_with("files outside"))
            .collect();
        let refused: Vec<String> = if r.sandbox_refused.is_empty() {
            vec!["nothing refused".to_string()]
        } else {
            r.sandbox_refused
                .iter()
                .map(|l| format!("refused: {l}"))
                .collect()
        };
        for line in std::iter::once(allowed.join("; ")).chain(refused) {
            for (i, l) in wrap(&line, width.saturating_sub(4).max(20))
                .iter()
                .enumerate()
            {
                writeln!(out, "{}{l}", if i == 0 { "  " } else { "    " })?;
            }
        }
    }
    if !r.approvals.is_empty() {
        writeln!(out)?;
        writeln!(out, "Approvals")?;
        for a in &r.approvals {
            let verdict = if a.allow { "allowed" } else { "denied" };
            let always = if a.always { " (always)" } else { "" };
            let mut line = format!(
                "{} {verdict}{always} by {} at {}: {}",
                // `a1`, as `approvals` names it (the whole id is in --format json).
                super::approvals::short_request_id(id, &a.request_id),
                a.by,
                when(&a.at),
                tool_and_summary(&a.tool, &a.summary)
            );
            if let Some(m) = &a.message {
                line.push_str(&format!(" — {m}"));
            }
            for (i, l) in wrap(&line, width.saturating_sub(4).max(20))
                .iter()
                .enumerate()
            {
                writeln!(out, "{}{l}", if i == 0 { "  " } else { "    " })?;
            }
        }
    }
    writeln!(out)?;
    // The commands whole, each on its own line to paste (never wrapped).
    writeln!(out, "--format json shows every field. The job's log:")?;
    writeln!(out, "  orchestrator logs {id}")?;
    writeln!(out, "  journalctl JOB_ID={id}")?;
    Ok(())
}

/// Writes a titled block, its text wrapped and indented by two.
fn section(out: &mut dyn Write, title: &str, text: &str, width: usize) -> io::Result<()> {
    writeln!(out)?;
    writeln!(out, "{title}")?;
    let text = if text.trim().is_empty() {
        "(empty)"
    } else {
        text
    };
    for l in wrap(text, width.saturating_sub(2).max(20)) {
        writeln!(out, "  {l}")?;
    }
    Ok(())
}

/// `2026-12-01 21:00:05 UTC`.
fn when(t: &Timestamp) -> String {
    t.0.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// The time from `a` to `b`, for people (`3 s`, `2 min 5 s`, `1 h 4 min`).
fn span(a: &Timestamp, b: &Timestamp) -> String {
    let s = a.seconds_until(b).max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// `Bash: rm -rf build` once: a request's summary often starts with its tool's name already.
pub fn tool_and_summary(tool: &str, summary: &str) -> String {
    let named = summary
        .strip_prefix(tool)
        .is_some_and(|rest| rest.starts_with(':') || rest.is_empty());
    if named {
        summary.to_string()
    } else {
        format!("{tool}: {summary}")
    }
}

/// Writes the job view at the terminal's width.
pub fn write_job_here(
    out: &mut dyn Write,
    id: &str,
    job: &Job,
    hostname: Option<&str>,
) -> io::Result<()> {
    write_job(out, id, job, terminal_width(), hostname)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(output: &str) -> Job {
        serde_json::from_value(serde_json::json!({
            "config": {
                "project": "demo",
                "working_directory": "/home/alice/demo",
                "queue_time": "2026-12-01T21:00:00Z",
                "jobtype": "claude",
                "claude_command": "greet",
                "claude_extra_args": [],
                "task_description": "Say hello ".repeat(30),
                "supporting_data": {},
                "queue": "poplar"
            },
            "runtime": {
                "status": "finished",
                "start_time": "2026-12-01T21:00:02Z",
                "finish_time": "2026-12-01T21:02:07Z",
                "output": output,
                "cost_usd": 0.0021,
                "num_turns": 3,
                "exit_code": 0
            }
        }))
        .unwrap()
    }

    fn render(j: &Job, width: usize) -> String {
        let mut buf = Vec::new();
        write_job(&mut buf, "20261201-x", j, width, None).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn whole_result_wrapped_to_width() {
        let long = "word ".repeat(200);
        let j = job(&serde_json::json!({"type": "result", "result": long}).to_string());
        for width in [80, 160] {
            let s = render(&j, width);
            for l in s.lines() {
                assert!(l.chars().count() <= width, "{width}: {l:?}");
            }
            assert_eq!(s.matches("word").count(), 200, "{s}");
            assert!(!s.contains('…'), "{s}");
            assert!(s.contains("Say hello Say hello"), "{s}");
            assert!(s.contains("(ran 2 min 5 s)"), "{s}");
            assert!(s.contains("$0.0021, 3 turns, exit 0"), "{s}");
        }
    }

    #[test]
    fn plain_output_kept_and_long_words_split() {
        let word = "#".repeat(300);
        let s = render(&job(&word), 80);
        assert_eq!(s.matches('#').count(), 300);
        for l in s.lines() {
            assert!(l.chars().count() <= 80, "{l:?}");
        }
    }

    /// The sandbox block says what this job was allowed and what it refused, in a few lines;
    /// the explanation that is the same for every job stays in --format json.
    #[test]
    fn the_sandbox_block_is_what_this_job_was_allowed_and_refused() {
        let mut j = job("done");
        j.runtime.sandbox = Some(
            "sandbox Landlock ABI 7 (enforced): writes /home/alice/demo, /tmp/s; read-only .git/hooks, .git/config; TCP connect to port 443; no_new_privs; environment allow-list; sockets: TCP and Unix stream only, each refusal listed in runtime.sandbox_refused; files outside are refused by Landlock (EACCES), each logged by the kernel's audit when it is on".into(),
        );
        let s = render(&j, 80);
        let block: Vec<&str> = s
            .lines()
            .skip_while(|l| *l != "Sandbox")
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(block.len() <= 5, "{block:#?}");
        let text = block.join(" ");
        assert!(
            text.contains("TCP connect to port 443") && text.contains("nothing refused"),
            "{text}"
        );
        assert!(!text.contains("kernel's audit"), "{text}");
        j.runtime.sandbox_refused = vec!["connect to 10.0.0.1:22 (TCP port 22 not allowed)".into()];
        let s = render(&j, 80);
        assert!(s.contains("refused: connect to 10.0.0.1:22"), "{s}");
        assert!(!s.contains("nothing refused"), "{s}");
    }
}
