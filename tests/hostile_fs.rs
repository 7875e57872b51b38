//! Hostile store (issue 9, the store I/O half): links, FIFOs, long and unsafe ids, option-like
//! file names and floods, each recreated on a private store and run through the daemons' own
//! code (the inbox sweep `process_inbox`, the queue manager's loop with the real agent-worker
//! binary on a private dbus-daemon). Asserted: nothing outside the store is read or written,
//! nothing blocks, every bad entry gets an error naming it, logs stay bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, queue_env};

use agentstore::model::Timestamp;
use agentstore::orchestrator::{FileOutcome, process_inbox};
use agentstore::store::Store;
use queue_env::*;
use serde_json::{Value, json};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

const SECRET: &str = "TOPSECRET-do-not-copy";

fn message(id: &str, command: &str) -> Value {
    json!({
        "correlation_id": id,
        "source": "user",
        "project": null,
        "queue_time": "2025-10-25T10:00:00Z",
        "processed_time": null,
        "command": command,
        "content": {},
        "status": "queued",
        "error": null
    })
}

/// A fresh store under its own temp dir, with an `outside/` folder beside it.
struct Env {
    dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("AgentStore");
        Store::init(&root).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        Env { dir, root, outside }
    }
    fn store(&self) -> Store {
        Store::open(&self.root).unwrap()
    }
    fn inbox(&self, name: &str, body: &[u8]) {
        std::fs::write(self.root.join("messaging/inbox").join(name), body).unwrap();
    }
    fn answer(&self, id: &str) -> Value {
        read_json(
            &self
                .root
                .join("messaging/outbox")
                .join(format!("{id}.json")),
        )
    }
    fn secret_file(&self, name: &str, body: &str) -> PathBuf {
        let p = self.outside.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }
    /// Everything beside the store in the temp dir, other than `outside/` and the store.
    fn stray_entries(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p != &self.root && p != &self.outside)
            .collect()
    }
}

/// This month's events of every machine (merged), one JSON line each.
fn events_text(store: &Store) -> String {
    store
        .read_events(&Timestamp::now())
        .map(|m| {
            m.entries
                .iter()
                .map(|e| serde_json::to_string(&e.entry).unwrap())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Every regular file in the store (links are not followed), with its text.
fn store_files(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else if m.is_file() {
                let t = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                out.push((p, t));
            }
        }
    }
    out
}

fn assert_secret_nowhere_in_store(root: &Path) {
    for (p, t) in store_files(root) {
        assert!(!t.contains(SECRET), "{} holds the secret", p.display());
    }
}

// ---- item 3: links --------------------------------------------------------------------

/// Log files that are links (this machine's errors.out, event log, daemon logs, queue-<q>.log,
/// and the PRD-named files the readers merge) are never appended to or read through the
/// link: the targets outside the store stay unchanged while the queue manager runs jobs and
/// fails invalid ones, and the merged readers leave them out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinked_log_files_are_not_followed() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let outside = env.dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let store = env.store();
        let events = store.events_path(&Timestamp::now());
        let shared = [
            env.root.join("JSONValidation/errors.out"),
            events,
            env.root.join("logs/queue-q1.log"),
            env.root.join("logs/orchestrator.log"),
        ];
        let host = agentstore::store::hostname();
        let logs: Vec<PathBuf> = shared
            .iter()
            .map(|p| agentstore::store::perhost::host_path(p, &host))
            .chain(shared.iter().cloned())
            .collect();
        let mut targets = Vec::new();
        for (i, l) in logs.iter().enumerate() {
            let t = outside.join(format!("victim-{i}"));
            std::fs::write(&t, "original\n").unwrap();
            std::fs::create_dir_all(l.parent().unwrap()).unwrap();
            let _ = std::fs::remove_file(l);
            symlink(&t, l).unwrap();
            targets.push(t);
        }
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        env.queue_job("ok-1", &noop(0.0));
        changes.until("ok-1", "finished").await;
        // An invalid job: rejected (errors.out), failed (events, queue log).
        std::fs::write(env.job_file("queued", "bad-1"), r#"{"config": 1}"#).unwrap();
        changes.until("bad-1", "failed").await;
        store.append_daemon_log("orchestrator.log", "line\nwith newline");
        m.stop().await;
        for t in &targets {
            assert_eq!(
                std::fs::read_to_string(t).unwrap(),
                "original\n",
                "{} was written through a link",
                t.display()
            );
        }
        for l in &logs {
            assert!(
                std::fs::symlink_metadata(l)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
        }
        // The merged readers do not read through the links either.
        let store = env.store();
        assert!(store.read_errors().unwrap().entries.is_empty());
        let events = store.read_all_events().unwrap();
        assert!(events.entries.is_empty() && events.unreadable.is_empty());
        assert!(store.read_daemon_log("queue-q1.log").unwrap().is_empty());
    })
    .await
}

