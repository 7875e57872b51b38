//! The dashboard in a real browser: headless Chromium (Debian's `chromium`) loads each page
//! from agentstore-web over a store of 10,000 jobs, the DOM is checked for the expected rows
//! and numbers (through the DevTools protocol on a pipe), screenshots are kept as artifacts
//! (target/artifacts/web-*.png), and the live view follows a job's state change within a
//! second. Real parts: dbus-daemon, orchestratord, agentstore-web (listeners passed as
//! systemd passes them), chromium. Under CI a missing chromium fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::browser::Browser;
use crate::{common, web_env};

use common::TestEnv;
use common::bus::{KillOnDrop, skip, wait_until};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const JOBS: usize = 10_000;
const COMMANDS: [&str; 3] = ["research-code", "create-prd", "implement-tasks"];

fn status_of(i: usize) -> &'static str {
    if i % 50 == 7 {
        "queued"
    } else if i % 10 == 3 {
        "failed"
    } else {
        "finished"
    }
}

/// 10,000 jobs over two projects and three commands, with times, cost, turns and Claude's
/// JSON output; and a PRD made by two of them.
fn generate(env: &TestEnv, queue: &str) {
    let base = chrono::DateTime::parse_from_rfc3339("2026-11-20T00:00:00Z").unwrap();
    for i in 0..JOBS {
        let st = status_of(i);
        let q = base + chrono::Duration::seconds(i as i64 * 8);
        let start = q + chrono::Duration::seconds(1);
        let finish = start + chrono::Duration::seconds((i % 13 + 1) as i64 * 7);
        let ts =
            |t: chrono::DateTime<chrono::FixedOffset>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let project = if i % 2 == 0 { "Alpha" } else { "Beta" };
        let cost = 0.01 * (i % 5 + 1) as f64;
        let turns = i % 7 + 1;
        let runtime = if st == "queued" {
            json!({"status": "queued", "start_time": null, "finish_time": null, "process_id": null,
                   "llm_process_id": null, "error": null, "output": null})
        } else {
            let output = json!({"type": "result", "result": format!("Result text for job {i}"),
                                "total_cost_usd": cost, "num_turns": turns})
            .to_string();
            json!({"status": st, "start_time": ts(start), "finish_time": ts(finish),
                   "process_id": null, "llm_process_id": null,
                   "error": if st == "failed" { json!("it broke") } else { Value::Null },
                   "output": output, "cost_usd": cost, "num_turns": turns})
        };
        let job = json!({
            "config": {"project": project, "working_directory": "/tmp", "queue_time": ts(q),
                       "jobtype": "noop", "claude_command": COMMANDS[i % 3], "claude_extra_args": [],
                       "task_description": format!("Task {i}"), "supporting_data": {},
                       "timeout_seconds": 60, "user": "chenry"},
            "runtime": runtime,
        });
        let dir = match st {
            "queued" => "queued_jobs",
            "failed" => "failed_jobs",
            _ => "finished_jobs",
        };
        env.write(
            &format!("Queues/{queue}/Jobs/{dir}/job-{i:05}.json"),
            &job.to_string(),
        );
    }
    let prd = json!({
        "id": "prd-web-1", "project": "Alpha", "title": "Faster listings", "version": "1.0",
        "owner": "chenry", "status": "queued", "created_time": "2026-11-20T00:00:00Z",
        "update_time": "2026-11-20T01:00:00Z", "content": {"problem_statement": "Listings are slow"},
        "jobs": ["job-00000", "job-00002"], "implementation_report": null
    });
    env.write(
        "projects/Alpha/queued_prds/prd-web-1.json",
        &prd.to_string(),
    );
}

