//! `list-messages` over a long history (issue 18): pages of a listing of thousands of
//! messages are exactly the slices of the whole listing (the listing keeps only a small key
//! per message and reads the page's files again), and a folder full of unreadable files
//! cannot fill the answer with `problems`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::TestEnv;
use serde_json::{Value, json};

fn message(cid: &str, t: &str, source: &str, status: &str) -> String {
    json!({
        "correlation_id": cid, "source": source, "project": null, "queue_time": t,
        "processed_time": null, "command": "list-queues", "content": {"n": cid},
        "status": status, "error": null,
    })
    .to_string()
}

fn list(env: &TestEnv, extra: &[&str]) -> Value {
    let mut args = vec!["--format", "json", "list-messages"];
    args.extend_from_slice(extra);
    serde_json::from_str(&env.ok(&args)).unwrap()
}

fn rows(v: &Value) -> Vec<(String, String, Value)> {
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["folder"].as_str().unwrap().to_string(),
                m["answer"].clone(),
            )
        })
        .collect()
}

/// 6,000 requests and answers, many sharing a queue time (ties go by id), one request still
/// in the inbox and one id in two folders: every page (including ones cut from the middle
/// and the end, past the point where the listing trims what it keeps) is the same slice of
/// the whole listing, with the same totals and answers.
#[test]
fn pages_are_slices_of_the_whole_listing() {
    let env = TestEnv::initialised();
    let n = 3000;
    for i in 0..n {
        let cid = format!("m-{i:05}");
        // 50 messages a second: long runs of equal queue times.
        let t = format!("2025-03-01T10:{:02}:{:02}Z", i / 50 / 60, i / 50 % 60);
        let (inbox, status) = if i == n - 1 {
            ("inbox", "queued")
        } else {
            ("processed_inbox", "done")
        };
        env.write(
            &format!("messaging/{inbox}/{cid}.json"),
            &message(&cid, &t, "user", status),
        );
        if i != n - 1 {
            let status = if i % 7 == 0 { "error" } else { "done" };
            env.write(
                &format!("messaging/processed_outbox/{cid}.json"),
                &message(&cid, &t, "orchestrator", status),
            );
        }
    }
    // The same id in the inbox and processed_inbox (a re-sent request).
    env.write(
        "messaging/inbox/m-00010.json",
        &message("m-00010", "2025-03-01T10:00:00Z", "user", "queued"),
    );
    // The CLI shows a page of 1000 unless asked for more.
    let first = list(&env, &[]);
    assert_eq!(first["messages"].as_array().unwrap().len(), 1000);
    assert_eq!(first["next_offset"], json!(1000));
    let all = list(&env, &["--limit", "100000"]);
    let whole = rows(&all);
    assert_eq!(all["total"], json!(2 * n));
    assert_eq!(whole.len(), 2 * n);
    // Spot checks of the order and the answers.
    // Newest first, the answers of a second before its requests, then by id (descending).
    assert_eq!(whole[0].0, format!("m-{:05}", n - 2));
    assert_eq!(whole[0].1, "processed_outbox");
    assert_eq!(whole[1].0, format!("m-{:05}", n - 3));
    let answers_first = whole
        .iter()
        .position(|r| r.1 != "processed_outbox")
        .unwrap();
    assert_eq!(answers_first, 49, "the last second's 49 answers");
    assert_eq!(whole[49].0, format!("m-{:05}", n - 1));
    assert_eq!(whole[49].1, "inbox");
    assert_eq!(whole[49].2, Value::Null, "not answered yet");
    let i7 = whole
        .iter()
        .find(|r| r.0 == "m-00007" && r.1 == "processed_inbox")
        .unwrap();
    assert_eq!(i7.2, json!("error"));
    let i8 = whole
        .iter()
        .find(|r| r.0 == "m-00008" && r.1 == "processed_inbox")
        .unwrap();
    assert_eq!(i8.2, json!("done"));
    let twice: Vec<_> = whole.iter().filter(|r| r.0 == "m-00010").collect();
    assert_eq!(twice.len(), 3, "{twice:?}");
    for (offset, limit) in [
        (0, 7),
        (7, 7),
        (1234, 50),
        (2 * n - 5, 7),
        (2 * n, 3),
        (0, 5000),
    ] {
        let page = list(
            &env,
            &[
                "--offset",
                &offset.to_string(),
                "--limit",
                &limit.to_string(),
            ],
        );
        let got = rows(&page);
        let end = (offset + limit).min(whole.len());
        let want = &whole[offset.min(end)..end];
        assert_eq!(got, want, "offset {offset} limit {limit}");
        assert_eq!(page["total"], json!(2 * n), "offset {offset}");
        assert_eq!(
            page["next_offset"],
            json!(end.max(offset)),
            "offset {offset}"
        );
    }
    // Filters keep the order of what they admit.
    let answers = list(
        &env,
        &["--direction", "out", "--offset", "10", "--limit", "5"],
    );
    let want: Vec<_> = whole
        .iter()
        .filter(|r| r.1 == "processed_outbox")
        .skip(10)
        .take(5)
        .cloned()
        .collect();
    assert_eq!(rows(&answers), want);
    assert_eq!(answers["total"], json!(n - 1));
    let errors = list(&env, &["--status", "error", "--limit", "1"]);
    assert_eq!(errors["total"], json!((n - 1).div_ceil(7)));
}

/// 150 unreadable files in processed_inbox/: an admin's answer names the first 100 and says
/// how many more there are, and still lists the readable messages; a page of one stays small.
#[test]
fn problems_are_bounded() {
    let env = TestEnv::initialised();
    for i in 0..150 {
        env.write(
            &format!("messaging/processed_inbox/broken-{i:03}.json"),
            "{\"not\": \"a message\"",
        );
    }
    env.write(
        "messaging/processed_inbox/good.json",
        &message("good", "2025-03-01T10:00:00Z", "user", "done"),
    );
    let v = list(&env, &["--limit", "1"]);
    assert_eq!(v["total"], json!(1));
    assert_eq!(rows(&v)[0].0, "good");
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 101, "{problems:?}");
    assert!(
        problems[..100].iter().all(|p| p
            .as_str()
            .unwrap()
            .contains("messaging/processed_inbox/broken-")),
        "{problems:?}"
    );
    let last = problems[100].as_str().unwrap();
    assert!(last.contains("50 more files not read"), "{last}");
}