/// A queued_jobs/ entry that is a link to a secret is set aside (moved, as a link, to
/// conflicts/) with an error naming it; a cancel of it is refused; the target is never read,
/// and no file in the store ever holds its contents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinked_queued_job_is_never_read() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let outside = env.dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        // A valid job document, so a reader that follows the link would accept it.
        let mut secret_job = noop(0.0);
        secret_job["config"]["task_description"] = json!(SECRET);
        let target = outside.join("shadow.json");
        std::fs::write(&target, serde_json::to_vec(&secret_job).unwrap()).unwrap();
        let before = std::fs::read(&target).unwrap();
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let p = changes.proxy.clone();
        // Paused: nothing is started, the link just sits in queued_jobs/.
        env.edit_queue(|q| q.runtime.paused = Some(true));
        symlink(&target, env.job_file("queued", "evil")).unwrap();
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let e = p.cancel_job("evil").await.unwrap_err();
        assert!(e.to_string().contains("NotFound"), "{e}");
        // A normal job after it still runs.
        p.resume().await.unwrap();
        env.queue_job("after", &noop(0.0));
        changes.until("after", "finished").await;
        m.stop().await;
        assert!(!env.job_file("queued", "evil").exists());
        assert!(
            std::fs::symlink_metadata(env.job_file("queued", "evil")).is_err(),
            "the link is not left in queued_jobs/"
        );
        let set_aside = env.root.join("conflicts/evil.json");
        assert!(
            std::fs::symlink_metadata(&set_aside)
                .unwrap()
                .file_type()
                .is_symlink(),
            "moved as a link"
        );
        let log = common::shared_log(&env.root.join("logs"), "queue-q1", "log");
        assert!(
            log.contains("evil.json") && log.contains("symbolic link"),
            "{log}"
        );
        assert_eq!(std::fs::read(&target).unwrap(), before);
        assert_eq!(names(&env.dir("failed")), Vec::<String>::new());
        assert_secret_nowhere_in_store(&env.root);
    })
    .await
}

