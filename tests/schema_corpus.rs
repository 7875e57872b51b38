//! The invalid-document corpus: every case rejected with a message naming the field, and
//! logged to errors.out; the valid corpus round-trips through the typed model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use agentstore::model::{DocKind, Job, Message, Prd, Project, Queue, User};
use agentstore::schema::Validator;
use common::{TestEnv, corpus};
use serde_json::Value;
use std::path::Path;

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug>(
    path: &Path,
) {
    let text = std::fs::read_to_string(path).unwrap();
    let first: T =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let again = serde_json::to_string(&first).unwrap();
    let second: T = serde_json::from_str(&again).unwrap();
    assert_eq!(first, second, "{}", path.display());
    // Re-serialised documents still satisfy their schema.
    let v = Validator::embedded().unwrap();
    let kind = DocKind::from_name(
        path.parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap(),
    )
    .unwrap();
    v.validate(kind, &serde_json::from_str(&again).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[test]
fn valid_corpus_round_trips_through_model() {
    let mut n = 0;
    for kind in DocKind::ALL {
        for e in std::fs::read_dir(corpus().join("valid").join(kind.name())).unwrap() {
            let p = e.unwrap().path();
            match kind {
                DocKind::User => round_trip::<User>(&p),
                DocKind::Message => round_trip::<Message>(&p),
                DocKind::Project => round_trip::<Project>(&p),
                DocKind::Prd => round_trip::<Prd>(&p),
                DocKind::Queue => round_trip::<Queue>(&p),
                DocKind::Job => round_trip::<Job>(&p),
                DocKind::Task => round_trip::<agentstore::model::Task>(&p),
            }
            n += 1;
        }
    }
    assert!(n >= 20, "only {n} valid documents");
}

#[derive(serde::Deserialize)]
struct Case {
    file: String,
    schema: String,
    pointer: String,
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    parse: bool,
}

#[test]
fn invalid_corpus_is_rejected_naming_the_field_and_logged() {
    let env = TestEnv::initialised();
    let cases: Vec<Case> =
        serde_json::from_slice(&std::fs::read(corpus().join("invalid/manifest.json")).unwrap())
            .unwrap();
    let mut per_schema = std::collections::HashMap::<String, Vec<String>>::new();
    for c in &cases {
        let path = corpus().join("invalid").join(&c.file);
        let o = env.run(&["validate", "--kind", &c.schema, path.to_str().unwrap()]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{} accepted: {out}", c.file);
        let expected = match (&c.field, c.parse) {
            (_, true) => String::new(),
            (Some(f), _) => format!("{}/{f}", c.pointer),
            (None, _) if c.pointer.is_empty() => "/".to_string(),
            (None, _) => c.pointer.clone(),
        };
        if c.parse {
            assert!(
                out.contains("not valid JSON") || out.contains("empty file"),
                "{}: {out}",
                c.file
            );
        } else {
            assert!(
                out.contains(&format!(": {expected}: ")),
                "{} should name {expected}: {out}",
                c.file
            );
        }
        per_schema
            .entry(c.schema.clone())
            .or_default()
            .push(c.file.clone());
    }
    for kind in DocKind::ALL {
        let files = &per_schema[kind.name()];
        for case in [
            "missing_required",
            "wrong_type",
            "unknown_field",
            "not_json",
            "empty",
        ] {
            assert!(
                files.iter().any(|f| f.contains(case)),
                "{kind}: no {case} case"
            );
        }
    }
    let log = env.error_log();
    assert_eq!(log.len(), cases.len(), "one errors.out line per rejection");
    for entry in &log {
        for k in ["timestamp", "type", "id", "error"] {
            assert!(entry.get(k).is_some(), "{entry}");
        }
    }
}

#[test]
fn ten_megabyte_documents_are_rejected_with_a_reason() {
    let env = TestEnv::initialised();
    for kind in DocKind::ALL {
        // A syntactically valid document with a 17 MB string: over the size limit.
        let big = format!(
            "{{\"id\": \"big\", \"pad\": \"{}\"}}",
            "x".repeat(17 * 1024 * 1024)
        );
        let p = env.dir.path().join(format!("big-{kind}.json"));
        std::fs::write(&p, &big).unwrap();
        let o = env.run(&["validate", "--kind", kind.name(), p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("larger than"),
            "{kind}"
        );
        // A 10 MB document under the limit is parsed and rejected by field.
        let ten = format!(
            "{{\"id\": \"ten\", \"pad\": \"{}\"}}",
            "x".repeat(10 * 1024 * 1024)
        );
        std::fs::write(&p, &ten).unwrap();
        let o = env.run(&["validate", "--kind", kind.name(), p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("/pad") || out.contains("required"),
            "{kind}: {out}"
        );
    }
    assert_eq!(env.error_log().len(), 2 * DocKind::ALL.len());
}

#[test]
fn fifty_concurrent_writers_leave_fifty_intact_lines() {
    let env = TestEnv::initialised();
    let bad = corpus().join("invalid/job/wrong_enum.json");
    let children: Vec<_> = (0..50)
        .map(|_| {
            env.cli()
                .args(["validate", "--kind", "job", bad.to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert_eq!(c.wait().unwrap().code(), Some(1));
    }
    let text = common::errors_out(&env.root);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 50);
    for l in lines {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["type"], "job");
    }
}

#[test]
fn store_schema_copy_takes_precedence() {
    let env = TestEnv::initialised();
    // Tighten the store's own user schema: emails must end in .gov.
    let p = env.root.join("JSONValidation/Schemas/user.schema.json");
    let mut schema: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    schema["properties"]["email"]["pattern"] = Value::from("\\.gov$");
    std::fs::write(&p, serde_json::to_vec(&schema).unwrap()).unwrap();
    let err = env.fails(&[
        "add-user",
        "bob",
        "--name",
        "Bob",
        "--email",
        "bob@example.com",
    ]);
    assert!(err.contains("/email"), "{err}");
    env.ok(&["add-user", "bob", "--name", "Bob", "--email", "bob@anl.gov"]);
}

#[test]
fn validate_finds_the_one_bad_file_among_a_thousand() {
    let env = TestEnv::initialised();
    for i in 0..1000 {
        env.write(
            &format!("Queues/poplar/Jobs/queued_jobs/job-{i:04}.json"),
            &common::noop_job("2025-10-25T10:00:00Z"),
        );
    }
    let bad = common::noop_job("2025-10-25T10:00:00Z")
        .replace("\"jobtype\": \"noop\"", "\"jobtype\": \"nope\"");
    assert_ne!(bad, common::noop_job("2025-10-25T10:00:00Z"));
    env.write("Queues/poplar/Jobs/finished_jobs/job-bad.json", &bad);
    // Temp files and dot-files are not documents and are not checked.
    env.write(
        "Queues/poplar/Jobs/queued_jobs/.job-x.json.1.0.tmp",
        "{half",
    );
    let o = env.run(&["validate"]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    let failures: Vec<&str> = out.lines().filter(|l| l.contains(".json: ")).collect();
    assert_eq!(failures.len(), 1, "{out}");
    assert!(
        failures[0].contains("job-bad.json: /config/jobtype"),
        "{out}"
    );
    // 1001 jobs, users/chenry.json and Queues/poplar/queue.json.
    assert!(out.contains("1003 document(s) checked, 1 invalid"), "{out}");
    let json: Value = serde_json::from_str(&String::from_utf8_lossy(
        &env.run(&["validate", "--format", "json"]).stdout,
    ))
    .unwrap();
    assert_eq!(json["invalid"].as_array().unwrap().len(), 1);
}
