//! Fuzzing every document kind with proptest (a fixed seed and a bounded count, so the run is
//! the same every time): valid corpus documents with fields replaced by arbitrary JSON,
//! duplicate keys spliced in, bytes cut off or replaced. The one parser, the validator, the
//! queue manager's checks and the orchestrator's job builder must answer every input — Ok or
//! a rejection — and never panic. A corpus of the hostile cases of issue 9 is run first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentstore::model::{
    DocKind, Job, MAX_TIMEOUT_SECONDS, Message, MessageStatus, Prd, Project, Queue, User,
};
use agentstore::permissions::Caller;
use agentstore::schema::Validator;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};
use std::path::Path;

/// Cases per document kind.
const CASES: u32 = 10_000;
/// Messages also run through the orchestrator's router (it writes job files; fewer).
const ROUTED: usize = 1_500;

fn corpus(kind: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/valid")
        .join(kind);
    let mut out: Vec<Value> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect();
    out.sort_by_key(|v| v.to_string());
    assert!(!out.is_empty(), "no valid {kind} corpus");
    out
}

/// Characters of ids and plain text.
const SAFE: &[char] = &[
    'a', 'b', 'z', 'A', 'Z', '0', '9', ' ', '.', '/', '_', '-', ':', 'T',
];
/// Object keys: the documents' own field names (so nested objects look real) and others.
const KEYS: &[&str] = &[
    "id",
    "config",
    "runtime",
    "status",
    "content",
    "task",
    "timeout",
    "queue",
    "project",
    "user",
    "owner",
    "timeout_seconds",
    "worker_count",
    "claude_extra_args",
    "jobs",
    "x",
    "supporting_data",
    "process_id",
    "queue_time",
    "correlation_id",
    "",
];

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(u64::MAX),
            Just(u64::from(u32::MAX) + 1),
            Just(MAX_TIMEOUT_SECONDS + 1),
            Just(0u64)
        ]
        .prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::collection::vec(prop::sample::select(SAFE), 0..24)
            .prop_map(|c| Value::String(c.into_iter().collect())),
        prop::collection::vec(any::<char>(), 0..12)
            .prop_map(|c| Value::String(c.into_iter().collect())),
        Just(json!("x".repeat(300))),
        Just(json!("../../etc/passwd")),
        Just(json!("--help")),
        Just(json!("2025-10-25T10:00:00Z")),
        Just(json!(["--dangerously-skip-permissions"])),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..4).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// Replaces the value at a path chosen by `steps` (indices into object members / array
/// items, taken modulo their count) with `v`; `delete` removes it instead.
/// Half the time the new value keeps the old one's type (a number stays a number, a string a
/// string), so documents get past the type checks and reach the bounds and the code behind.
fn same_type(old: &Value, v: Value, salt: usize) -> Value {
    match (old, &v) {
        (Value::Number(_), Value::Number(_)) | (Value::String(_), Value::String(_)) => v,
        (Value::Number(_), _) => match salt % 4 {
            0 => json!(u64::MAX),
            1 => json!(salt as u64),
            2 => json!(-(salt as i64)),
            _ => json!(MAX_TIMEOUT_SECONDS + (salt as u64 % 3)),
        },
        (Value::String(s), _) => {
            let mut t = s.clone();
            t.push_str(&v.to_string().chars().take(salt % 40).collect::<String>());
            json!(t)
        }
        _ => v,
    }
}