/// Inbox entries that are links or FIFOs are set aside to conflicts/messaging-inbox/ with an
/// event naming them (not left to sit forever, not read); the messages after them are
/// answered. Run both with openat2 and with the forced component walk.
#[test]
fn symlinked_inbox_entries_are_set_aside() {
    for walk in [false, true] {
        agentstore::store::safe::force_component_walk(walk);
        let env = Env::new();
        let store = env.store();
        let target = env.secret_file(
            "secret.json",
            &serde_json::to_string(&message("stolen", SECRET)).unwrap(),
        );
        symlink(&target, env.root.join("messaging/inbox/link.json")).unwrap();
        nix::unistd::mkfifo(
            &env.root.join("messaging/inbox/pipe.json"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
        env.inbox(
            "ok.json",
            &serde_json::to_vec(&message("ok", "help")).unwrap(),
        );
        let out = process_inbox(&store, 100).unwrap();
        let set_aside = out
            .iter()
            .filter(|o| matches!(o, FileOutcome::SetAside(_)))
            .count();
        assert_eq!(set_aside, 2, "walk={walk}: {out:?}");
        assert_eq!(env.answer("ok")["status"], "done");
        assert_eq!(
            names(&env.root.join("messaging/inbox")),
            Vec::<String>::new()
        );
        assert_eq!(
            names(&env.root.join("conflicts/messaging-inbox")),
            ["link.json", "pipe.json"]
        );
        let events = events_text(&store);
        assert!(
            events.contains("link.json") && events.contains("pipe.json"),
            "{events}"
        );
        assert!(!env.root.join("messaging/outbox/stolen.json").exists());
        assert_secret_nowhere_in_store(&env.root);
    }
    agentstore::store::safe::force_component_walk(false);
}

/// outbox/, processed_inbox/ and a project folder that are links to folders outside the store
/// are refused with an error: nothing is written there, and the store does not read through
/// them.
#[test]
fn directory_symlinks_are_refused() {
    for walk in [false, true] {
        agentstore::store::safe::force_component_walk(walk);
        let env = Env::new();
        let out_dir = env.outside.join("outbox");
        let processed = env.outside.join("processed");
        let project = env.outside.join("project");
        for d in [&out_dir, &processed, &project] {
            std::fs::create_dir_all(d).unwrap();
        }
        let now = Timestamp::now().to_string();
        std::fs::write(
            project.join("project.json"),
            json!({"id": "Evil", "directory": "/tmp", "create_time": now, "update_time": now,
                   "owner": "nobody", "description": SECRET})
            .to_string(),
        )
        .unwrap();
        let ob = env.root.join("messaging/outbox");
        std::fs::remove_dir(&ob).unwrap();
        symlink(&out_dir, &ob).unwrap();
        let pi = env.root.join("messaging/processed_inbox");
        std::fs::remove_dir(&pi).unwrap();
        symlink(&processed, &pi).unwrap();
        symlink(&project, env.root.join("projects/Evil")).unwrap();

        let store = env.store();
        env.inbox(
            "m1.json",
            &serde_json::to_vec(&message("m1", "help")).unwrap(),
        );
        let out = process_inbox(&store, 100).unwrap();
        // The message fails alone, with an error naming the link.
        let shown = format!("{out:?}");
        assert!(
            out.len() == 1 && shown.contains("Failed") && shown.contains("symbolic link"),
            "walk={walk}: {shown}"
        );
        assert_eq!(names(&out_dir), Vec::<String>::new(), "walk={walk}");
        assert_eq!(names(&processed), Vec::<String>::new());
        let e = store.project("Evil").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(names(&project), ["project.json"]);
        assert!(env.stray_entries().is_empty(), "{:?}", env.stray_entries());
    }
    agentstore::store::safe::force_component_walk(false);
}

/// A queue whose job folder is a link is refused at start, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_folder_symlink_is_refused() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let outside = env.dir.path().join("outside-queued");
        std::fs::create_dir_all(&outside).unwrap();
        let q = env.dir("queued");
        std::fs::remove_dir(&q).unwrap();
        symlink(&outside, &q).unwrap();
        let e = agentstore::bus::queue::start_manager(env.manager_config(&bus))
            .await
            .err()
            .expect("start must refuse a linked queued_jobs/")
            .to_string();
        assert!(
            e.contains("queued_jobs") && e.contains("symbolic link"),
            "{e}"
        );
        assert_eq!(names(&outside), Vec::<String>::new());
    })
    .await
}

// ---- items 2 and 4: ids ----------------------------------------------------------------

/// Correlation ids too long for `outbox/<id>.json` get an error answer under a derived safe
/// name, and the messages after them are still answered.
#[test]
fn long_correlation_ids_are_answered_and_later_messages_too() {
    let env = Env::new();
    let store = env.store();
    for (i, len) in [201usize, 236, 250, 255, 300].into_iter().enumerate() {
        let id = "a".repeat(len);
        env.inbox(
            &format!("m{i}.json"),
            &serde_json::to_vec(&message(&id, "help")).unwrap(),
        );
    }
    env.inbox(
        "z-last.json",
        &serde_json::to_vec(&message("z-last", "help")).unwrap(),
    );
    let out = process_inbox(&store, 100).unwrap();
    assert!(
        out.iter().all(|o| matches!(o, FileOutcome::Answered(_))),
        "{out:?}"
    );
    for i in 0..5 {
        let a = env.answer(&format!("m{i}"));
        assert_eq!(a["status"], "error", "{a}");
        let e = a["error"].as_str().unwrap();
        assert!(e.contains("/correlation_id"), "{e}");
        assert!(e.len() < 4096, "{}", e.len());
    }
    assert_eq!(env.answer("z-last")["status"], "done");
    assert_eq!(
        names(&env.root.join("messaging/inbox")),
        Vec::<String>::new()
    );
}

