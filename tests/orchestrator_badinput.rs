//! Bad-input corpus (issue 3, DESIGN §4): malformed, schema-invalid and unroutable files are
//! dropped into the inbox of a running orchestratord (child process on a private bus). Each
//! gets exactly one outbox answer with `status: "error"` naming the problem, the original is
//! kept byte for byte in `processed_inbox/`, schema failures are logged to
//! `JSONValidation/errors.out`, conflict copies are set aside, non-documents are left alone,
//! no job is created, and the daemon keeps serving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::TestEnv;
use common::bus::{KillOnDrop, PrivateBus, orchestratord_command, wait_for_name, wait_until};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// Hang guard only (the empty/unparsable files are deliberately answered after the daemon's
/// 2 s settle time; the 17 MB file takes a moment in a debug build).
const LONG: Duration = Duration::from_secs(120);

/// One bad inbox file.
struct Case {
    /// File stem in the inbox (the file is `<stem>.json`).
    stem: String,
    /// Raw file contents.
    body: Vec<u8>,
    /// The answer's `correlation_id` (its outbox file name).
    answer_id: String,
    /// Substrings the answer's `error` must contain (the field pointer or the unknown name).
    expect: Vec<&'static str>,
    /// `Some(id)`: the validator must log a line to errors.out with this id.
    logged_as: Option<String>,
}

/// A message that is valid apart from what a case changes.
fn base(id: &str, command: &str, project: Option<&str>, content: Value) -> Value {
    json!({
        "correlation_id": id,
        "source": "user",
        "project": project,
        "queue_time": "2025-10-25T10:00:00Z",
        "processed_time": null,
        "command": command,
        "content": content,
        "status": "queued",
        "error": null
    })
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap()
}

/// A case whose document has `correlation_id == stem`.
fn doc_case(stem: &str, v: Value, expect: Vec<&'static str>, schema: bool) -> Case {
    Case {
        stem: stem.into(),
        body: bytes(&v),
        answer_id: stem.into(),
        expect,
        logged_as: schema.then(|| stem.to_string()),
    }
}

/// A case that fails before a correlation id can be trusted: answered under the file stem.
fn raw_case(stem: &str, body: Vec<u8>, expect: Vec<&'static str>) -> Case {
    Case {
        stem: stem.into(),
        body,
        answer_id: stem.into(),
        expect,
        logged_as: Some(stem.into()),
    }
}

/// A schema failure of a document with a `correlation_id` that is missing or unusable as a
/// file name: answered under the file stem, logged under `logged`.
fn unsafe_id_case(stem: &str, v: Value, expect: Vec<&'static str>, logged: &str) -> Case {
    Case {
        stem: stem.into(),
        body: bytes(&v),
        answer_id: stem.into(),
        expect,
        logged_as: Some(logged.into()),
    }
}

fn without(mut v: Value, field: &str) -> Value {
    v.as_object_mut().unwrap().remove(field);
    v
}

