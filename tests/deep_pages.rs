//! Issue 33 (deep pages): a `ListJobs` page at any offset, or after any place (`after`),
//! is the same slice of the one listing order (oldest `queue_time`, then id, then queue)
//! that paging from the start gives; `after` cursors stay put while jobs are added before
//! them; a user sees only their jobs at every depth. Checked by behaviour, never by timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use agentstore::bus::orchestrator::Orchestrator1Proxy;
use queue_env::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// One job of the store as the test knows it: (queue time, id, queue, project).
type Known = (String, String, String, String);

fn write_job(env: &QueueEnv, known: &Known, state: &str) {
    let (t, id, q, project) = known;
    let mut j = job("noop", json!({"project": project, "queue_time": t}));
    j["runtime"]["status"] = json!(state);
    if state != "queued" {
        j["runtime"]["handled"] = json!(true);
    }
    let dir = env.root.join(format!("Queues/{q}/Jobs/{state}_jobs"));
    std::fs::create_dir_all(&dir).unwrap();
    agentstore::store::write_json_atomic(&dir.join(format!("{id}.json")), &j).unwrap();
}

/// The listing order: queue time (as an instant), id, queue.
fn sorted(mut v: Vec<Known>) -> Vec<Known> {
    let key = |k: &Known| {
        let t: agentstore::model::Timestamp = k.0.parse().unwrap();
        (t, k.1.clone(), k.2.clone())
    };
    v.sort_by_key(key);
    v
}

fn place(k: &Known) -> String {
    agentstore::store::listing::Bound::token_of(&k.0.parse().unwrap(), &k.2, &k.1)
}

/// A page's (id, queue) pairs, and the `after` place of its last job as a client makes it.
fn rows(page: &str) -> (Vec<(String, String)>, Option<String>) {
    let v: Vec<Value> = serde_json::from_str(page).unwrap();
    let q = |j: &Value| {
        j["config"]["queue"]
            .as_str()
            .or(j["queue"].as_str())
            .unwrap()
            .to_string()
    };
    let t = |j: &Value| {
        j["config"]["queue_time"]
            .as_str()
            .or(j["queue_time"].as_str())
            .unwrap()
            .to_string()
    };
    let last = v.last().map(|j| {
        agentstore::store::listing::Bound::token_of(
            &t(j).parse().unwrap(),
            &q(j),
            j["id"].as_str().unwrap(),
        )
    });
    let ids = v
        .iter()
        .map(|j| (j["id"].as_str().unwrap().to_string(), q(j)))
        .collect();
    (ids, last)
}

fn ids_of(v: &[Known]) -> Vec<(String, String)> {
    v.iter().map(|k| (k.1.clone(), k.2.clone())).collect()
}