fn mutate(doc: &mut Value, steps: &[usize], v: Value, delete: bool) {
    let Some((s, rest)) = steps.split_first() else {
        *doc = v;
        return;
    };
    let keep = s % 2 == 0;
    let v = if rest.is_empty() && keep {
        let old = match &*doc {
            Value::Object(m) if !m.is_empty() => m.values().nth(s % m.len()).cloned(),
            Value::Array(a) if !a.is_empty() => a.get(s % a.len()).cloned(),
            _ => None,
        };
        old.map_or(v.clone(), |o| same_type(&o, v, *s / 2))
    } else {
        v
    };
    let last = rest.is_empty();
    match doc {
        Value::Object(m) if !m.is_empty() => {
            let key = m.keys().nth(s % m.len()).cloned().unwrap();
            if last && delete {
                m.remove(&key);
            } else if last {
                m.insert(key, v);
            } else if let Some(child) = m.get_mut(&key) {
                mutate(child, rest, v, delete);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let n = s % a.len();
            if last && delete {
                a.remove(n);
            } else if last {
                a[n] = v;
            } else {
                mutate(&mut a[n], rest, v, delete);
            }
        }
        other => *other = v,
    }
}

#[derive(Debug, Clone)]
enum TextEdit {
    None,
    /// `{"<first key>": <json>, ` spliced after the first `{` (a duplicate key).
    DuplicateFirst(Value),
    /// Cut after this fraction (per mille) of the text.
    Truncate(u16),
    /// Overwrite one byte.
    Byte(u16, u8),
}

fn arb_edit() -> impl Strategy<Value = TextEdit> {
    prop_oneof![
        4 => Just(TextEdit::None),
        2 => arb_json().prop_map(TextEdit::DuplicateFirst),
        1 => (0u16..1000).prop_map(TextEdit::Truncate),
        1 => (0u16..1000, any::<u8>()).prop_map(|(p, b)| TextEdit::Byte(p, b)),
    ]
}

fn apply(doc: &Value, edit: &TextEdit) -> Vec<u8> {
    let text = serde_json::to_string(doc).unwrap();
    match edit {
        TextEdit::None => text.into_bytes(),
        TextEdit::DuplicateFirst(v) => {
            let key = doc
                .as_object()
                .and_then(|m| m.keys().next().cloned())
                .unwrap_or_else(|| "config".into());
            text.replacen('{', &format!("{{{}: {v}, ", json!(key)), 1)
                .into_bytes()
        }
        TextEdit::Truncate(p) => {
            let mut b = text.into_bytes();
            b.truncate(b.len() * usize::from(*p) / 1000);
            b
        }
        TextEdit::Byte(p, x) => {
            let mut b = text.into_bytes();
            if !b.is_empty() {
                let i = (b.len() - 1) * usize::from(*p) / 1000;
                b[i] = *x;
            }
            b
        }
    }
}

fn arb_case(bases: usize) -> impl Strategy<Value = (usize, Vec<usize>, Value, bool, TextEdit)> {
    (
        0..bases,
        prop::collection::vec(any::<usize>(), 1..5),
        arb_json(),
        prop::bool::weighted(0.15),
        arb_edit(),
    )
}

fn runner(kind: DocKind) -> TestRunner {
    let seed = [kind.name().len() as u8 ^ 0x5a; 32];
    let mut seed = seed;
    for (i, b) in kind.name().bytes().enumerate() {
        seed[i] = b;
    }
    TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            max_shrink_iters: 200,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::XorShift, &seed[..16]),
    )
}

/// Parses `bytes` as `kind` with the one parser; the verdict must not depend on who asks:
/// the typed parse and the value validation agree.
fn check(v: &Validator, kind: DocKind, bytes: &[u8]) -> bool {
    let typed_ok = match kind {
        DocKind::User => v.parse::<User>(kind, bytes).is_ok(),
        DocKind::Message => v.parse::<Message>(kind, bytes).is_ok(),
        DocKind::Project => v.parse::<Project>(kind, bytes).is_ok(),
        DocKind::Prd => v.parse::<Prd>(kind, bytes).is_ok(),
        DocKind::Queue => v.parse::<Queue>(kind, bytes).is_ok(),
        DocKind::Task => v.parse::<agentstore::model::Task>(kind, bytes).is_ok(),
        DocKind::Job => match v.parse::<Job>(kind, bytes) {
            Ok(job) => {
                // The queue manager's checks answer every valid job without panicking.
                let cfg = agentstore::model::QueueConfig::defaults("q");
                if let Ok(l) = agentstore::queue::job_limit(&job, &cfg) {
                    assert!((1..=MAX_TIMEOUT_SECONDS).contains(&l));
                }
                let _ = agentstore::model::permission_widening_arg(&job.config.claude_extra_args);
                true
            }
            Err(_) => false,
        },
    };
    // Duplicate keys are refused by every reader.
    if agentstore::model::strict::parse_value(bytes).is_err() {
        assert!(
            !typed_ok,
            "a document the strict reader refuses was accepted"
        );
    }
    typed_ok
}