/// A store whose message schema was loosened to accept anything cannot turn the id check
/// off: a `../` correlation id gets an error answer inside the outbox and nothing is written
/// outside the store.
#[test]
fn loosened_schema_cannot_disable_id_checks() {
    let env = Env::new();
    for kind in ["message", "job", "project", "user", "queue", "prd"] {
        std::fs::write(
            env.root
                .join(format!("JSONValidation/Schemas/{kind}.schema.json")),
            "{}",
        )
        .unwrap();
    }
    let store = env.store();
    let bad = [
        "../../../escaped",
        "../../escaped2",
        "a..b",
        "x/../../../../escaped3",
    ];
    for (i, id) in bad.iter().enumerate() {
        env.inbox(
            &format!("m{i}.json"),
            &serde_json::to_vec(&message(id, "help")).unwrap(),
        );
    }
    let out = process_inbox(&store, 100).unwrap();
    assert!(
        out.iter().all(|o| matches!(o, FileOutcome::Answered(_))),
        "{out:?}"
    );
    for i in 0..bad.len() {
        let a = env.answer(&format!("m{i}"));
        assert_eq!(a["status"], "error", "{a}");
        assert!(
            a["error"].as_str().unwrap().contains("not a safe id"),
            "{a}"
        );
    }
    assert!(env.stray_entries().is_empty(), "{:?}", env.stray_entries());
    assert_eq!(names(&env.outside), Vec::<String>::new());
    assert_eq!(
        names(&env.root.join("messaging/outbox")).len(),
        bad.len(),
        "{:?}",
        names(&env.root.join("messaging/outbox"))
    );
    // The writer side too: a job whose id is unsafe is never written.
    let mut j = noop(0.0);
    j["id"] = json!("../../escaped-job");
    let e = store
        .write_doc(
            agentstore::model::DocKind::Job,
            &store.job_path("poplar", agentstore::model::JobStatus::Queued, "x"),
            &j,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a safe id"), "{e}");
}

// ---- item 6: option-like names ---------------------------------------------------------

/// Job files named `--help.json` and `-V.json` run like any other job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn option_like_job_names_run() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(2);
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let m = RunningManager::start(env.manager_config(&bus)).await;
        env.queue_job("--help", &noop(0.0));
        env.queue_job("-V", &noop(0.0));
        changes.until("--help", "finished").await;
        changes.until("-V", "finished").await;
        m.stop().await;
        for id in ["--help", "-V"] {
            let j = env.job("finished", id);
            assert_eq!(j["runtime"]["status"], "finished", "{j}");
            assert_eq!(j["runtime"]["error"], Value::Null, "{j}");
        }
    })
    .await
}

// ---- item 9: amplification and rotation --------------------------------------------------

/// 5 MB bad values cost errors.out and the answer a few KiB, not megabytes.
#[test]
fn big_bad_message_is_quoted_briefly() {
    let env = Env::new();
    let store = env.store();
    let big = "x".repeat(5 << 20);
    let mut m1 = message("big-source", "help");
    m1["source"] = json!(big);
    let mut m2 = message("big-command", "help");
    m2["command"] = json!(big);
    let mut m3 = message("big-id", "help");
    m3["correlation_id"] = json!(big);
    let mut m4 = message("big-many", "help");
    for i in 0..1000 {
        m4[format!("extra{i}")] = json!(big[..5000]);
    }
    let errors = agentstore::store::perhost::host_path(
        &env.root.join("JSONValidation/errors.out"),
        &agentstore::store::hostname(),
    );
    for (i, m) in [m1, m2, m3, m4].iter().enumerate() {
        let before = std::fs::metadata(&errors).map(|m| m.len()).unwrap_or(0);
        env.inbox(&format!("b{i}.json"), &serde_json::to_vec(m).unwrap());
        let out = process_inbox(&store, 100).unwrap();
        assert!(matches!(out[..], [FileOutcome::Answered(_)]), "{out:?}");
        let grown = std::fs::metadata(&errors).unwrap().len() - before;
        eprintln!("case {i}: errors.out grew {grown} bytes");
        assert!(
            grown > 0 && grown <= 8192,
            "case {i}: errors.out grew {grown} bytes"
        );
        let answer = env.root.join(format!("messaging/outbox/b{i}.json"));
        let answer = if answer.exists() {
            answer
        } else {
            env.root.join(format!(
                "messaging/outbox/big-{}.json",
                ["source", "command", "id", "many"][i]
            ))
        };
        let size = std::fs::metadata(&answer).unwrap().len();
        eprintln!("case {i}: answer is {size} bytes");
        assert!(size <= 8192, "case {i}: answer is {size} bytes");
    }
}

