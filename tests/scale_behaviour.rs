//! Issue 18 (scale): behaviour that keeps per-event work proportional to the new work, never
//! to the store's history. Checked by behaviour (which files are read, what is reported),
//! never by timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{common, queue_env};

use queue_env::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A hang guard, not a timing assertion.
const LONG: Duration = Duration::from_secs(120);

/// orchestratord without D-Bus (inbox and finished jobs only), never idling out.
fn orchestratord(root: &Path, home: &Path) -> KillOnDrop {
    crate::daemons::orchestratord(root)
        .env("HOME", home)
        .spawn()
}

fn finished_job(id: &str) -> Value {
    let mut j = job("noop", json!({}));
    j["id"] = json!(id);
    j["runtime"]["status"] = json!("finished");
    j["runtime"]["output"] = json!("done");
    j
}

fn errors_out(root: &Path) -> String {
    common::errors_out(root)
}

/// 20,000 finished jobs the handled-log names, each file corrupt: a new finished job is
/// handled, and none of the old files is read (a read would report it in errors.out, as the
/// one corrupt file the log does not name is) or touched; a restart reads none of them either.
#[test]
fn completion_never_rereads_handled_history() {
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let fin = env.dir("finished");
    std::fs::create_dir_all(&fin).unwrap();
    let mut log = String::new();
    for i in 0..20_000 {
        let id = format!("old-{i:05}");
        std::fs::write(fin.join(format!("{id}.json")), "corrupt {").unwrap();
        log.push_str(&format!("{}/{id}\n", env.queue));
    }
    let logdir = env.root.join("logs/handled-jobs");
    std::fs::create_dir_all(&logdir).unwrap();
    // Another machine's log: readers take the union of every machine's file.
    std::fs::write(logdir.join("other-host.log"), log).unwrap();
    // The control: a corrupt finished file nobody handled is read and reported.
    std::fs::write(fin.join("unlogged.json"), "corrupt {").unwrap();

    let d = orchestratord(&env.root, &home);
    wait_until(LONG, "the unlogged corrupt job reported", || {
        errors_out(&env.root).contains("unlogged")
    });
    let fresh = env.job_file("finished", "fresh-1");
    write_json_atomic_value(&fresh, &finished_job("fresh-1"));
    wait_until(LONG, "the new job handled", || {
        read_json(&fresh)["runtime"]["handled"] == json!(true)
    });
    // The log line is appended just after the flag is written: wait for it too.
    let own_log = || {
        std::fs::read_dir(&logdir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| !p.ends_with("other-host.log"))
    };
    wait_until(
        LONG,
        "the handled job recorded in this machine's handled-log",
        || {
            own_log().is_some_and(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l == format!("{}/fresh-1", env.queue))
            })
        },
    );
    drop(d);

    // A restart with one more finished job: the old ones stay unread.
    let second = env.job_file("finished", "fresh-2");
    write_json_atomic_value(&second, &finished_job("fresh-2"));
    let _d = orchestratord(&env.root, &home);
    wait_until(LONG, "the second job handled after a restart", || {
        read_json(&second)["runtime"]["handled"] == json!(true)
    });
    let errors = errors_out(&env.root);
    assert!(
        !errors.contains("old-"),
        "handled history was read again: {}",
        errors.lines().find(|l| l.contains("old-")).unwrap_or("")
    );
    for i in [0, 9_999, 19_999] {
        assert_eq!(
            std::fs::read_to_string(fin.join(format!("old-{i:05}.json"))).unwrap(),
            "corrupt {"
        );
    }
    // Handled exactly once across the restart: one job_handled event per job (the event is
    // appended just after the flag is written, so wait for it, then look for a second).
    let handled = |id: &str| {
        std::fs::read_dir(env.root.join("logs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("events-"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect::<String>()
            .lines()
            .filter(|l| l.contains("\"job_handled\"") && l.contains(&format!("\"{id}\"")))
            .count()
    };
    wait_until(LONG, "the job_handled event", || handled("fresh-2") > 0);
    assert_eq!(handled("fresh-1"), 1);
    assert_eq!(handled("fresh-2"), 1);
}

fn write_json_atomic_value(path: &Path, v: &Value) {
    agentstore::store::write_json_atomic(path, v).unwrap();
}

/// A job whose id already exists in finished_jobs/ ends failed under a disambiguated name with
/// an error naming the collision; the earlier job's file is untouched; nothing stays in
/// running_jobs/.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_collision_with_finished_job_ends_failed() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        std::fs::create_dir_all(env.dir("finished")).unwrap();
        let earlier = env.job_file("finished", "dup-1");
        let before = serde_json::to_vec_pretty(&finished_job("dup-1")).unwrap();
        std::fs::write(&earlier, &before).unwrap();
        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        env.queue_job("dup-1", &noop(0.0));
        changes.until("dup-1", "failed").await;
        m.stop().await;
        assert_eq!(env.count("running"), 0, "nothing stays in running_jobs/");
        let collided = env.dir("failed").join("dup-1.collision-1.json");
        let doc = read_json(&collided);
        assert_eq!(doc["runtime"]["status"], "failed");
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.contains("dup-1 already exists") && err.contains("finished_jobs"),
            "{err}"
        );
        assert_eq!(std::fs::read(&earlier).unwrap(), before);
    })
    .await;
}

