//! Issue 32: what a new user reads. `view-job` and `list-jobs` as text at 80 and 160 columns,
//! whole values, never cut.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::TestEnv;
use serde_json::json;

/// A finished claude job whose result and task are long, as Claude Code's JSON leaves them.
fn long_job(env: &TestEnv, id: &str) -> String {
    let result = (0..120)
        .map(|i| format!("line-{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let task = "Implement the parser for the config format and add tests ".repeat(4);
    let job = json!({
        "config": {
            "project": "TestProject",
            "working_directory": "/tmp",
            "queue_time": "2026-12-01T21:00:00Z",
            "jobtype": "claude",
            "claude_command": "implement",
            "claude_extra_args": [],
            "task_description": task,
            "supporting_data": {},
            "timeout_seconds": 600,
            "queue": "poplar"
        },
        "runtime": {
            "status": "finished",
            "start_time": "2026-12-01T21:00:03Z",
            "finish_time": "2026-12-01T21:04:10Z",
            "process_id": 4242,
            "llm_process_id": null,
            "error": null,
            "output": json!({"type": "result", "subtype": "success", "result": result}).to_string(),
            "cost_usd": 0.0123,
            "num_turns": 7,
            "exit_code": 0,
            "unit": "agentstore-job-a-very-long-unit-name-that-used-to-be-cut.scope"
        }
    });
    env.write(
        &format!("Queues/poplar/Jobs/finished_jobs/{id}.json"),
        &serde_json::to_string_pretty(&job).unwrap(),
    );
    result
}

fn at_width(env: &TestEnv, cols: usize, args: &[&str]) -> String {
    let o = env
        .cli()
        .env("COLUMNS", cols.to_string())
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn view_job_text_shows_the_whole_result_at_every_width() {
    let env = TestEnv::with_test_project();
    let result = long_job(&env, "20261201-long");
    for cols in [80, 160] {
        let text = at_width(&env, cols, &["view-job", "20261201-long"]);
        for l in text.lines() {
            assert!(l.chars().count() <= cols, "{cols} columns: {l:?}\n{text}");
        }
        assert!(!text.contains('…'), "nothing is cut:\n{text}");
        // Every word of the result, in order, and the whole task.
        let words: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "Result")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .flat_map(str::split_whitespace)
            .collect();
        assert_eq!(words.join(" "), result, "{cols} columns:\n{text}");
        assert_eq!(
            text.matches("Implement the parser").count(),
            4,
            "{cols} columns:\n{text}"
        );
        assert!(
            text.contains("agentstore-job-a-very-long-unit-name-that-used-to-be-cut.scope"),
            "{text}"
        );
        assert!(text.starts_with("Job 20261201-long  finished"), "{text}");
        assert!(text.contains("(ran 4 min 7 s)"), "{text}");
        assert!(text.contains("$0.0123, 7 turns, exit 0"), "{text}");
    }
    // JSON unchanged: the document itself.
    let v: serde_json::Value =
        serde_json::from_str(&env.ok(&["--format", "json", "view-job", "20261201-long"])).unwrap();
    assert_eq!(v["runtime"]["num_turns"], 7);
    assert_eq!(v["id"], "20261201-long");
}

#[test]
fn list_jobs_keeps_the_queued_time_whole() {
    let env = TestEnv::with_test_project();
    // Job ids are UUIDs: 36 characters that users copy, never cut.
    let id = "0b5a7c9e-3f41-5d2a-9c1e-7a8b6c5d4e3f";
    long_job(&env, id);
    for cols in [80, 160] {
        let text = at_width(&env, cols, &["list-jobs"]);
        assert!(text.contains("12-01 21:00"), "{cols}:\n{text}");
        assert!(text.contains(id), "{text}");
        // Every line fits the terminal. At 80 columns a UUID, the status and the time (never
        // cut) leave no room for every column: PRIORITY is left out, not the line widened;
        // at 160 everything fits whole.
        for l in text.lines() {
            assert!(l.chars().count() <= cols, "{cols}: {l:?}\n{text}");
        }
        assert!(text.contains("TestProject"), "{text}");
        assert_eq!(text.contains("PRIORITY"), cols == 160, "{cols}:\n{text}");
        if cols == 160 {
            assert!(!text.contains('…'), "nothing cut at {cols}:\n{text}");
        }
    }
    // Into a pipe (no COLUMNS, no terminal) no column goes missing: scripts that grep a
    // column still find it.
    let o = env
        .cli()
        .env_remove("COLUMNS")
        .args(["list-jobs"])
        .output()
        .unwrap();
    let piped = String::from_utf8(o.stdout).unwrap();
    assert!(
        piped.lines().next().unwrap().contains("PRIORITY"),
        "{piped}"
    );
}

#[test]
fn a_project_folder_that_is_not_here_is_warned_about() {
    let env = TestEnv::initialised();
    let missing = env.dir.path().join("no-such-folder");
    let o = env.run(&[
        "add-project",
        "Ghost",
        "--directory",
        missing.to_str().unwrap(),
        "--owner",
        "chenry",
    ]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning:")
            && err.contains(missing.to_str().unwrap())
            && err.contains("does not exist on this machine")
            && err.contains("mkdir -p"),
        "{err}"
    );
    // A folder that is there: no warning.
    let o = env.run(&[
        "add-project",
        "Real",
        "--directory",
        env.dir.path().to_str().unwrap(),
        "--owner",
        "chenry",
    ]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}

#[test]
fn approvals_are_configured_from_the_cli() {
    let env = TestEnv::initialised();
    env.ok(&[
        "set-queue",
        "poplar",
        "--approval-rule",
        "Bash:git status*=allow",
        "--approval-rule",
        "Write:/etc/*=deny",
        "--approval-rule",
        "*=ask",
        "--approval-default",
        "deny",
        "--approval-deadline",
        "120",
    ]);
    let q: serde_json::Value =
        serde_json::from_str(&env.ok(&["--format", "json", "view-queue", "poplar"])).unwrap();
    assert_eq!(
        q["config"]["approvals"],
        json!({
            "rules": [
                {"tool": "Bash", "pattern": "git status*", "decision": "allow"},
                {"tool": "Write", "pattern": "/etc/*", "decision": "deny"},
                {"tool": "*", "decision": "ask"}
            ],
            "default": "deny",
            "deadline_seconds": 120
        })
    );
    // The queue file still validates.
    let file = env.root.join("Queues/poplar/queue.json");
    env.ok(&["validate", "--kind", "queue", file.to_str().unwrap()]);
    // Changing one field keeps the others; clearing works.
    env.ok(&["set-queue", "poplar", "--approval-deadline", "30"]);
    let q: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(q["config"]["approvals"]["deadline_seconds"], 30);
    assert_eq!(
        q["config"]["approvals"]["rules"].as_array().unwrap().len(),
        3
    );
    env.ok(&["set-queue", "poplar", "--no-approvals"]);
    let q: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(
        q["config"].get("approvals").is_none_or(|a| a.is_null()),
        "{q}"
    );
    // Bad input is named.
    for (args, msg) in [
        (vec!["--approval-rule", "Bash=maybe"], "is not a decision"),
        (vec!["--approval-rule", "=allow"], "the tool is empty"),
        (vec!["--approval-rule", "Bash"], "expected TOOL=DECISION"),
        (
            vec!["--approval-deadline", "0"],
            "--approval-deadline must be",
        ),
    ] {
        let mut a = vec!["set-queue", "poplar"];
        a.extend(args.iter().copied());
        let o = env.run(&a);
        assert!(!o.status.success(), "{a:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(msg), "{a:?}: {err}");
    }
}

#[path = "../examples/docs/man.rs"]
mod man;

/// Every man page renders without one warning (groff -ww, C locale: `can't find special
/// character 'u2026'` was printed by every `man orchestrator`), each page another names
/// exists, and each binary's page has EXAMPLES, FILES and ENVIRONMENT.
#[test]
fn man_pages_are_complete_and_render_cleanly() {
    use clap::CommandFactory;
    let pages = man::pages(vec![
        agentstore::cli::Cli::command(),
        agentstore::orchestrator::daemon::Args::command(),
        agentstore::agent::cli::Cli::command(),
        agentstore::queue::args::Args::command(),
        agentstore::worker::args::Args::command(),
        agentstore::web::args::Args::command(),
    ])
    .unwrap();
    let names: std::collections::BTreeSet<String> = pages.iter().map(|(n, _)| n.clone()).collect();
    assert!(names.contains("orchestrator-approvals") && names.contains("agentstore-web"));
    let dir = tempfile::tempdir().unwrap();
    let refs = regex::Regex::new(r"([a-z][a-z0-9\\-]*)\(1\)").unwrap();
    for (name, text) in &pages {
        let file = dir.path().join(format!("{name}.1"));
        std::fs::write(&file, text).unwrap();
        let o = std::process::Command::new("groff")
            .args(["-man", "-Tascii", "-ww", "-z"])
            .arg(&file)
            .env("LC_ALL", "C")
            .output()
            .expect("groff (package groff-base) renders man pages");
        let warnings = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && warnings.is_empty(),
            "{name}: {warnings}"
        );
        for c in refs.captures_iter(text) {
            let target = c[1].replace("\\-", "-");
            assert!(
                names.contains(&target) || target == "journalctl" || target == "systemctl",
                "{name}.1 names {target}(1), which no page is"
            );
        }
    }
    for bin in [
        "orchestrator",
        "orchestratord",
        "queue-manager",
        "agent-worker",
        "agentstore-web",
        "agentshell",
    ] {
        let text = &pages.iter().find(|(n, _)| n == bin).unwrap().1;
        for s in [".SH FILES", ".SH ENVIRONMENT", ".SH \"SEE ALSO\""] {
            assert!(text.contains(s), "{bin}: no {s}");
        }
    }
    assert!(
        pages
            .iter()
            .find(|(n, _)| n == "orchestrator")
            .unwrap()
            .1
            .contains(".SH EXAMPLES")
    );
}

/// A queue no machine serves: the submission says so (stderr, exit 0: the job is queued and
/// waits), and `list-queues` counts what waits in its folder and says why nothing starts it.
/// A manager that reports (or stopped cleanly) serves it: no warning.
#[test]
fn an_unserved_queue_is_named_at_submission_and_in_list_queues() {
    let env = TestEnv::with_test_project();
    let o = env.run(&[
        "create-prd",
        "--project",
        "TestProject",
        "--task",
        "Something",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: no machine serves queue poplar")
            && err.contains("queue-manager@poplar.path"),
        "{err}"
    );
    env.write(
        "Queues/poplar/Jobs/queued_jobs/waiting-1.json",
        &common::noop_job("2026-12-01T21:00:00Z"),
    );
    let text = env.ok(&["list-queues"]);
    let row = text.lines().find(|l| l.starts_with("poplar")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[3], "1", "QUEUED counts the folder:\n{text}");
    assert!(text.contains("no machine serves queue poplar"), "{text}");

    // A manager of poplar on some machine (its heartbeat, fresh): served.
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let hb = agentstore::store::machines::Heartbeat::new("queue-manager", Some("poplar"), 30);
    store.write_heartbeat(&hb).unwrap();
    assert!(!env.ok(&["list-queues"]).contains("no machine serves"));
    let o = env.run(&[
        "create-prd",
        "--project",
        "TestProject",
        "--task",
        "Something else",
    ]);
    assert!(o.status.success());
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("no machine serves"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn doctor(env: &TestEnv) -> (i32, Vec<serde_json::Value>) {
    let o = env.run(&["--format", "json", "doctor"]);
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --format json: {e}\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap(), checks)
}

fn verdict(checks: &[serde_json::Value], name: &str) -> String {
    checks
        .iter()
        .find(|c| c["check"] == name)
        .map(|c| c["verdict"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no check {name}: {checks:#?}"))
}

/// `doctor` finds each planted fault, says how to fix it, and exits 1 only for a failure.
#[test]
fn doctor_finds_each_planted_fault() {
    // No store at all.
    let env = TestEnv::empty();
    let (code, checks) = doctor(&env);
    assert_eq!(code, 1);
    assert_eq!(verdict(&checks, "store"), "fail");
    assert!(
        checks[0]["fix"]
            .as_str()
            .unwrap()
            .contains("orchestrator init")
    );

    // A store that is fine: nothing fails.
    let env = TestEnv::with_test_project();
    let (code, checks) = doctor(&env);
    assert_eq!(code, 0, "{checks:#?}");
    assert_eq!(verdict(&checks, "store"), "ok");
    // Where the store came from, in words (it said "(chosen by Env)").
    assert!(
        checks[0]["detail"]
            .as_str()
            .unwrap()
            .contains("(chosen by AGENT_STORE_ROOT)"),
        "{checks:#?}"
    );
    // Lingering as /var/lib/systemd/linger says, with the command that needs root.
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    let lingering = std::path::Path::new("/var/lib/systemd/linger")
        .join(&me)
        .exists();
    // Per-user mode (the session bus named): lingering is checked.
    let o = env
        .cli()
        .env("AGENTSTORE_BUS", "session")
        .args(["--format", "json", "doctor"])
        .output()
        .unwrap();
    let user_checks: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        verdict(&user_checks, "linger"),
        if lingering { "ok" } else { "warn" }
    );
    if !lingering {
        let l = user_checks.iter().find(|c| c["check"] == "linger").unwrap();
        assert_eq!(l["fix"], format!("sudo loginctl enable-linger {me}"), "{l}");
    }
    assert_eq!(verdict(&checks, "clock"), "ok");
    assert_eq!(verdict(&checks, "disk"), "ok");
    // Nothing serves poplar yet: its jobs would wait; said, with the unit to enable.
    assert_eq!(verdict(&checks, "queues"), "warn", "{checks:#?}");
    let q = checks.iter().find(|c| c["check"] == "queues").unwrap();
    assert!(
        q["detail"]
            .as_str()
            .unwrap()
            .contains("no machine serves poplar")
            && q["fix"]
                .as_str()
                .unwrap()
                .contains("enable --now queue-manager@poplar.path"),
        "{q}"
    );

    // This machine serves poplar, whose claude is not installed: fail, naming the fix.
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let hb = agentstore::store::machines::Heartbeat::new("queue-manager", Some("poplar"), 30);
    store.write_heartbeat(&hb).unwrap();
    env.ok(&[
        "set-queue",
        "poplar",
        "--claude-cli-path",
        "/nonexistent/bin/claude",
    ]);
    // Another machine whose heartbeat is ten minutes ahead of this clock.
    let mut other = agentstore::store::machines::Heartbeat::new("orchestratord", None, 30);
    other.host = "beta".into();
    other.last_seen = other.last_seen.plus_secs(600);
    store.write_heartbeat(&other).unwrap();
    let (code, checks) = doctor(&env);
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(verdict(&checks, "claude:poplar"), "fail");
    let c = checks
        .iter()
        .find(|c| c["check"] == "claude:poplar")
        .unwrap();
    assert!(
        c["fix"].as_str().unwrap().contains("--claude-cli-path"),
        "{c}"
    );
    assert_eq!(verdict(&checks, "clock"), "warn");
    assert_eq!(verdict(&checks, "queues"), "ok", "{checks:#?}");
    assert!(
        checks
            .iter()
            .any(|c| c["check"] == "clock" && c["detail"].as_str().unwrap().contains("beta")),
        "{checks:#?}"
    );

    // No Codex CLI on PATH and none named: no warning on a Claude-only machine, a word on
    // how to add it.
    {
        let empty = tempfile::tempdir().unwrap();
        let o = env
            .cli()
            .env("PATH", empty.path())
            .args(["--format", "json", "doctor"])
            .output()
            .unwrap();
        let checks: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
        let c = checks
            .iter()
            .find(|c| c["check"] == "codex:poplar")
            .unwrap();
        assert_eq!(c["verdict"], "ok", "{c}");
        assert!(
            c["detail"]
                .as_str()
                .unwrap()
                .contains("needed only for codex jobs"),
            "{c}"
        );
    }
    // Its queue names a Codex CLI that is not there (issue 35): fail, naming the field; one
    // that is there: ok.
    let set_codex = |path: &str| {
        let file = env.root.join("Queues/poplar/queue.json");
        let mut q: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        q["config"]["codex_cli_path"] = serde_json::json!(path);
        std::fs::write(&file, serde_json::to_string_pretty(&q).unwrap()).unwrap();
    };
    set_codex("/nonexistent/bin/codex");
    let (_, checks) = doctor(&env);
    assert_eq!(verdict(&checks, "codex:poplar"), "fail", "{checks:#?}");
    let c = checks
        .iter()
        .find(|c| c["check"] == "codex:poplar")
        .unwrap();
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/bin/codex")
            && c["fix"].as_str().unwrap().contains("codex_cli_path"),
        "{c}"
    );
    set_codex("/bin/sh");
    let (_, checks) = doctor(&env);
    assert_eq!(verdict(&checks, "codex:poplar"), "ok", "{checks:#?}");

    // A config.yaml that does not parse: the store check fails and names it.
    env.write("config.yaml", "queues_default: [unclosed\n");
    let (code, checks) = doctor(&env);
    assert_eq!(code, 1);
    assert_eq!(verdict(&checks, "store"), "fail");
    assert!(
        checks[0]["detail"]
            .as_str()
            .unwrap()
            .contains("config.yaml"),
        "{checks:#?}"
    );
    // What does not need the store is checked all the same.
    for name in ["bus", "units", "disk"] {
        assert!(
            checks.iter().any(|c| c["check"] == name),
            "{name} not checked: {checks:#?}"
        );
    }
    // Text: one line per check and the count.
    let o = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("FAIL  store:") && text.contains("1 failed") && !text.contains("1 checks"),
        "{text}"
    );
}

/// Completions come from the store: `COMPLETE=bash orchestrator` registers a function that
/// calls the binary back, which offers the project, queue, user and job ids the store holds
/// (the store named by `--root` on the line, else the environment's).
#[test]
fn completions_offer_the_stores_ids() {
    let env = TestEnv::with_test_project();
    long_job(&env, "20261201-done");
    env.write("users/chenry.json", "{}");
    // A second store named by --root on the line being completed.
    let other = TestEnv::initialised();
    other.write("projects/elsewhere/project.json", "{}");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_orchestrator"));
    let script = r#"
source <(COMPLETE=bash orchestrator)
comp() {
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9
    _clap_complete_orchestrator orchestrator "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
    printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '; echo
}
comp orchestrator view-project ""
comp orchestrator research-code --project Test
comp orchestrator list-jobs --queue ""
comp orchestrator view-job 2026
comp orchestrator view-user ""
comp orchestrator --root "$OTHER" view-project ""
comp orchestrator view-project nothing-like-this
comp orchestrator edit-project Te
"#;
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", bin.parent().unwrap().display()),
        )
        .env("AGENT_STORE_ROOT", &env.root)
        .env("HOME", &env.home)
        .env("OTHER", &other.root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    let has = |i: usize, word: &str| lines[i].split(' ').any(|w| w == word);
    assert!(has(0, "TestProject"), "projects: {}", lines[0]);
    assert_eq!(
        lines[1].trim(),
        "TestProject",
        "--project Test: {}",
        lines[1]
    );
    assert!(has(2, "poplar"), "queues: {}", lines[2]);
    assert_eq!(lines[3].trim(), "20261201-done", "job ids: {}", lines[3]);
    assert!(has(4, "chenry"), "users: {}", lines[4]);
    assert!(
        has(5, "elsewhere") && !has(5, "TestProject"),
        "--root: {}",
        lines[5]
    );
    assert_eq!(lines[6].trim(), "", "no match offers nothing: {}", lines[6]);
    assert_eq!(lines[7].trim(), "TestProject", "edit-project: {}", lines[7]);
}

/// A job waiting in a queue no machine serves can be cancelled (there is no manager to ask:
/// it could not be, and waited forever): the CLI takes it from `queued_jobs/` and fails it
/// "Job cancelled by <user>". A queue that is served is left to its manager: the CLI then
/// says the manager is not on the bus, and the job stays queued.
#[test]
fn a_job_waiting_in_a_queue_nobody_serves_can_be_cancelled() {
    // No bus with a manager on it (a bus address that leads nowhere).
    let cancel = |env: &TestEnv, id: &str| {
        env.cli()
            .env(
                "DBUS_SESSION_BUS_ADDRESS",
                "unix:path=/nonexistent/agentstore-test-bus",
            )
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                "unix:path=/nonexistent/agentstore-test-bus",
            )
            .args(["cancel-job", id])
            .output()
            .unwrap()
    };
    let env = TestEnv::with_test_project();
    env.ok(&["login", "chenry"]);
    env.write(
        "Queues/poplar/Jobs/queued_jobs/stuck-1.json",
        &common::noop_job("2026-12-01T21:00:00Z"),
    );
    let o = cancel(&env, "stuck-1");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Cancelled job stuck-1 (queue poplar; no machine serves queue poplar"),
        "{out}"
    );
    assert!(
        !env.root
            .join("Queues/poplar/Jobs/queued_jobs/stuck-1.json")
            .exists()
    );
    let failed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(env.root.join("Queues/poplar/Jobs/failed_jobs/stuck-1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(failed["runtime"]["status"], "failed");
    assert_eq!(failed["runtime"]["error"], "Job cancelled by chenry");
    assert!(failed["runtime"]["finish_time"].is_string(), "{failed}");
    // Ended jobs are not cancelled again.
    let o = cancel(&env, "stuck-1");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("has already failed"));

    // A served queue (a manager's fresh heartbeat): its manager decides, the job stays.
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let hb = agentstore::store::machines::Heartbeat::new("queue-manager", Some("poplar"), 30);
    store.write_heartbeat(&hb).unwrap();
    env.write(
        "Queues/poplar/Jobs/queued_jobs/stuck-2.json",
        &common::noop_job("2026-12-01T21:00:00Z"),
    );
    let o = cancel(&env, "stuck-2");
    assert!(!o.status.success());
    assert!(
        env.root
            .join("Queues/poplar/Jobs/queued_jobs/stuck-2.json")
            .exists()
    );

    // A user who may not change the job's project cannot cancel it this way either.
    let env = TestEnv::with_test_project();
    env.ok(&[
        "add-user",
        "nob",
        "--name",
        "N",
        "--email",
        "n@x",
        "--permissions",
        "user",
    ]);
    env.ok(&["login", "nob"]);
    env.write(
        "Queues/poplar/Jobs/queued_jobs/theirs-1.json",
        &common::noop_job("2026-12-01T21:00:00Z"),
    );
    let o = cancel(&env, "theirs-1");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("job theirs-1 belongs to another user's project"),
        "{err}"
    );
    assert!(
        env.root
            .join("Queues/poplar/Jobs/queued_jobs/theirs-1.json")
            .exists()
    );
}

/// view-job of a running job names the real commands that show its log (they said `logs ID`
/// once): `orchestrator logs <id> --follow 600` in the Result section, `orchestrator logs <id>`
/// and `journalctl JOB_ID=<id>` at the end, each whole on a line of its own to paste (at 80
/// columns a job id made them wrap mid-command), at 80 and 160 columns.
#[test]
fn view_job_of_a_running_job_names_the_commands_for_its_log() {
    let env = TestEnv::with_test_project();
    let id = "2f0c6a3e-5b1d-4c8e-9a7f-0d3e1b2c4a5f";
    let job = json!({
        "config": {
            "project": "TestProject", "working_directory": "/tmp",
            "queue_time": "2026-12-01T21:00:00Z", "jobtype": "claude",
            "claude_command": "research-code", "claude_extra_args": [],
            "task_description": "Read the code", "supporting_data": {},
            "timeout_seconds": 600, "queue": "poplar"
        },
        "runtime": {
            "status": "running", "start_time": "2026-12-01T21:00:03Z", "finish_time": null,
            "process_id": 4242, "llm_process_id": null, "error": null, "output": null
        }
    });
    env.write(
        &format!("Queues/poplar/Jobs/running_jobs/{id}.json"),
        &serde_json::to_string_pretty(&job).unwrap(),
    );
    for cols in [80, 160] {
        let text = at_width(&env, cols, &["view-job", id]);
        for l in text.lines() {
            assert!(l.chars().count() <= cols, "{cols} columns: {l:?}\n{text}");
        }
        let result: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "Result")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        // Each command alone on its line, as it is pasted.
        let follow = format!("orchestrator logs {id} --follow 600");
        assert!(
            result.iter().any(|l| l.trim() == follow),
            "{cols} columns: {follow:?} on a line of its own:\n{text}"
        );
        let last: Vec<&str> = text.lines().rev().take_while(|l| !l.is_empty()).collect();
        for cmd in [
            format!("orchestrator logs {id}"),
            format!("journalctl JOB_ID={id}"),
        ] {
            assert!(
                last.iter().any(|l| l.trim() == cmd),
                "{cols} columns: {cmd:?} on a line of its own:\n{text}"
            );
        }
        assert!(!text.contains("logs ID"), "{cols} columns:\n{text}");
    }
}

/// A mistyped project folder is changed with `edit-project --directory`, as add-project's
/// warning says (it said "edit projects/X/project.json" before): the default research
/// document moves with it, the text fits 80 and 160 columns, --format json is the document,
/// a retry of the job that failed in the old folder runs in the new one; nothing to change is
/// a usage error (2), an unknown project 1, and PRD §10 holds: a collaborator may not, the
/// owner may.
#[test]
fn a_projects_folder_is_changed_with_edit_project() {
    let env = TestEnv::initialised();
    for (id, name) in [("ann", "Ann"), ("bob", "Bob")] {
        env.ok(&[
            "add-user",
            id,
            "--name",
            name,
            "--email",
            &format!("{id}@x"),
        ]);
    }
    let typo = env.dir.path().join("proejcts/ecoli");
    let real = env.dir.path().join("projects/ecoli");
    std::fs::create_dir_all(&real).unwrap();
    let o = env.run(&[
        "add-project",
        "ecoli",
        "--directory",
        typo.to_str().unwrap(),
        "--owner",
        "ann",
        "--collaborator",
        "bob",
    ]);
    assert!(o.status.success());
    let warned = String::from_utf8_lossy(&o.stderr);
    assert!(
        warned.contains("orchestrator edit-project ecoli --directory DIR"),
        "add-project's warning names the command: {warned}"
    );
    // A job that failed in the mistyped folder.
    let failed = json!({
        "config": {"project": "ecoli", "working_directory": typo.to_str().unwrap(),
                   "queue_time": "2026-12-01T21:00:00Z", "jobtype": "noop",
                   "claude_command": "research-code", "claude_extra_args": [],
                   "task_description": "Read it", "supporting_data": {},
                   "timeout_seconds": 60, "user": "ann"},
        "runtime": {"status": "failed", "start_time": "2026-12-01T21:00:01Z",
                    "finish_time": "2026-12-01T21:00:01Z", "process_id": null,
                    "llm_process_id": null, "output": null,
                    "error": format!("Working directory does not exist: {}", typo.display())}
    });
    env.write(
        "Queues/poplar/Jobs/failed_jobs/typo-1.json",
        &failed.to_string(),
    );

    // Nothing to change: a usage error, naming the options.
    let o = env.run(&["edit-project", "ecoli"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--directory"), "{err}");
    // An unknown project.
    let err = env.fails(&["edit-project", "nope", "--directory", "/tmp"]);
    assert!(err.contains("nope"), "{err}");

    // PRD §10: bob, a collaborator, may see the project but not change it.
    env.ok(&["login", "bob"]);
    let err = env.fails(&[
        "edit-project",
        "ecoli",
        "--directory",
        real.to_str().unwrap(),
    ]);
    assert!(
        err.contains("permission denied: only the owner of project ecoli (ann) or an admin"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.root.join("projects/ecoli/project.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["directory"], json!(typo.to_str().unwrap()), "unchanged");

    // ann, its owner, may: text at 80 and 160 columns (the same change twice: the second
    // says there is nothing to change).
    env.ok(&["login", "ann"]);
    for (i, cols) in [80, 160].into_iter().enumerate() {
        let o = env
            .cli()
            .env("COLUMNS", cols.to_string())
            .args(["edit-project", "ecoli", "--directory"])
            .arg(&real)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let text = String::from_utf8(o.stdout).unwrap();
        for l in text.lines() {
            assert!(l.chars().count() <= cols, "{cols} columns: {l:?}\n{text}");
        }
        assert!(
            String::from_utf8_lossy(&o.stderr).is_empty(),
            "the folder is there: no warning"
        );
        if i == 0 {
            assert!(
                text.starts_with("Updated projects/ecoli/project.json\n"),
                "{text}"
            );
            assert!(
                text.contains(&format!("  directory: {}\n", real.display())),
                "{text}"
            );
            assert!(
                text.contains(&format!("(was {})", typo.display())),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "  code_research_document: {}/CODE_RESEARCH.md\n",
                    real.display()
                )),
                "the default document moves with the folder: {text}"
            );
        } else {
            assert!(text.contains("already has that"), "{text}");
        }
    }
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.root.join("projects/ecoli/project.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["directory"], json!(real.to_str().unwrap()));
    assert_eq!(
        doc["code_research_document"],
        json!(format!("{}/CODE_RESEARCH.md", real.display()))
    );
    let project_json = env.root.join("projects/ecoli/project.json");
    env.ok(&["validate", project_json.to_str().unwrap()]);

    // --format json: the document; a folder that is not there is warned about.
    let gone = env.dir.path().join("elsewhere");
    let o = env
        .cli()
        .args(["--format", "json", "edit-project", "ecoli", "--directory"])
        .arg(&gone)
        .args(["--code-research-document"])
        .arg(real.join("NOTES.md"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["directory"], json!(gone.to_str().unwrap()));
    assert_eq!(
        v["code_research_document"],
        json!(real.join("NOTES.md").to_str().unwrap()),
        "a document given is kept, not moved"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not exist on this machine"), "{err}");
    env.ok(&[
        "edit-project",
        "ecoli",
        "--directory",
        real.to_str().unwrap(),
    ]);

    // The failed job, retried, runs in the folder the project has now.
    let out = env.ok(&["--format", "json", "retry", "typo-1"]);
    let retried: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let new_id = retried[0]["job_id"].as_str().unwrap();
    let job: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            env.root
                .join(format!("Queues/poplar/Jobs/queued_jobs/{new_id}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        job["config"]["working_directory"],
        json!(real.to_str().unwrap())
    );
}

/// `Job queued: <id>` from the inbox path, then `view-job <id>` before any orchestrator has
/// routed the request: it said "job not found". It now says the request waits in
/// messaging/inbox/ and what routes it; `--follow` waits for the job to be made and to end;
/// a user who may not see the request still gets "not found".
#[test]
fn a_job_asked_for_but_not_made_yet_is_explained_and_followed() {
    let env = TestEnv::with_test_project();
    env.ok(&["add-user", "eve", "--name", "Eve", "--email", "eve@x"]);
    env.ok(&["login", "chenry"]);
    let out = env.ok(&["--bus", "none", "research-code", "--project", "TestProject"]);
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("Job queued: "))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let err = env.fails(&["view-job", &id]);
    assert!(
        err.contains(&format!("job {id} is not made yet"))
            && err.contains("research-code, project TestProject")
            && err.contains("waits in messaging/inbox/")
            && err.contains("agentstore-orchestrator.path")
            && err.contains(&format!("view-job {id} --follow 60")),
        "{err}"
    );
    // Someone who may not see chenry's request: as before.
    env.ok(&["login", "eve"]);
    let err = env.fails(&["view-job", &id]);
    assert!(err.contains(&format!("job not found: {id}")), "{err}");
    assert!(!err.contains("inbox"), "{err}");
    env.ok(&["login", "chenry"]);

    // --follow waits while the request is not routed, then for the job to end.
    let mut child = env
        .cli()
        .args(["--verbose", "view-job", &id, "--follow", "120"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(n > 0, "view-job --follow ended before waiting");
        if line.contains("requested, not made yet") {
            break;
        }
    }
    // As the orchestrator would make it (and the job then run): the finished job.
    let mut job: serde_json::Value =
        serde_json::from_str(&common::noop_job("2026-12-01T21:00:00Z")).unwrap();
    job["config"]["project"] = json!("TestProject");
    job["config"]["user"] = json!("chenry");
    job["runtime"] = json!({"status": "finished", "start_time": "2026-12-01T21:00:01Z",
        "finish_time": "2026-12-01T21:00:02Z", "process_id": null, "llm_process_id": null,
        "error": null, "output": "{\"type\":\"result\",\"result\":\"Routed and done.\"}"});
    env.write(
        &format!("Queues/poplar/Jobs/finished_jobs/{id}.json"),
        &job.to_string(),
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{rest}");
    assert!(text.contains("Routed and done."), "{text}");
}

/// `orchestrator --help` is what a new user reads first: at 80 columns each command is one
/// short summary (at most two lines; a few took up to seven, and the list ran to 183 lines),
/// the details stay in `<command> --help` (and the man pages).
#[test]
fn help_lists_each_command_in_at_most_two_lines() {
    let env = TestEnv::empty();
    let text = at_width(&env, 80, &["--help"]);
    let commands: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty() && *l != "Options:")
        .collect();
    assert!(commands.len() > 40, "the Commands section:\n{text}");
    let mut lines_of: Vec<(String, usize)> = Vec::new();
    for l in &commands {
        if let Some(name) = l.strip_prefix("  ").filter(|r| !r.starts_with(' ')) {
            lines_of.push((name.split_whitespace().next().unwrap().to_string(), 1));
        } else if let Some(last) = lines_of.last_mut() {
            last.1 += 1;
        }
    }
    let long: Vec<&(String, usize)> = lines_of.iter().filter(|(_, n)| *n > 2).collect();
    assert!(long.is_empty(), "more than two lines: {long:?}\n{text}");
    for (cmd, detail) in [
        ("doctor", "Exit status 1 when a check failed"),
        ("set-job-key", "queue-manager@.service"),
        ("demo", "--keep leaves the store to explore"),
    ] {
        let help = at_width(&env, 80, &[cmd, "--help"]);
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(detail),
            "{cmd} --help keeps its details:\n{help}"
        );
    }
}

/// Each line of `text` fits `cols` columns, or is a command in backticks alone on its line
/// (a command is printed whole, to copy).
fn fits_or_is_a_command(text: &str, cols: usize) {
    for l in text.lines() {
        let t = l.trim();
        let command = t.trim_start_matches('(').starts_with('`') && t.matches('`').count() == 2;
        assert!(
            l.chars().count() <= cols || command,
            "{cols} columns: {l:?}\n{text}"
        );
    }
}

/// What goes to stderr (warnings, errors) is wrapped to the terminal, commands in backticks
/// whole on one line; `list-messages` keeps each column it shows whole (issue 32).
#[test]
fn warnings_errors_and_list_messages_fit_80_and_160_columns() {
    let env = TestEnv::with_test_project();
    env.ok(&["login", "chenry"]);
    let missing = env
        .dir
        .path()
        .join("a-folder-whose-name-is-long-enough/to-need/wrapping");
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for cols in [80, 160] {
        let run = |args: &[&str]| {
            let o = env
                .cli()
                .env("COLUMNS", cols.to_string())
                .args(args)
                .output()
                .unwrap();
            (
                o.status.code(),
                String::from_utf8(o.stdout).unwrap(),
                String::from_utf8(o.stderr).unwrap(),
            )
        };
        let project = format!("Ghost{cols}");
        let (rc, _, err) = run(&[
            "add-project",
            &project,
            "--directory",
            missing.to_str().unwrap(),
            "--owner",
            "chenry",
        ]);
        assert_eq!(rc, Some(0), "{err}");
        fits_or_is_a_command(&err, cols);
        assert!(err.starts_with("warning: "), "{err}");
        assert_eq!(err.matches("warning:").count(), 1, "{err}");
        assert!(
            err.lines().skip(1).all(|l| l.starts_with("  ")),
            "continuation lines are indented:\n{err}"
        );
        assert!(
            err.lines().any(|l| l.trim().contains(&format!(
                "`orchestrator edit-project {project} --directory DIR`"
            ))),
            "the command whole on one line:\n{err}"
        );
        assert!(
            flat(&err).contains(&format!(
                "{} does not exist on this machine",
                missing.display()
            )),
            "{err}"
        );
        if cols == 80 {
            assert!(err.lines().count() > 2, "wrapped at 80:\n{err}");
        }
        // A job for a queue nobody serves: the warning after `Job queued`.
        let (rc, out, err) = run(&["create-prd", "--project", "TestProject", "--task", "x"]);
        assert_eq!(rc, Some(0), "{err}");
        assert!(out.contains("queued"), "{out}");
        fits_or_is_a_command(&err, cols);
        assert!(
            err.lines()
                .any(|l| l.contains("enable --now queue-manager@poplar.path`")
                    && l.contains("`systemctl")),
            "the command whole on one line:\n{err}"
        );
        // An error (exit 1) is wrapped the same way.
        let (rc, _, err) = run(&["set-job-key", "lower_case"]);
        assert_eq!(rc, Some(1), "{err}");
        fits_or_is_a_command(&err, cols);
        assert!(err.starts_with("error: \"lower_case\" cannot be"), "{err}");
        assert!(flat(&err).contains("LOGNAME, SHELL"), "{err}");
        assert_eq!(err.lines().count() > 1, cols == 80, "{cols}:\n{err}");
    }
    // Two requests waiting in the inbox (no orchestratord): listed whole at both widths.
    for cols in [80, 160] {
        let text = at_width(&env, cols, &["list-messages"]);
        for l in text.lines() {
            assert!(l.chars().count() <= cols, "{cols}: {l:?}\n{text}");
        }
        assert!(!text.contains('…'), "nothing cut at {cols}:\n{text}");
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 2, "{text}");
        for r in &rows {
            assert_eq!(r[0].len(), 36, "the whole id: {text}");
            assert!(
                r.contains(&"waiting") && r.contains(&"create-prd"),
                "{text}"
            );
            assert!(
                r.last().unwrap().len() == 5 && r[r.len() - 2].len() == 5,
                "QUEUED as MM-DD HH:MM: {text}"
            );
        }
        assert_eq!(
            text.contains("TestProject") && text.contains("chenry"),
            cols == 160,
            "{cols}:\n{text}"
        );
        assert!(text.lines().next().unwrap().contains("DIR"), "{text}");
    }
}

/// A failed agent whose result is its error message (Claude Code's "Prompt is too long", "Not
/// logged in"): view-job says it once, under Error, whole at 80 and 160 columns.
#[test]
fn view_job_says_a_failed_agents_message_once() {
    let env = TestEnv::with_test_project();
    let said = "Prompt is too long · the request is ~212345 tokens (limit 200000) but this conversation is only ~1978 tokens — the rest is system prompt, tool definitions, and attachment content.";
    let job = json!({
        "config": {
            "project": "TestProject", "working_directory": "/tmp",
            "queue_time": "2026-12-01T21:00:00Z", "jobtype": "claude",
            "claude_command": "code-researcher", "claude_extra_args": [],
            "task_description": "Research", "supporting_data": {},
            "timeout_seconds": 600, "queue": "poplar"
        },
        "runtime": {
            "status": "failed", "start_time": "2026-12-01T21:00:03Z",
            "finish_time": "2026-12-01T21:00:06Z", "process_id": 4242,
            "llm_process_id": null,
            "error": format!("Claude exited with code 1: {said}"),
            "output": json!({"type": "result", "subtype": "success", "is_error": true, "result": said}).to_string(),
            "exit_code": 1
        }
    });
    env.write(
        "Queues/poplar/Jobs/failed_jobs/20261201-big.json",
        &serde_json::to_string_pretty(&job).unwrap(),
    );
    for cols in [80, 160] {
        let text = at_width(&env, cols, &["view-job", "20261201-big"]);
        for l in text.lines() {
            assert!(l.chars().count() <= cols, "{cols}: {l:?}\n{text}");
        }
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(flat.matches("Prompt is too long").count(), 1, "{text}");
        assert!(
            flat.contains(&format!("Error Claude exited with code 1: {said}")),
            "{text}"
        );
        assert!(flat.contains("Result (the error above)"), "{text}");
    }
}

/// Issue 32 (a third day): a project folder renamed after `add-project` — the next job was
/// queued without a word and failed "Working directory does not exist". The agent command
/// now warns as it queues the job, naming the folder and the fix; with the folder there it
/// says nothing.
#[test]
fn a_job_for_a_project_whose_folder_moved_is_warned_about_as_it_is_queued() {
    let env = TestEnv::initialised();
    env.ok(&["login", "chenry"]);
    let old = env.dir.path().join("code/soil-model");
    std::fs::create_dir_all(&old).unwrap();
    env.ok(&["add-project", "soil", "--directory", old.to_str().unwrap()]);
    let quiet = env.run(&["--bus", "none", "research-code", "--project", "soil"]);
    assert!(quiet.status.success(), "{quiet:?}");
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("does not exist"),
        "{quiet:?}"
    );
    std::fs::rename(&old, env.dir.path().join("code/soil")).unwrap();
    for cols in [80, 160] {
        let o = env
            .cli()
            .env("COLUMNS", cols.to_string())
            .args(["--bus", "none", "research-code", "--project", "soil"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        assert!(String::from_utf8_lossy(&o.stdout).starts_with("Job queued: "));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        let flat = err.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(&format!("{} does not exist on this machine", old.display()))
                && flat.contains("`orchestrator edit-project soil --directory DIR`"),
            "{cols} columns: {err}"
        );
        for l in err.lines() {
            // A path or a command in backticks is never split (it may pass the width alone).
            if !l.contains('/') && !l.contains('`') {
                assert!(l.chars().count() <= cols, "{cols} columns: {l:?}\n{err}");
            }
        }
    }
}
