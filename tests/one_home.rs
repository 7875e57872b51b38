//! One home per query (issue 29, DESIGN §9): a command is named in code only by the typed
//! `model::Command` (its name as text lives in `src/model/command.rs` alone, so no door
//! dispatches on strings of its own), and a job listing decides who sees which job only in
//! `orchestrator/commands/job_listing.rs` (over `permissions::Visibility`), whichever door
//! lists. Like `layers.rs`, these read the sources; each rule also checks that its home
//! holds what it looks for, so a renamed file cannot make the scan blind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::layers::{code_outside_tests, sources};
use std::path::Path;

const COMMAND_HOME: &str = "src/model/command.rs";

/// Literals that spell a command's name but mean something else, each (file, literal,
/// why). A row that no longer occurs fails the test, so the list only shrinks.
const OTHER_MEANINGS: &[(&str, &str, &str)] = &[
    (
        "src/slackapp/commands.rs",
        "help",
        "`/agentstore help`, the Slack command's own subcommand",
    ),
    (
        "src/orchestrator/flow.rs",
        "retry",
        "content.retry, a job's retry policy",
    ),
    (
        "src/cli/flow.rs",
        "retry",
        "content.retry, a job's retry policy",
    ),
    (
        "src/store/listing/merge.rs",
        "archive",
        "the Jobs/archive folder",
    ),
    ("src/store/archive.rs", "archive", "the Jobs/archive folder"),
    (
        "src/web/api_tasks.rs",
        "retry",
        "the path segment of POST /api/v1/tasks/{prd}/{task}/retry (retry-task)",
    ),
];

/// The command names of the `commands!` table: `Variant = "name", Kind, …;`.
fn command_names(home: &str) -> Vec<String> {
    home.lines()
        .filter_map(|l| {
            let (_, rest) = l.trim().split_once(" = \"")?;
            let (name, tail) = rest.split_once('"')?;
            tail.starts_with(", ").then(|| name.to_string())
        })
        .collect()
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap().display().to_string()
}