async fn page(
    p: &Orchestrator1Proxy<'static>,
    filter: &[(&str, &str)],
    offset: u32,
    limit: u32,
) -> (Vec<(String, String)>, u32, u32, Option<String>) {
    let f: HashMap<&str, &str> = filter.iter().copied().collect();
    let (text, total, next) = p.list_jobs(f, offset, limit).await.unwrap();
    let (ids, last) = rows(&text);
    (ids, total, next, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_pages_and_cursors_are_slices_of_the_one_order_for_each_caller() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let home = env.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let store = env.store();
        let mut q2 = agentstore::model::QueueConfig::defaults("q2");
        q2.launcher = Some(agentstore::model::Launcher::Direct);
        store.add_queue(q2).unwrap();
        std::fs::write(
            store.user_path("nob"),
            json!({"id": "nob", "name": "Nob", "email": "nob@example.org", "permissions": "user"})
                .to_string(),
        )
        .unwrap();
        for (p, owner) in [("Mine", "nob"), ("Other", "chenry")] {
            let path = store.project_path(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(
                path,
                json!({"id": p, "directory": "/tmp", "create_time": "2025-01-01T00:00:00Z",
                    "update_time": "2025-01-01T00:00:00Z", "owner": owner, "default_queue": "q1"})
                .to_string(),
            )
            .unwrap();
        }
        // 1,500 jobs over two queues and three states; three jobs share each queue time (ties
        // broken by id, then queue: the same id in both queues too), some with fractions.
        let mut all = Vec::new();
        for i in 0..1500u32 {
            let s = 1000 + i / 3;
            let t = if i % 7 == 0 {
                format!(
                    "2025-01-01T{:02}:{:02}:{:02}.5Z",
                    s / 3600,
                    s / 60 % 60,
                    s % 60
                )
            } else {
                format!(
                    "2025-01-01T{:02}:{:02}:{:02}Z",
                    s / 3600,
                    s / 60 % 60,
                    s % 60
                )
            };
            let q = if i % 2 == 0 { "q1" } else { "q2" };
            let id = if i % 3 == 2 {
                format!("job-{:04}", i - 1)
            } else {
                format!("job-{i:04}")
            };
            let project = ["TestProject", "Mine", "Other"][(i % 5 % 3) as usize];
            let k = (t, id, q.to_string(), project.to_string());
            write_job(
                &env,
                &k,
                ["queued", "finished", "failed"][(i % 4 % 3) as usize],
            );
            all.push(k);
        }
        let all = sorted(all);
        let nob: Vec<Known> = all.iter().filter(|k| k.3 == "Mine").cloned().collect();
        assert_eq!(nob.len(), 600);

        let d = KillOnDrop(
            orchestratord_command(&bus, &env.root, &["--idle-exit", "0"])
                .env("HOME", &home)
                .spawn()
                .unwrap(),
        );
        let p = orchestrator_on(&bus).await;

        for (who, want) in [(None, &all), (Some("nob"), &nob)] {
            let mut base: Vec<(&str, &str)> = who.map(|u| ("user", u)).into_iter().collect();
            for summary in [false, true] {
                if summary {
                    base.push(("fields", "summary"));
                }
                let n = want.len() as u32;
                // Pages opened afresh at offsets around the marks (one every 256 jobs), from
                // the deepest back to the first: each the slice of the whole order.
                let offsets = [n - 3, n - 50, 1025, 769, 513, 512, 511, 257, 256, 255, 1, 0];
                for off in offsets.into_iter().filter(|o| *o < n) {
                    let (ids, total, next, _) = page(&p, &base, off, 50).await;
                    let end = (off as usize + 50).min(want.len());
                    assert_eq!(total, n, "{who:?} total");
                    assert_eq!(ids, ids_of(&want[off as usize..end]), "{who:?} at {off}");
                    assert_eq!(next as usize, end, "{who:?} next after {off}");
                }
                // A page after any place: the slice after it, and its offset.
                for at in [0usize, 255, 256, 599, want.len() - 2] {
                    let mut f = base.clone();
                    let after = place(&want[at]);
                    f.push(("after", &after));
                    let (ids, _, next, _) = page(&p, &f, 0, 40).await;
                    let end = (at + 41).min(want.len());
                    assert_eq!(ids, ids_of(&want[at + 1..end]), "{who:?} after {at}");
                    assert_eq!(next as usize, end, "{who:?} next after place {at}");
                }
            }
        }

        // A cursor stays put while jobs are added: ten new jobs, five before the cursor's
        // place and five after it (by offset the five before would shift every page).
        let (first, _, _, last) = page(&p, &[], 0, 300).await;
        assert_eq!(first, ids_of(&all[..300]));
        let cursor = last.unwrap();
        let mut added = Vec::new();
        for i in 0..10u32 {
            let s = if i < 5 { 1000 + i } else { 1000 + 600 + i };
            let t = format!(
                "2025-01-01T{:02}:{:02}:{:02}Z",
                s / 3600,
                s / 60 % 60,
                s % 60
            );
            let k = (t, format!("new-{i}"), "q1".to_string(), "Mine".to_string());
            write_job(&env, &k, "queued");
            added.push(k);
        }
        let now = sorted(all.iter().chain(&added).cloned().collect());
        let at = now.iter().position(|k| place(k) == cursor).unwrap();
        let walk = |filter: Vec<(&'static str, &'static str)>, from: String| {
            let p = &p;
            async move {
                let (mut got, mut after) = (Vec::new(), from);
                loop {
                    let mut f = filter.clone();
                    f.push(("after", &after));
                    let (ids, total, next, last) = page(p, &f, 0, 97).await;
                    got.extend(ids);
                    match last {
                        Some(l) if next < total => after = l,
                        _ => return got,
                    }
                }
            }
        };
        // The walk begun before they came goes on over what it began with: each job after
        // the place once, in order, none before it (those added after the place may show).
        let got = walk(vec![], cursor.clone()).await;
        let new_ids = ids_of(&added);
        let old: Vec<_> = got
            .iter()
            .filter(|j| !new_ids.contains(j))
            .cloned()
            .collect();
        assert_eq!(
            old,
            ids_of(&all[300..]),
            "the old jobs after the cursor, each once"
        );
        let after_place = ids_of(&now[at + 1..]);
        let pos = got.iter().map(|j| after_place.iter().position(|k| k == j));
        assert!(
            pos.clone().all(|p| p.is_some()) && pos.is_sorted(),
            "in order, nothing before the place: {got:?}"
        );
        // A walk from the same place begun now: exactly the jobs after it, new ones too.
        let got = walk(vec![("fields", "summary")], cursor).await;
        assert_eq!(got, after_place, "after the cursor, each job once");
        // nob at every depth still sees only theirs, the new ones included.
        let nob_now: Vec<Known> = now.iter().filter(|k| k.3 == "Mine").cloned().collect();
        for off in [nob_now.len() as u32 - 10, 300, 0] {
            let (ids, total, _, _) = page(&p, &[("user", "nob")], off, 10).await;
            assert_eq!(total as usize, nob_now.len());
            let end = (off as usize + 10).min(nob_now.len());
            assert_eq!(ids, ids_of(&nob_now[off as usize..end]));
        }

        // Fifty callers at once (a connection each, deep pages): they take turns for a few
        // threads, never a thread each (the daemon grew from 6 to 59 threads before).
        let threads = |pid: u32| -> usize {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let pid = d.0.id();
        let before = threads(pid);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut most = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    most = most.max(threads(pid));
                    std::thread::sleep(Duration::from_millis(2));
                }
                most
            })
        };
        let mut calls = Vec::new();
        for k in 0..50u32 {
            let conn = bus.connect().await;
            calls.push(tokio::spawn(async move {
                let p = Orchestrator1Proxy::new(&conn).await.unwrap();
                for j in 0..3u32 {
                    let off = 1000 + (k * 3 + j) % 400;
                    let (text, _, next) = p.list_jobs(HashMap::new(), off, 20).await.unwrap();
                    assert_eq!(rows(&text).0.len(), 20);
                    assert_eq!(next, off + 20);
                }
            }));
        }
        for c in calls {
            c.await.unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let most = watch.join().unwrap();
        eprintln!("orchestratord threads: {before} before, {most} at most under 50 callers");
        let bound = before + 2 * agentstore::orchestrator::service::CALLS_AT_ONCE + 2;
        assert!(
            most <= bound,
            "orchestratord grew from {before} to {most} threads under 50 callers (at most {bound})"
        );

        // A cursor that is not a place: refused, saying what one is.
        for bad in [
            "yesterday",
            "2025-01-01T00:00:00Z/q1/job-0001",
            "1735689600.000000000/q1",
            "1735689600.5/q1/job-0001",
            "1735689600.000000000/q1/../x",
        ] {
            let f: HashMap<&str, &str> = HashMap::from([("after", bad)]);
            let err = p.list_jobs(f, 0, 10).await.unwrap_err().to_string();
            assert!(
                err.contains("InvalidMessage") && err.contains("after"),
                "{bad}: {err}"
            );
        }
    })
    .await;
}
