//! The HTTP API (`agentstore-web`) is the D-Bus API in another dress: each endpoint answers
//! what the D-Bus method it mirrors answers for the same user, refuses what it refuses, and
//! the server takes its listeners from `LISTEN_FDS` as systemd passes them.
//!
//! Real parts: a private dbus-daemon, orchestratord, agentstore-web started with a Unix and a
//! loopback TCP listener passed by this test (fds 3 and 4, `LISTEN_PID` its own pid), curl as
//! the client, `runuser` to call as another Unix user (`nobody`). Needs root (CI runs as root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, web_env};

use common::TestEnv;
use common::bus::{KillOnDrop, PrivateBus, skip, wait_until};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use web_env::spawn_web;

pub(crate) struct Web {
    pub(crate) env: TestEnv,
    bus: PrivateBus,
    _orchestratord: KillOnDrop,
    web: KillOnDrop,
    sock: PathBuf,
    tcp: u16,
    token: String,
    queue: String,
}

pub(crate) fn start() -> Option<Web> {
    if !nix::unistd::getuid().is_root() {
        skip("the web API", "needs root to call as user nobody (runuser)");
        return None;
    }
    for tool in ["curl", "runuser", "dbus-daemon"] {
        if !common::bus::have(tool) {
            skip("the web API", &format!("{tool} is not installed"));
            return None;
        }
    }
    let env = TestEnv::initialised();
    env.ok(&[
        "add-user",
        "nob",
        "--name",
        "N",
        "--email",
        "n@x",
        "--unix-user",
        "nobody",
    ]);
    env.ok(&[
        "add-project",
        "Mine",
        "--directory",
        "/tmp",
        "--owner",
        "nob",
    ]);
    env.ok(&[
        "add-project",
        "Theirs",
        "--directory",
        "/tmp",
        "--owner",
        "chenry",
    ]);
    let queue = std::fs::read_dir(env.root.join("Queues"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .next()
        .unwrap();
    // Jobs of both projects, queued at distinct times.
    for i in 0..7 {
        let (project, user) = if i % 2 == 0 {
            ("Mine", "nob")
        } else {
            ("Theirs", "chenry")
        };
        let mut job: Value =
            serde_json::from_str(&common::noop_job(&format!("2026-01-01T00:00:{i:02}Z"))).unwrap();
        job["config"]["project"] = json!(project);
        job["config"]["user"] = json!(user);
        env.write(
            &format!("Queues/{queue}/Jobs/queued_jobs/job-{i}.json"),
            &job.to_string(),
        );
    }
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o750)).unwrap();
    let served = web_env::serve(&env.root, &env.home, env.dir.path());
    Some(Web {
        env,
        bus: served.bus,
        _orchestratord: served.orchestratord,
        web: served.web,
        sock: served.sock,
        tcp: served.port,
        token: served.token,
        queue,
    })
}

impl Web {
    /// `curl` over the Unix socket, as `user` (None: root); (status, body).
    pub(crate) fn unix(
        &self,
        user: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let json: &[&str] = match body {
            Some(_) => &["Content-Type: application/json"],
            None => &[],
        };
        self.unix_with(user, method, path, json, body)
    }

    /// [`Web::unix`] with `headers`.
    fn unix_with(
        &self,
        user: Option<&str>,
        method: &str,
        path: &str,
        headers: &[&str],
        body: Option<&str>,
    ) -> (u16, String) {
        let mut c = match user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--", "curl"]);
                c
            }
            None => Command::new("curl"),
        };
        c.args([
            "-sS",
            "--max-time",
            "20",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-X",
            method,
        ])
        .arg("--unix-socket")
        .arg(&self.sock);
        for h in headers {
            c.args(["-H", h]);
        }
        if let Some(b) = body {
            c.args(["--data-binary", b]);
        }
        c.arg(format!("http://localhost{path}"));
        parse_curl(c.output().unwrap())
    }

    /// `curl` over TCP with `token` (None: no token).
    fn tcp(&self, token: Option<&str>, path: &str) -> (u16, String) {
        let mut c = Command::new("curl");
        c.args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"]);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        c.arg(format!("http://127.0.0.1:{}{path}", self.tcp));
        parse_curl(c.output().unwrap())
    }

    /// `Submit` of a direct command over D-Bus, acting for `user` as a trusted caller does
    /// (None: as root): the answer's `content.result`, or the D-Bus error (name, text).
    pub(crate) fn dbus_direct(
        &self,
        user: Option<&str>,
        command: &str,
        content: Value,
    ) -> Result<Value, (String, String)> {
        let msg = json!({"command": command, "content": content, "user": user});
        let out = self.busctl(&["Submit", "s", &msg.to_string()])?;
        let v: Value = serde_json::from_str(out[0].as_str().unwrap()).unwrap();
        Ok(v["content"]["result"].clone())
    }

    fn busctl(&self, call: &[&str]) -> Result<Vec<Value>, (String, String)> {
        let o = Command::new("busctl")
            .args(["--address", &self.bus.address, "--json=short", "call"])
            .args([
                "org.agentstore.Orchestrator1",
                "/org/agentstore/Orchestrator1",
                "org.agentstore.Orchestrator1",
            ])
            .args(call)
            .output()
            .unwrap();
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
            return Err(("error".into(), err));
        }
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        Ok(v["data"].as_array().unwrap().clone())
    }

    /// `ListJobs` over D-Bus.
    fn dbus_list(
        &self,
        filter: &HashMap<&str, &str>,
        offset: u32,
        limit: u32,
    ) -> (Value, u64, u64) {
        let mut args = vec![
            "ListJobs".to_string(),
            "a{ss}uu".into(),
            filter.len().to_string(),
        ];
        for (k, v) in filter {
            args.push(k.to_string());
            args.push(v.to_string());
        }
        args.push(offset.to_string());
        args.push(limit.to_string());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let d = self.busctl(&a).unwrap();
        (
            serde_json::from_str(d[0].as_str().unwrap()).unwrap(),
            d[1].as_u64().unwrap(),
            d[2].as_u64().unwrap(),
        )
    }
}