#[test]
fn commands_are_named_only_by_the_typed_enum() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let names = command_names(&std::fs::read_to_string(root.join(COMMAND_HOME)).unwrap());
    // Not blind: the table was read (the PRD's commands, ours, the agent commands).
    for must in [
        "help",
        "list-jobs",
        "view-job",
        "create-prd",
        "retry",
        "set-task",
    ] {
        assert!(names.iter().any(|n| n == must), "{must} not in {names:?}");
    }
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let (mut found, mut used) = (Vec::new(), Vec::new());
    for path in &files {
        let r = rel(root, path);
        if r == COMMAND_HOME || r.starts_with("src/agent/") || r.ends_with("/tests.rs") {
            continue;
        }
        let src = std::fs::read_to_string(path).unwrap();
        for (n, code) in code_outside_tests(&src) {
            for name in &names {
                if !code.contains(&format!("\"{name}\"")) {
                    continue;
                }
                match OTHER_MEANINGS
                    .iter()
                    .find(|(f, l, _)| *f == r && *l == name.as_str())
                {
                    Some(row) => used.push(*row),
                    None => found.push(format!("{r}:{n}: \"{name}\" ({})", code.trim())),
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "command names spelled as text outside {COMMAND_HOME} (use model::Command):\n{}",
        found.join("\n")
    );
    let stale: Vec<_> = OTHER_MEANINGS
        .iter()
        .filter(|row| !used.contains(row))
        .collect();
    assert!(
        stale.is_empty(),
        "rows of OTHER_MEANINGS no longer seen: {stale:?}"
    );
}

/// The calls that decide which listed job a caller may see, and their homes.
const VISIBILITY_CALLS: &[&str] = &["Visibility::new(", ".admits("];
const VISIBILITY_HOMES: &[&str] = &[
    "src/permissions.rs",
    "src/orchestrator/commands/job_listing.rs",
];

#[test]
fn job_listings_decide_visibility_in_one_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for path in &files {
        let r = rel(root, path);
        if VISIBILITY_HOMES.contains(&r.as_str()) || r.starts_with("src/agent/") {
            continue;
        }
        let src = std::fs::read_to_string(path).unwrap();
        for (n, code) in code_outside_tests(&src) {
            for call in VISIBILITY_CALLS {
                if code.contains(call) {
                    found.push(format!("{r}:{n}: {call} ({})", code.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a job listing decides who sees what outside job_listing.rs (walk a VisibleJobs):\n{}",
        found.join("\n")
    );
    let walker = std::fs::read_to_string(root.join(VISIBILITY_HOMES[1])).unwrap();
    for call in VISIBILITY_CALLS {
        assert!(
            walker.contains(call),
            "{call} not in {}",
            VISIBILITY_HOMES[1]
        );
    }
}

/// One lock policy (issue 29 item 5): the crate's locks are `parking_lot`'s, which do not
/// poison, so no lock site decides again what a panic while it was held means (recover,
/// fail, or skip the update: all three were written before). Each (file, text, why) row
/// is a std lock that must stay one; a row no longer seen fails the test.
const STD_LOCKS: &[(&str, &str, &str)] = &[(
    "src/agent/bootstrap/logger.rs",
    "use std::sync::Mutex;",
    "tracing-subscriber's MakeWriter is implemented for std's Mutex<File>; nothing here locks it",
)];

#[test]
fn locks_are_parking_lots_and_do_not_poison() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let (mut found, mut used) = (Vec::new(), Vec::new());
    let mut parking = 0;
    for path in &files {
        let r = rel(root, path);
        let src = std::fs::read_to_string(path).unwrap();
        for (n, code) in code_outside_tests(&src) {
            parking += code.matches("parking_lot::").count();
            let std_lock = ["Mutex", "RwLock", "Condvar", "MutexGuard"]
                .iter()
                .any(|t| code.contains(&format!("std::sync::{t}")))
                || (code.contains("std::sync::{")
                    && ["Mutex", "RwLock", "Condvar"]
                        .iter()
                        .any(|t| code.contains(t)));
            let poison = code.contains("PoisonError") || code.contains(".into_inner())");
            if !(std_lock || poison) {
                continue;
            }
            match STD_LOCKS
                .iter()
                .find(|(f, t, _)| *f == r && code.contains(t))
            {
                Some(row) => used.push(*row),
                None => found.push(format!("{r}:{n}: {}", code.trim())),
            }
        }
    }
    // Not blind: the crate's locks were seen.
    assert!(parking > 10, "only {parking} parking_lot paths seen");
    assert!(
        found.is_empty(),
        "a std lock or poison handling (use parking_lot::Mutex/RwLock: they do not poison):\n{}",
        found.join("\n")
    );
    let stale: Vec<_> = STD_LOCKS.iter().filter(|row| !used.contains(row)).collect();
    assert!(
        stale.is_empty(),
        "rows of STD_LOCKS no longer seen: {stale:?}"
    );
}

/// Encodings written by hand before (issue 29 item 5), each (the shape: texts a line holds
/// all of, what to use instead): seen in the crate's code outside tests, it fails the test.
const HAND_ENCODINGS: &[(&[&str], &str)] = &[
    (&[":02x}"], "data_encoding::HEXLOWER"),
    (
        &[":02X}"],
        "data_encoding::HEXUPPER (or web::percent for %XX)",
    ),
    (
        &["from_str_radix", ", 16)"],
        "data_encoding::HEXLOWER_PERMISSIVE (from_str_radix takes a sign)",
    ),
    (
        &["ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"],
        "data_encoding::BASE64*",
    ),
    (&["0x6a09e667"], "sha2::Sha256"),
    (&["boundary="], "reqwest::multipart::Form"),
];

#[test]
fn encodings_come_from_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let (mut found, mut crates) = (Vec::new(), 0);
    // A module's tests in a file of their own (`#[cfg(test)] mod tests;`) are tests.
    for path in files.iter().filter(|p| !p.ends_with("tests.rs")) {
        let r = rel(root, path);
        let src = std::fs::read_to_string(path).unwrap();
        for (n, code) in code_outside_tests(&src) {
            crates += [
                "data_encoding::",
                "percent_encoding::",
                "Sha256",
                "multipart::",
            ]
            .iter()
            .map(|c| code.matches(c).count())
            .sum::<usize>();
            for (shape, instead) in HAND_ENCODINGS {
                if shape.iter().all(|s| code.contains(s)) {
                    found.push(format!("{r}:{n}: {} (use {instead})", code.trim()));
                }
            }
        }
    }
    // Not blind: the crates' uses were seen.
    assert!(
        crates >= 8,
        "only {crates} uses of the encoding crates seen"
    );
    assert!(
        found.is_empty(),
        "an encoding written by hand:\n{}",
        found.join("\n")
    );
}

/// The tests' fixed sleeps, each (file, how many, why): the list only shrinks. A test that
/// waits for something awaits it through `tests/support/wait.rs`.
const SLEEPS_LEFT: &[(&str, usize, &str)] = &[
    (
        "tests/support/wait.rs",
        2,
        "the helper's tick for conditions no event announces; no pidfd (kernel < 5.3)",
    ),
    (
        "tests/agentshell_web.rs",
        2,
        "the slow client under test (Python): reconnect pacing, then hold",
    ),
    (
        "tests/web_limits.rs",
        1,
        "headers dribbled a byte at a time (the test)",
    ),
    (
        "tests/support/fake_model.rs",
        1,
        "the Trickle reply: a slow stream",
    ),
    (
        "tests/failover.rs",
        1,
        "the inbox writer: a message every 40 ms",
    ),
    (
        "tests/failover.rs",
        1,
        "roles sampled 10 times, 300 ms apart",
    ),
    (
        "tests/failover.rs",
        1,
        "alpha is SIGSTOPped: its idle time must pass while it cannot run",
    ),
    (
        "tests/machines.rs",
        2,
        "the fake sync engine's replace cycle",
    ),
    (
        "tests/hostile_input.rs",
        4,
        "queue add/remove pacing (the stimulus), and the warm-up and settle of the fd and \
         thread counts: a heartbeat pass there holds the fds it measures",
    ),
    (
        "tests/hostile_input.rs",
        1,
        "a manager on a full disk writes nothing that marks its back-off retries",
    ),
    (
        "tests/web_api.rs",
        4,
        "the listing's SETTLED (2 s) is a product constant: kept totals need older folders",
    ),
    (
        "tests/deep_pages.rs",
        1,
        "the thread-count sampler while 50 calls run",
    ),
    (
        "tests/support/queue_env.rs",
        1,
        "a pause between WatchJobs retries after a refused call",
    ),
];

/// Every `.rs` file under `tests/` with its text, but this one (it names what it looks for).
fn test_sources(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    sources(&root.join("tests"), &mut files);
    files
        .iter()
        .map(|p| (rel(root, p), std::fs::read_to_string(p).unwrap()))
        .filter(|(r, _)| r != "tests/one_home.rs")
        .collect()
}

/// The test support has one home for each helper (issue 29 item 6): waiting in
/// `support/wait.rs` (fixed sleeps only where [`SLEEPS_LEFT`] says why), the daemon binaries
/// named in `support/daemons.rs`, Chromium driven from `support/browser.rs`, the fake
/// `claude` found through `common::fake_claude`, and no module- or crate-wide
/// `allow(dead_code)` (an item used by one target and not another may say so itself).
#[test]
fn test_helpers_have_one_home() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = test_sources(root);
    assert!(files.len() > 50, "only {} test sources seen", files.len());
    let sleep = ["sle", "ep("].concat();
    let mut allowed = std::collections::BTreeMap::<&str, usize>::new();
    for (f, n, _) in SLEEPS_LEFT {
        *allowed.entry(f).or_default() += n;
    }
    let mut wrong = Vec::new();
    for (r, text) in &files {
        let n = text.matches(&sleep).count();
        let may = allowed.get(r.as_str()).copied().unwrap_or(0);
        if n > may {
            wrong.push(format!(
                "{r}: {n} fixed sleeps, {may} listed: await the event (tests/support/wait.rs)"
            ));
        } else if n < may {
            wrong.push(format!(
                "{r}: {n} fixed sleeps, {may} listed: shrink SLEEPS_LEFT"
            ));
        }
    }
    let inner = ["#!", "[allow("].concat();
    for (r, text) in &files {
        for (at, _) in text.match_indices(&inner) {
            let attr = &text[at..at + text[at..].find(")]").unwrap_or(0)];
            if attr.contains("dead_code") {
                wrong.push(format!("{r}: {attr})]: allow only the items that need it"));
            }
        }
    }
    let homes: [(&[&str], &str); 4] = [
        (
            &["CARGO_BIN_EXE_", "orchestratord"],
            "tests/support/daemons.rs",
        ),
        (
            &["CARGO_BIN_EXE_", "queue-manager"],
            "tests/support/daemons.rs",
        ),
        (&["--remote-debugging", "-pipe"], "tests/support/browser.rs"),
        (
            &["join(\"tests/fixtures/", "fake-claude\")"],
            "tests/common/mod.rs",
        ),
    ];
    for (parts, home) in homes {
        let needle = parts.concat();
        let at: Vec<&str> = files
            .iter()
            .filter(|(_, t)| t.contains(&needle))
            .map(|(r, _)| r.as_str())
            .collect();
        if at != [home] {
            wrong.push(format!("{needle} is in {at:?}; its one home: {home}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Where the web layer may pass text through unescaped (`maud::PreEscaped`), each (file, what
/// is passed, why). A row that no longer occurs fails the test, so the list only shrinks.
const UNESCAPED: &[(&str, &str, &str)] = &[(
    "src/web/dashboard/mod.rs",
    "PreEscaped(CSS)",
    "the dashboard's own style sheet, a constant of that file",
)];

/// The dashboard's HTML comes from maud templates, escaped at compile time (issue 29): no
/// string in `src/web` spells a tag (no HTML built with `format!`), no hand-written escaper,
/// and markup passes unescaped only where [`UNESCAPED`] says why.
#[test]
fn web_html_comes_from_templates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src/web"), &mut files);
    let tag = regex::Regex::new(r#""[^"]*</?[a-zA-Z][a-zA-Z0-9]*[ >/]"#).unwrap();
    let (mut found, mut templates) = (Vec::new(), 0);
    let mut seen = vec![false; UNESCAPED.len()];
    for path in files.iter().filter(|p| !p.ends_with("tests.rs")) {
        let r = rel(root, path);
        let src = std::fs::read_to_string(path).unwrap();
        for (n, code) in code_outside_tests(&src) {
            templates += code.matches("html! {").count();
            if tag.is_match(code) {
                found.push(format!("{r}:{n}: a tag in a string: {}", code.trim()));
            }
            if code.contains("fn esc(") {
                found.push(format!("{r}:{n}: an escaper by hand: {}", code.trim()));
            }
            for (piece, _) in code.match_indices("PreEscaped(") {
                let at = &code[piece..];
                match UNESCAPED
                    .iter()
                    .position(|(f, what, _)| *f == r && at.starts_with(what))
                {
                    Some(k) => seen[k] = true,
                    None if code.contains("use maud::") => {}
                    None => found.push(format!("{r}:{n}: unescaped: {}", code.trim())),
                }
            }
        }
    }
    // Not blind: the templates were seen.
    assert!(templates >= 20, "only {templates} maud templates seen");
    for (k, (f, what, _)) in UNESCAPED.iter().enumerate() {
        assert!(seen[k], "{f} no longer has {what}: remove its row");
    }
    assert!(
        found.is_empty(),
        "HTML outside a template:\n{}",
        found.join("\n")
    );
}
