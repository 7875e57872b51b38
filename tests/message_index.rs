//! Issue 33 item 3: `list-messages` from the message index. Every page (any offset, any
//! filter, as an admin and as an ordinary user) is the slice of the one order that reading
//! every file the slow way gives; a message added or answered between pages is seen; the
//! index outlives orchestratord and a folder a sync engine delivered files into is read
//! again. Checked by behaviour, never by timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use agentstore::bus::orchestrator::Orchestrator1Proxy;
use agentstore::model::Timestamp;
use futures_util::StreamExt;
use queue_env::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const FOLDERS: [&str; 4] = ["inbox", "processed_inbox", "outbox", "processed_outbox"];

/// A message as the slow way reads it: (queue time, answer?, id, folder), user, project,
/// status.
#[derive(Debug, Clone)]
struct Slow {
    t: Timestamp,
    out: bool,
    id: String,
    folder: usize,
    user: Option<String>,
    project: Option<String>,
    status: String,
}

/// Every message file of the store, read whole, in the listing order: newest first, answers
/// before their requests, then id descending, then folder.
fn slow_listing(root: &Path) -> Vec<Slow> {
    let mut all = Vec::new();
    for (folder, name) in FOLDERS.iter().enumerate() {
        let dir = root.join("messaging").join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let file = e.file_name().to_string_lossy().to_string();
            let Some(id) = file.strip_suffix(".json") else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(&std::fs::read(e.path()).unwrap()) else {
                continue;
            };
            let Some(t) = v["queue_time"].as_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let text = |k: &str| v[k].as_str().map(str::to_string);
            all.push(Slow {
                t,
                out: folder >= 2,
                id: id.to_string(),
                folder,
                user: text("user"),
                project: text("project"),
                status: text("status").unwrap(),
            });
        }
    }
    all.sort_by(|a, b| {
        (&b.t, b.out, &b.id)
            .cmp(&(&a.t, a.out, &a.id))
            .then(a.folder.cmp(&b.folder))
    });
    all
}

fn message(
    id: &str,
    t: &str,
    out: bool,
    user: Option<&str>,
    project: Option<&str>,
    status: &str,
) -> Value {
    let mut m = json!({
        "correlation_id": id, "source": if out { "orchestrator" } else { "user" },
        "project": project, "queue_time": t, "processed_time": null,
        "command": "list-queues", "content": {}, "status": status, "error": null,
    });
    if let Some(u) = user {
        m["user"] = json!(u);
    }
    m
}

fn put(root: &Path, folder: &str, id: &str, m: &Value) {
    let dir = root.join("messaging").join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    agentstore::store::write_json_atomic(&dir.join(format!("{id}.json")), m).unwrap();
}

/// One `list-messages` answer over D-Bus: ((id, folder) rows, total, next_offset, problems).
async fn ask(
    p: &Orchestrator1Proxy<'static>,
    user: Option<&str>,
    content: Value,
) -> (Vec<(String, String)>, u64, u64, usize) {
    let mut msg = json!({"command": "list-messages", "content": content});
    if let Some(u) = user {
        msg["user"] = json!(u);
    }
    let answer: Value = serde_json::from_str(&p.submit(&msg.to_string()).await.unwrap()).unwrap();
    let r = &answer["content"]["result"];
    let rows = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap().to_string();
            (s("id"), s("folder"))
        })
        .collect();
    let n = |k: &str| r[k].as_u64().unwrap();
    (
        rows,
        n("total"),
        n("next_offset"),
        r["problems"].as_array().unwrap().len(),
    )
}

fn rows_of(v: &[&Slow]) -> Vec<(String, String)> {
    v.iter()
        .map(|m| (m.id.clone(), FOLDERS[m.folder].to_string()))
        .collect()
}

/// What `who` may see under `filter` ((key, value) of content), the slow way.
fn admitted<'a>(all: &'a [Slow], who: Option<&str>, filter: &[(&str, &str)]) -> Vec<&'a Slow> {
    all.iter()
        .filter(|m| who.is_none_or(|u| m.user.as_deref() == Some(u)))
        .filter(|m| {
            filter.iter().all(|(k, v)| match *k {
                "direction" => (*v == "out") == m.out,
                "status" => m.status == *v,
                "project" => m.project.as_deref() == Some(*v),
                "user" => m.user.as_deref() == Some(*v),
                _ => unreachable!(),
            })
        })
        .collect()
}