fn parse_curl(o: std::process::Output) -> (u16, String) {
    assert!(
        o.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

pub(crate) fn parsed(r: (u16, String)) -> Value {
    assert_eq!(r.0, 200, "{}", r.1);
    serde_json::from_str(&r.1).unwrap()
}

#[test]
fn every_endpoint_answers_what_its_dbus_method_answers() {
    let Some(w) = start() else { return };
    // Root (trusted) and nobody (user nob) see what the orchestrator shows each of them.
    for (http_user, bus_user) in [(None, None), (Some("nobody"), Some("nob"))] {
        for (path, command, content) in [
            ("/api/v1/projects", "list-projects", json!({})),
            ("/api/v1/queues", "list-queues", json!({})),
            ("/api/v1/prds", "list-prds", json!({})),
            (
                "/api/v1/prds?project=Mine",
                "list-prds",
                json!({"project": "Mine"}),
            ),
            (
                "/api/v1/projects/Mine",
                "view-project",
                json!({"project": "Mine"}),
            ),
            ("/api/v1/users/nob", "view-user", json!({"user": "nob"})),
            ("/api/v1/jobs/job-0", "view-job", json!({"job": "job-0"})),
            (
                &format!("/api/v1/queues/{}", w.queue),
                "view-queue",
                json!({"queue": w.queue}),
            ),
        ] {
            let http = parsed(w.unix(http_user, "GET", path, None));
            let bus = w.dbus_direct(bus_user, command, content).unwrap();
            assert_eq!(http, bus, "{path} as {http_user:?}");
        }
    }
    let users = parsed(w.unix(None, "GET", "/api/v1/users", None));
    assert_eq!(users, w.dbus_direct(None, "list-users", json!({})).unwrap());
    assert_eq!(users.as_array().unwrap().len(), 2);
    let me = parsed(w.unix(Some("nobody"), "GET", "/api/v1/whoami", None));
    assert_eq!(me["user"], "nob");
    assert_eq!(me["trusted"], false);

    // Paging: the same pages, totals and next offsets as ListJobs, for both callers.
    for (http_user, acting) in [(None, None), (Some("nobody"), Some("nob"))] {
        let mut offset = 0u64;
        let mut seen = 0;
        loop {
            let http = parsed(w.unix(
                http_user,
                "GET",
                &format!("/api/v1/jobs?limit=2&offset={offset}&fields=summary"),
                None,
            ));
            let mut f = HashMap::from([("fields", "summary")]);
            if let Some(u) = acting {
                f.insert("user", u);
            }
            let (jobs, total, next) = w.dbus_list(&f, offset as u32, 2);
            assert_eq!(http["jobs"], jobs);
            assert_eq!(http["total"], total);
            assert_eq!(http["next_offset"], next);
            seen += jobs.as_array().unwrap().len();
            if next >= total {
                break;
            }
            offset = next;
        }
        assert_eq!(seen, if http_user.is_none() { 7 } else { 4 });
        // The same walk by `after` (each page's next_after, null on the last): the same
        // jobs in the same order, documents or summary rows.
        for fields in ["summary", "all"] {
            let by_offset = w.dbus_list(&HashMap::from([("fields", fields)]), 0, 0).0;
            let mut want = by_offset.as_array().unwrap().clone();
            if let Some(u) = acting {
                let f = HashMap::from([("fields", fields), ("user", u)]);
                want = w.dbus_list(&f, 0, 0).0.as_array().unwrap().clone();
            }
            let (mut got, mut after) = (Vec::new(), String::new());
            loop {
                let http = parsed(w.unix(
                    http_user,
                    "GET",
                    &format!("/api/v1/jobs?limit=3&fields={fields}&after={after}"),
                    None,
                ));
                got.extend(http["jobs"].as_array().unwrap().iter().cloned());
                match http["next_after"].as_str() {
                    Some(a) => after = a.to_string(),
                    None => break,
                }
            }
            assert_eq!(got, want, "{fields} by after as {http_user:?}");
        }
    }
    let (code, body) = w.unix(None, "GET", "/api/v1/jobs?after=yesterday", None);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("after"), "{body}");
    let http = parsed(w.unix(
        None,
        "GET",
        "/api/v1/jobs?status=queued&project=Theirs",
        None,
    ));
    let (jobs, total, _) = w.dbus_list(
        &HashMap::from([("status", "queued"), ("project", "Theirs")]),
        0,
        0,
    );
    assert_eq!(http["jobs"], jobs);
    assert_eq!(total, 3);

    // A submitted message is the D-Bus Submit: the response document.
    let (code, body) = w.unix(
        Some("nobody"),
        "POST",
        "/api/v1/messages",
        Some(r#"{"command":"list-projects","content":{}}"#),
    );
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["user"], "nob");
    assert_eq!(
        answer["content"]["result"],
        w.dbus_direct(Some("nob"), "list-projects", json!({}))
            .unwrap()
    );

    // The OpenAPI document served is the one checked in.
    let served = parsed(w.unix(None, "GET", "/api/openapi.json", None));
    let checked_in: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(served, checked_in);
}

#[test]
fn another_unix_user_is_refused_as_over_dbus() {
    let Some(w) = start() else { return };
    for (path, command, content) in [
        (
            "/api/v1/projects/Theirs",
            "view-project",
            json!({"project": "Theirs"}),
        ),
        ("/api/v1/users", "list-users", json!({})),
        (
            "/api/v1/users/chenry",
            "view-user",
            json!({"user": "chenry"}),
        ),
    ] {
        let (code, body) = w.unix(Some("nobody"), "GET", path, None);
        assert_eq!(code, 403, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"], "org.agentstore.Error.PermissionDenied");
        let (_, text) = w.dbus_direct(Some("nob"), command, content).unwrap_err();
        let msg = v["message"].as_str().unwrap();
        assert!(msg.starts_with("Permission denied: "), "{msg}");
        assert!(text.contains(msg), "{path}: HTTP {msg:?}, D-Bus {text:?}");
    }
    // Acting for another user, cancelling their job, claiming to be them in a message.
    let (code, body) = w.unix(Some("nobody"), "GET", "/api/v1/projects?as=chenry", None);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("Unix user nobody is nob, not chenry"),
        "{body}"
    );
    // Another user's job reads as one that does not exist (issue 27: no id can be probed),
    // viewed or cancelled, over HTTP as over D-Bus.
    let (code, hidden) = w.unix(Some("nobody"), "GET", "/api/v1/jobs/job-1", None);
    assert_eq!(code, 404, "{hidden}");
    let (code, unknown) = w.unix(Some("nobody"), "GET", "/api/v1/jobs/job-99", None);
    assert_eq!(code, 404, "{unknown}");
    assert_eq!(
        hidden.replace("job-1", "ID"),
        unknown.replace("job-99", "ID")
    );
    let (_, text) = w
        .dbus_direct(Some("nob"), "view-job", json!({"job": "job-1"}))
        .unwrap_err();
    assert!(
        text.to_lowercase().contains("job not found: job-1"),
        "{text}"
    );
    let (code, body) = w.unix(Some("nobody"), "POST", "/api/v1/jobs/job-1/cancel", None);
    assert_eq!(code, 404, "{body}");
    let (code, unknown) = w.unix(Some("nobody"), "POST", "/api/v1/jobs/job-99/cancel", None);
    assert_eq!(code, 404, "{unknown}");
    assert_eq!(body.replace("job-1", "ID"), unknown.replace("job-99", "ID"));
    assert!(
        w.env
            .root
            .join(format!("Queues/{}/Jobs/queued_jobs/job-1.json", w.queue))
            .exists()
    );
    let (code, body) = w.unix(
        Some("nobody"),
        "POST",
        "/api/v1/messages",
        Some(r#"{"command":"list-users","content":{},"user":"chenry"}"#),
    );
    assert_eq!(code, 403, "{body}");
    // A Unix user with no document in users/ is refused with the daemon's words.
    let (code, body) = w.unix(Some("daemon"), "GET", "/api/v1/projects", None);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("has no document in users/"), "{body}");
    // Bad input is named.
    let (code, body) = w.unix(None, "GET", "/api/v1/jobs?colour=red", None);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("colour"), "{body}");
    let (code, body) = w.unix(None, "GET", "/api/v1/jobs?status=lost", None);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("lost"), "{body}");
    let (code, body) = w.unix(None, "POST", "/api/v1/messages", Some("{not json"));
    assert_eq!(code, 400, "{body}");
    let (code, _) = w.unix(None, "GET", "/api/v1/projects/Nope", None);
    assert_eq!(code, 404);
}