/// orchestratord on the private bus `bus`.
fn orchestratord_on(bus: &PrivateBus, root: &Path, home: &Path) -> KillOnDrop {
    crate::daemons::orchestratord(root)
        .on(bus)
        .env("HOME", home)
        .spawn()
}

/// Every page of ListJobs, with the size of each answer.
async fn all_pages(
    p: &agentstore::bus::orchestrator::Orchestrator1Proxy<'static>,
    filter: &[(&str, &str)],
    limit: u32,
) -> (Vec<Value>, Vec<usize>) {
    let filter: std::collections::HashMap<&str, &str> = filter.iter().copied().collect();
    let (mut jobs, mut sizes, mut offset) = (Vec::new(), Vec::new(), 0);
    loop {
        let (page, total, next) = p.list_jobs(filter.clone(), offset, limit).await.unwrap();
        sizes.push(page.len());
        let v: Vec<Value> = serde_json::from_str(&page).unwrap();
        assert!(next > offset || next >= total, "no progress at {offset}");
        jobs.extend(v);
        if next >= total {
            assert_eq!(jobs.len() as u32, total);
            return (jobs, sizes);
        }
        offset = next;
    }
}

fn ids(jobs: &[Value]) -> Vec<String> {
    jobs.iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
}

/// ListJobs pages: every job exactly once, oldest first, filters honoured, no output in a
/// listing, and each answer bounded however large the documents are; an answer that could
/// not fit a D-Bus message is refused with an error and the daemon keeps its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_jobs_pages_are_complete_filtered_and_bounded() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let home = env.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let store = env.store();
        let mut q2 = agentstore::model::QueueConfig::defaults("q2");
        q2.launcher = Some(agentstore::model::Launcher::Direct);
        store.add_queue(q2).unwrap();
        let other = serde_json::json!({"id": "Other", "directory": "/tmp", "create_time": "2025-01-01T00:00:00Z",
            "update_time": "2025-01-01T00:00:00Z", "owner": "chenry", "default_queue": "q2"});
        let path = store.project_path("Other");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, other.to_string()).unwrap();
        let mut expected = Vec::new();
        for i in 0..1200u32 {
            let (q, state, project) = match i % 3 {
                0 => ("q1", "queued", "TestProject"),
                1 => ("q1", "finished", "TestProject"),
                _ => ("q2", "finished", "Other"),
            };
            let id = format!("job-{i:04}");
            let mut j = job("noop", json!({"project": project,
                "queue_time": format!("2025-01-01T00:{:02}:{:02}Z", (1199 - i) / 60, (1199 - i) % 60)}));
            j["runtime"]["status"] = json!(state);
            j["runtime"]["output"] = json!("an output the listing leaves out");
            let dir = env.root.join(format!("Queues/{q}/Jobs/{state}_jobs"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{id}.json")), j.to_string()).unwrap();
            expected.push((q, state, project, id));
        }
        // Oldest first: queue times run backwards with the number.
        expected.reverse();
        let _d = orchestratord_on(&bus, &env.root, &home);
        let p = orchestrator_on(&bus).await;

        let (jobs, _) = all_pages(&p, &[], 97).await;
        let want: Vec<String> = expected.iter().map(|e| e.3.clone()).collect();
        assert_eq!(ids(&jobs), want, "every job once, oldest first");
        assert!(jobs.iter().all(|j| j["runtime"]["output"].is_null()));
        let (jobs, _) = all_pages(&p, &[("status", "finished")], 0).await;
        assert_eq!(jobs.len(), 800);
        assert!(jobs.iter().all(|j| j["runtime"]["status"] == "finished"));
        // Documents come from a cache: one rewritten in place (its folder's time unchanged)
        // is listed as it is now, and one moved to another project is judged by that.
        let f = |id: &str| env.root.join(format!("Queues/q1/Jobs/finished_jobs/{id}.json"));
        // The completion handler (its own thread) writes each finished job's handled flag
        // once; the rewrite comes after that, or the handler's write would replace it.
        wait_until(LONG, "job-0001 handled", || {
            read_json(&f("job-0001"))["runtime"]["handled"] == json!(true)
        });
        let mut d = read_json(&f("job-0001"));
        d["config"]["task_description"] = json!("rewritten in place");
        std::fs::write(f("job-0001"), d.to_string()).unwrap();
        let (jobs, _) = all_pages(&p, &[("status", "finished")], 0).await;
        let j1 = jobs.iter().find(|j| j["id"] == "job-0001").unwrap();
        assert_eq!(j1["config"]["task_description"], "rewritten in place");
        assert!(jobs.iter().all(|j| j["runtime"]["output"].is_null()));
        let (jobs, _) = all_pages(&p, &[("queue", "q2")], 50).await;
        assert_eq!(jobs.len(), 400);
        assert!(jobs.iter().all(|j| j["config"]["project"] == "Other"));
        let (jobs, _) = all_pages(&p, &[("project", "TestProject"), ("status", "queued")], 33).await;
        assert_eq!(jobs.len(), 400);
        let err = p
            .list_jobs([("status", "done")].into_iter().collect(), 0, 10)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("status") && err.contains("done"), "{err}");
        let err = p
            .list_jobs([("colour", "red")].into_iter().collect(), 0, 10)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("colour"), "{err}");

        // Big documents (300 KB of supporting data each, 20 MB in all): pages stay bounded.
        let big = "x".repeat(300 * 1024);
        for i in 0..70 {
            let mut j = job("noop", json!({"supporting_data": {"blob": big},
                "queue_time": "2030-01-01T00:00:00Z"}));
            j["runtime"]["status"] = json!("queued");
            env.queue_job(&format!("big-{i:02}"), &j);
        }
        let (jobs, sizes) = all_pages(&p, &[("queue", "q1"), ("status", "queued")], 5000).await;
        assert_eq!(jobs.len(), 470);
        assert!(sizes.len() > 1, "{sizes:?}");
        assert!(sizes.iter().all(|s| *s < 5 << 20), "{sizes:?}");
        // The one-string answer would be too big for one message: refused, name kept.
        let msg = json!({"command": "list-jobs", "content": {}}).to_string();
        let err = p.submit(&msg).await.unwrap_err().to_string();
        assert!(err.contains("ListJobs"), "{err}");
        assert!(p.version().await.is_ok(), "the daemon keeps its name");
        let (jobs, _) = all_pages(&p, &[("status", "queued")], 0).await;
        assert_eq!(jobs.len(), 470);
    })
    .await;
}

