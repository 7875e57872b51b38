//! Job listings from the per-folder index (issue 18): the order, each job once, jobs moving
//! between folders, a warm listing that reads no job document, and an index that is only a
//! cache (damaged, missing or unwritable: the listing is still right).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use agentstore::model::JobStatus;
use agentstore::store::Store;
use agentstore::store::listing::{JobFilter, JobIndex, read_listed};
use common::TestEnv;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn job(t: &str, project: &str) -> String {
    common::noop_job(t).replace("\"TestProject\"", &format!("{project:?}"))
}

/// Sets a folder's time a minute back: the index may then skip listing it.
fn settle(dir: &Path) {
    let ok = Command::new("touch")
        .args(["-d", "1 minute ago"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(ok.success());
}

fn ids(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

fn rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .skip(1)
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().to_string(), w.next().unwrap().to_string())
        })
        .collect()
}

fn json_ids(text: &str) -> Vec<(String, String)> {
    let v: Value = serde_json::from_str(text).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_string(),
                j["runtime"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A store with 30 jobs over two queues and three states, queue times out of name order.
fn store_with_jobs() -> (TestEnv, Vec<String>) {
    let env = TestEnv::initialised();
    env.ok(&["add-queue", "oak"]);
    let mut want = Vec::new();
    for i in 0..30u32 {
        let (q, state) = match i % 3 {
            0 => ("poplar", "queued"),
            1 => ("oak", "finished"),
            _ => ("poplar", "running"),
        };
        let t = format!("2025-10-25T10:{:02}:00Z", 59 - i);
        let mut doc: Value = serde_json::from_str(&job(&t, "TestProject")).unwrap();
        doc["runtime"]["status"] = state.into();
        env.write(
            &format!("Queues/{q}/Jobs/{state}_jobs/j{i:02}.json"),
            &doc.to_string(),
        );
        want.push(format!("j{i:02}"));
    }
    want.reverse();
    (env, want)
}

fn settle_all(env: &TestEnv) {
    for q in ["poplar", "oak"] {
        for s in JobStatus::ALL {
            let d = env.root.join(format!("Queues/{q}/Jobs/{}", s.dir()));
            std::fs::create_dir_all(&d).unwrap();
            settle(&d);
        }
    }
}

/// Text and JSON listings agree, oldest first, each job once, cold and warm; a job moved to
/// another folder is listed once, where it went; a new job appears.
#[test]
fn listing_is_ordered_complete_and_follows_moves() {
    let (env, want) = store_with_jobs();
    settle_all(&env);
    for _ in 0..2 {
        assert_eq!(ids(&env.ok(&["list-jobs"])), want);
        let j = json_ids(&env.ok(&["list-jobs", "--format", "json"]));
        assert_eq!(j.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), want);
    }
    // The index lives in the caller's cache, not in the store.
    assert!(env.home.join(".cache/agentstore/job-index").is_dir());
    // Move j00 from queued to finished (the queue folder's time changes with the rename).
    let q = env.root.join("Queues/poplar/Jobs");
    std::fs::rename(
        q.join("queued_jobs/j00.json"),
        q.join("finished_jobs/j00.json"),
    )
    .unwrap();
    let text = env.ok(&["list-jobs"]);
    assert_eq!(ids(&text), want, "{text}");
    assert!(
        rows(&text).contains(&("j00".into(), "finished".into())),
        "{text}"
    );
    // The same job in two folders (a copy left behind) is listed once, in the later state.
    std::fs::copy(
        q.join("finished_jobs/j00.json"),
        q.join("queued_jobs/j00.json"),
    )
    .unwrap();
    let text = env.ok(&["list-jobs"]);
    assert_eq!(ids(&text), want, "{text}");
    assert!(
        rows(&text).contains(&("j00".into(), "finished".into())),
        "{text}"
    );
    let j = json_ids(&env.ok(&["list-jobs", "--format", "json"]));
    assert_eq!(j.iter().filter(|x| x.0 == "j00").count(), 1, "{j:?}");
    // A new job appears; a filtered listing sees only its folder.
    env.write(
        "Queues/oak/Jobs/queued_jobs/new.json",
        &job("2020-01-01T00:00:00Z", "TestProject"),
    );
    assert_eq!(ids(&env.ok(&["list-jobs"]))[0], "new");
    assert_eq!(
        ids(&env.ok(&["list-jobs", "--queue", "oak", "--status", "queued"])),
        ["new"]
    );
}

/// A job that moves on after its folder was listed (between the index and the read of its
/// document) is still listed exactly once, read from the folder it moved to.
#[test]
fn job_moved_mid_listing_appears_once() {
    let (env, want) = store_with_jobs();
    let store = Store::open(&env.root).unwrap();
    let mut index = JobIndex::in_dir(env.dir.path().join("cache"));
    let listing = index.listing(&store, &JobFilter::default());
    let q = env.root.join("Queues/poplar/Jobs");
    std::fs::rename(
        q.join("queued_jobs/j00.json"),
        q.join("running_jobs/j00.json"),
    )
    .unwrap();
    let mut got = Vec::new();
    for l in listing {
        let (loc, job) = read_listed(&store, &l)
            .unwrap()
            .expect("every job is found");
        got.push((loc.id.clone(), loc.status));
        assert_eq!(job.config.queue_time, l.head.queue_time);
    }
    assert_eq!(
        got.iter().map(|g| g.0.clone()).collect::<Vec<_>>(),
        want,
        "every job once, oldest first"
    );
    assert!(got.contains(&("j00".into(), JobStatus::Running)), "{got:?}");
}

/// Once a folder's index is settled, a listing reads no job document: a job file rewritten in
/// place (no rename, so its folder did not change) still lists with the head it had. (The
/// JSON listing reads documents, so it reports the damage.)
#[test]
fn warm_text_listing_reads_no_job_document() {
    let (env, want) = store_with_jobs();
    settle_all(&env);
    assert_eq!(ids(&env.ok(&["list-jobs"])), want);
    let f = env.root.join("Queues/oak/Jobs/finished_jobs/j01.json");
    let dir_time = std::fs::metadata(f.parent().unwrap())
        .unwrap()
        .modified()
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f)
        .unwrap();
    assert_eq!(
        std::fs::metadata(f.parent().unwrap())
            .unwrap()
            .modified()
            .unwrap(),
        dir_time
    );
    assert_eq!(ids(&env.ok(&["list-jobs"])), want);
    let o = env.run(&["list-jobs", "--format", "json"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("j01"));
}

/// The index is a cache: damaged, removed or impossible to write, the listing is the same.
#[test]
fn damaged_or_unwritable_index_changes_nothing() {
    let (env, want) = store_with_jobs();
    settle_all(&env);
    assert_eq!(ids(&env.ok(&["list-jobs"])), want);
    let cache = env.home.join(".cache/agentstore/job-index");
    let mut files = Vec::new();
    let mut stack = vec![cache.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 6, "{files:?}");
    // The largest first: a body cut short, garbage, another folder's index.
    files.sort_by_key(|f| std::cmp::Reverse(std::fs::metadata(f).unwrap().len()));
    let body = std::fs::read_to_string(&files[0]).unwrap();
    assert!(body.lines().count() > 5, "{body}");
    let cut = body.match_indices('\n').nth(3).unwrap().0 + 1;
    std::fs::write(&files[0], &body[..cut]).unwrap();
    std::fs::write(&files[1], "not an index\n").unwrap();
    let other = std::fs::read_to_string(&files[0]).unwrap();
    std::fs::write(&files[2], other).unwrap();
    assert_eq!(ids(&env.ok(&["list-jobs"])), want);
    // The damage was repaired: a second listing is right too.
    assert_eq!(ids(&env.ok(&["list-jobs"])), want);
    std::fs::remove_dir_all(&cache).unwrap();
    // A cache folder that cannot be made (a file in its way): listed from memory.
    let xdg = env.dir.path().join("xdg");
    std::fs::write(&xdg, "in the way").unwrap();
    let o = env
        .cli()
        .env("XDG_CACHE_HOME", &xdg)
        .args(["list-jobs"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(ids(&String::from_utf8_lossy(&o.stdout)), want);
}

/// Tabs and newlines in a project name cannot break the index's records.
#[test]
fn odd_field_text_round_trips_through_the_index() {
    let env = TestEnv::initialised();
    let odd = "we\tird\\nname";
    env.write(
        "Queues/poplar/Jobs/queued_jobs/odd.json",
        &job("2025-01-01T00:00:00Z", odd),
    );
    env.write(
        "Queues/poplar/Jobs/queued_jobs/plain.json",
        &job("2025-01-02T00:00:00Z", "TestProject"),
    );
    let store = Store::open(&env.root).unwrap();
    for _ in 0..2 {
        let mut index = JobIndex::in_dir(env.dir.path().join("cache"));
        let got: Vec<(String, String)> = index
            .listing(&store, &JobFilter::default())
            .map(|l| (l.id, l.head.project))
            .collect();
        assert_eq!(
            got,
            [
                ("odd".to_string(), odd.to_string()),
                ("plain".into(), "TestProject".into())
            ]
        );
    }
}

/// `list-jobs --archived` goes through the same index as the live folders (issue 17 at
/// 100,000 archived jobs): oldest queue time first over every month and state, with the
/// month and end time from the index, only the asked project; once indexed, a settled
/// archive folder is not read again (a document emptied behind its back still lists in
/// text, and JSON, which reads documents, names it); a file that is not a job is named.
#[test]
fn archived_listing_comes_from_the_index() {
    let env = TestEnv::initialised();
    let arch = env.root.join("Queues/poplar/Jobs/archive");
    let mut want = Vec::new();
    for i in 0..12u32 {
        let (month, state) = match i % 3 {
            0 => ("2025-08", "finished"),
            1 => ("2025-09", "failed"),
            _ => ("2025-09", "finished"),
        };
        let project = if i == 5 { "Other" } else { "TestProject" };
        let t = format!("2025-08-25T10:{:02}:00Z", 59 - i);
        let mut doc: Value = serde_json::from_str(&job(&t, project)).unwrap();
        doc["runtime"]["status"] = state.into();
        doc["runtime"]["finish_time"] = format!("2025-09-01T11:{i:02}:00Z").into();
        env.write(
            &format!("Queues/poplar/Jobs/archive/{month}/{state}_jobs/a{i:02}.json"),
            &doc.to_string(),
        );
        want.push((format!("a{i:02}"), state.to_string(), month.to_string()));
    }
    want.reverse();
    env.write(
        "Queues/poplar/Jobs/archive/2025-09/failed_jobs/broken.json",
        "{not json",
    );
    for m in ["2025-08", "2025-09"] {
        for s in ["finished_jobs", "failed_jobs"] {
            let d = arch.join(m).join(s);
            std::fs::create_dir_all(&d).unwrap();
            settle(&d);
        }
    }
    let cells = |text: &str| -> Vec<(String, String, String)> {
        text.lines()
            .skip(1)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w[0].to_string(), w[1].to_string(), w[4].to_string())
            })
            .collect()
    };
    let o = env.run(&["list-jobs", "--archived"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("broken"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(cells(&text), want, "{text}");
    assert!(text.lines().next().unwrap().contains("ENDED"), "{text}");
    assert!(text.contains("2025-09-01 11:07"), "{text}");
    let other = env.ok(&["list-jobs", "--archived", "--project", "Other"]);
    assert_eq!(ids(&other), vec!["a05".to_string()], "{other}");
    let j: Value =
        serde_json::from_str(&env.ok(&["list-jobs", "--archived", "--format", "json"])).unwrap();
    let j_ids: Vec<&str> = j
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    let want_ids: Vec<&str> = want.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(j_ids, want_ids);

    // Empty a document without touching its folder's time: text comes from the index.
    let f = arch.join("2025-09/finished_jobs/a02.json");
    let dir_time = std::fs::metadata(f.parent().unwrap())
        .unwrap()
        .modified()
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f)
        .unwrap();
    assert_eq!(
        std::fs::metadata(f.parent().unwrap())
            .unwrap()
            .modified()
            .unwrap(),
        dir_time
    );
    assert_eq!(cells(&env.ok(&["list-jobs", "--archived"])), want);
    let o = env.run(&["list-jobs", "--archived", "--format", "json"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("a02"));
}

/// `list-jobs --format json` prints each document from a cache beside the index (issue 18:
/// 100,000 jobs in ≤ 0.5 s) while its file keeps the identity it was read with (inode,
/// modification time, size): a warm listing opens no such document (an edit that keeps all
/// three, which no writer makes, is not seen), and any other change — a rewrite in place
/// (its folder's time unchanged), a replacement by rename, a damaged file — is read again.
/// Cached or not, the listing is the same.
#[test]
fn json_listing_prints_cached_documents_only_while_their_files_are_unchanged() {
    let (env, want) = store_with_jobs();
    settle_all(&env);
    let cold = env.ok(&["list-jobs", "--format", "json"]);
    let warm = env.ok(&["list-jobs", "--format", "json"]);
    assert_eq!(cold, warm);
    let j = json_ids(&warm);
    assert_eq!(j.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), want);
    // The same as a listing without any cache (a file in the cache folder's way).
    let xdg = env.dir.path().join("xdg");
    std::fs::write(&xdg, "in the way").unwrap();
    let o = env
        .cli()
        .env("XDG_CACHE_HOME", &xdg)
        .args(["list-jobs", "--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), warm);
    let docs = env
        .home
        .join(".cache/agentstore/job-index")
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("oak/finished_jobs.docs");
    assert!(
        std::fs::read_to_string(&docs).unwrap().contains("Test job"),
        "{}",
        docs.display()
    );
    let task = |text: &str, id: &str| -> String {
        let v: Value = serde_json::from_str(text).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|d| d["id"] == id)
            .map(|d| {
                d["config"]["task_description"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .unwrap()
    };
    let f = env.root.join("Queues/oak/Jobs/finished_jobs/j01.json");
    let edit = |from: &str, to: &str| {
        let body = std::fs::read_to_string(&f).unwrap();
        assert!(body.contains(from), "{body}");
        std::fs::write(&f, body.replace(from, to)).unwrap();
    };
    // Same inode, size and time: served from the cache (proof that it is one).
    let m = std::fs::metadata(&f).unwrap().modified().unwrap();
    edit("Test job", "Tost job");
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(m)
        .unwrap();
    let out = env.ok(&["list-jobs", "--format", "json"]);
    assert_eq!(task(&out, "j01"), "Test job");
    // Rewritten in place (new time; the folder's time is unchanged): read again.
    edit("Tost job", "Tast job");
    assert_eq!(
        task(&env.ok(&["list-jobs", "--format", "json"]), "j01"),
        "Tast job"
    );
    // Replaced by rename: read again.
    let body = std::fs::read_to_string(&f)
        .unwrap()
        .replace("Tast job", "Renamed in");
    let tmp = f.with_file_name(".j01.tmp");
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, &f).unwrap();
    assert_eq!(
        task(&env.ok(&["list-jobs", "--format", "json"]), "j01"),
        "Renamed in"
    );
    // Damaged in place: named on stderr, the rest listed.
    std::fs::write(&f, "{not json").unwrap();
    let o = env.run(&["list-jobs", "--format", "json"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("j01"));
    let j = json_ids(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(j.len(), want.len() - 1);
}

/// A job being started is, for a few milliseconds, only a start claim
/// (`Queues/<q>/.claimed/<host>/<id>.json`) between queued_jobs/ and running_jobs/: every
/// listing still shows it (as queued), once, and a stale claim left next to the job in a
/// later state (a sync engine's late delete) does not list it twice.
#[test]
fn a_job_held_as_a_start_claim_is_listed_once() {
    let (env, want) = store_with_jobs();
    settle_all(&env);
    let _ = env.ok(&["list-jobs"]);
    let q = env.root.join("Queues/poplar");
    let claims = q.join(".claimed/hostA");
    std::fs::create_dir_all(&claims).unwrap();
    std::fs::rename(q.join("Jobs/queued_jobs/j00.json"), claims.join("j00.json")).unwrap();
    for args in [vec!["list-jobs"], vec!["list-jobs", "--status", "queued"]] {
        let text = env.ok(&args);
        assert!(
            rows(&text).contains(&("j00".into(), "queued".into())),
            "{args:?}: {text}"
        );
    }
    assert_eq!(ids(&env.ok(&["list-jobs"])), want);
    let j = json_ids(&env.ok(&["list-jobs", "--format", "json"]));
    assert_eq!(j.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), want);
    assert!(
        ids(&env.ok(&["list-jobs", "--status", "running"]))
            .iter()
            .all(|i| i != "j00")
    );
    // The claim moves on to running_jobs/ while a copy of it stays behind.
    std::fs::copy(
        claims.join("j00.json"),
        q.join("Jobs/running_jobs/j00.json"),
    )
    .unwrap();
    let text = env.ok(&["list-jobs"]);
    assert_eq!(ids(&text), want, "{text}");
    assert!(
        rows(&text).contains(&("j00".into(), "running".into())),
        "{text}"
    );
    let j = json_ids(&env.ok(&["list-jobs", "--format", "json"]));
    assert_eq!(j.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), want);
}

/// A job claimed for a start after its folder was listed is read from its claim, and one
/// that moved on from the claim to running_jobs/ meanwhile from there: listed once each.
#[test]
fn a_job_claimed_mid_listing_is_read_from_its_claim() {
    let (env, want) = store_with_jobs();
    let store = Store::open(&env.root).unwrap();
    let mut index = JobIndex::in_dir(env.dir.path().join("cache"));
    let listing = index.listing(&store, &JobFilter::default());
    let q = env.root.join("Queues/poplar");
    let claims = q.join(".claimed/hostA");
    std::fs::create_dir_all(&claims).unwrap();
    std::fs::rename(q.join("Jobs/queued_jobs/j00.json"), claims.join("j00.json")).unwrap();
    let mut got = Vec::new();
    for l in listing {
        let (loc, _) = read_listed(&store, &l)
            .unwrap()
            .unwrap_or_else(|| panic!("{} is found", l.id));
        got.push((loc.id.clone(), loc.path.clone()));
    }
    assert_eq!(got.iter().map(|g| g.0.clone()).collect::<Vec<_>>(), want);
    assert!(
        got.contains(&("j00".into(), claims.join("j00.json"))),
        "{got:?}"
    );
}