#[test]
fn tcp_needs_the_token() {
    let Some(w) = start() else { return };
    let mode = std::fs::metadata(w.env.home.join(".config/agentstore/web-token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (code, body) = w.tcp(None, "/api/v1/projects");
    assert_eq!(code, 401, "{body}");
    let mut wrong = w.token.clone();
    wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
    let (code, body) = w.tcp(Some(&wrong), "/api/v1/projects");
    assert_eq!(code, 401, "{body}");
    let (code, _) = w.tcp(Some(&w.token[..10]), "/api/v1/projects");
    assert_eq!(code, 401);
    let ok = parsed(w.tcp(Some(&w.token), "/api/v1/projects"));
    assert_eq!(ok, w.dbus_direct(None, "list-projects", json!({})).unwrap());
}

#[test]
fn events_carry_the_bus_signals() {
    let Some(w) = start() else { return };
    let mut curl = KillOnDrop(
        Command::new("curl")
            .args(["-sSN", "--max-time", "30", "--unix-socket"])
            .arg(&w.sock)
            .arg("http://localhost/api/v1/events")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(curl.0.stdout.take().unwrap()).lines();
    // Subscribed once the server's first comment arrives.
    loop {
        let l = lines.next().unwrap().unwrap();
        if l.starts_with(": subscribed") {
            break;
        }
    }
    let msg = json!({"command": "list-queues", "content": {}, "correlation_id": "web-sse-1"});
    w.busctl(&["Submit", "s", &msg.to_string()]).unwrap();
    let mut event = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        if let Some(name) = l.strip_prefix("event: ") {
            event = Some(name.to_string());
        } else if let Some(data) = l.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(data).unwrap();
            if event.as_deref() == Some("MessageProcessed") && v["correlation_id"] == "web-sse-1" {
                // Ids only: the command and its outcome are the sender's answer.
                assert!(
                    v.get("command").is_none() && v.get("status").is_none(),
                    "{v}"
                );
                return;
            }
        }
    }
    panic!("no MessageProcessed event for web-sse-1");
}

#[test]
fn idle_server_exits_and_says_so() {
    let Some(w) = start() else { return };
    drop(w.web);
    let sock = w.env.dir.path().join("idle.sock");
    let u = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut web = spawn_web(
        &w.bus,
        &w.env.root,
        &w.env.home,
        vec![u.into()],
        "http",
        &["--idle-exit", "1"],
    );
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--unix-socket"])
        .arg(&sock)
        .arg("http://localhost/api/v1/whoami")
        .output()
        .unwrap();
    assert!(o.status.success());
    let started = std::time::Instant::now();
    let status = crate::wait::child_exit(&mut web.0, crate::wait::LOADED, "the idle exit");
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));
}