fn vm_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

/// A one-string `list-jobs` over more jobs than one answer may carry is refused, and the
/// daemon does not keep what it read on the way (it kept ~140 MiB at 100,000 jobs: the
/// documents read up to the 16 MiB bound, never given back); a slice of the same listing
/// is still answered in full, oldest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_one_string_listing_gives_its_memory_back() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let home = env.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let dir = env.root.join("Queues/q1/Jobs/queued_jobs");
        std::fs::create_dir_all(&dir).unwrap();
        let n = 50_000u32;
        for i in 0..n {
            let mut j = job("noop", json!({"task_description": "a job among many",
                "queue_time": format!("2025-01-{:02}T{:02}:{:02}:{:02}Z", 1 + i / 86400, i / 3600 % 24, i / 60 % 60, i % 60)}));
            j["runtime"]["status"] = json!("queued");
            std::fs::write(dir.join(format!("job-{i:06}.json")), j.to_string()).unwrap();
        }
        let d = orchestratord_on(&bus, &env.root, &home);
        let p = orchestrator_on(&bus).await;
        // A first small listing builds the daemon's view of the store.
        let slice = json!({"command": "list-jobs", "content": {"offset": 10, "limit": 5}});
        let answer: Value = serde_json::from_str(&p.submit(&slice.to_string()).await.unwrap()).unwrap();
        let got: Vec<&str> = answer["content"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(got, ["job-000010", "job-000011", "job-000012", "job-000013", "job-000014"]);
        let before = vm_rss_mib(d.0.id());
        for _ in 0..2 {
            let msg = json!({"command": "list-jobs", "content": {}}).to_string();
            let err = p.submit(&msg).await.unwrap_err().to_string();
            assert!(err.contains("ListJobs"), "{err}");
        }
        let after = vm_rss_mib(d.0.id());
        assert!(
            after <= before + 40,
            "orchestratord kept {after} MiB after the refused listings ({before} MiB before)"
        );
        assert!(p.version().await.is_ok(), "the daemon keeps its name");
    })
    .await;
}

