//! The sync engines' conflict copies (issue 13): `orchestrator conflicts` lists them in place
//! and set aside, naming the engine, the device, the original and whether it exists;
//! `conflicts resolve PATH --keep original|copy` keeps one side and never deletes the other;
//! paths outside the store, `..`, links and files that are not copies are refused with a
//! message naming the path and nothing changes. The daemons report a copy by its engine's
//! name, and a real queue manager's set-aside copy goes back into the queue with `--keep copy`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, queue_env};

use common::TestEnv;
use queue_env::*;
use serde_json::Value;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ST: &str = "project.sync-conflict-20251023-101010-ABCDEFG.json";

fn list(env: &TestEnv) -> Vec<Value> {
    let out = env.ok(&["conflicts", "--format", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["conflicts"].as_array().unwrap().clone()
}

fn entry<'a>(rows: &'a [Value], path: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["path"] == path)
        .unwrap_or_else(|| panic!("{path} not listed: {rows:#?}"))
}

/// Every file below `dir` with its bytes (to show a refusal changed nothing).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                let bytes = if m.is_file() {
                    std::fs::read(&p).unwrap()
                } else {
                    Vec::new()
                };
                out.push((p.to_string_lossy().into_owned(), bytes));
            }
        }
    }
    out.sort();
    out
}

/// A store holding one copy of each engine, in place and set aside.
fn store_with_copies() -> TestEnv {
    let env = TestEnv::initialised();
    env.write("projects/P/project.json", "{\"original\": true}\n");
    env.write(&format!("projects/P/{ST}"), "{\"copy\": true}\n");
    env.write(
        "prds/x (laptop's conflicted copy 2025-10-23).md",
        "dropbox copy",
    );
    env.write(
        "conflicts/messaging-inbox/m1 (conflicted copy 2025-10-23 101010).json",
        "{\"m\": 1}",
    );
    env.write(
        "Queues/poplar/Jobs/queued_jobs/j1_conflict-20251023-101010.json",
        "{}",
    );
    env
}

#[test]
fn conflict_copies_are_listed_with_engine_device_and_original() {
    let env = store_with_copies();
    let rows = list(&env);
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let st = entry(&rows, &format!("projects/P/{ST}"));
    assert_eq!(st["engine"], "syncthing");
    assert_eq!(st["device"], "ABCDEFG");
    assert_eq!(st["original"], "projects/P/project.json");
    assert_eq!(st["original_exists"], true);
    assert_eq!(st["set_aside"], false);
    assert_eq!(st["size"], 15);
    assert!(st["mtime"].as_str().unwrap().ends_with('Z'), "{st}");
    let db = entry(&rows, "prds/x (laptop's conflicted copy 2025-10-23).md");
    assert_eq!(
        (
            &db["engine"],
            &db["device"],
            &db["original"],
            &db["original_exists"]
        ),
        (
            &Value::from("dropbox"),
            &Value::from("laptop"),
            &Value::from("prds/x.md"),
            &Value::from(false)
        )
    );
    let nc = entry(
        &rows,
        "conflicts/messaging-inbox/m1 (conflicted copy 2025-10-23 101010).json",
    );
    assert_eq!(nc["engine"], "nextcloud");
    assert_eq!(nc["original"], "messaging/inbox/m1.json");
    assert_eq!(nc["set_aside"], true);
    assert_eq!(nc["device"], Value::Null);
    let oc = entry(
        &rows,
        "Queues/poplar/Jobs/queued_jobs/j1_conflict-20251023-101010.json",
    );
    assert_eq!(oc["engine"], "owncloud");
    assert_eq!(oc["original"], "Queues/poplar/Jobs/queued_jobs/j1.json");
    // Text: one row each, the engine by name.
    let text = env.ok(&["conflicts"]);
    for w in [
        "Syncthing",
        "Dropbox",
        "Nextcloud",
        "ownCloud",
        "ABCDEFG",
        "(missing)",
    ] {
        assert!(text.contains(w), "{w} not in:\n{text}");
    }
    // An empty store says so.
    let clean = TestEnv::initialised();
    assert!(clean.ok(&["conflicts"]).contains("No conflict copies"));
    assert!(list(&clean).is_empty());
}

