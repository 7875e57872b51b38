//! Issue 30's other front doors: `list-tasks`/`view-task` over Orchestrator1.Submit, the
//! same answers at /api/v1/tasks, and a PRD's dashboard page drawing its task graph as SVG
//! (escaped, coloured by state, linked to the jobs). PRD §10 throughout: the user `nob`
//! (Unix account nobody) sees the tasks of his project only; another project's PRD and
//! tasks read as not found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_api::{parsed, start};
use serde_json::json;

fn task(
    prd: &str,
    project: &str,
    id: &str,
    title: &str,
    status: &str,
    deps: &[&str],
    jobs: &[&str],
) -> String {
    json!({
        "schema_version": "0.6", "id": id, "prd": prd, "project": project, "title": title,
        "description": "d", "acceptance_criteria": [], "depends_on": deps, "status": status,
        "jobs": jobs, "created_time": "2026-01-01T00:00:00Z", "update_time": "2026-01-01T00:00:00Z"
    })
    .to_string()
}

fn prd(id: &str, project: &str, owner: &str) -> String {
    json!({
        "id": id, "project": project, "title": "T", "version": "1.0", "owner": owner,
        "status": "running", "created_time": "2026-01-01T00:00:00Z",
        "update_time": "2026-01-01T00:00:00Z", "content": {"tasks": ["A", "B"]}, "jobs": []
    })
    .to_string()
}

