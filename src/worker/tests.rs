use super::*;
use std::os::unix::process::ExitStatusExt;

fn output(code: i32, stdout: &str, total: Option<u64>) -> AgentOutput {
    let mut c = capture::Captured {
        head: stdout.as_bytes().to_vec(),
        tail: Vec::new(),
        total: stdout.len() as u64,
    };
    if let Some(t) = total {
        c.total = t;
        c.tail = stdout.as_bytes().to_vec();
    }
    AgentOutput {
        pid: 1,
        status: std::process::ExitStatus::from_raw(code << 8),
        stdout: c,
        stderr: capture::Captured::default(),
    }
}

const OK: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"hi","num_turns":2,"total_cost_usd":0.25,"session_id":"s1"}"#;

#[test]
fn the_queue_settings_handed_through_the_gate_are_read_or_left() {
    let config: QueueConfig = serde_json::from_str(
        r#"{"id":"q","worker_count":3,"claude_cli_path":"claude","rest_interval":10,"claude_default_args":["--x"],"max_job_runtime_seconds":60}"#,
    )
    .unwrap();
    let line = format!("{}\n", serde_json::to_string(&config).unwrap());
    assert_eq!(handed_config(&line), Some(config));
    // None handed (an older manager closed the gate after `go`), or settings this worker
    // cannot read: queue.json is read instead.
    assert_eq!(handed_config(""), None);
    assert_eq!(handed_config("{\"worker_count\":\"many\"}\n"), None);
}

#[test]
fn success_records_fields() {
    let o = judge(
        output(0, OK, None),
        "Claude",
        &accounting::ResultFormat::ResultJson,
    );
    assert!(!o.failed, "{o:?}");
    assert_eq!(o.error, None);
    assert_eq!(o.output.as_deref(), Some(OK));
    assert_eq!((o.cost_usd, o.num_turns), (Some(0.25), Some(2)));
    assert_eq!(o.session_id.as_deref(), Some("s1"));
}

#[test]
fn is_error_fails_even_with_subtype_success() {
    let s = OK.replace("\"is_error\":false", "\"is_error\":true");
    let o = judge(
        output(1, &s, None),
        "Claude",
        &accounting::ResultFormat::ResultJson,
    );
    assert!(o.failed);
    assert_eq!(o.error.as_deref(), Some("Claude exited with code 1: hi"));
    let o = judge(
        output(0, &s, None),
        "Claude",
        &accounting::ResultFormat::ResultJson,
    );
    assert_eq!(o.error.as_deref(), Some("Claude reported an error: hi"));
}

#[test]
fn truncation_is_noted_and_result_still_parsed() {
    let o = judge(
        output(0, OK, Some(11 << 20)),
        "Claude",
        &accounting::ResultFormat::ResultJson,
    );
    assert!(!o.failed);
    assert!(
        o.error
            .unwrap()
            .starts_with("Output truncated to 10485760 bytes")
    );
    assert_eq!(o.num_turns, Some(2));
}

#[test]
fn bad_json_fails() {
    let o = judge(
        output(0, "this is not JSON\n", None),
        "Claude",
        &accounting::ResultFormat::ResultJson,
    );
    assert!(o.failed);
    assert!(
        o.error
            .unwrap()
            .starts_with("Claude output is not a JSON result")
    );
}

#[test]
fn output_keeps_stdout_and_a_bounded_stderr_within_10_mb() {
    let cap = |b: Vec<u8>, limit: usize| capture::capture(&b[..], limit, |_| {});
    let o = combined_output(
        &cap(b"{\"result\":\"ok\"}\n".to_vec(), OUTPUT_LIMIT),
        &cap(Vec::new(), 1 << 20),
    );
    assert_eq!(o, "{\"result\":\"ok\"}\n");
    let o = combined_output(
        &cap(b"out\n".to_vec(), OUTPUT_LIMIT),
        &cap(b"warn: x\n".to_vec(), 1 << 20),
    );
    assert_eq!(o, format!("out\n{STDERR_MARKER}warn: x"));
    let big_out = vec![b'a'; OUTPUT_LIMIT + 10];
    let mut big_err = vec![b'e'; 200 * 1024];
    big_err.extend_from_slice(b"the real error");
    let o = combined_output(&cap(big_out, OUTPUT_LIMIT), &cap(big_err, 1 << 20));
    assert!(o.len() <= OUTPUT_LIMIT, "{}", o.len());
    assert!(o.ends_with("the real error"));
    assert!(o.contains(STDERR_MARKER));
}

/// Issue 32: Claude Code without a login or key fails the job saying where an unattended job
/// finds credentials and how to give them, for that account.
#[test]
fn a_claude_without_credentials_is_explained() {
    for said in [
        "Not logged in · Please run /login",
        "Invalid API key · Fix external API key",
    ] {
        let hint = super::judge::credential_hint("Claude", said, Some("rita".into())).unwrap();
        for part in [
            "as rita",
            "rita's login in ~/.claude/",
            "orchestrator set-job-key ANTHROPIC_API_KEY",
            "sudo orchestrator set-job-key --system ANTHROPIC_API_KEY",
            "orchestrator doctor",
        ] {
            assert!(hint.contains(part), "{part:?} missing: {hint}");
        }
    }
    assert!(super::judge::credential_hint("Claude", "rate limited", None).is_none());
    assert!(super::judge::credential_hint("Codex", "Not logged in", None).is_none());
}

#[test]
fn a_slurm_step_without_the_managers_credentials_says_why() {
    let e = "credentials /run/credentials/queue-manager@q.service: No such file or directory";
    assert_eq!(
        credentials_failure(e, false),
        format!("The queue's credentials: {e}")
    );
    let slurm = credentials_failure(e, true);
    assert!(
        slurm.starts_with(&format!("The queue's credentials: {e} (a Slurm job:"))
            && slurm.contains("do not reach Slurm jobs on other nodes"),
        "{slurm}"
    );
}