/// Listings taken while the real manager starts jobs never miss one: a job being started is
/// only a start claim for a few milliseconds, between queued_jobs/ and running_jobs/.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_taken_while_jobs_start_always_show_every_job() {
    use agentstore::store::listing::{JobFilter, JobIndex, read_listed};
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(4);
        let n = 40;
        let ids: Vec<String> = (0..n).map(|i| format!("lj-{i:02}")).collect();
        let m = RunningManager::start(env.manager_config(&bus)).await;
        for id in &ids {
            env.queue_job(id, &noop(0.0));
        }
        let store = env.store();
        let mut index = JobIndex::in_dir(env.dir.path().join("cache"));
        let (mut listings, mut missed) = (0, Vec::new());
        let deadline = std::time::Instant::now() + LONG;
        while env.count("finished") < n {
            assert!(std::time::Instant::now() < deadline, "jobs did not finish");
            let listing = index.listing(&store, &JobFilter::default());
            let mut seen = std::collections::BTreeSet::new();
            for l in listing {
                // Each listed job can be read, wherever it went meanwhile.
                if read_listed(&store, &l).unwrap().is_some() {
                    seen.insert(l.id.clone());
                }
            }
            listings += 1;
            if let Some(id) = ids.iter().find(|id| !seen.contains(*id)) {
                missed.push(id.clone());
            }
        }
        m.stop().await;
        assert!(listings > 0);
        assert!(
            missed.is_empty(),
            "{} of {listings} listings missed a job (first: {:?})",
            missed.len(),
            missed.first()
        );
    })
    .await;
}

/// Hostile handled-logs (issue 18): a log of binary junk with one good line after 3 MB
/// without a newline, an overlong line, a link to another log, and a FIFO. orchestratord
/// starts (never waits on the FIFO), takes the good line (that job is not read again), does
/// not follow the link (the job only it names is read, so reported as the corrupt file it
/// is), warns about each bad file by name, and still handles a new job.
#[test]
fn hostile_handled_logs_are_read_safely_and_reported() {
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let fin = env.dir("finished");
    std::fs::create_dir_all(&fin).unwrap();
    for id in ["old-a", "old-b", "old-c"] {
        std::fs::write(fin.join(format!("{id}.json")), "corrupt {").unwrap();
    }
    let logdir = env.root.join("logs/handled-jobs");
    std::fs::create_dir_all(&logdir).unwrap();
    let q = &env.queue;
    // Junk: bytes that are no text, 3 MB without a newline, then the good line.
    let mut junk: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8 | 0x80).collect();
    junk.extend_from_slice(format!("\n{q}/old-a\n").as_bytes());
    junk.extend_from_slice(format!("{}/old-c\n", "q".repeat(100_000)).as_bytes());
    std::fs::write(logdir.join("junk.log"), junk).unwrap();
    // A link to a log outside the folder that names old-b: never followed.
    let outside = env.dir.path().join("elsewhere.log");
    std::fs::write(&outside, format!("{q}/old-b\n")).unwrap();
    std::os::unix::fs::symlink(&outside, logdir.join("link.log")).unwrap();
    let fifo = logdir.join("fifo.log");
    let ok = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(ok.success());

    let stderr = env.dir.path().join("orchestratord.err");
    let _d = crate::daemons::orchestratord(&env.root)
        .env("HOME", &home)
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn();
    wait_until(
        LONG,
        "the job only the link names read and reported",
        || errors_out(&env.root).contains("old-b"),
    );
    let fresh = env.job_file("finished", "fresh-1");
    write_json_atomic_value(&fresh, &finished_job("fresh-1"));
    wait_until(LONG, "the new job handled", || {
        read_json(&fresh)["runtime"]["handled"] == json!(true)
    });
    let errors = errors_out(&env.root);
    assert!(
        !errors.contains("old-a"),
        "the job the junk log names was read again: {errors}"
    );
    // old-c's line is overlong (its queue is no queue): not taken, so old-c is read.
    wait_until(LONG, "old-c read", || {
        errors_out(&env.root).contains("old-c")
    });
    let err = std::fs::read_to_string(&stderr).unwrap();
    for (file, why) in [
        ("junk.log", "2 lines are not <queue>/<job id>"),
        ("link.log", "cannot read handled-log"),
        ("fifo.log", "not a regular file"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(file) && l.contains(why)),
            "no warning about {file} ({why}) in:\n{err}"
        );
    }
}