/// errors.out (and every store log) is capped and rotated: a flood leaves the current file
/// plus `keep_files` rotated ones, each within the cap.
#[test]
fn logs_rotate_and_keep_n_files() {
    let env = Env::new();
    let cfg = env.root.join("config.yaml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text = text.replace(
        "logging:\n",
        "logging:\n  max_file_bytes: 20000\n  keep_files: 2\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let store = env.store();
    for i in 0..300 {
        let mut m = message(&format!("f{i}"), "help");
        m["source"] = json!("y".repeat(3000));
        env.inbox(&format!("f{i}.json"), &serde_json::to_vec(&m).unwrap());
    }
    process_inbox(&store, 1000).unwrap();
    let dir = env.root.join("JSONValidation");
    let host = agentstore::store::hostname();
    let mine = format!("errors@{host}.out");
    let logs: Vec<String> = names(&dir)
        .into_iter()
        .filter(|n| n.starts_with("errors"))
        .collect();
    assert_eq!(
        logs,
        [
            "errors.out".to_string(),
            mine.clone(),
            format!("{mine}.1"),
            format!("{mine}.2")
        ]
    );
    for n in &logs {
        let len = std::fs::metadata(dir.join(n)).unwrap().len();
        assert!(len <= 20000, "{n}: {len}");
    }
    let events =
        agentstore::store::perhost::host_path(&store.events_path(&Timestamp::now()), &host);
    let ev_dir = events.parent().unwrap();
    let ev_name = events.file_name().unwrap().to_str().unwrap();
    let ev: Vec<String> = names(ev_dir)
        .into_iter()
        .filter(|n| n.starts_with(ev_name))
        .collect();
    assert!(!ev.is_empty() && ev.len() <= 3, "{ev:?}");
    // All 300 answered.
    assert_eq!(names(&env.root.join("messaging/outbox")).len(), 300);
}

/// A `conflicts/` folder that is a link cannot block the inbox: the entries that would be set
/// aside there fail alone (named), nothing is moved outside, the messages are answered.
#[test]
fn linked_conflicts_folder_does_not_block_the_inbox() {
    let env = Env::new();
    let store = env.store();
    let trap = env.outside.join("conflicts");
    std::fs::create_dir_all(&trap).unwrap();
    symlink(&trap, env.root.join("conflicts")).unwrap();
    env.inbox(
        "c (laptop's conflicted copy 2025-10-23).json",
        &serde_json::to_vec(&message("c", "help")).unwrap(),
    );
    let target = env.secret_file("s.json", SECRET);
    symlink(&target, env.root.join("messaging/inbox/link.json")).unwrap();
    env.inbox(
        "ok.json",
        &serde_json::to_vec(&message("ok", "help")).unwrap(),
    );
    let out = process_inbox(&store, 100).unwrap();
    let shown = format!("{out:?}");
    assert_eq!(env.answer("ok")["status"], "done", "{shown}");
    assert!(
        shown.contains("link.json") && shown.contains("conflicted copy"),
        "{shown}"
    );
    assert_eq!(names(&trap), Vec::<String>::new());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), SECRET);
}