#[test]
fn keep_copy_replaces_the_original_and_keeps_it() {
    let env = store_with_copies();
    let out = env.ok(&[
        "conflicts",
        "resolve",
        &format!("projects/P/{ST}"),
        "--keep",
        "copy",
    ]);
    assert!(out.contains("projects/P/project.json"), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("projects/P/project.json")).unwrap(),
        "{\"copy\": true}\n"
    );
    assert!(!env.root.join("projects/P").join(ST).exists());
    // The replaced original is kept, whole, under conflicts/resolved/.
    let kept: Vec<_> = std::fs::read_dir(env.root.join("conflicts/resolved/projects/P"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("project.json.replaced-"),
        "{kept:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&kept[0]).unwrap(),
        "{\"original\": true}\n"
    );
    // No longer listed; resolved losers are not conflicts.
    let rows = list(&env);
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["path"] != format!("projects/P/{ST}")));
    // A set-aside inbox copy goes back into the inbox (absolute path accepted).
    let abs = env
        .root
        .join("conflicts/messaging-inbox/m1 (conflicted copy 2025-10-23 101010).json");
    env.ok(&[
        "conflicts",
        "resolve",
        abs.to_str().unwrap(),
        "--keep",
        "copy",
    ]);
    assert_eq!(
        std::fs::read_to_string(env.root.join("messaging/inbox/m1.json")).unwrap(),
        "{\"m\": 1}"
    );
    assert!(!abs.exists());
}