/// A stand-in worker for running job `id`: a live process whose command line names the job
/// (what the queue manager checks before re-adopting a running job).
fn fake_worker(id: &str) -> KillOnDrop {
    // Its `sleep` outlives the killed shell: it must not hold the test's output open (nextest
    // reported the test as leaky).
    KillOnDrop(
        Command::new("sh")
            .args(["-c", "sleep 600; :", id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Approvals through the API and the dashboard's form: a REAL queue-manager process re-adopts
/// two running jobs and publishes the requests their workers write (`Jobs/approvals/`, as
/// `worker::approval` writes them); the API lists what the caller may see, answers through
/// `Queue1.AnswerFor` as the caller (the manager applies PRD §10 and records who), the event
/// stream carries `ApprovalAnswered`, a stranger and a cross-site form are refused and leave
/// the request waiting.
#[test]
fn approvals_are_listed_and_answered_through_the_queue_manager() {
    let Some(w) = start() else { return };
    let root = w.env.root.clone();
    let q = w.queue.clone();
    // The queue is paused: its manager only adopts and publishes, it starts nothing.
    let qp = root.join(format!("Queues/{q}/queue.json"));
    let mut qdoc: Value = serde_json::from_str(&std::fs::read_to_string(&qp).unwrap()).unwrap();
    qdoc["runtime"]["paused"] = json!(true);
    std::fs::write(&qp, qdoc.to_string()).unwrap();
    let mut workers = Vec::new();
    for (id, project, user) in [
        ("run-mine", "Mine", "nob"),
        ("run-theirs", "Theirs", "chenry"),
    ] {
        let worker = fake_worker(id);
        let mut job: Value =
            serde_json::from_str(&common::noop_job("2026-01-01T00:01:00Z")).unwrap();
        job["config"]["project"] = json!(project);
        job["config"]["user"] = json!(user);
        job["config"]["timeout_seconds"] = json!(3600);
        job["runtime"]["status"] = json!("running");
        job["runtime"]["start_time"] = json!(agentstore::model::Timestamp::now().to_string());
        job["runtime"]["process_id"] = json!(worker.0.id());
        w.env.write(
            &format!("Queues/{q}/Jobs/running_jobs/{id}.json"),
            &job.to_string(),
        );
        workers.push(worker);
    }
    let _manager = direct_manager(&w, &root, &q);
    // nob's event stream, open before anything is asked: it must carry the events of nob's
    // job and none of chenry's (PRD §10 for every reader, issue 27 item 4).
    let mut nob_stream = KillOnDrop({
        use std::os::unix::process::CommandExt;
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        Command::new("curl")
            .args(["-sSN", "--max-time", "60", "--unix-socket"])
            .arg(&w.sock)
            .arg("http://localhost/api/v1/events")
            .uid(nobody.uid.as_raw())
            .gid(nobody.gid.as_raw())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    });
    let mut nob_lines = BufReader::new(nob_stream.0.stdout.take().unwrap()).lines();
    loop {
        if nob_lines
            .next()
            .unwrap()
            .unwrap()
            .starts_with(": subscribed")
        {
            break;
        }
    }
    let store = agentstore::store::Store::open(&root).unwrap();
    for id in ["run-mine", "run-theirs"] {
        let now = agentstore::model::Timestamp::now();
        let req = agentstore::model::approval::ApprovalRequest {
            request_id: format!("{id}-a1"),
            job_id: id.to_string(),
            tool: "Write".into(),
            summary: format!("Write /tmp/{id}.txt"),
            input: json!({"file_path": format!("/tmp/{id}.txt"), "content": "x"}),
            requested_at: now,
            deadline: serde_json::from_value(json!("2099-01-01T00:00:00Z")).unwrap(),
        };
        store.write_approval_request(&q, &req).unwrap();
    }
    // Root (trusted) sees both; nob only the request of the job in their project.
    wait_until(Duration::from_secs(20), "both requests published", || {
        let v = parsed(w.unix(None, "GET", "/api/v1/approvals", None));
        v.as_array().unwrap().len() == 2
    });
    let all = parsed(w.unix(None, "GET", "/api/v1/approvals", None));
    let mine = all
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == "run-mine-a1")
        .unwrap();
    assert_eq!(mine["queue"], json!(q));
    assert_eq!(mine["job_id"], "run-mine");
    assert_eq!(mine["tool"], "Write");
    assert_eq!(mine["input"]["file_path"], "/tmp/run-mine.txt");
    let seen = parsed(w.unix(Some("nobody"), "GET", "/api/v1/approvals", None));
    let ids: Vec<&str> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["run-mine-a1"]);

    // A stranger to run-theirs is refused by the manager, and the request still waits.
    let answer_theirs = format!("/api/v1/approvals/{q}/run-theirs-a1/answer");
    let (code, body) = w.unix(
        Some("nobody"),
        "POST",
        &answer_theirs,
        Some(r#"{"allow": true}"#),
    );
    // As an unknown request is (PRD §10: nob may not even see the job).
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("not waiting"), "{body}");
    assert!(!store.approval_answer_path(&q, "run-theirs-a1").exists());
    // Bad bodies are named.
    let (code, body) = w.unix(
        Some("nobody"),
        "POST",
        &format!("/api/v1/approvals/{q}/run-mine-a1/answer"),
        Some(r#"{"allow": "yes"}"#),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("allow"), "{body}");

    // nob allows their own; the event stream says so (ids only).
    let mut curl = KillOnDrop(
        Command::new("curl")
            .args(["-sSN", "--max-time", "30", "--unix-socket"])
            .arg(&w.sock)
            .arg("http://localhost/api/v1/events")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(curl.0.stdout.take().unwrap()).lines();
    loop {
        if lines.next().unwrap().unwrap().starts_with(": subscribed") {
            break;
        }
    }
    let v = parsed(w.unix(
        Some("nobody"),
        "POST",
        &format!("/api/v1/approvals/{q}/run-mine-a1/answer"),
        Some(r#"{"allow": true, "always": true, "message": "go ahead"}"#),
    ));
    assert_eq!(v["by"], "nob");
    let answer: Value = serde_json::from_str(
        &std::fs::read_to_string(store.approval_answer_path(&q, "run-mine-a1")).unwrap(),
    )
    .unwrap();
    assert_eq!(answer["allow"], true);
    assert_eq!(answer["always"], true);
    assert_eq!(answer["message"], "go ahead");
    assert_eq!(answer["by"], "nob");
    let mut event = None;
    let mut answered = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        if let Some(name) = l.strip_prefix("event: ") {
            event = Some(name.to_string());
        } else if let Some(data) = l.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(data).unwrap();
            if event.as_deref() == Some("ApprovalAnswered") && v["request_id"] == "run-mine-a1" {
                answered = Some(v);
                break;
            }
        }
    }
    let answered = answered.expect("an ApprovalAnswered event for run-mine-a1");
    // nob's stream, up to that same event: both requests were published before it, and only
    // nob's own reached nob.
    let mut seen = String::new();
    let mut last_event = String::new();
    for l in nob_lines.by_ref() {
        let l = l.unwrap();
        seen.push_str(&l);
        seen.push('\n');
        if let Some(name) = l.strip_prefix("event: ") {
            last_event = name.to_string();
        } else if last_event == "ApprovalAnswered" && l.contains("\"run-mine-a1\"") {
            break;
        }
    }
    assert!(seen.contains("event: ApprovalRequested"), "{seen}");
    assert!(
        !seen.contains("run-theirs"),
        "nob saw an event of chenry's job: {seen}"
    );
    drop(nob_stream);
    // Ids only: what was decided is on the job.
    assert_eq!(answered["job_id"], "run-mine");
    assert!(
        answered.get("by").is_none() && answered.get("allow").is_none(),
        "{answered}"
    );
    wait_until(
        Duration::from_secs(10),
        "run-mine-a1 to leave the list",
        || {
            parsed(w.unix(Some("nobody"), "GET", "/api/v1/approvals", None))
                .as_array()
                .unwrap()
                .is_empty()
        },
    );

    // The dashboard's form (works without JavaScript): a cross-site POST is refused and
    // writes nothing; a same-origin one denies with the reason and goes back to the list.
    let form = |origin: &str| {
        let o = Command::new("curl")
            .args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
            .arg("--unix-socket")
            .arg(&w.sock)
            .args(["-H", &format!("Origin: {origin}")])
            .args(["--data", "message=not+here&decision=deny"])
            .arg(format!(
                "http://localhost/approvals/{q}/run-theirs-a1/answer"
            ))
            .output()
            .unwrap();
        parse_curl(o)
    };
    let (code, body) = form("http://evil.example");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("cross-site"), "{body}");
    assert!(!store.approval_answer_path(&q, "run-theirs-a1").exists());
    let page = w.unix(None, "GET", "/approvals", None);
    assert_eq!(page.0, 200);
    assert!(
        page.1.contains(r#"<tr data-request="run-theirs-a1">"#),
        "{}",
        page.1
    );
    assert!(
        page.1
            .contains(&format!(r#"action="/approvals/{q}/run-theirs-a1/answer""#))
    );
    let (code, body) = form("http://localhost");
    assert_eq!(code, 303, "{body}");
    let answer: Value = serde_json::from_str(
        &std::fs::read_to_string(store.approval_answer_path(&q, "run-theirs-a1")).unwrap(),
    )
    .unwrap();
    assert_eq!(answer["allow"], false);
    assert_eq!(answer["message"], "not here");
    wait_until(
        Duration::from_secs(10),
        "the dashboard list to empty",
        || {
            w.unix(None, "GET", "/approvals", None)
                .1
                .contains(r#"<p id="waiting">0 waiting</p>"#)
        },
    );
    drop(workers);
}

/// Writes a heartbeat of machine `host`'s queue manager last seen at `at`.
fn heartbeat(root: &std::path::Path, host: &str, at: &str) {
    let dir = root.join("machines").join(host);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("queue-manager.q1.json"),
        json!({"host": host, "daemon": "queue-manager", "queue": "q1", "pid": 1,
               "version": "0.1.0", "started": at, "last_seen": at, "interval_seconds": 30})
        .to_string(),
    )
    .unwrap();
}

/// A machine row without what changes from one second to the next.
fn steady(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("silent_seconds");
        o.remove("state");
    }
    v
}

/// Machines (issue 13's heartbeats) through the API and the dashboard: the same rows as
/// Orchestrator1's `list-machines` / `view-machine`, a silent machine marked stale on the
/// page (readable with JavaScript off), a machine that never reported and a hostile host
/// name refused as on D-Bus, a damaged heartbeat reported, not fatal.
#[test]
fn machines_are_served_as_orchestrator1_serves_them() {
    let Some(w) = start() else { return };
    let now = agentstore::model::Timestamp::now().to_string();
    heartbeat(&w.env.root, "fresh", &now);
    heartbeat(&w.env.root, "ghost", "2026-01-01T00:00:00Z");
    std::fs::write(
        w.env.root.join("machines/fresh/broken.json"),
        "{not a heartbeat",
    )
    .unwrap();
    for user in [None, Some("nobody")] {
        let http = parsed(w.unix(user, "GET", "/api/v1/machines", None));
        let bus = w
            .dbus_direct(user.map(|_| "nob"), "list-machines", json!({}))
            .unwrap();
        let rows = |v: &Value| -> HashMap<String, Value> {
            v["machines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| (m["host"].as_str().unwrap().to_string(), steady(m.clone())))
                .collect()
        };
        let (h, b) = (rows(&http), rows(&bus));
        assert_eq!(h["fresh"], b["fresh"], "as {user:?}");
        assert_eq!(h["ghost"], b["ghost"], "as {user:?}");
        assert_eq!(
            h.keys().collect::<std::collections::BTreeSet<_>>(),
            b.keys().collect()
        );
        assert_eq!(http["problems"], bus["problems"]);
        let problems = http["problems"].to_string();
        assert!(
            problems.contains("machines/fresh/broken.json"),
            "{problems}"
        );
    }
    let all = parsed(w.unix(None, "GET", "/api/v1/machines", None));
    let ghost = all["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["host"] == "ghost")
        .unwrap();
    assert_eq!(ghost["stale"], true);
    assert!(ghost["state"].as_str().unwrap().starts_with("stale for "));

    let http = parsed(w.unix(Some("nobody"), "GET", "/api/v1/machines/ghost", None));
    let bus = w
        .dbus_direct(Some("nob"), "view-machine", json!({"host": "ghost"}))
        .unwrap();
    assert_eq!(steady(http.clone()), steady(bus));
    assert_eq!(http["heartbeats"][0]["daemon"], "queue-manager");

    // Refusals: the daemon's words, with the status its error name maps to.
    let (code, body) = w.unix(None, "GET", "/api/v1/machines/never", None);
    assert_eq!(code, 404, "{body}");
    let (_, text) = w
        .dbus_direct(None, "view-machine", json!({"host": "never"}))
        .unwrap_err();
    let msg = serde_json::from_str::<Value>(&body).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("Machine not found: never"), "{msg}");
    assert!(text.contains(&msg), "HTTP {msg:?}, D-Bus {text:?}");
    let (code, body) = w.unix(None, "GET", "/api/v1/machines/..%2F..%2Fetc", None);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("host"), "{body}");
    let (code, body) = w.unix(None, "GET", "/api/v1/machines?colour=red", None);
    assert_eq!(code, 400, "{body}");

    // The page: every machine a row, the silent one marked stale.
    let (code, html) = w.unix(Some("nobody"), "GET", "/machines", None);
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains(r#"<tr data-machine="ghost" class="stale">"#),
        "{html}"
    );
    assert!(html.contains(r#"<tr data-machine="fresh">"#), "{html}");
    assert!(html.contains("machines/fresh/broken.json"), "{html}");
}

/// What another site's page could send through a reverse proxy on the Unix socket (where the
/// proxy's account is the caller): a form-encodable or `text/plain` POST, or one naming
/// another origin, is refused on every POST endpoint and changes nothing; ids that climb out
/// of their folder and oversized query values are refused with the field named.
#[test]
fn cross_site_posts_and_hostile_ids_are_refused() {
    let Some(w) = start() else { return };
    let queued = w
        .env
        .root
        .join(format!("Queues/{}/Jobs/queued_jobs/job-0.json", w.queue));
    let msg = r#"{"command":"create-prd","project":"Mine","content":{"task":"x"}}"#;
    for (path, headers, body) in [
        (
            "/api/v1/messages",
            vec!["Content-Type: text/plain"],
            Some(msg),
        ),
        (
            "/api/v1/messages",
            vec!["Content-Type: application/x-www-form-urlencoded"],
            Some(msg),
        ),
        ("/api/v1/messages", vec![], Some(msg)),
        (
            "/api/v1/messages",
            vec![
                "Content-Type: application/json",
                "Origin: http://evil.example",
            ],
            Some(msg),
        ),
        (
            "/api/v1/messages",
            vec![
                "Content-Type: application/json",
                "Sec-Fetch-Site: cross-site",
            ],
            Some(msg),
        ),
        (
            "/api/v1/jobs/job-0/cancel",
            vec!["Origin: http://evil.example"],
            None,
        ),
        (
            "/api/v1/jobs/job-0/cancel",
            vec!["Content-Type: text/plain"],
            Some("x"),
        ),
        (
            "/jobs/job-0/cancel",
            vec!["Sec-Fetch-Site: cross-site"],
            None,
        ),
    ] {
        let (code, body) = w.unix_with(None, "POST", path, &headers, body);
        assert!(
            code == 403 || code == 415,
            "{path} {headers:?}: {code} {body}"
        );
        let text = body.to_lowercase();
        assert!(
            text.contains("cross-site") || text.contains("content-type"),
            "{path} {headers:?}: {body}"
        );
    }
    assert!(queued.exists(), "a refused cancel cancelled the job");
    let jobs = parsed(w.unix(None, "GET", "/api/v1/jobs?fields=summary", None));
    assert_eq!(jobs["total"], 7, "a refused message made a job");
    // The same POST from this server's own page (or a tool) goes through.
    let (code, body) = w.unix_with(
        None,
        "POST",
        "/api/v1/messages",
        &[
            "Content-Type: application/json; charset=utf-8",
            "Origin: http://localhost",
        ],
        Some(r#"{"command":"list-queues","content":{}}"#),
    );
    assert_eq!(code, 200, "{body}");

    // Ids that climb out of their folder: refused as bad ids, never read.
    std::fs::write(w.env.dir.path().join("secret.json"), r#"{"secret":1}"#).unwrap();
    for path in [
        "/api/v1/jobs/..%2F..%2F..%2Fsecret",
        "/api/v1/projects/..%2F..%2Fsecret",
        "/api/v1/prds/..%2F..%2Fsecret",
        "/api/v1/users/..%2F..%2Fsecret",
        "/api/v1/queues/..%2F..%2Fsecret",
        "/api/v1/queues/..%2F..%2Fsecret/state",
        "/api/v1/machines/..%2F..%2Fsecret",
        "/jobs/..%2F..%2F..%2Fsecret",
    ] {
        let (code, body) = w.unix(None, "GET", path, None);
        assert!(code == 400 || code == 404, "{path}: {code} {body}");
        assert!(!body.contains("\"secret\""), "{path}: {body}");
    }
    // Oversized and malformed query values: a clear refusal, the server still answers.
    let huge = "x".repeat(100_000);
    let (code, body) = w.unix(None, "GET", &format!("/api/v1/jobs?project={huge}"), None);
    assert!(
        code == 400 || code == 404 || code == 414 || code == 431,
        "{code} {}",
        &body[..body.len().min(300)]
    );
    assert!(
        body.len() < 20_000,
        "the refusal echoes the whole value: {} bytes",
        body.len()
    );
    let (code, body) = w.unix(None, "GET", "/api/v1/jobs?limit=99999999999999", None);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("limit"), "{body}");
    let (code, body) = w.unix(None, "GET", "/api/v1/jobs?offset=-1", None);
    assert_eq!(code, 400, "{body}");
    let (code, body) = w.unix(None, "GET", "/api/v1/jobs?status=%ZZ", None);
    assert_eq!(code, 400, "{body}");
    let me = parsed(w.unix(None, "GET", "/api/v1/whoami", None));
    assert_eq!(me["trusted"], true);
}

/// `ListJobs` keeps a first page's total while the listed folders and the caller's rights
/// are unchanged (so a first page of 100,000 jobs costs a page, not a count); the kept total
/// must follow every change: a new job, a job moving on, a project shared with the caller.
#[test]
fn a_kept_total_follows_new_jobs_moves_and_changed_rights() {
    let Some(w) = start() else { return };
    let nob = HashMap::from([("user", "nob"), ("fields", "summary")]);
    let all = HashMap::from([("fields", "summary")]);
    let totals = |w: &Web| (w.dbus_list(&all, 0, 2).1, w.dbus_list(&nob, 0, 2).1);
    assert_eq!(totals(&w), (7, 4));
    // Past the settling time the totals are kept; asked again, the same.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(totals(&w), (7, 4));
    assert_eq!(totals(&w), (7, 4));
    // A new job of nob's project.
    let mut job: Value = serde_json::from_str(&common::noop_job("2026-01-01T00:01:00Z")).unwrap();
    job["config"]["project"] = json!("Mine");
    job["config"]["user"] = json!("nob");
    w.env.write(
        &format!("Queues/{}/Jobs/queued_jobs/job-new.json", w.queue),
        &job.to_string(),
    );
    assert_eq!(totals(&w), (8, 5));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(totals(&w), (8, 5));
    // nob is made a collaborator of Theirs: the folders are unchanged (and settled), the
    // rights are not.
    let pp = w.env.root.join("projects/Theirs/project.json");
    let mut p: Value = serde_json::from_str(&std::fs::read_to_string(&pp).unwrap()).unwrap();
    p["collaborators"] = json!(["nob"]);
    std::fs::write(&pp, p.to_string()).unwrap();
    assert_eq!(totals(&w), (8, 8));
    // A job moving to another folder is still one job; a deleted one is gone.
    std::thread::sleep(Duration::from_millis(2500));
    let q = &w.queue;
    std::fs::create_dir_all(w.env.root.join(format!("Queues/{q}/Jobs/failed_jobs"))).unwrap();
    std::fs::rename(
        w.env
            .root
            .join(format!("Queues/{q}/Jobs/queued_jobs/job-1.json")),
        w.env
            .root
            .join(format!("Queues/{q}/Jobs/failed_jobs/job-1.json")),
    )
    .unwrap();
    assert_eq!(totals(&w), (8, 8));
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::remove_file(
        w.env
            .root
            .join(format!("Queues/{q}/Jobs/queued_jobs/job-2.json")),
    )
    .unwrap();
    assert_eq!(totals(&w), (7, 7));
}

/// A message document (PRD §4.6) in `messaging/<folder>/<name>.json`.
#[allow(clippy::too_many_arguments)]
fn message(
    w: &Web,
    folder: &str,
    name: &str,
    user: Option<&str>,
    project: &str,
    at: &str,
    status: &str,
    content: Value,
) {
    let answer = folder.contains("outbox");
    let mut m = json!({
        "correlation_id": name, "source": if answer { "orchestrator" } else { "user" },
        "project": project, "queue_time": at, "command": "research-code",
        "content": content, "status": status,
    });
    if answer {
        m["processed_time"] = json!(at);
    }
    if let Some(u) = user {
        m["user"] = json!(u);
    }
    w.env
        .write(&format!("messaging/{folder}/{name}.json"), &m.to_string());
}

/// Messages (PRD §4.6) are browsable like every other document kind: GET /api/v1/messages and
/// /api/v1/messages/{id} answer what Orchestrator1's `list-messages` / `view-message` answer
/// for the same caller, and the CLI's `list-messages` / `view-message` the same; PRD §10 — a
/// user sees only their own messages (another's is refused with the daemon's words, as is
/// listing another user's), admins all, unreadable files reported to admins only; the pages
/// /messages and /messages/{id} are readable with JavaScript off. Only processed folders
/// are used, so orchestratord (which drains the inbox) changes nothing under the test.
#[test]
fn messages_are_served_as_orchestrator1_serves_them() {
    let Some(w) = start() else { return };
    message(
        &w,
        "processed_inbox",
        "req-nob",
        Some("nob"),
        "Mine",
        "2026-01-02T00:00:01Z",
        "queued",
        json!({"task": "look at the code"}),
    );
    message(
        &w,
        "processed_outbox",
        "req-nob",
        Some("nob"),
        "Mine",
        "2026-01-02T00:00:01Z",
        "done",
        json!({"job_id": "job-0", "queue": w.queue}),
    );
    message(
        &w,
        "processed_inbox",
        "waiting-nob",
        Some("nob"),
        "Mine",
        "2026-01-02T00:00:03Z",
        "queued",
        json!({"task": "not answered yet"}),
    );
    message(
        &w,
        "processed_inbox",
        "req-chenry",
        Some("chenry"),
        "Theirs",
        "2026-01-02T00:00:02Z",
        "queued",
        json!({"task": "secret plans"}),
    );
    message(
        &w,
        "outbox",
        "req-chenry",
        Some("chenry"),
        "Theirs",
        "2026-01-02T00:00:02Z",
        "error",
        json!({}),
    );
    message(
        &w,
        "processed_inbox",
        "dropped",
        None,
        "Theirs",
        "2026-01-02T00:00:04Z",
        "queued",
        json!({}),
    );
    // The error answer to a later message that reused chenry's correlation id (the daemon
    // names it `<id>.duplicate-N.json`): listed on its own, not taken for req-chenry's answer.
    w.env.write(
        "messaging/processed_outbox/req-chenry.duplicate-1.json",
        &json!({"correlation_id": "req-chenry", "source": "orchestrator", "project": "Theirs",
            "queue_time": "2026-01-02T00:00:02Z", "processed_time": "2026-01-02T00:00:02Z",
            "command": "research-code", "content": {}, "status": "done", "user": "chenry"})
        .to_string(),
    );
    w.env
        .write("messaging/processed_inbox/broken.json", "{not json");
    let errors_before = w.env.error_log().len();

    let ids = |v: &Value| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                format!(
                    "{}:{}",
                    m["direction"].as_str().unwrap(),
                    m["id"].as_str().unwrap()
                )
            })
            .collect()
    };
    for (http_user, bus_user) in [(None, None), (Some("nobody"), Some("nob"))] {
        for (query, content) in [
            ("", json!({})),
            ("?direction=in", json!({"direction": "in"})),
            (
                "?status=queued&project=Mine",
                json!({"status": "queued", "project": "Mine"}),
            ),
            ("?offset=1&limit=2", json!({"offset": 1, "limit": 2})),
            (
                "?user=nob&direction=out",
                json!({"user": "nob", "direction": "out"}),
            ),
        ] {
            let http = parsed(w.unix(http_user, "GET", &format!("/api/v1/messages{query}"), None));
            let bus = w.dbus_direct(bus_user, "list-messages", content).unwrap();
            assert_eq!(http, bus, "{query} as {http_user:?}");
        }
        for id in ["req-nob", "waiting-nob"] {
            let http = parsed(w.unix(http_user, "GET", &format!("/api/v1/messages/{id}"), None));
            let bus = w
                .dbus_direct(bus_user, "view-message", json!({"message": id}))
                .unwrap();
            assert_eq!(http, bus, "{id} as {http_user:?}");
        }
    }
    // Admins see every message, newest first, answers before their requests, and the file
    // that could not be read; each request says whether it was answered.
    let all = parsed(w.unix(None, "GET", "/api/v1/messages", None));
    assert_eq!(
        ids(&all),
        [
            "in:dropped",
            "in:waiting-nob",
            "out:req-chenry.duplicate-1",
            "out:req-chenry",
            "in:req-chenry",
            "out:req-nob",
            "in:req-nob"
        ]
    );
    assert_eq!(all["total"], 7);
    assert_eq!(all["messages"][1]["answer"], Value::Null);
    assert_eq!(all["messages"][4]["answer"], "error");
    assert_eq!(all["messages"][6]["answer"], "done");
    assert_eq!(all["messages"][6]["folder"], "processed_inbox");
    assert!(all["messages"][0].get("content").is_none());
    let problems = all["problems"].to_string();
    assert!(
        problems.contains("messaging/processed_inbox/broken.json"),
        "{problems}"
    );
    // nob sees their own three, nothing of chenry's or the file with no user, no problems.
    let mine = parsed(w.unix(Some("nobody"), "GET", "/api/v1/messages", None));
    assert_eq!(ids(&mine), ["in:waiting-nob", "out:req-nob", "in:req-nob"]);
    assert_eq!(mine["total"], 3);
    assert_eq!(mine["problems"], json!([]));
    let page = parsed(w.unix(
        Some("nobody"),
        "GET",
        "/api/v1/messages?offset=1&limit=1",
        None,
    ));
    assert_eq!(ids(&page), ["out:req-nob"]);
    assert_eq!(
        (page["total"].as_u64(), page["next_offset"].as_u64()),
        (Some(3), Some(2))
    );
    // One message with its other half and its content.
    let one = parsed(w.unix(Some("nobody"), "GET", "/api/v1/messages/req-nob", None));
    assert_eq!(one["request"]["content"]["task"], "look at the code");
    assert_eq!(one["answer"]["content"]["job_id"], "job-0");
    assert_eq!(one["answer"]["folder"], "processed_outbox");
    let waiting = parsed(w.unix(Some("nobody"), "GET", "/api/v1/messages/waiting-nob", None));
    assert_eq!(waiting["answer"], Value::Null);
    // Reading never logged a rejection (the broken file was listed 10 times above).
    assert_eq!(w.env.error_log().len(), errors_before);

    // PRD §10 refusals for another Unix user over the Unix socket, in the daemon's words.
    for (path, command, content) in [
        (
            "/api/v1/messages/req-chenry",
            "view-message",
            json!({"message": "req-chenry"}),
        ),
        (
            "/api/v1/messages/dropped",
            "view-message",
            json!({"message": "dropped"}),
        ),
        (
            "/api/v1/messages?user=chenry",
            "list-messages",
            json!({"user": "chenry"}),
        ),
    ] {
        let (code, body) = w.unix(Some("nobody"), "GET", path, None);
        assert_eq!(code, 403, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"], "org.agentstore.Error.PermissionDenied");
        let msg = v["message"].as_str().unwrap();
        assert!(msg.starts_with("Permission denied: "), "{msg}");
        let (_, text) = w.dbus_direct(Some("nob"), command, content).unwrap_err();
        assert!(text.contains(msg), "{path}: HTTP {msg:?}, D-Bus {text:?}");
        assert!(!body.contains("secret plans"), "{body}");
    }
    // Bad input named; an unknown message is 404.
    for (path, code, names) in [
        ("/api/v1/messages/nope", 404, "Message not found: nope"),
        ("/api/v1/messages/..%2F..%2Fetc%2Fpasswd", 400, "message"),
        ("/api/v1/messages?status=lost", 400, "lost"),
        ("/api/v1/messages?direction=sideways", 400, "sideways"),
        ("/api/v1/messages?limit=many", 400, "limit"),
        ("/api/v1/messages?colour=red", 400, "colour"),
    ] {
        let (c, body) = w.unix(None, "GET", path, None);
        assert_eq!(c, code, "{path}: {body}");
        assert!(body.contains(names), "{path}: {body}");
    }

    // The CLI answers the same, read from the store (root: trusted) …
    let cli: Value =
        serde_json::from_str(&w.env.ok(&["list-messages", "--format", "json"])).unwrap();
    assert_eq!(cli, all);
    let cli: Value =
        serde_json::from_str(&w.env.ok(&["view-message", "req-nob", "--format", "json"])).unwrap();
    assert_eq!(
        cli,
        parsed(w.unix(None, "GET", "/api/v1/messages/req-nob", None))
    );
    // A request still unanswered says so (its STATUS is its answer's: waiting until one).
    let text = w.env.ok(&["list-messages", "--direction", "in"]);
    assert!(
        text.lines()
            .any(|l| l.contains("waiting-nob") && l.contains("waiting  ")),
        "{text}"
    );
    let err = w.env.fails(&["list-messages", "--status", "lost"]);
    assert!(err.contains("content.status \"lost\""), "{err}");

    // The pages, readable without JavaScript: nob's rows only; one message with its answer.
    let (code, html) = w.unix(Some("nobody"), "GET", "/messages", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains(r#"<tr data-message="req-nob">"#), "{html}");
    assert!(
        html.contains(r#"<tr data-message="waiting-nob">"#),
        "{html}"
    );
    assert!(
        !html.contains("req-chenry") && !html.contains("dropped"),
        "{html}"
    );
    assert!(html.contains(r#"of <span id="total">3</span>"#), "{html}");
    let (code, html) = w.unix(None, "GET", "/messages?direction=in&limit=1", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains(r#"<tr data-message="dropped">"#), "{html}");
    assert!(
        html.contains(r#"id="next" href="/messages?offset=1&amp;limit=1&amp;direction=in""#),
        "{html}"
    );
    assert!(html.contains("broken.json"), "{html}");
    let (code, html) = w.unix(Some("nobody"), "GET", "/messages/req-nob", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains("look at the code"), "{html}");
    assert!(
        html.contains(r#"<td id="answer-status"><span class="s-done">done</span></td>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<a href="/jobs/job-0">job-0</a>"#),
        "{html}"
    );
    let (code, html) = w.unix(Some("nobody"), "GET", "/messages/req-chenry", None);
    assert_eq!(code, 403, "{html}");
    assert!(!html.contains("secret plans"), "{html}");
}

/// /machines/{host}: the machine's row and each daemon's heartbeat with its age, linked from
/// /machines; an unknown host is the daemon's 404.
#[test]
fn a_machine_has_its_own_page() {
    let Some(w) = start() else { return };
    let now = agentstore::model::Timestamp::now().to_string();
    heartbeat(&w.env.root, "fresh", &now);
    heartbeat(&w.env.root, "ghost", "2026-01-01T00:00:00Z");
    let (code, html) = w.unix(Some("nobody"), "GET", "/machines", None);
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains(r#"<a href="/machines/ghost">ghost</a>"#),
        "{html}"
    );
    let (code, html) = w.unix(Some("nobody"), "GET", "/machines/ghost", None);
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains(r#"<tr class="stale"><th>state</th>"#),
        "{html}"
    );
    assert!(html.contains(r#"<td id="f-queues">q1</td>"#), "{html}");
    assert!(html.contains(r#"<tr data-daemon="queue-manager"><td>queue-manager</td><td>q1</td><td>1</td><td>0.1.0</td>"#), "{html}");
    // Silent since 2026-01-01: its heartbeat's age is days, not seconds.
    let age = html
        .split(r#"<td class="age">"#)
        .nth(1)
        .and_then(|s| s.split('<').next())
        .unwrap();
    assert!(age.contains('d'), "age {age:?}");
    let (code, html) = w.unix(None, "GET", "/machines/fresh", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains(r#"<td id="f-state">ok</td>"#), "{html}");
    let (code, html) = w.unix(None, "GET", "/machines/never", None);
    assert_eq!(code, 404, "{html}");
    assert!(html.contains("Machine not found: never"), "{html}");
}

/// /projects and /users: what `list-projects` / `list-users` show the caller (PRD §10: nob
/// sees Mine only and is refused the users with the daemon's words), readable without
/// JavaScript.
#[test]
fn projects_and_users_have_pages() {
    let Some(w) = start() else { return };
    let (code, html) = w.unix(Some("nobody"), "GET", "/projects", None);
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains(r#"<tr data-project="Mine"><td>Mine</td><td>nob</td>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<a href="/messages?project=Mine">messages</a>"#),
        "{html}"
    );
    assert!(!html.contains("Theirs"), "{html}");
    let (code, html) = w.unix(None, "GET", "/projects", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains(r#"<tr data-project="Theirs">"#), "{html}");
    let (code, html) = w.unix(None, "GET", "/users", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains(r#"<tr data-user="nob"><td>nob</td><td>N</td><td>n@x</td><td>user</td><td>nobody</td></tr>"#), "{html}");
    assert!(html.contains(r#"<tr data-user="chenry">"#), "{html}");
    let (code, html) = w.unix(Some("nobody"), "GET", "/users", None);
    assert_eq!(code, 403, "{html}");
    assert!(html.contains("only admins can list users"), "{html}");
}

/// Issue 32: a job's page is the place to watch it: the timeline with durations, the
/// approvals decided, what a failed job left (not "(none yet)"), and the header names the
/// person, not "trusted".
#[test]
fn a_job_page_shows_its_timeline_decisions_and_outcome() {
    let Some(w) = start() else { return };
    let mut job: Value = serde_json::from_str(&common::noop_job("2026-01-01T00:01:00Z")).unwrap();
    job["config"]["project"] = json!("Mine");
    job["config"]["user"] = json!("nob");
    job["runtime"] = json!({
        "status": "failed", "start_time": "2026-01-01T00:01:30Z",
        "finish_time": "2026-01-01T00:03:35Z", "process_id": 7, "llm_process_id": null,
        "error": "Claude exited with 1", "output": null,
        "approvals": [
            {"request_id": "done-1-a1", "tool": "Bash", "summary": "rm -rf build <x>",
             "allow": false, "by": "nob", "at": "2026-01-01T00:02:00Z", "message": "not that"},
            {"request_id": "done-1-a2", "tool": "Write", "summary": "src/lib.rs",
             "allow": true, "always": true, "by": "queue rule", "at": "2026-01-01T00:02:10Z"}
        ]
    });
    w.env.write(
        &format!("Queues/{}/Jobs/failed_jobs/done-1.json", w.queue),
        &job.to_string(),
    );
    let (code, html) = w.unix(Some("nobody"), "GET", "/jobs/done-1", None);
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains(r#"<span style="float:right">nob</span>"#),
        "{html}"
    );
    assert!(
        html.contains("waited 30s") && html.contains("ran 2m05s"),
        "{html}"
    );
    assert!(html.contains(r#"<table id="decided">"#), "{html}");
    assert!(
        html.contains("rm -rf build &lt;x&gt;") && html.contains("not that"),
        "{html}"
    );
    assert!(
        html.contains("allowed (always)") && html.contains("queue rule"),
        "{html}"
    );
    assert!(html.contains("(the job left no output)"), "{html}");
    assert!(!html.contains("(none yet)"), "{html}");
    // The log: journal lines through job-log (the real journal in tests/system/t_journal).
    let (code, log) = w.unix(Some("nobody"), "GET", "/api/v1/jobs/done-1/log", None);
    if std::path::Path::new("/run/systemd/journal/socket").exists() {
        assert_eq!(code, 200, "{log}");
        let v: Value = serde_json::from_str(&log).unwrap();
        assert!(v["lines"].is_array() && v["ended"] == json!(true), "{log}");
        assert!(
            html.contains(r#"<pre id="joblog" data-job="done-1""#),
            "{html}"
        );
    } else {
        assert_eq!(code, 502, "{log}");
        assert!(log.contains("no systemd journal on this machine"), "{log}");
        assert!(
            html.contains(
                r#"<p id="joblog-missing">The log cannot be shown here: no systemd journal"#
            ),
            "{html}"
        );
    }
    assert!(
        html.contains("orchestrator logs done-1 --follow 600"),
        "{html}"
    );
    let (code, bad) = w.unix(
        Some("nobody"),
        "GET",
        "/api/v1/jobs/done-1/log?limit=100000",
        None,
    );
    assert_eq!(code, 400, "{bad}");
    assert!(
        bad.contains("content.limit must be a number from 1 to 500"),
        "{bad}"
    );
    // Root is a trusted caller: the header names the account, not "trusted".
    let (code, html) = w.unix(None, "GET", "/jobs/done-1", None);
    assert_eq!(code, 200);
    assert!(
        html.contains(r#"<span style="float:right">root</span>"#),
        "{html}"
    );
}

/// `JobStateChanged` is not broadcast (issue 27 round 3): the web server asks each queue
/// manager for it (`WatchJobs`), also one that starts after the server, and passes each move
/// on only to a caller who may see the job. Two queued jobs of a paused queue are cancelled by
/// root, chenry's first: root's stream carries both moves, nob's only nob's own.
#[test]
fn events_carry_job_moves_of_a_manager_started_later_to_who_may_see_them() {
    let Some(w) = start() else { return };
    let root = w.env.root.clone();
    let q = w.queue.clone();
    let qp = root.join(format!("Queues/{q}/queue.json"));
    let mut qdoc: Value = serde_json::from_str(&std::fs::read_to_string(&qp).unwrap()).unwrap();
    qdoc["runtime"]["paused"] = json!(true);
    std::fs::write(&qp, qdoc.to_string()).unwrap();
    for (id, project, user) in [("q-theirs", "Theirs", "chenry"), ("q-mine", "Mine", "nob")] {
        let mut job: Value =
            serde_json::from_str(&common::noop_job("2026-01-01T00:01:00Z")).unwrap();
        job["config"]["project"] = json!(project);
        job["config"]["user"] = json!(user);
        w.env.write(
            &format!("Queues/{q}/Jobs/queued_jobs/{id}.json"),
            &job.to_string(),
        );
    }
    let stream = |uid: Option<u32>| {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new("curl");
        c.args(["-sSN", "--max-time", "60", "--unix-socket"])
            .arg(&w.sock)
            .arg("http://localhost/api/v1/events")
            .stdout(Stdio::piped());
        if let Some(u) = uid {
            c.uid(u).gid(u);
        }
        let mut child = KillOnDrop(c.spawn().unwrap());
        let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
        while !lines.next().unwrap().unwrap().starts_with(": subscribed") {}
        (child, lines)
    };
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .unwrap()
        .uid
        .as_raw();
    let (_root_curl, mut root_lines) = stream(None);
    let (_nob_curl, mut nob_lines) = stream(Some(nobody));
    let _manager = direct_manager(&w, &root, &q);
    let name = agentstore::bus::queue_bus_name(&q);
    let path = agentstore::bus::queue_object_path(&q);
    // The server asks the new manager on its own, with replay: a move made before its call
    // arrives still reaches the stream.
    for id in ["q-theirs", "q-mine"] {
        let o = Command::new("busctl")
            .args(["--address", &w.bus.address, "call", &name, &path])
            .args(["org.agentstore.Queue1", "CancelJob", "s", id])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Up to q-mine's move, in each stream.
    let until_mine = |lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>| {
        let mut seen = String::new();
        let mut event = String::new();
        for l in lines.by_ref() {
            let l = l.unwrap();
            seen.push_str(&l);
            seen.push('\n');
            if let Some(e) = l.strip_prefix("event: ") {
                event = e.to_string();
            } else if event == "JobStateChanged" && l.contains("\"q-mine\"") {
                return seen;
            }
        }
        panic!("the stream ended before q-mine's move: {seen}");
    };
    let all = until_mine(&mut root_lines);
    assert!(
        all.contains("\"q-theirs\"") && all.contains("\"failed\""),
        "root's stream lacks chenry's job's move: {all}"
    );
    let nob = until_mine(&mut nob_lines);
    assert!(
        !nob.contains("q-theirs"),
        "nob's stream carried chenry's job's move: {nob}"
    );
}

/// Queue `q`'s manager of the store at `root` on the test's session bus (direct launcher),
/// once it holds its bus name.
fn direct_manager(w: &Web, root: &std::path::Path, q: &str) -> KillOnDrop {
    let manager = crate::daemons::queue_manager(root, q)
        .on(&w.bus)
        .idle_exit(None)
        .spawn();
    common::bus::wait_for_name(&w.bus, &agentstore::bus::queue_bus_name(q));
    manager
}

/// Issue 29: the pages are maud templates, escaped at compile time. Markup and quotes in what
/// a job, a project and a PRD hold read as text on every page that shows them, in element text
/// and in attribute values (the charts' `data-command`). A project name outside the schema's
/// pattern is refused by the store; the jobs list and the refusal show it escaped.
#[test]
fn markup_and_quotes_in_store_values_are_escaped_on_every_page() {
    let Some(w) = start() else { return };
    const EVIL: &str = r#"<script>alert("x")</script>"#;
    const SHOWN: &str = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;";
    w.env.ok(&[
        "add-project",
        "Evil",
        "--directory",
        "/tmp",
        "--owner",
        "nob",
        "--description",
        EVIL,
    ]);
    for (id, project) in [("evil-1", "Mine"), ("evil-2", EVIL)] {
        let mut job: Value =
            serde_json::from_str(&common::noop_job("2026-01-01T00:05:00Z")).unwrap();
        job["config"]["project"] = json!(project);
        job["config"]["user"] = json!("nob");
        job["config"]["claude_command"] = json!(EVIL);
        job["config"]["task_description"] = json!(EVIL);
        job["runtime"] = json!({
            "status": "failed", "start_time": "2026-01-01T00:05:30Z",
            "finish_time": "2026-01-01T00:06:00Z", "process_id": 7, "llm_process_id": null,
            "error": EVIL, "output": null, "cost_usd": 0.25, "warnings": [EVIL],
            "approvals": [{"request_id": "a1", "tool": EVIL, "summary": EVIL, "allow": false,
                           "by": "nob", "at": "2026-01-01T00:05:40Z", "message": EVIL}]
        });
        w.env.write(
            &format!("Queues/{}/Jobs/failed_jobs/{id}.json", w.queue),
            &job.to_string(),
        );
    }
    w.env.write(
        "projects/Mine/running_prds/prd-e.json",
        &json!({
            "id": "prd-e", "project": "Mine", "title": EVIL, "version": "1.0", "owner": "nob",
            "status": "running", "created_time": "2026-01-01T00:00:00Z",
            "update_time": "2026-01-01T00:00:00Z", "content": {"note": EVIL}, "jobs": ["evil-1"]
        })
        .to_string(),
    );
    for (path, status, shows) in [
        (
            "/jobs",
            200,
            &[r#"<td>&lt;script&gt;alert(&quot;x&quot;)"#][..],
        ),
        (
            "/jobs/evil-1",
            200,
            &[
                r#"<td id="f-command">&lt;script&gt;"#,
                r#"<pre id="task">&lt;script&gt;"#,
                r#"<td id="f-error">&lt;script&gt;"#,
                r#"<ul id="warnings"><li>&lt;script&gt;"#,
            ][..],
        ),
        // A project name outside the schema's pattern: the job document is refused, and the
        // error page says why, escaped too.
        (
            "/jobs/evil-2",
            400,
            &[
                r#"<p id="error">"#,
                r#"&lt;script&gt;alert(\&quot;x\&quot;)"#,
            ][..],
        ),
        (
            "/charts",
            200,
            &[r#"data-command="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;""#][..],
        ),
        (
            "/projects",
            200,
            &[r#"<td>&lt;script&gt;alert(&quot;x&quot;)"#][..],
        ),
        ("/prds", 200, &[r#"<td>&lt;script&gt;"#][..]),
        (
            "/prds/prd-e",
            200,
            &[r#"<h1>&lt;script&gt;"#, "&lt;/script&gt;"][..],
        ),
    ] {
        let (code, html) = w.unix(None, "GET", path, None);
        assert_eq!(code, status, "{path}: {html}");
        assert!(!html.contains("<script>alert"), "{path}: {html}");
        assert!(!html.contains(r#"alert("x")"#), "{path}: {html}");
        assert!(
            status != 200 || html.contains(SHOWN),
            "{path} shows the value: {html}"
        );
        for s in shows {
            assert!(html.contains(s), "{path} has {s}: {html}");
        }
    }
}