/// A project's `code_research_document` in a folder that is a link: the completion handler
/// only records the research (the job writes the document, as its user); nothing is written
/// through the link, nor anywhere in the project.
#[test]
fn code_research_document_folder_link_is_refused() {
    let env = Env::new();
    let store = env.store();
    let real = env.outside.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let work = env.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    symlink(&real, work.join("docs")).unwrap();
    let now = Timestamp::now().to_string();
    std::fs::create_dir_all(env.root.join("projects/TestProject")).unwrap();
    std::fs::write(
        store.project_path("TestProject"),
        json!({"id": "TestProject", "directory": work, "create_time": now,
               "update_time": now, "owner": "chenry", "default_queue": "poplar",
               "code_research_document": work.join("docs/RESEARCH.md")})
        .to_string(),
    )
    .unwrap();
    let q = store.config().queues_default.clone();
    let mut j = job(
        "claude",
        json!({"claude_command": "code-researcher", "command": "research-code"}),
    );
    j["runtime"]["status"] = json!("finished");
    j["runtime"]["start_time"] = json!(now);
    j["runtime"]["finish_time"] = json!(now);
    j["runtime"]["output"] = json!("# Research");
    let path = store.job_path(&q, agentstore::model::JobStatus::Finished, "r1");
    std::fs::write(&path, j.to_string()).unwrap();
    let done = agentstore::orchestrator::handle_finished_jobs(
        &store,
        &mut agentstore::orchestrator::handled::Completions::new(),
    )
    .unwrap();
    assert_eq!(done.len(), 1);
    assert!(done[0].action.starts_with("recorded"), "{}", done[0].action);
    assert_eq!(names(&real), Vec::<String>::new());
    assert_eq!(names(&work), vec!["docs".to_string()]);
}

/// A research document the project keeps INSIDE the store is a store record: the
/// orchestrator writes it when it handles the job (the job's user may be unable to write the
/// store: system mode). One named through `..` out of the store is not the store's: only
/// recorded, nothing written there.
#[test]
fn research_document_inside_the_store_is_written_by_the_orchestrator() {
    let env = Env::new();
    let store = env.store();
    let now = Timestamp::now().to_string();
    std::fs::create_dir_all(env.root.join("projects/TestProject")).unwrap();
    let inside = env.root.join("projects/TestProject/CODE_RESEARCH.md");
    let escape = env.root.join("projects/../../escaped/CODE_RESEARCH.md");
    let q = store.config().queues_default.clone();
    for (id, doc) in [("in1", &inside), ("out1", &escape)] {
        std::fs::write(
            store.project_path("TestProject"),
            json!({"id": "TestProject", "directory": env.dir.path(), "create_time": now,
                   "update_time": now, "owner": "chenry", "default_queue": "poplar",
                   "code_research_document": doc})
            .to_string(),
        )
        .unwrap();
        let mut j = job(
            "claude",
            json!({"claude_command": "code-researcher", "command": "research-code",
                   "supporting_data": {"code_research_document": doc}}),
        );
        j["runtime"]["status"] = json!("finished");
        j["runtime"]["start_time"] = json!(now);
        j["runtime"]["finish_time"] = json!(now);
        j["runtime"]["output"] = json!("# Research");
        let path = store.job_path(&q, agentstore::model::JobStatus::Finished, id);
        std::fs::write(&path, j.to_string()).unwrap();
        let done = agentstore::orchestrator::handle_finished_jobs(
            &store,
            &mut agentstore::orchestrator::handled::Completions::new(),
        )
        .unwrap();
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(done[0].action.starts_with("recorded"), "{}", done[0].action);
    }
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "# Research");
    assert!(store.holds(&inside));
    assert!(!store.holds(&escape));
    assert!(!env.dir.path().join("escaped").exists());
    assert!(!env.root.parent().unwrap().join("escaped").exists());
}