fn with(mut v: Value, field: &str, value: Value) -> Value {
    v[field] = value;
    v
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let rc = |id: &str, content: Value| base(id, "research-code", Some("Proj"), content);

    // Not JSON at all, or not a JSON object.
    cases.push(raw_case(
        "not-json",
        b"hello, orchestrator\n".to_vec(),
        vec!["not valid JSON"],
    ));
    cases.push(raw_case("empty", Vec::new(), vec!["empty file"]));
    cases.push(raw_case("blank", b" \n\t \n".to_vec(), vec!["empty file"]));
    let full = bytes(&base("truncated", "help", None, json!({})));
    cases.push(raw_case(
        "truncated",
        full[..full.len() / 2].to_vec(),
        vec!["not valid JSON"],
    ));
    cases.push(raw_case(
        "array",
        b"[1, 2, 3]".to_vec(),
        vec!["not of type", "object"],
    ));
    cases.push(raw_case(
        "string",
        b"\"list-projects\"".to_vec(),
        vec!["not of type", "object"],
    ));
    cases.push(raw_case(
        "number",
        b"42".to_vec(),
        vec!["not of type", "object"],
    ));
    cases.push(raw_case(
        "null",
        b"null".to_vec(),
        vec!["not of type", "object"],
    ));
    let mut trailing = bytes(&base("trailing", "help", None, json!({})));
    trailing.extend_from_slice(b"\n}garbage");
    cases.push(raw_case(
        "trailing",
        trailing,
        vec!["not valid JSON", "trailing"],
    ));
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend(bytes(&base("bom", "help", None, json!({}))));
    cases.push(raw_case("bom", bom, vec!["not valid JSON"]));
    let mut invalid_utf8 = br#"{"correlation_id": "bad-utf8", "source": "user", "queue_time": "2025-10-25T10:00:00Z", "command": "help"#.to_vec();
    invalid_utf8.extend_from_slice(b"\xFF\xFE\xC3\x28");
    invalid_utf8.extend_from_slice(br#"", "content": {}, "status": "queued"}"#);
    cases.push(raw_case("bad-utf8", invalid_utf8, vec!["not valid JSON"]));
    cases.push(raw_case(
        "deep",
        "[".repeat(100_000).into_bytes(),
        vec!["not valid JSON", "recursion"],
    ));
    cases.push(raw_case("nul-bytes", vec![0u8; 64], vec!["not valid JSON"]));

    // Over the 16 MB document limit (valid JSON otherwise).
    let mut huge = base("huge", "help", None, json!({}));
    huge["content"]["pad"] = Value::String("x".repeat(17 * 1024 * 1024));
    cases.push(raw_case("huge", bytes(&huge), vec!["byte limit"]));

    // Schema: each required field missing.
    for field in ["source", "queue_time", "command", "content", "status"] {
        let stem = format!("missing-{}", field.replace('_', "-"));
        let v = without(base(&stem, "help", None, json!({})), field);
        let mut c = doc_case(&stem, v, vec![], true);
        c.expect = vec![match field {
            "source" => "/source",
            "queue_time" => "/queue_time",
            "command" => "/command",
            "content" => "/content",
            _ => "/status",
        }];
        cases.push(c);
    }
    cases.push(unsafe_id_case(
        "missing-correlation-id",
        without(base("x", "help", None, json!({})), "correlation_id"),
        vec!["/correlation_id"],
        "missing-correlation-id",
    ));

    // Schema: wrong enums, types, timestamps, ids, unknown fields.
    let help = |id: &str| base(id, "help", None, json!({}));
    cases.push(doc_case(
        "bad-source",
        with(help("bad-source"), "source", json!("robot")),
        vec!["/source", "robot"],
        true,
    ));
    cases.push(doc_case(
        "bad-status",
        with(help("bad-status"), "status", json!("pending")),
        vec!["/status", "pending"],
        true,
    ));
    cases.push(doc_case(
        "bad-timestamp",
        with(help("bad-timestamp"), "queue_time", json!("yesterday")),
        vec!["/queue_time"],
        true,
    ));
    cases.push(doc_case(
        "offset-timestamp",
        with(
            help("offset-timestamp"),
            "queue_time",
            json!("2025-10-25T10:00:00+02:00"),
        ),
        vec!["/queue_time"],
        true,
    ));
    cases.push(doc_case(
        "bad-processed-time",
        with(help("bad-processed-time"), "processed_time", json!(12345)),
        vec!["/processed_time"],
        true,
    ));
    cases.push(doc_case(
        "unknown-field",
        with(help("unknown-field"), "priority", json!(5)),
        vec!["/priority"],
        true,
    ));
    cases.push(doc_case(
        "content-array",
        with(help("content-array"), "content", json!(["queue", "poplar"])),
        vec!["/content"],
        true,
    ));
    cases.push(doc_case(
        "content-string",
        with(help("content-string"), "content", json!("poplar")),
        vec!["/content"],
        true,
    ));
    cases.push(doc_case(
        "command-number",
        with(help("command-number"), "command", json!(7)),
        vec!["/command"],
        true,
    ));
    cases.push(doc_case(
        "project-number",
        with(help("project-number"), "project", json!(7)),
        vec!["/project"],
        true,
    ));
    cases.push(doc_case(
        "bad-user-id",
        with(help("bad-user-id"), "user", json!("../root")),
        vec!["/user"],
        true,
    ));
    cases.push(unsafe_id_case(
        "slash-id",
        help("a/b"),
        vec!["/correlation_id"],
        "a/b",
    ));
    cases.push(unsafe_id_case(
        "space-id",
        help("has spaces"),
        vec!["/correlation_id"],
        "has spaces",
    ));
    let long_id = "L".repeat(300);
    cases.push(unsafe_id_case(
        "long-id",
        help(&long_id),
        vec!["/correlation_id"],
        &long_id,
    ));

    // Valid documents the router cannot act on.
    cases.push(doc_case(
        "unknown-command",
        base("unknown-command", "frobnicate", None, json!({})),
        vec!["Unknown command: frobnicate"],
        false,
    ));
    cases.push(doc_case(
        "unknown-project",
        base(
            "unknown-project",
            "research-code",
            Some("NoSuchProject"),
            json!({}),
        ),
        vec!["Project not found: NoSuchProject"],
        false,
    ));
    cases.push(doc_case(
        "traversal-project",
        base(
            "traversal-project",
            "view-project",
            Some("../users/chenry"),
            json!({}),
        ),
        vec!["../users/chenry"],
        false,
    ));
    cases.push(doc_case(
        "view-unknown-project",
        base(
            "view-unknown-project",
            "view-project",
            Some("Ghost"),
            json!({}),
        ),
        vec!["Project not found: Ghost"],
        false,
    ));
    cases.push(doc_case(
        "agent-no-project",
        base("agent-no-project", "research-code", None, json!({})),
        vec!["project is required"],
        false,
    ));
    cases.push(doc_case(
        "unknown-queue",
        rc("unknown-queue", json!({"queue": "nosuchqueue"})),
        vec!["Queue not found: nosuchqueue"],
        false,
    ));
    // `pipeline.steps` lets a step wait for the steps before it in its own pipeline before
    // they exist; it cannot wave through any other unknown id.
    cases.push(doc_case(
        "after-smuggled",
        rc(
            "after-smuggled",
            json!({"after": ["ghost-1"], "pipeline": {"steps": ["ghost-1"]}}),
        ),
        vec!["unknown job ghost-1"],
        false,
    ));
    let me = agentstore::orchestrator::job_id_for("after-smuggled-later");
    cases.push(doc_case(
        "after-smuggled-later",
        rc(
            "after-smuggled-later",
            json!({"after": ["ghost-2"], "pipeline": {"steps": [me, "ghost-2"]}}),
        ),
        vec!["unknown job ghost-2"],
        false,
    ));
    cases.push(doc_case(
        "queue-not-string",
        rc("queue-not-string", json!({"queue": 5})),
        vec!["content.queue"],
        false,
    ));
    cases.push(doc_case(
        "orphan-default-queue",
        base(
            "orphan-default-queue",
            "research-code",
            Some("Orphan"),
            json!({}),
        ),
        vec!["vanished"],
        false,
    ));
    cases.push(doc_case(
        "unknown-user",
        with(
            base("unknown-user", "list-projects", None, json!({})),
            "user",
            json!("ghost"),
        ),
        vec!["User not found: ghost"],
        false,
    ));
    cases.push(doc_case(
        "tasks-without-prd",
        base("tasks-without-prd", "create-tasks", Some("Proj"), json!({})),
        vec!["content.prd"],
        false,
    ));
    cases.push(doc_case(
        "unknown-prd",
        base(
            "unknown-prd",
            "implement-tasks",
            Some("Proj"),
            json!({"prd": "nosuchprd"}),
        ),
        vec!["PRD not found: nosuchprd"],
        false,
    ));
    cases.push(doc_case(
        "prd-without-task",
        base("prd-without-task", "create-prd", Some("Proj"), json!({})),
        vec!["content.task"],
        false,
    ));
    cases.push(doc_case(
        "extra-args-string",
        rc(
            "extra-args-string",
            json!({"claude_extra_args": "--verbose"}),
        ),
        vec!["content.claude_extra_args"],
        false,
    ));
    cases.push(doc_case(
        "extra-args-numbers",
        rc("extra-args-numbers", json!({"claude_extra_args": [1, 2]})),
        vec!["content.claude_extra_args"],
        false,
    ));
    cases.push(doc_case(
        "timeout-negative",
        rc("timeout-negative", json!({"timeout": -5})),
        vec!["content.timeout"],
        false,
    ));
    cases.push(doc_case(
        "timeout-zero",
        rc("timeout-zero", json!({"timeout": 0})),
        vec!["content.timeout"],
        false,
    ));
    cases.push(doc_case(
        "timeout-string",
        rc("timeout-string", json!({"timeout": "1h"})),
        vec!["content.timeout"],
        false,
    ));
    cases.push(doc_case(
        "bad-jobtype",
        rc("bad-jobtype", json!({"jobtype": "shell"})),
        vec!["content.jobtype", "shell"],
        false,
    ));
    cases.push(doc_case(
        "supporting-not-object",
        rc("supporting-not-object", json!({"supporting_data": [1]})),
        vec!["content.supporting_data"],
        false,
    ));
    cases.push(doc_case(
        "env-no-project",
        base("env-no-project", "create-environment", None, json!({})),
        vec!["project is required"],
        false,
    ));
    // create-environment's options become venvman's arguments on the compute host: a
    // python that would be an option, or flags that are not booleans, are refused here.
    cases.push(doc_case(
        "env-python-option",
        base(
            "env-python-option",
            "create-environment",
            Some("Proj"),
            json!({"python": "--index-url=http://evil"}),
        ),
        vec!["content.python", "not a Python version"],
        false,
    ));
    cases.push(doc_case(
        "env-flag-not-bool",
        base(
            "env-flag-not-bool",
            "create-environment",
            Some("Proj"),
            json!({"install_deps": "yes"}),
        ),
        vec!["content.install_deps must be true or false"],
        false,
    ));
    cases.push(doc_case(
        "view-job-no-id",
        base("view-job-no-id", "view-job", None, json!({})),
        vec!["content.job"],
        false,
    ));
    cases.push(doc_case(
        "list-jobs-bad-status",
        base(
            "list-jobs-bad-status",
            "list-jobs",
            None,
            json!({"status": "sleeping"}),
        ),
        vec!["content.status", "sleeping"],
        false,
    ));
    // A filter that is misspelt or not a string is refused, never taken as no filter (which
    // answered every job or message as if the filter had been met).
    for (stem, command, content, expect) in [
        (
            "list-jobs-misspelt-filter",
            "list-jobs",
            json!({"stauts": "finished", "limit": 1}),
            vec!["unknown content key", "stauts"],
        ),
        (
            "list-jobs-status-number",
            "list-jobs",
            json!({"status": 5}),
            vec!["content.status must be a string", "5"],
        ),
        (
            "list-jobs-queue-list",
            "list-jobs",
            json!({"queue": ["poplar"]}),
            vec!["content.queue must be a string"],
        ),
        (
            "list-messages-misspelt-filter",
            "list-messages",
            json!({"direktion": "in", "limit": 1}),
            vec!["unknown content key", "direktion"],
        ),
    ] {
        cases.push(doc_case(
            stem,
            base(stem, command, None, content),
            expect,
            false,
        ));
    }
    cases.push(doc_case(
        "view-unknown-queue",
        base(
            "view-unknown-queue",
            "view-queue",
            None,
            json!({"queue": "nosuchqueue"}),
        ),
        vec!["nosuchqueue"],
        false,
    ));
    cases
}

/// Writes `bytes` to `dir/name` the way a careful writer (or Dropbox) does: a dot-file, then
/// a rename, so the daemon never sees a half-written test file.
fn drop_file(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.part"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

fn stems(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .map(|n| n.strip_suffix(".json").map(str::to_string).unwrap_or(n))
        .collect()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `org.freedesktop.DBus.Properties.Get` of one u64 counter.
fn counter(conn: &zbus::Connection, rt: &tokio::runtime::Runtime, name: &str) -> u64 {
    rt.block_on(async {
        let props = zbus::fdo::PropertiesProxy::builder(conn)
            .destination("org.agentstore.Orchestrator1")
            .path("/org/agentstore/Orchestrator1")
            .build()
            .await
            .unwrap();
        let iface = zbus::names::InterfaceName::try_from("org.agentstore.Orchestrator1").unwrap();
        let v = props.get(iface, name).await.unwrap();
        u64::try_from(v).unwrap()
    })
}

#[test]
fn bad_inbox_files_are_answered_with_errors_and_the_daemon_keeps_serving() {
    let env = TestEnv::initialised();
    env.ok(&[
        "add-project",
        "Proj",
        "--directory",
        "/tmp/agentstore-badinput",
        "--owner",
        "chenry",
    ]);
    // A project whose default queue was deleted after the project was made.
    env.ok(&["add-queue", "vanished"]);
    env.ok(&[
        "add-project",
        "Orphan",
        "--directory",
        "/tmp/agentstore-badinput",
        "--owner",
        "chenry",
        "--default-queue",
        "vanished",
    ]);
    std::fs::remove_dir_all(env.root.join("Queues/vanished")).unwrap();
    let errors_before = env.error_log().len();

    let mut cases = corpus();
    // A mode-000 file. Root would read it anyway, so as root the daemon runs without
    // CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (below): the case runs for every user.
    let root_user = nix::unistd::geteuid().is_root();
    cases.push(Case {
        stem: "unreadable".into(),
        body: bytes(&base("unreadable", "help", None, json!({}))),
        answer_id: "unreadable".into(),
        expect: vec!["Permission denied"],
        logged_as: None,
    });
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    let ids: BTreeSet<&str> = cases.iter().map(|c| c.answer_id.as_str()).collect();
    assert_eq!(ids.len(), cases.len(), "answer ids must be unique");

    let bus = PrivateBus::start();
    let mut cmd = orchestratord_command(&bus, &env.root, &["--idle-exit", "0"]);
    if root_user {
        let mut setpriv = std::process::Command::new("setpriv");
        setpriv
            .args(["--bounding-set=-dac_override,-dac_read_search", "--"])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdout(std::process::Stdio::null());
        cmd = setpriv;
    }
    let mut daemon = KillOnDrop(cmd.spawn().unwrap());
    wait_for_name(&bus, "org.agentstore.Orchestrator1");

    let inbox = env.root.join("messaging/inbox");
    let outbox = env.root.join("messaging/outbox");
    let processed = env.root.join("messaging/processed_inbox");

    // A good message, plus a Dropbox conflict copy of it: the copy must be set aside, never
    // answered (a second time).
    let good_first = bytes(&base("conflicted", "help", None, json!({})));
    drop_file(&inbox, "conflicted.json", &good_first);
    let conflict_name = "conflicted (host's conflicted copy 2025-10-23).json";
    drop_file(&inbox, conflict_name, &good_first);
    // Not documents: left alone.
    let leave_alone = ["notes.txt", "message.json.bak", ".hidden.json"];
    for name in leave_alone {
        let p = inbox.join(name);
        std::fs::write(&p, bytes(&base("left-alone", "help", None, json!({})))).unwrap();
    }

    for c in &cases {
        let name = format!("{}.json", c.stem);
        if c.stem == "unreadable" {
            let p = inbox.join(&name);
            std::fs::write(&p, &c.body).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        } else {
            drop_file(&inbox, &name, &c.body);
        }
    }

    let expected: BTreeSet<String> = cases
        .iter()
        .map(|c| c.answer_id.clone())
        .chain(["conflicted".to_string()])
        .collect();
    wait_until(LONG, "an answer to every bad file", || {
        expected
            .iter()
            .all(|id| outbox.join(format!("{id}.json")).exists())
    });

    // The daemon is still alive and serves a good message, from the inbox …
    assert!(daemon.0.try_wait().unwrap().is_none(), "orchestratord died");
    drop_file(
        &inbox,
        "still-alive.json",
        &bytes(&base("still-alive", "list-projects", None, json!({}))),
    );
    let alive = outbox.join("still-alive.json");
    wait_until(LONG, "the good message after the bad ones", || {
        alive.exists()
    });
    let resp = read_json(&alive);
    assert_eq!(resp["status"], "done", "{resp}");
    assert!(
        resp["content"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == "Proj"),
        "{resp}"
    );
    // … and over D-Bus.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(bus.connect());
    let answer = rt.block_on(async {
        let p = agentstore::bus::orchestrator::Orchestrator1Proxy::new(&conn)
            .await
            .unwrap();
        p.submit(r#"{"command": "help"}"#).await.unwrap()
    });
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["status"], "done", "{answer}");

    let mut report = Vec::new();
    let mut problems = Vec::new();
    let log = env.error_log()[errors_before..].to_vec();
    for c in &cases {
        let out = outbox.join(format!("{}.json", c.answer_id));
        let resp = read_json(&out);
        let err = resp["error"].as_str().unwrap_or_default().to_string();
        report.push(format!("{:<22} {}", c.stem, truncate(&err, 150)));
        let mut fail = |what: String| {
            problems.push(format!(
                "{}: {what}\n    answer: {}",
                c.stem,
                truncate(&resp.to_string(), 400)
            ))
        };
        if resp["status"] != "error" {
            fail("status is not \"error\"".into());
        }
        if resp["correlation_id"] != c.answer_id.as_str() {
            fail(format!("correlation_id is not {}", c.answer_id));
        }
        if resp["source"] != "orchestrator" || !resp["processed_time"].is_string() {
            fail("not an orchestrator response with processed_time".into());
        }
        for want in &c.expect {
            if !err.contains(want) {
                fail(format!("error does not mention {want:?}"));
            }
        }
        // The original, byte for byte, in processed_inbox/; gone from the inbox.
        let kept = processed.join(format!("{}.json", c.stem));
        if c.stem == "unreadable" && kept.exists() {
            // Kept as it was (mode 000); let the test read it back.
            std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        match std::fs::read(&kept) {
            Ok(b) if b == c.body => {}
            Ok(_) => fail(format!("{} differs from the original", kept.display())),
            Err(e) => fail(format!("{} missing: {e}", kept.display())),
        }
        if inbox.join(format!("{}.json", c.stem)).exists() {
            fail("still in the inbox".into());
        }
        if let Some(id) = &c.logged_as {
            let n = log
                .iter()
                .filter(|l| l["id"] == id.as_str() && l["type"] == "message")
                .count();
            if n != 1 {
                fail(format!("{n} errors.out lines with id {id:?} (expected 1)"));
            }
        }
    }
    eprintln!(
        "{} bad inbox files and their answers:\n{}",
        cases.len(),
        report.join("\n")
    );
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );

    // Exactly one answer per file: nothing else in the outbox (the conflict copy and the
    // non-documents were not answered).
    let mut all = expected.clone();
    all.insert("still-alive".into());
    assert_eq!(
        stems(&outbox),
        all,
        "outbox holds exactly one answer per message"
    );
    assert_eq!(read_json(&outbox.join("conflicted.json"))["status"], "done");

    // The conflict copy is set aside, not processed.
    let aside = env
        .root
        .join("conflicts/messaging-inbox")
        .join(conflict_name);
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        good_first,
        "conflict copy set aside intact"
    );
    assert!(!inbox.join(conflict_name).exists());
    assert!(!processed.join(conflict_name).exists());

    // Non-documents and dot-files are left where they were, untouched; nothing else is left.
    let mut left: Vec<String> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want: Vec<String> = leave_alone.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(
        left, want,
        "the inbox holds only the files the daemon must ignore"
    );

    // No job anywhere, and the counters agree with what was answered.
    let jobs = files_under(&env.root.join("Queues"))
        .into_iter()
        .filter(|p| p.components().any(|c| c.as_os_str() == "Jobs"))
        .collect::<Vec<_>>();
    assert!(jobs.is_empty(), "jobs were created: {jobs:?}");
    let answered = cases.len() as u64 + 3; // + conflicted, still-alive, the D-Bus help
    assert_eq!(
        counter(&conn, &rt, "MessagesProcessed"),
        answered,
        "MessagesProcessed"
    );
    assert_eq!(
        counter(&conn, &rt, "Errors"),
        cases.len() as u64,
        "Errors counts every answer with status error"
    );
    assert_eq!(counter(&conn, &rt, "JobsCreated"), 0, "JobsCreated");

    // The answers themselves are valid message documents.
    env.ok(&["validate", outbox.to_str().unwrap()]);

    assert!(daemon.0.try_wait().unwrap().is_none(), "orchestratord died");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(daemon.0.wait().unwrap().success(), "clean exit on SIGTERM");
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}