#[test]
fn every_kind_10000_cases_no_panic() {
    let v = std::sync::Arc::new(Validator::embedded().unwrap());
    let started = std::time::Instant::now();
    let threads: Vec<_> = DocKind::ALL
        .into_iter()
        .map(|kind| {
            let v = v.clone();
            std::thread::spawn(move || {
                let bases = corpus(kind.name());
                let accepted = std::cell::Cell::new(0u32);
                let rejected = std::cell::Cell::new(0u32);
                let mut r = runner(kind);
                r.run(&arb_case(bases.len()), |(b, steps, val, delete, edit)| {
                    let mut doc = bases[b].clone();
                    mutate(&mut doc, &steps, val, delete);
                    let bytes = apply(&doc, &edit);
                    if check(&v, kind, &bytes) {
                        accepted.set(accepted.get() + 1);
                    } else {
                        rejected.set(rejected.get() + 1);
                    }
                    Ok(())
                })
                .unwrap();
                (kind, accepted.get(), rejected.get())
            })
        })
        .collect();
    for t in threads {
        let (kind, accepted, rejected) = t.join().unwrap();
        assert!(
            accepted + rejected >= CASES,
            "{kind}: {accepted}+{rejected}"
        );
        // The generator is not degenerate: both verdicts occur.
        assert!(
            accepted > 0 && rejected > 0,
            "{kind}: {accepted} accepted, {rejected} rejected"
        );
        eprintln!("{kind}: {accepted} accepted, {rejected} rejected");
    }
    eprintln!("parsers: {:?}", started.elapsed());
}

/// Messages through the orchestrator's router and job builder in a temp store: every one is
/// answered `done` or `error`, never a panic; every job written is valid and bounded.
#[test]
fn messages_through_the_router_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("AgentStore");
    let (store, _) = agentstore::store::Store::init(&root).unwrap();
    std::fs::write(
        store.user_path("chenry"),
        json!({"id": "chenry", "name": "C", "email": "c@x", "permissions": "admin"}).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(store.project_path("TestProject").parent().unwrap()).unwrap();
    std::fs::write(
        store.project_path("TestProject"),
        json!({"id": "TestProject", "directory": "/tmp", "create_time": "2025-10-25T10:00:00Z",
               "update_time": "2025-10-25T10:00:00Z", "owner": "chenry",
               "collaborators": ["alice"], "default_queue": "poplar"})
        .to_string(),
    )
    .unwrap();
    let bases = [
        json!({"correlation_id": "c", "source": "user", "project": "TestProject",
               "queue_time": "2025-10-25T10:00:00Z", "command": "research-code",
               "content": {"task": "t", "timeout": 60, "claude_extra_args": ["--model", "m"],
                           "supporting_data": {"a": 1}, "jobtype": "noop"},
               "status": "queued", "user": "chenry"}),
        json!({"correlation_id": "d", "source": "user", "project": "TestProject",
               "queue_time": "2025-10-25T10:00:00Z", "command": "list-jobs",
               "content": {}, "status": "queued"}),
    ];
    let v = store.validator();
    let mut r = runner(DocKind::Message);
    let count = std::cell::Cell::new(0usize);
    r.run(&arb_case(bases.len()), |(b, steps, val, delete, edit)| {
        let n = count.get();
        if n >= ROUTED {
            return Ok(());
        }
        let mut doc = bases[b].clone();
        mutate(&mut doc, &steps, val, delete);
        let bytes = apply(&doc, &edit);
        let Ok(mut msg) = v.parse::<Message>(DocKind::Message, &bytes) else {
            return Ok(());
        };
        let n = n + 1;
        count.set(n);
        msg.correlation_id = format!("fuzz-{n}");
        let who = match msg.user.as_deref() {
            Some(u) => match store.user(u) {
                Ok(user) => Caller::User(user),
                Err(_) => return Ok(()),
            },
            None => Caller::Trusted,
        };
        let o = agentstore::orchestrator::handle(&store, &msg, &who);
        assert!(
            matches!(
                o.response.status,
                MessageStatus::Done | MessageStatus::Error
            ),
            "{:?}",
            o.response
        );
        assert_eq!(o.response.status == MessageStatus::Error, o.error.is_some());
        if let Some(j) = &o.job {
            let job: Job = store
                .read_doc(DocKind::Job, &store.root().join(&j.path))
                .unwrap();
            let t = job.config.timeout_seconds.unwrap();
            assert!((1..=MAX_TIMEOUT_SECONDS).contains(&t));
            assert_eq!(
                agentstore::model::permission_widening_arg(&job.config.claude_extra_args),
                None
            );
        }
        Ok(())
    })
    .unwrap();
    let n = count.get();
    assert!(n >= ROUTED / 3, "only {n} messages were routable");
}