/// A store with chenry's `projects` and its queue's name; `None` (said) without chromium.
pub(crate) fn store_for_chromium(projects: &[&str]) -> Option<(TestEnv, String)> {
    if crate::browser::binary().is_none() {
        skip(
            "the dashboard in chromium",
            "chromium is not installed (apt-get install chromium; .ci/run does)",
        );
        return None;
    }
    let env = TestEnv::initialised();
    for p in projects {
        env.ok(&["add-project", p, "--directory", "/tmp", "--owner", "chenry"]);
    }
    let queue = std::fs::read_dir(env.root.join("Queues"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .next()
        .unwrap();
    Some((env, queue))
}

#[test]
fn dashboard_pages_in_chromium_over_10000_jobs() {
    let Some((env, queue)) = store_for_chromium(&["Alpha", "Beta"]) else {
        return;
    };
    generate(&env, &queue);
    let served = web_env::serve(&env.root, &env.home, env.dir.path());
    let (bus, port, token) = (&served.bus, served.port, served.token.clone());
    let base = format!("http://127.0.0.1:{port}");
    let login = |next: &str| {
        format!(
            "{base}/login?token={token}&next={}",
            next.replace('&', "%26")
                .replace('?', "%3F")
                .replace('=', "%3D")
        )
    };

    let mut b = Browser::start();
    // Without the token: refused.
    b.open(&format!("{base}/jobs"));
    assert_eq!(
        b.eval("document.querySelector('h1').textContent"),
        json!("Unauthorized")
    );

    // Queues.
    b.open(&login("/"));
    assert_eq!(
        b.eval("document.querySelectorAll('#queues tr[data-queue]').length"),
        json!(1)
    );
    assert_eq!(
        b.eval(&format!(
            "document.querySelector('tr[data-queue=\"{queue}\"]') !== null"
        )),
        json!(true)
    );
    let queued = (0..JOBS).filter(|i| status_of(*i) == "queued").count();
    assert_eq!(
        b.eval("document.querySelector('#queues td.queued').textContent"),
        json!(queued.to_string())
    );
    b.screenshot("web-queues");

    // Jobs: the first page of 100, the total, and paging.
    let failed = (0..JOBS).filter(|i| status_of(*i) == "failed").count();
    b.open(&format!("{base}/jobs"));
    assert_eq!(
        b.eval("document.querySelectorAll('#jobs tbody tr').length"),
        json!(100)
    );
    assert_eq!(
        b.eval("document.querySelector('#total').textContent"),
        json!(JOBS.to_string())
    );
    assert_eq!(
        b.eval("document.querySelector('#jobs tbody tr').dataset.job"),
        json!("job-00000")
    );
    b.open(&format!("{base}/jobs?offset=9900&limit=100"));
    assert_eq!(
        b.eval("document.querySelector('#jobs tbody tr:last-child').dataset.job"),
        json!("job-09999")
    );
    assert_eq!(b.eval("document.querySelector('#next')"), Value::Null);
    // Filters: status, project, queue.
    b.open(&format!(
        "{base}/jobs?status=failed&project=Beta&queue={queue}"
    ));
    let beta_failed = (0..JOBS)
        .filter(|i| status_of(*i) == "failed" && i % 2 == 1)
        .count();
    assert_eq!(
        b.eval("document.querySelector('#total').textContent"),
        json!(beta_failed.to_string())
    );
    assert_eq!(
        b.eval("[...document.querySelectorAll('#jobs tbody tr td:nth-child(2)')].every(td => td.textContent === 'failed')"),
        json!(true)
    );
    b.screenshot("web-jobs");
    b.open(&format!("{base}/jobs?status=queued"));
    assert_eq!(
        b.eval("document.querySelector('#total').textContent"),
        json!(queued.to_string())
    );
    b.open(&format!("{base}/jobs?status=failed"));
    assert_eq!(
        b.eval("document.querySelector('#total').textContent"),
        json!(failed.to_string())
    );

    // A job: Claude's JSON result as text, cost, turns.
    b.open(&format!("{base}/jobs/job-00013"));
    assert_eq!(
        b.eval("document.querySelector('#output').textContent"),
        json!("Result text for job 13")
    );
    assert_eq!(
        b.eval("document.querySelector('#f-cost').textContent"),
        json!("$0.0400")
    );
    assert_eq!(
        b.eval("document.querySelector('#f-turns').textContent"),
        json!("7")
    );
    assert_eq!(
        b.eval("document.querySelector('#f-error').textContent"),
        json!("it broke")
    );
    b.screenshot("web-job");

    // A PRD with its provenance.
    b.open(&format!("{base}/prds"));
    assert_eq!(
        b.eval("document.querySelectorAll('#prds tr[data-prd]').length"),
        json!(1)
    );
    b.open(&format!("{base}/prds/prd-web-1"));
    assert_eq!(
        b.eval("[...document.querySelectorAll('#provenance a')].map(a => a.textContent).join(',')"),
        json!("job-00000,job-00002")
    );
    b.screenshot("web-prd");

    // Messages: 150 answered requests, newest first, 100 a page; one with its answer.
    for i in 0..150 {
        for (folder, status, source) in [
            ("processed_inbox", "queued", "user"),
            ("processed_outbox", "done", "orchestrator"),
        ] {
            env.write(
                &format!("messaging/{folder}/msg-{i:03}.json"),
                &json!({"correlation_id": format!("msg-{i:03}"), "source": source,
                    "project": "Alpha", "queue_time": format!("2026-02-01T00:{:02}:{:02}Z", i / 60, i % 60),
                    "processed_time": "2026-02-01T01:00:00Z", "command": "research-code",
                    "content": {"task": format!("task {i}")}, "status": status, "user": "chenry"})
                .to_string(),
            );
        }
    }
    b.open(&format!("{base}/messages"));
    assert_eq!(
        b.eval("document.querySelectorAll('#messages tbody tr').length"),
        json!(100)
    );
    assert_eq!(
        b.eval("document.querySelector('#total').textContent"),
        json!("300")
    );
    assert_eq!(
        b.eval("document.querySelector('#messages tbody tr').dataset.message"),
        json!("msg-149")
    );
    b.screenshot("web-messages");
    b.open(&format!("{base}/messages/msg-007"));
    assert_eq!(
        b.eval("document.querySelector('#answer-status').textContent"),
        json!("done")
    );
    assert!(
        b.eval("document.querySelector('#request-content').textContent")
            .as_str()
            .unwrap()
            .contains("task 7")
    );
    b.screenshot("web-message");

    // Charts over the 2000 most recent jobs.
    b.open(&format!("{base}/charts"));
    let recent: Vec<usize> = (JOBS - 2000..JOBS).collect();
    let ended = recent.iter().filter(|i| status_of(**i) != "queued").count();
    assert_eq!(
        b.eval("[...document.querySelectorAll('#chart-hourly g.bar')].reduce((n, g) => n + (+g.dataset.finished) + (+g.dataset.failed), 0)"),
        json!(ended)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#chart-durations g.dur').length"),
        json!(3)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#chart-cost g.cost').length"),
        json!(2)
    );
    let alpha: f64 = recent
        .iter()
        .filter(|i| status_of(**i) != "queued" && *i % 2 == 0)
        .map(|i| 0.01 * (i % 5 + 1) as f64)
        .sum();
    assert_eq!(
        b.eval(
            "document.querySelector('#chart-cost g.cost[data-project=\"Alpha\"]').dataset.total"
        ),
        json!(format!("{alpha:.2}"))
    );
    b.screenshot("web-charts");

    // Live: a queued job's page follows its move to running (the page has no other way to
    // learn it; how fast is a benchmark's question, not this test's: a loaded machine may
    // take seconds).
    b.open(&format!("{base}/jobs/job-00007"));
    assert_eq!(
        b.eval("document.querySelector('#f-status').textContent"),
        json!("queued")
    );
    b.wait_for(
        Duration::from_secs(20),
        "the event stream",
        "document.body.dataset.live === 'connected'",
    );
    let from = env
        .root
        .join(format!("Queues/{queue}/Jobs/queued_jobs/job-00007.json"));
    let to = env
        .root
        .join(format!("Queues/{queue}/Jobs/running_jobs/job-00007.json"));
    let mut job: Value = serde_json::from_str(&std::fs::read_to_string(&from).unwrap()).unwrap();
    job["runtime"]["status"] = json!("running");
    job["runtime"]["start_time"] = json!("2026-11-30T00:00:00Z");
    std::fs::write(&from, job.to_string()).unwrap();
    std::fs::rename(&from, &to).unwrap();
    // What the queue manager says on the bus when it moves a job.
    let path = format!("/org/agentstore/Queue/{}", queue.replace(['-', '.'], "_"));
    let t0 = Instant::now();
    let o = Command::new("busctl")
        .args([
            "--address",
            &bus.address,
            "emit",
            &path,
            "org.agentstore.Queue1",
            "JobStateChanged",
            "sss",
            "job-00007",
            "queued",
            "running",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    b.wait_for(
        Duration::from_secs(30),
        "the job page to follow the state change",
        "document.querySelector('#f-status').textContent === 'running'",
    );
    eprintln!("live update after {:?}", t0.elapsed());
}

/// The live view follows a REAL job: a queue manager (real process, direct launcher, real
/// agent-worker running a 2-second noop job) moves it queued → running → finished, and the
/// job page in Chromium shows each state within a second of the job file reaching its folder.
/// Also the machines page, with the manager's heartbeat, in a screenshot.
#[test]
fn live_view_follows_a_real_queue_manager() {
    let Some((env, queue)) = store_for_chromium(&[]) else {
        return;
    };
    // The job runs as its project owner's Unix user: one that exists here.
    env.ok(&[
        "add-user",
        "ops",
        "--name",
        "Ops",
        "--email",
        "ops@x",
        "--unix-user",
        "root",
    ]);
    env.ok(&[
        "add-project",
        "Alpha",
        "--directory",
        "/tmp",
        "--owner",
        "ops",
    ]);
    let mut job: Value = serde_json::from_str(&common::noop_job("2026-11-30T00:00:00Z")).unwrap();
    job["config"]["project"] = json!("Alpha");
    job["config"]["supporting_data"] = json!({"sleep_seconds": 2.0});
    env.write(
        &format!("Queues/{queue}/Jobs/queued_jobs/live-1.json"),
        &job.to_string(),
    );
    let served = web_env::serve(&env.root, &env.home, env.dir.path());
    let base = format!("http://127.0.0.1:{}", served.port);
    let mut b = Browser::start();
    b.open(&format!(
        "{base}/login?token={}&next=/jobs/live-1",
        served.token
    ));
    assert_eq!(
        b.eval("document.querySelector('#f-status').textContent"),
        json!("queued")
    );
    b.wait_for(
        Duration::from_secs(20),
        "the event stream",
        "document.body.dataset.live === 'connected'",
    );
    let _manager = crate::daemons::queue_manager(&env.root, &queue)
        .on(&served.bus)
        .env("HOME", &env.home)
        .spawn();
    for state in ["running", "finished"] {
        let file = env
            .root
            .join(format!("Queues/{queue}/Jobs/{state}_jobs/live-1.json"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut moved: Option<Instant> = None;
        let shows = format!("document.querySelector('#f-status').textContent === '{state}'");
        // Awaited in the page a tenth of a second at a time, the files looked at between.
        loop {
            if moved.is_none() && file.exists() {
                moved = Some(Instant::now());
            }
            if b.becomes(&shows, Duration::from_millis(100)) {
                // Shown before this loop saw the file: within a second as well.
                let after = moved.map(|t| t.elapsed()).unwrap_or_default();
                eprintln!("page showed {state} {after:?} after the file moved");
                break;
            }
            let failed = env
                .root
                .join(format!("Queues/{queue}/Jobs/failed_jobs/live-1.json"));
            if let Ok(text) = std::fs::read_to_string(&failed) {
                panic!("the job failed: {text}");
            }
            let shown = b.eval("document.querySelector('#f-status').textContent");
            if let Some(t) = moved {
                assert!(
                    t.elapsed() < Duration::from_secs(1),
                    "the job page still shows {shown} a second after the job became {state}"
                );
            }
            assert!(
                Instant::now() < deadline,
                "the job never became {state} (page shows {shown})"
            );
        }
    }
    b.screenshot("web-job-live");
    b.open(&format!("{base}/machines"));
    wait_until(Duration::from_secs(30), "the manager's heartbeat", || {
        b.open(&format!("{base}/machines"));
        b.eval("document.querySelectorAll('#machines tr[data-machine]').length")
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    b.screenshot("web-machines");
    // The machine's own page: its daemons' heartbeats, the manager's among them.
    let host = b.eval("document.querySelector('#machines tr[data-machine]').dataset.machine");
    b.open(&format!("{base}/machines/{}", host.as_str().unwrap()));
    assert_eq!(
        b.eval("document.querySelector('#heartbeats tr[data-daemon=\"queue-manager\"] td:nth-child(2)').textContent"),
        json!(queue)
    );
    b.screenshot("web-machine");
}

/// A request waiting for a person on the job page, in Chromium (issue 32): a REAL queue
/// manager re-adopts a running job (a live stand-in worker whose command line names it) and
/// publishes the request its worker wrote; the job page shows it under "Waiting for an
/// answer" with its tool, what it asks, the deadline and visible Allow and Deny buttons
/// (screenshot web-job-approval.png); clicking Allow in the browser writes the answer, as the
/// dashboard's user, and the page then no longer asks.
#[test]
fn a_waiting_approval_is_answered_on_the_job_page_in_chromium() {
    let Some((env, queue)) = store_for_chromium(&["Alpha"]) else {
        return;
    };
    // Paused: the manager adopts and publishes, it starts nothing.
    let qp = env.root.join(format!("Queues/{queue}/queue.json"));
    let mut qdoc: Value = serde_json::from_str(&std::fs::read_to_string(&qp).unwrap()).unwrap();
    qdoc["runtime"]["paused"] = json!(true);
    std::fs::write(&qp, qdoc.to_string()).unwrap();
    let id = "ask-1";
    // Its own process group, all of it killed at the end (the shell and its sleep).
    let worker = {
        use std::os::unix::process::CommandExt;
        KillOnDrop(
            Command::new("sh")
                .args(["-c", "sleep 600; :", id])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let worker_group = nix::unistd::Pid::from_raw(worker.0.id() as i32);
    let mut job: Value = serde_json::from_str(&common::noop_job("2026-11-30T00:00:00Z")).unwrap();
    job["config"]["project"] = json!("Alpha");
    job["config"]["user"] = json!("chenry");
    job["config"]["timeout_seconds"] = json!(3600);
    job["config"]["task_description"] = json!("Fetch the growth data");
    job["runtime"]["status"] = json!("running");
    job["runtime"]["start_time"] = json!(agentstore::model::Timestamp::now().to_string());
    job["runtime"]["process_id"] = json!(worker.0.id());
    env.write(
        &format!("Queues/{queue}/Jobs/running_jobs/{id}.json"),
        &job.to_string(),
    );
    let served = web_env::serve(&env.root, &env.home, env.dir.path());
    let _manager = crate::daemons::queue_manager(&env.root, &queue)
        .on(&served.bus)
        .env("HOME", &env.home)
        .spawn();
    common::bus::wait_for_name(&served.bus, &agentstore::bus::queue_bus_name(&queue));
    let store = agentstore::store::Store::open(&env.root).unwrap();
    let request = format!("{id}-a1");
    store
        .write_approval_request(
            &queue,
            &agentstore::model::approval::ApprovalRequest {
                request_id: request.clone(),
                job_id: id.into(),
                tool: "Bash".into(),
                summary: "curl -s https://example.org/growth.csv -o growth.csv".into(),
                input: json!({"command": "curl -s https://example.org/growth.csv -o growth.csv"}),
                requested_at: agentstore::model::Timestamp::now(),
                deadline: serde_json::from_value(json!("2099-01-01T00:00:00Z")).unwrap(),
            },
        )
        .unwrap();
    let base = format!("http://127.0.0.1:{}", served.port);
    let mut b = Browser::start();
    b.open(&format!(
        "{base}/login?token={}&next=/jobs/{id}",
        served.token
    ));
    // The page is drawn by the server: load it again until the manager has published it.
    let row = format!("#pending tr[data-request=\"{request}\"]");
    wait_until(
        Duration::from_secs(30),
        "the request on the job page",
        || {
            let there = b.eval(&format!("!!document.querySelector('{row}')")) == json!(true);
            if !there {
                b.open(&format!("{base}/jobs/{id}"));
            }
            there
        },
    );
    let cells = b.eval(&format!(
        "Array.from(document.querySelectorAll('{row} td')).slice(0, 3).map(td => td.innerText)"
    ));
    assert_eq!(
        cells,
        json!([
            "Bash",
            "curl -s https://example.org/growth.csv -o growth.csv",
            "denied at 2099-01-01T00:00:00Z"
        ]),
        "the row as shown"
    );
    // The heading and both buttons are on screen, not only in the HTML.
    let heading = b.eval(
        "Array.from(document.querySelectorAll('h2')).map(h => h.innerText).includes('Waiting for an answer')",
    );
    assert_eq!(heading, json!(true));
    for (button, label) in [("allow", "Allow"), ("deny", "Deny")] {
        let shown = b.eval(&format!(
            "(() => {{ const e = document.querySelector('{row} button[value=\"{button}\"]'); \
             if (!e) return null; const r = e.getBoundingClientRect(); \
             const s = getComputedStyle(e); \
             return [e.innerText, r.width > 10 && r.height > 10 && s.visibility === 'visible' && s.display !== 'none', \
                     r.top >= 0 && r.bottom <= window.innerHeight + window.scrollY]; }})()"
        ));
        assert_eq!(shown, json!([label, true, true]), "the {label} button");
    }
    b.eval(&format!(
        "document.querySelector('{row}').scrollIntoView({{block: 'center'}})"
    ));
    b.screenshot("web-job-approval");
    // Allow, clicked in the browser: the answer is written through the manager.
    b.eval(&format!(
        "document.querySelector('{row} button[value=\"allow\"]').click()"
    ));
    let answer = store.approval_answer_path(&queue, &request);
    wait_until(Duration::from_secs(30), "the answer file", || {
        answer.exists()
    });
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&answer).unwrap()).unwrap();
    assert_eq!(a["allow"], json!(true), "{a}");
    let by = a["by"].as_str().unwrap_or_default();
    assert!(
        !by.is_empty() && by != "deadline",
        "answered by a person: {a}"
    );
    // The stand-in worker does not act on the answer; once the request is gone (a real
    // worker removes both files), the page stops asking.
    store.remove_approval(&queue, &request);
    wait_until(
        Duration::from_secs(30),
        "the request off the job page",
        || {
            b.open(&format!("{base}/jobs/{id}"));
            b.eval("!!document.querySelector('#pending')") == json!(false)
        },
    );
    let _ = nix::sys::signal::killpg(worker_group, nix::sys::signal::Signal::SIGKILL);
    drop(worker);
}