#[test]
fn keep_original_sets_the_copy_aside_and_changes_nothing_else() {
    let env = store_with_copies();
    let out = env.ok(&[
        "--format",
        "json",
        "conflicts",
        "resolve",
        &format!("projects/P/{ST}"),
        "--keep",
        "original",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kept"], "projects/P/project.json");
    let aside = v["set_aside"].as_str().unwrap();
    assert!(
        aside.starts_with(&format!("conflicts/resolved/projects/P/{ST}.discarded-")),
        "{aside}"
    );
    assert_eq!(
        std::fs::read_to_string(env.root.join(aside)).unwrap(),
        "{\"copy\": true}\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.root.join("projects/P/project.json")).unwrap(),
        "{\"original\": true}\n"
    );
    assert_eq!(list(&env).len(), 3);
    // Resolving it again: it is gone from its place.
    let err = env.fails(&[
        "conflicts",
        "resolve",
        &format!("projects/P/{ST}"),
        "--keep",
        "copy",
    ]);
    assert!(err.contains(ST), "{err}");
}

#[test]
fn resolve_refuses_outside_paths_links_and_non_copies_and_changes_nothing() {
    let env = store_with_copies();
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim.json");
    std::fs::write(&victim, "precious").unwrap();
    let out_copy = outside.join("victim.sync-conflict-20251023-101010-ABCDEFG.json");
    std::fs::write(&out_copy, "evil").unwrap();
    // A copy that is a link (to a file outside), and a linked folder holding a copy.
    symlink(
        &out_copy,
        env.root
            .join("projects/P/linked.sync-conflict-20251023-101010-ABCDEFG.json"),
    )
    .unwrap();
    symlink(&outside, env.root.join("projects/L")).unwrap();
    let before = (tree(&env.root), tree(&outside));
    let cases: Vec<(String, &str)> = vec![
        (
            out_copy.to_string_lossy().into_owned(),
            "not inside the store",
        ),
        (
            "../outside/victim.sync-conflict-20251023-101010-ABCDEFG.json".into(),
            "no `..`",
        ),
        (
            "projects/P/linked.sync-conflict-20251023-101010-ABCDEFG.json".into(),
            "link",
        ),
        (
            "projects/L/victim.sync-conflict-20251023-101010-ABCDEFG.json".into(),
            "projects/L",
        ),
        ("projects/P/project.json".into(), "not a conflict copy"),
        (
            "projects/P/nothing.sync-conflict-20251023-101010-A.json".into(),
            "nothing",
        ),
    ];
    for (path, why) in &cases {
        for keep in ["copy", "original"] {
            let err = env.fails(&["conflicts", "resolve", path, "--keep", keep]);
            assert!(err.contains(why), "{path} --keep {keep}: {err}");
        }
    }
    assert_eq!((tree(&env.root), tree(&outside)), before);
    // The linked copy is not listed either (links are never followed).
    let rows = list(&env);
    assert!(
        rows.iter()
            .all(|r| !r["path"].as_str().unwrap().contains("linked"))
    );
    assert!(
        rows.iter()
            .all(|r| !r["path"].as_str().unwrap().starts_with("projects/L"))
    );
    // A bad --keep value names the choices.
    let o = env.run(&["conflicts", "resolve", "projects/P/x", "--keep", "both"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("original"));
}

/// The daemons used to call every copy a "Dropbox conflict copy"; a real queue manager now
/// names Syncthing, sets the copy aside under its folder's path, and `--keep copy` puts it
/// back in the queue, where it runs.
#[test]
fn a_queue_managers_syncthing_copy_is_reported_as_such_and_resolved_back_into_the_queue() {
    let env = QueueEnv::new(1);
    let copy = "j1.sync-conflict-20251023-101010-BETADEV.json";
    std::fs::write(
        env.dir("queued").join(copy),
        serde_json::to_vec(&noop(0.1)).unwrap(),
    )
    .unwrap();
    let qm = crate::daemons::queue_manager(&env.root, &env.queue).spawn();
    let aside = env
        .root
        .join("conflicts/Queues/q1/Jobs/queued_jobs")
        .join(copy);
    wait_until(
        Duration::from_secs(30),
        "the copy set aside and reported",
        || {
            aside.exists()
                && events(&env.root)
                    .iter()
                    .any(|e| e["event"] == "conflict_set_aside")
        },
    );
    let ev = events(&env.root);
    let reported = ev
        .iter()
        .find(|e| e["event"] == "conflict_set_aside")
        .unwrap_or_else(|| panic!("no conflict_set_aside in {ev:#?}"));
    let detail = reported["detail"].as_str().unwrap();
    assert!(
        detail.contains("Syncthing conflict copy") && detail.contains(copy),
        "{detail}"
    );
    let cli = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(args)
            .arg("--root")
            .arg(&env.root)
            .args(["--bus", "none"])
            .env("HOME", env.dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let rows: Value = serde_json::from_str(&cli(&["conflicts", "--format", "json"])).unwrap();
    let row = &rows["conflicts"][0];
    assert_eq!(row["original"], "Queues/q1/Jobs/queued_jobs/j1.json");
    assert_eq!(row["engine"], "syncthing");
    assert_eq!(row["device"], "BETADEV");
    cli(&[
        "conflicts",
        "resolve",
        row["path"].as_str().unwrap(),
        "--keep",
        "copy",
    ]);
    wait_until(Duration::from_secs(60), "j1 finished", || {
        env.job_file("finished", "j1").exists()
    });
    drop(qm);
}

/// The orchestrator's inbox: a Syncthing copy is reported as one.
#[test]
fn the_inbox_reports_a_copy_by_its_engine() {
    let env = QueueEnv::new(1);
    let store = env.store();
    let copy = "m1.sync-conflict-20251023-101010-ABCDEFG.json";
    std::fs::write(store.inbox().join(copy), "{}").unwrap();
    agentstore::orchestrator::process_inbox(&store, 10).unwrap();
    let ev = events(&env.root);
    let d = ev
        .iter()
        .find(|e| e["event"] == "conflict_set_aside")
        .map(|e| e["detail"].as_str().unwrap().to_string())
        .unwrap();
    assert!(d.starts_with("Syncthing conflict copy"), "{d}");
}