/// An id already used by a failed job, or by a job archived under `archive/<month>/`: the new
/// job under that id ends failed with an error naming where the id is used, never stays in
/// running_jobs/ and never lands beside the earlier job in finished_jobs/ (it did: two jobs
/// under one id, and the manager reported the earlier one's state), and the earlier job is
/// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_collision_with_failed_or_archived_job_never_sticks() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let failed_dir = env.dir("failed");
        std::fs::create_dir_all(&failed_dir).unwrap();
        let mut earlier_failed = finished_job("dup-f");
        earlier_failed["runtime"]["status"] = json!("failed");
        earlier_failed["runtime"]["error"] = json!("an earlier failure");
        // An earlier job (another queue time), not a synced copy of the new one.
        earlier_failed["config"]["queue_time"] = json!("2024-01-01T00:00:00Z");
        let earlier_f = failed_dir.join("dup-f.json");
        let before_f = serde_json::to_vec_pretty(&earlier_failed).unwrap();
        std::fs::write(&earlier_f, &before_f).unwrap();
        let arch = env.root.join(format!(
            "Queues/{}/Jobs/archive/2025-01/finished_jobs",
            env.queue
        ));
        std::fs::create_dir_all(&arch).unwrap();
        let earlier_a = arch.join("dup-a.json");
        let mut archived = finished_job("dup-a");
        archived["config"]["queue_time"] = json!("2024-01-01T00:00:00Z");
        let before_a = serde_json::to_vec_pretty(&archived).unwrap();
        std::fs::write(&earlier_a, &before_a).unwrap();

        let m = RunningManager::start(env.manager_config(&bus)).await;
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        env.queue_job("dup-f", &noop(0.0));
        changes.until("dup-f", "failed").await;
        env.queue_job("dup-a", &noop(0.0));
        changes.until("dup-a", "failed").await;
        m.stop().await;
        assert_eq!(env.count("running"), 0, "nothing stays in running_jobs/");
        assert_eq!(std::fs::read(&earlier_f).unwrap(), before_f);
        assert_eq!(std::fs::read(&earlier_a).unwrap(), before_a);
        let names: Vec<String> = std::fs::read_dir(&failed_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let collided = names
            .iter()
            .find(|n| n.starts_with("dup-f.") && n.as_str() != "dup-f.json")
            .unwrap_or_else(|| panic!("no collision copy in failed_jobs/: {names:?}"));
        let doc = read_json(&failed_dir.join(collided));
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.contains(&format!(
                "dup-f already exists in Queues/{}/Jobs/failed_jobs/",
                env.queue
            )),
            "{err}"
        );
        assert!(
            !env.job_file("finished", "dup-f").exists()
                && !env.job_file("finished", "dup-a").exists(),
            "a second job under a used id in finished_jobs/"
        );
        let doc = read_json(&failed_dir.join("dup-a.collision-1.json"));
        let err = doc["runtime"]["error"].as_str().unwrap();
        assert!(
            err.contains(&format!(
                "dup-a already exists in Queues/{}/Jobs/archive/2025-01/finished_jobs/",
                env.queue
            )),
            "{err}"
        );
    })
    .await;
}

/// A FIFO planted under this machine's own handled-log name: recording a handled job is
/// refused with a warning instead of waiting for a reader forever (which stopped all
/// completion handling after the first job), and every later job is still handled once.
#[test]
fn a_fifo_as_this_machines_handled_log_never_blocks_completion() {
    let env = QueueEnv::new(1);
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(env.dir("finished")).unwrap();
    let logdir = env.root.join("logs/handled-jobs");
    std::fs::create_dir_all(&logdir).unwrap();
    // This machine's file name, as the daemon makes it.
    let fifo = logdir.join(agentstore::orchestrator::handled::own_name());
    let ok = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(ok.success());
    let stderr = env.dir.path().join("orchestratord.err");
    let _d = crate::daemons::orchestratord(&env.root)
        .env("HOME", &home)
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn();
    for id in ["fresh-1", "fresh-2", "fresh-3"] {
        let f = env.job_file("finished", id);
        write_json_atomic_value(&f, &finished_job(id));
        wait_until(LONG, &format!("{id} handled"), || {
            read_json(&f)["runtime"]["handled"] == json!(true)
        });
    }
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        err.contains("handled-log not written"),
        "no warning in:\n{err}"
    );
}