#[test]
fn tasks_are_served_over_dbus_the_api_and_drawn_on_the_prd_page() {
    let Some(w) = start() else { return };
    let env = &w.env;
    env.write(
        "projects/Mine/running_prds/prd-m.json",
        &prd("prd-m", "Mine", "nob"),
    );
    env.write(
        "projects/Mine/tasks/prd-m/A.json",
        &task(
            "prd-m",
            "Mine",
            "A",
            "<script>alert(1)</script>",
            "done",
            &[],
            &["j-a"],
        ),
    );
    env.write(
        "projects/Mine/tasks/prd-m/B.json",
        &task(
            "prd-m",
            "Mine",
            "B",
            "second",
            "pending",
            &["A", "prd-t/T"],
            &[],
        ),
    );
    env.write(
        "projects/Theirs/running_prds/prd-t.json",
        &prd("prd-t", "Theirs", "chenry"),
    );
    env.write(
        "projects/Theirs/tasks/prd-t/T.json",
        &task("prd-t", "Theirs", "T", "theirs", "pending", &[], &[]),
    );

    // D-Bus and the API answer the same, narrowed to what nob may see.
    let over_bus = w.dbus_direct(Some("nob"), "list-tasks", json!({})).unwrap();
    let ids: Vec<&str> = over_bus
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["A", "B"], "{over_bus}");
    let api = parsed(w.unix(Some("nobody"), "GET", "/api/v1/tasks", None));
    assert_eq!(api, over_bus);
    let all = w.dbus_direct(None, "list-tasks", json!({})).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    let done = parsed(w.unix(None, "GET", "/api/v1/tasks?prd=prd-m&status=done", None));
    assert_eq!(done.as_array().unwrap().len(), 1, "{done}");
    assert_eq!(done[0]["id"], "A");
    let one = parsed(w.unix(Some("nobody"), "GET", "/api/v1/tasks/prd-m/B", None));
    assert_eq!(one["depends_on"], json!(["A", "prd-t/T"]));
    assert_eq!(
        one,
        w.dbus_direct(Some("nob"), "view-task", json!({"task": "prd-m/B"}))
            .unwrap()
    );
    // Another project's PRD and task: not found, over both doors; bad input: 400.
    let (code, body) = w.unix(Some("nobody"), "GET", "/api/v1/tasks/prd-t/T", None);
    assert_eq!(code, 404, "{body}");
    let (code, body) = w.unix(Some("nobody"), "GET", "/api/v1/tasks?prd=prd-t", None);
    assert_eq!(code, 404, "{body}");
    let (code, body) = w.unix(Some("nobody"), "GET", "/api/v1/tasks?project=Theirs", None);
    assert!(code == 403 || code == 404, "{code} {body}");
    let e = w
        .dbus_direct(Some("nob"), "view-task", json!({"task": "prd-t/T"}))
        .unwrap_err();
    assert!(e.1.contains("not found"), "{e:?}");
    let (code, body) = w.unix(None, "GET", "/api/v1/tasks?status=bogus", None);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("bogus"), "{body}");

    // The PRD's page: the graph, escaped, coloured, linked; the other PRD's node is grey.
    let (code, html) = w.unix(Some("nobody"), "GET", "/prds/prd-m", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains(r#"<svg id="task-graph""#), "{html}");
    assert!(
        !html.contains("<script>alert(1)"),
        "unescaped title: {html}"
    );
    assert!(html.contains("&lt;script&gt;alert(1)"), "{html}");
    assert!(
        html.contains(r#"data-task="A" data-status="done"><a href="/jobs/j-a""#),
        "{html}"
    );
    assert!(
        html.contains(r#"data-task="B" data-status="pending""#),
        "{html}"
    );
    assert!(
        html.contains(r#"data-from="A" data-to="B""#)
            && html.contains(r#"data-from="prd-t/T" data-to="B""#),
        "{html}"
    );
    assert!(html.contains(r#"<table id="tasks">"#), "{html}");
    // The other PRD's page is drawn for its owner's side (root here), refused to nob.
    let (code, html) = w.unix(None, "GET", "/prds/prd-t", None);
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains(r#"data-task="T" data-status="pending""#),
        "{html}"
    );
    let (code, html) = w.unix(Some("nobody"), "GET", "/prds/prd-t", None);
    assert_ne!(code, 200, "{html}");
    assert!(!html.contains("task-graph"), "{html}");
}

/// The state-changing task commands at /api/v1/tasks (issue 30: "the same over
/// Orchestrator1, /api/v1/tasks"): set-task as `POST /api/v1/tasks/{prd}/{task}` with the
/// change as its body, `…/retry` and `…/cancel`, for the task's owner only; bad input is a
/// 400 naming what is wrong, with the task left as it was; another project's task is not
/// found, and stays as it was.
#[test]
fn tasks_are_changed_retried_and_cancelled_over_the_api() {
    let Some(w) = start() else { return };
    let env = &w.env;
    env.write(
        "projects/Mine/running_prds/prd-m.json",
        &prd("prd-m", "Mine", "nob"),
    );
    let a = env.write(
        "projects/Mine/tasks/prd-m/A.json",
        &task("prd-m", "Mine", "A", "first", "ready", &[], &["job-0"]),
    );
    let b = env.write(
        "projects/Mine/tasks/prd-m/B.json",
        &task("prd-m", "Mine", "B", "second", "pending", &["A"], &[]),
    );
    env.write(
        "projects/Mine/tasks/prd-m/C.json",
        &task("prd-m", "Mine", "C", "third", "pending", &["B"], &[]),
    );
    env.write(
        "projects/Theirs/running_prds/prd-t.json",
        &prd("prd-t", "Theirs", "chenry"),
    );
    let t = env.write(
        "projects/Theirs/tasks/prd-t/T.json",
        &task("prd-t", "Theirs", "T", "theirs", "pending", &[], &[]),
    );
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let before_b = read(&b);

    // Bad input: each a 400 naming it; B unchanged.
    for (body, says) in [
        (r#"{"colour": "red"}"#, "colour"),
        (r#"{"title": 7}"#, "title"),
        (r#"{"depends_on": "A"}"#, "depends_on"),
        (r#"{}"#, "nothing to change"),
        ("not json", "not a task change"),
        (r#"{"depends_on": ["B"]}"#, "itself"),
        (r#"{"depends_on": ["ghost"]}"#, "ghost"),
        (r#"{"depends_on": ["prd-t/T"]}"#, "may see"),
        (r#"{"depends_on": ["C"]}"#, "cycle"),
    ] {
        let (code, text) = w.unix(Some("nobody"), "POST", "/api/v1/tasks/prd-m/B", Some(body));
        assert_eq!(code, 400, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
        assert_eq!(read(&b), before_b, "{body} changed B");
    }
    // A task whose job is queued is not changed under it.
    let before_a = read(&a);
    let (code, text) = w.unix(
        Some("nobody"),
        "POST",
        "/api/v1/tasks/prd-m/A",
        Some(r#"{"title": "renamed"}"#),
    );
    assert!(
        code == 400 && text.contains("before its job starts"),
        "{code} {text}"
    );
    assert_eq!(read(&a), before_a);

    // The owner's change: the task as it is now, on disk too, and the same as view-task.
    let (code, text) = w.unix(
        Some("nobody"),
        "POST",
        "/api/v1/tasks/prd-m/B",
        Some(r#"{"description": "write B.txt", "depends_on": []}"#),
    );
    assert_eq!(code, 200, "{text}");
    let now = read(&b);
    assert_eq!(now["description"], "write B.txt");
    assert_eq!(now["depends_on"], json!([]));

    // Another project's task: not found, unchanged, whichever verb.
    let before_t = read(&t);
    for (path, body) in [
        ("/api/v1/tasks/prd-t/T", Some(r#"{"title": "mine now"}"#)),
        ("/api/v1/tasks/prd-t/T/retry", None),
        ("/api/v1/tasks/prd-t/T/cancel", None),
    ] {
        let (code, text) = w.unix(Some("nobody"), "POST", path, body);
        assert_eq!(code, 404, "{path}: {text}");
        assert_eq!(read(&t), before_t, "{path} changed T");
    }
    // GET on a POST-only path: 405.
    let (code, text) = w.unix(Some("nobody"), "GET", "/api/v1/tasks/prd-m/A/retry", None);
    assert_eq!(code, 405, "{text}");

    // Retry of a task that has not failed: refused, saying why.
    let (code, text) = w.unix(Some("nobody"), "POST", "/api/v1/tasks/prd-m/A/retry", None);
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("cancel it first"), "{text}");
    // Cancel: the task cancelled, its live job named (and asked of its queue manager).
    let (code, text) = w.unix(Some("nobody"), "POST", "/api/v1/tasks/prd-m/A/cancel", None);
    assert_eq!(code, 200, "{text}");
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["cancelled"], true, "{r}");
    assert_eq!(r["job"], "job-0", "{r}");
    assert!(r["job_note"].as_str().unwrap().contains("job-0"), "{r}");
    assert_eq!(read(&a)["status"], "cancelled");
}