/// Asks for pages at `offsets` (limit `limit`) and checks each against the slow listing.
async fn check_pages(
    p: &Orchestrator1Proxy<'static>,
    root: &Path,
    who: Option<&str>,
    filter: &[(&str, &str)],
    offsets: &[usize],
    limit: usize,
) {
    let all = slow_listing(root);
    let want = admitted(&all, who, filter);
    for &off in offsets {
        let mut content = json!({"offset": off, "limit": limit});
        for (k, v) in filter {
            content[*k] = json!(v);
        }
        let (rows, total, next, _) = ask(p, who, content).await;
        let end = (off + limit).min(want.len());
        let start = off.min(end);
        assert_eq!(total as usize, want.len(), "{who:?} {filter:?} total");
        assert_eq!(
            rows,
            rows_of(&want[start..end]),
            "{who:?} {filter:?} at {off}"
        );
        assert_eq!(
            next as usize,
            end.max(off),
            "{who:?} {filter:?} next at {off}"
        );
    }
}

fn start_daemon(bus: &PrivateBus, env: &QueueEnv, home: &Path) -> KillOnDrop {
    KillOnDrop(
        orchestratord_command(bus, &env.root, &["--idle-exit", "0"])
            .env("HOME", home)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("CACHE_DIRECTORY")
            .spawn()
            .unwrap(),
    )
}

fn env_with_nob() -> (QueueEnv, PathBuf) {
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let store = env.store();
    std::fs::write(
        store.user_path("nob"),
        json!({"id": "nob", "name": "Nob", "email": "nob@example.org", "permissions": "user"})
            .to_string(),
    )
    .unwrap();
    (env, home)
}

/// 1,200 messages in processed_inbox/, outbox/ and processed_outbox/ (requests and answers
/// sharing ids, three to a queue time, some with fractions; users nob, chenry and none;
/// projects Mine, Other and none), one unreadable file and one conflict copy.
fn write_history(root: &Path) {
    for i in 0..1200u32 {
        let s = 1000 + i / 3;
        let frac = if i % 7 == 0 { ".5" } else { "" };
        let t = format!(
            "2025-01-01T{:02}:{:02}:{:02}{frac}Z",
            s / 3600,
            s / 60 % 60,
            s % 60
        );
        let folder = ["processed_inbox", "outbox", "processed_outbox"][(i % 3) as usize];
        let out = folder != "processed_inbox";
        let id = format!("m-{:04}", i / 2);
        let user = [Some("nob"), Some("chenry"), None][(i % 4 % 3) as usize];
        let project = [Some("Mine"), Some("Other"), None][(i % 5 % 3) as usize];
        let status = if out && i % 11 == 0 { "error" } else { "done" };
        put(
            root,
            folder,
            &id,
            &message(&id, &t, out, user, project, status),
        );
    }
    std::fs::write(root.join("messaging/processed_inbox/broken.json"), "{").unwrap();
    std::fs::write(
        root.join("messaging/processed_outbox/m-0001 (conflicted copy).json"),
        "{}",
    )
    .unwrap();
}

