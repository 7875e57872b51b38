//! Running a confined job's program and judging what it wrote: the combined output kept on
//! the job and the outcome read from it.

use super::*;
use accounting::ResultFormat;

pub(super) fn run_confined(
    store: &Store,
    args: &WorkerArgs,
    job: &mut Job,
    cmd: &AgentCommand,
    what: &str,
    format: &ResultFormat,
) -> Outcome {
    let (q, id) = (args.queue.as_str(), args.job_id.as_str());
    let lines = std::sync::atomic::AtomicUsize::new(0);
    let result = run_agent(
        cmd,
        |pid| {
            job.runtime.llm_process_id = Some(pid);
            let path = store.job_path(q, JobStatus::Running, id);
            if let Err(e) = store.write_doc(crate::model::DocKind::Job, &path, &*job) {
                tracing::warn!(job_id = %id, queue = %q, "cannot record llm_process_id: {e}");
            }
            tracing::info!(job_id = %id, queue = %q, llm_pid = pid, "started {}", cmd.program);
        },
        |stream, line| {
            if lines.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < JOURNAL_LINES {
                let text = String::from_utf8_lossy(line);
                tracing::info!(job_id = %id, queue = %q, stream, "{text}");
            }
        },
    );
    let out = match result {
        Ok(o) => o,
        Err(e) => return Outcome::fail(e.to_string()),
    };
    let mut o = judge(out, what, format);
    let account = cmd.switch_to.as_ref().map(|a| a.name.clone());
    if o.failed
        && let Some(hint) = credential_hint(what, o.output.as_deref().unwrap_or(""), account)
    {
        let e = o.error.get_or_insert_default();
        if !e.is_empty() {
            e.push_str("; ");
        }
        e.push_str(&hint);
    }
    o
}

/// Separates stdout from stderr in `runtime.output`.
pub const STDERR_MARKER: &str = "\n--- stderr ---\n";

/// The most of stderr kept in `runtime.output` (its end: where the error is).
pub const STDERR_KEEP: usize = 64 * 1024;

/// `runtime.output` (PRD §4.6: stdout and stderr, 10 MB in all): stdout, then — when the
/// agent wrote to stderr — [`STDERR_MARKER`] and the last [`STDERR_KEEP`] bytes of stderr.
/// stdout gives up the room stderr takes, so the total stays within [`OUTPUT_LIMIT`].
/// Readers that want Claude's JSON parse the first JSON value (stdout comes first).
pub(super) fn combined_output(stdout: &capture::Captured, stderr: &capture::Captured) -> String {
    let err_bytes = stderr.end();
    let err_bytes = &err_bytes[err_bytes.len().saturating_sub(STDERR_KEEP)..];
    let err = String::from_utf8_lossy(err_bytes);
    let err = err.trim_end_matches('\n');
    if err.trim().is_empty() {
        return stdout.head_text(OUTPUT_LIMIT);
    }
    let mut text = stdout.head_text(OUTPUT_LIMIT - STDERR_MARKER.len() - err.len());
    text.push_str(STDERR_MARKER);
    text.push_str(err);
    text
}

pub(super) fn judge(out: AgentOutput, what: &str, format: &ResultFormat) -> Outcome {
    let code = out.exit_code();
    let mut o = Outcome {
        exit_code: Some(code),
        output: Some(combined_output(&out.stdout, &out.stderr)),
        ..Outcome::default()
    };
    let mut notes: Vec<String> = Vec::new();
    if out.stdout.truncated() {
        notes.push(format!(
            "Output truncated to {OUTPUT_LIMIT} bytes ({what} wrote {} bytes)",
            out.stdout.total
        ));
    }
    let parsed = match format {
        ResultFormat::Text => None,
        ResultFormat::ResultJson => Some(accounting::from_result_json(capture::last_line(
            out.stdout.end(),
        ))),
        ResultFormat::CodexEvents { model } => {
            Some(codex::parse_events(&out.stdout, model.as_deref()))
        }
    };
    if let Some(Ok(r)) = &parsed {
        o.cost_usd = r.cost_usd;
        o.num_turns = r.num_turns;
        o.session_id = r.session_id.clone();
        o.usage = r.usage;
    }
    let stderr_tail = String::from_utf8_lossy(capture::last_line(out.stderr.end())).into_owned();
    let reason = |r: &Option<Result<accounting::AgentRun, String>>| -> String {
        match r {
            Some(Ok(res)) => res.result.clone().unwrap_or_default(),
            _ => stderr_tail.clone(),
        }
    };
    if !out.status.success() {
        o.failed = true;
        let why = reason(&parsed);
        let head = match out.status.code() {
            Some(c) => format!("{what} exited with code {c}"),
            None => format!("{what} was killed by signal {}", code - 128),
        };
        notes.insert(
            0,
            if why.is_empty() {
                head
            } else {
                format!("{head}: {why}")
            },
        );
    } else {
        match &parsed {
            Some(Ok(r)) if r.is_error => {
                o.failed = true;
                notes.insert(0, format!("{what} reported an error: {}", reason(&parsed)));
            }
            Some(Err(e)) if !out.stdout.truncated() => {
                o.failed = true;
                notes.insert(0, format!("{what} output is not a JSON result: {e}"));
            }
            _ => {}
        }
    }
    if !notes.is_empty() {
        o.error = Some(notes.join("; "));
    }
    o
}

/// What Claude Code prints when it has no credentials (`claude -p` without a login or key:
/// "Not logged in · Please run /login"; a key it was given and the API refused: "Invalid API
/// key"): where an unattended job finds them and how to give them (issue 32).
pub(super) fn credential_hint(what: &str, output: &str, account: Option<String>) -> Option<String> {
    if what != "Claude" {
        return None;
    }
    let no_login = ["Not logged in", "Please run /login", "Invalid API key"];
    if !no_login.iter().any(|m| output.contains(m)) {
        return None;
    }
    let user = account
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .unwrap_or_else(|| "the job's account".into());
    Some(format!(
        "Claude Code found no usable credentials as {user} on {host}: an unattended job uses \
         {user}'s login in ~/.claude/ (run `claude` once as {user} and /login) or \
         ANTHROPIC_API_KEY from the queue manager (per user: `printf %s \"$KEY\" | \
         orchestrator set-job-key ANTHROPIC_API_KEY`; system-wide: `printf %s \"$KEY\" | sudo \
         orchestrator set-job-key --system ANTHROPIC_API_KEY`); `orchestrator doctor` on that machine checks it",
        host = crate::store::identity::display_hostname(),
    ))
}