/// The hostile documents of issue 9, each with its expected verdict.
#[test]
fn hostile_corpus() {
    let v = Validator::embedded().unwrap();
    let job = |config: &str| {
        format!(
            r#"{{"config": {{"project": "P", "working_directory": "/tmp",
            "queue_time": "2025-10-25T10:00:00Z", "jobtype": "noop", "claude_command": "noop",
            "claude_extra_args": [], "task_description": "t", "supporting_data": {{}},
            {config}}}, "runtime": {{"status": "queued", "start_time": null,
            "finish_time": null, "process_id": null, "llm_process_id": null, "error": null,
            "output": null}}}}"#
        )
    };
    let refused = [
        (
            DocKind::Job,
            job(r#""timeout_seconds": 18446744073709551615"#),
        ),
        (DocKind::Job, job(r#""timeout_seconds": 2592001"#)),
        (DocKind::Job, job(r#""timeout_seconds": 0"#)),
        (
            DocKind::Job,
            job(r#""timeout_seconds": 60, "timeout_seconds": 61"#),
        ),
        (
            DocKind::Job,
            format!(
                r#"{{"config": "", {}"#,
                &job(r#""timeout_seconds": 60"#)[1..]
            ),
        ),
        (
            DocKind::Message,
            r#"{"correlation_id": "a", "correlation_id": "b", "source": "user",
               "queue_time": "2025-10-25T10:00:00Z", "command": "help", "content": {},
               "status": "queued"}"#
                .to_string(),
        ),
        (
            DocKind::Queue,
            r#"{"config": {"id": "q", "worker_count": 4294967295, "claude_cli_path": "claude",
               "rest_interval": 60, "claude_default_args": [], "max_job_runtime_seconds": 60},
               "runtime": {"process_id": null, "active_jobs": 0, "last_update": null,
               "queued_jobs": 0}}"#
                .to_string(),
        ),
        (
            DocKind::Queue,
            r#"{"config": {"id": "q", "worker_count": 1, "claude_cli_path": "claude",
               "rest_interval": 18446744073709551615, "claude_default_args": [],
               "max_job_runtime_seconds": 60}, "runtime": {"process_id": null,
               "active_jobs": 0, "last_update": null, "queued_jobs": 0}}"#
                .to_string(),
        ),
        (DocKind::Job, "[".repeat(100_000)),
        (DocKind::Job, String::new()),
    ];
    for (kind, text) in &refused {
        assert!(
            !check(&v, *kind, text.as_bytes()),
            "{kind} accepted: {}",
            &text[..text.len().min(200)]
        );
    }
    let accepted = [(DocKind::Job, job(r#""timeout_seconds": 2592000"#))];
    for (kind, text) in &accepted {
        assert!(check(&v, *kind, text.as_bytes()), "{kind} refused: {text}");
    }
}