/// Messages that keep failing (here: processed_inbox/ is a link) never make the running
/// orchestratord spin: more of them than one batch holds, and it still answers on D-Bus.
#[test]
fn failing_messages_do_not_stall_the_daemon() {
    let env = Env::new();
    let cfg = env.root.join("config.yaml");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("max_messages_per_loop: 50", "max_messages_per_loop: 2");
    assert!(text.contains("max_messages_per_loop: 2"), "{text}");
    std::fs::write(&cfg, text).unwrap();
    let trap = env.outside.join("processed");
    std::fs::create_dir_all(&trap).unwrap();
    let pi = env.root.join("messaging/processed_inbox");
    std::fs::remove_dir(&pi).unwrap();
    symlink(&trap, &pi).unwrap();
    for i in 0..5 {
        env.inbox(
            &format!("s{i}.json"),
            &serde_json::to_vec(&message(&format!("s{i}"), "help")).unwrap(),
        );
    }
    let bus = common::bus::PrivateBus::start();
    let mut daemon = common::bus::spawn_orchestratord(&bus, &env.root, &[]);
    common::bus::wait_for_name(&bus, "org.agentstore.Orchestrator1");
    let store = env.store();
    common::bus::wait_until(
        std::time::Duration::from_secs(60),
        "message_failed events",
        || {
            let t = events_text(&store);
            t.contains("message_failed") && t.contains("s4.json")
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = rt.block_on(async {
        let conn = bus.connect().await;
        let p = agentstore::bus::orchestrator::Orchestrator1Proxy::new(&conn)
            .await
            .unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            p.submit(r#"{"command": "help"}"#),
        )
        .await
        .expect("the daemon answers D-Bus while messages keep failing")
        .unwrap()
    });
    let _ = daemon.kill();
    let _ = daemon.wait();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["status"], "done", "{answer}");
    assert_eq!(names(&trap), Vec::<String>::new());
    assert_eq!(names(&env.root.join("messaging/inbox")).len(), 5);
}

// ---- least privilege: the root queue-manager's store I/O -----------------------------------

/// A root queue-manager on a store owned by another account (`nobody` here, `agentstore` in
/// the package) reads and writes the store with that account's rights: a hard link and a
/// symbolic link planted in queued_jobs/ to a root-only file outside the store do not get
/// its content copied into the store, the file stays as it was, a normal job still runs, and
/// what the daemons create in the store belongs to the store's owner.
#[test]
fn root_queue_manager_uses_the_store_owners_rights() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !nix::unistd::geteuid().is_root() {
        common::bus::skip(
            "root_queue_manager_uses_the_store_owners_rights",
            "needs root (a root daemon dropping to the store owner)",
        );
        return;
    }
    let env = QueueEnv::new(1);
    env.queue_job("good", &noop(0.0));
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let ok = std::process::Command::new("chown")
        .args(["-R", "-h"])
        .arg(format!("{}:{}", nobody.uid, nobody.gid))
        .arg(&env.root)
        .status()
        .unwrap();
    assert!(ok.success());
    let canary = env.dir.path().join("canary.json");
    let body = json!({"secret": SECRET}).to_string();
    std::fs::write(&canary, &body).unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&canary, env.job_file("queued", "evil")).unwrap();
    symlink(&canary, env.job_file("queued", "link")).unwrap();
    let before = std::fs::metadata(&canary).unwrap();

    let mut child = crate::daemons::queue_manager(&env.root, "q1")
        .args(["--worker", env!("CARGO_BIN_EXE_agent-worker")])
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn();
    let done = env.job_file("finished", "good");
    crate::wait::files_within(&[&env.dir("finished")], crate::wait::LOADED, || {
        done.exists()
    });
    // The manager's pass after the job ended (its runtime shows no job running) went over
    // the planted entries again.
    crate::wait::files_within(&[&env.root.join("Queues/q1")], crate::wait::LOADED, || {
        env.queue_json()["runtime"]["active_jobs"] == 0
    });
    let _ = child.0.kill();
    let out = child.0.wait_with_output_ref();
    assert!(done.exists(), "the normal job did not finish: {out}");

    // The root-only file: same bytes, mode, owner and inode; its content nowhere else.
    let after = std::fs::metadata(&canary).unwrap();
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), body);
    assert_eq!(
        (after.mode(), after.uid(), after.ino()),
        (before.mode(), before.uid(), before.ino())
    );
    for (path, text) in store_files(&env.root) {
        let ino = std::fs::symlink_metadata(&path).unwrap().ino();
        if ino != before.ino() {
            assert!(
                !text.contains(SECRET),
                "{} holds the secret",
                path.display()
            );
        }
    }
    // What the manager (and its root worker) made in the store is the store owner's.
    let queue_log = agentstore::store::perhost::host_path(
        &env.root.join("logs/queue-q1.log"),
        &agentstore::store::hostname(),
    );
    for p in [
        queue_log.clone(),
        done.clone(),
        env.root.join("Queues/q1/runtime"),
    ] {
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            assert_eq!(m.uid(), nobody.uid.as_raw(), "{} owner", p.display());
        }
    }
    let m = std::fs::metadata(&queue_log).unwrap();
    assert_eq!(m.uid(), nobody.uid.as_raw());
    assert!(
        out.contains("store owner's rights"),
        "the manager did not report the drop: {out}"
    );
}

/// Reads what a killed child wrote to its piped stderr.
trait StderrText {
    fn wait_with_output_ref(&mut self) -> String;
}

impl StderrText for std::process::Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}