/// A private bus, the store of [`write_history`] (its folders settled) and orchestratord on
/// it, with a proxy.
async fn started() -> (
    PrivateBus,
    QueueEnv,
    PathBuf,
    KillOnDrop,
    Orchestrator1Proxy<'static>,
) {
    let bus = PrivateBus::start();
    let (env, home) = env_with_nob();
    write_history(&env.root);
    settle_all(&env.root);
    let d = start_daemon(&bus, &env, &home);
    let p = orchestrator_on(&bus).await;
    (bus, env, home, d, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_page_is_a_slice_of_the_slow_order_for_each_caller() {
    guarded(async {
        // Settled folders: the total and the marks (one every 256 messages) are counted once
        // and kept, and a page starts from the mark before it.
        let (_bus, env, _home, _d, p) = started().await;
        let n = slow_listing(&env.root).len();
        assert_eq!(n, 1200);

        let filters: [&[(&str, &str)]; 6] = [
            &[],
            &[("direction", "out")],
            &[("direction", "in")],
            &[("status", "error")],
            &[("project", "Mine")],
            &[("user", "nob"), ("direction", "out")],
        ];
        for who in [None, Some("nob")] {
            for filter in filters {
                let offsets = [n + 5, n - 3, 1025, 777, 512, 256, 255, 41, 1, 0];
                check_pages(&p, &env.root, who, filter, &offsets, 50).await;
                // Around every mark, where a seek lands (ties of time and id included).
                let around: Vec<usize> = (1..=4).flat_map(|k| 256 * k - 2..256 * k + 3).collect();
                check_pages(&p, &env.root, who, filter, &around, 3).await;
            }
        }
        // Problems are the admin's only.
        let (_, _, _, problems) = ask(&p, None, json!({"limit": 1})).await;
        assert_eq!(problems, 2);
        let (_, _, _, problems) = ask(&p, Some("nob"), json!({"limit": 1})).await;
        assert_eq!(problems, 0);
        // A user may not ask for another's messages.
        let mut denied = json!({"command": "list-messages", "content": {"user": "chenry"}});
        denied["user"] = json!("nob");
        assert!(p.submit(&denied.to_string()).await.is_err());

        // Between two pages: an answer delivered (newest of all: it moves every page by one)
        // and a request written to the inbox, which orchestratord answers (the request moves
        // to processed_inbox/, its answer appears in outbox/).
        check_pages(&p, &env.root, None, &[], &[0], 50).await;
        put(
            &env.root,
            "processed_outbox",
            "late",
            &message(
                "late",
                "2025-06-01T00:00:00Z",
                true,
                Some("nob"),
                None,
                "done",
            ),
        );
        // Subscribed before the request is written: its MessageProcessed comes once the pass
        // that answered it is over (answer written, request moved).
        let mut processed = p.receive_message_processed().await.unwrap();
        put(
            &env.root,
            "inbox",
            "asked",
            &message(
                "asked",
                "2025-05-01T00:00:00Z",
                false,
                Some("nob"),
                None,
                "queued",
            ),
        );
        while let Some(sig) = processed.next().await {
            if *sig.args().unwrap().correlation_id() == "asked" {
                break;
            }
        }
        assert!(
            env.root
                .join("messaging/processed_inbox/asked.json")
                .exists()
        );
        let all = slow_listing(&env.root);
        assert_eq!(all[0].id, "late");
        assert!(
            all.iter().any(|m| m.id == "asked" && m.out),
            "answered: {:?}",
            &all[..4]
        );
        for who in [None, Some("nob")] {
            check_pages(&p, &env.root, who, &[], &[50, 0, 1], 50).await;
            check_pages(&p, &env.root, who, &[("direction", "in")], &[0, 3], 5).await;
        }
    })
    .await;
}

/// The index files orchestratord keeps under its HOME's cache: (path, inode, mtime).
fn index_files(home: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![home.join(".cache")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if e.path().parent().unwrap().ends_with(".messaging") {
                out.push((e.path(), m.ino(), m.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Sets the messaging folders' modification time back a minute: settled, as folders nobody
/// wrote to lately are.
fn settle_all(root: &Path) {
    let past = SystemTime::now() - Duration::from_secs(60);
    for f in FOLDERS {
        let dir = root.join("messaging").join(f);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(past)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_index_outlives_a_restart_and_a_synced_folder_is_read_again() {
    guarded(async {
        let (bus, env, home, d, p) = started().await;
        check_pages(&p, &env.root, None, &[], &[0, 600], 50).await;
        let kept = index_files(&home);
        assert_eq!(
            kept.iter()
                .map(|k| k.0.file_name().unwrap().to_string_lossy().to_string())
                .collect::<Vec<_>>(),
            [
                "inbox.idx",
                "outbox.idx",
                "processed_inbox.idx",
                "processed_outbox.idx"
            ]
        );
        drop(p);
        drop(d);

        // After a restart the listing is served from the kept files: none is written again.
        let d = start_daemon(&bus, &env, &home);
        let p = orchestrator_on(&bus).await;
        check_pages(&p, &env.root, Some("nob"), &[], &[0, 300], 50).await;
        check_pages(&p, &env.root, None, &[("direction", "out")], &[799], 50).await;
        assert_eq!(
            index_files(&home),
            kept,
            "the kept index was used as it was"
        );

        // A sync engine delivers files (written beside, renamed in): that folder is read
        // again, the others are not.
        let synced = env.root.join("messaging/processed_outbox");
        for i in 0..5 {
            let id = format!("synced-{i}");
            let m = message(
                &id,
                "2025-01-01T00:10:00Z",
                true,
                Some("nob"),
                Some("Mine"),
                "done",
            );
            let tmp = synced.join(format!(".{id}.json.tmp"));
            std::fs::write(&tmp, m.to_string()).unwrap();
            std::fs::rename(&tmp, synced.join(format!("{id}.json"))).unwrap();
        }
        for who in [None, Some("nob")] {
            check_pages(&p, &env.root, who, &[], &[0, 400], 50).await;
            check_pages(&p, &env.root, who, &[("project", "Mine")], &[0, 90], 50).await;
        }
        let now = index_files(&home);
        for (was, is) in kept.iter().zip(&now) {
            // A file written again has a new time (its inode may be the old one's, reused).
            let rewritten = (was.1, was.2) != (is.1, is.2);
            assert_eq!(
                rewritten,
                was.0.ends_with("processed_outbox.idx"),
                "{}",
                was.0.display()
            );
        }
        drop(d);
    })
    .await;
}
