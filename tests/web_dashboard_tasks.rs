//! A PRD's task page in a real browser (issue 30, "retry-task, cancel-task … a dashboard page
//! per PRD"): headless Chromium logs in with the server's token, opens the PRD's page and
//! finds Retry on the failed task only and Cancel on the tasks not yet ended (none on a done
//! one); clicking Retry queues the task's new job through orchestratord (the task is ready
//! again, naming it), clicking Cancel cancels the waiting task; the page comes back to the
//! PRD. A cross-site POST of the same form (another Origin) is refused, the task unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::browser::Browser;
use crate::common::bus::wait_until;
use crate::web_dashboard::store_for_chromium;
use crate::{common, web_env};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

fn task(id: &str, status: &str, deps: &[&str], jobs: &[&str]) -> String {
    json!({
        "schema_version": "0.6", "id": id, "prd": "prd-g", "project": "Alpha", "title": format!("task {id}"),
        "description": "d", "acceptance_criteria": [], "depends_on": deps, "status": status,
        "jobs": jobs, "created_time": "2026-01-01T00:00:00Z", "update_time": "2026-01-01T00:00:00Z"
    })
    .to_string()
}

#[test]
fn a_tasks_retry_and_cancel_buttons_work_in_chromium_and_only_same_site() {
    let Some((env, queue)) = store_for_chromium(&["Alpha"]) else {
        return;
    };
    env.write(
        "projects/Alpha/running_prds/prd-g.json",
        &json!({
            "id": "prd-g", "project": "Alpha", "title": "G", "version": "1.0", "owner": "chenry",
            "status": "running", "created_time": "2026-01-01T00:00:00Z",
            "update_time": "2026-01-01T00:00:00Z", "content": {"tasks": ["D", "F", "W"]}, "jobs": []
        })
        .to_string(),
    );
    // F failed (its job failed), W waits for F (no job yet), D is done.
    let mut job: Value = serde_json::from_str(&common::noop_job("2026-01-01T00:00:00Z")).unwrap();
    job["config"]["project"] = json!("Alpha");
    job["config"]["user"] = json!("chenry");
    job["runtime"]["status"] = json!("failed");
    job["runtime"]["error"] = json!("told to fail");
    env.write(
        &format!("Queues/{queue}/Jobs/failed_jobs/job-f.json"),
        &job.to_string(),
    );
    let f = env.write(
        "projects/Alpha/tasks/prd-g/F.json",
        &task("F", "failed", &[], &["job-f"]),
    );
    let w = env.write(
        "projects/Alpha/tasks/prd-g/W.json",
        &task("W", "pending", &["F"], &[]),
    );
    env.write(
        "projects/Alpha/tasks/prd-g/D.json",
        &task("D", "done", &[], &[]),
    );
    let read = |p: &std::path::Path| -> Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let served = web_env::serve(&env.root, &env.home, env.dir.path());
    let base = format!("http://127.0.0.1:{}", served.port);

    // A cross-site POST of the Cancel form: refused, W as it was.
    let before = read(&w);
    let o = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["-H", &format!("Authorization: Bearer {}", served.token)])
        .args(["-H", "Origin: http://evil.example"])
        .arg(format!("{base}/prds/prd-g/tasks/W/cancel"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "403");
    assert_eq!(read(&w), before, "a cross-site POST changed the task");

    let mut b = Browser::start();
    b.open(&format!(
        "{base}/login?token={}&next=/prds/prd-g",
        served.token
    ));
    let buttons = |b: &mut Browser, t: &str| -> Value {
        b.eval(&format!(
            "Array.from(document.querySelectorAll('#tasks tr[data-task=\"{t}\"] button')).map(e => e.innerText)"
        ))
    };
    assert_eq!(buttons(&mut b, "F"), json!(["Retry", "Cancel"]));
    assert_eq!(buttons(&mut b, "W"), json!(["Cancel"]));
    assert_eq!(buttons(&mut b, "D"), json!([]));
    b.screenshot("web-prd-task-buttons");

    // Retry F, clicked: a new job for it, F ready again; back on the PRD's page.
    b.eval("document.querySelector('#tasks tr[data-task=\"F\"] form.task-retry button').click()");
    // The task is written first, then its new job: wait for both.
    wait_until(
        Duration::from_secs(30),
        "F retried, its new job queued",
        || {
            let now = read(&f);
            now["jobs"].as_array().unwrap().len() == 2
                && env
                    .root
                    .join(format!(
                        "Queues/{queue}/Jobs/queued_jobs/{}.json",
                        now["jobs"][1].as_str().unwrap()
                    ))
                    .is_file()
        },
    );
    let now = read(&f);
    assert_eq!(now["status"], "ready", "{now}");
    wait_until(Duration::from_secs(30), "the PRD page again", || {
        b.eval("location.pathname") == json!("/prds/prd-g")
            && b.eval("document.readyState") == json!("complete")
    });
    // W, waiting for F, is cancelled by its button.
    b.eval("document.querySelector('#tasks tr[data-task=\"W\"] form.task-cancel button').click()");
    wait_until(Duration::from_secs(30), "W cancelled", || {
        read(&w)["status"] == "cancelled"
    });
    wait_until(Duration::from_secs(30), "the page shows it", || {
        b.open(&format!("{base}/prds/prd-g"));
        b.eval("document.querySelector('#tasks tr[data-task=\"W\"] td:nth-child(2)').innerText")
            == json!("cancelled")
    });
    assert_eq!(buttons(&mut b, "W"), json!(["Retry"]));
}
