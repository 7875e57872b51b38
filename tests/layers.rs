//! The crate's layers (DESIGN §8, docs/architecture.md) import in one direction only:
//!
//! ```text
//! bin → cli, bus, web → orchestrator, queue, worker → permissions, store, schema, systemd → model
//! ```
//!
//! A module may use a module of a lower layer, and within one layer only along the few
//! arrows listed in `SIDEWAYS` (which form no circle). `agent/` stands apart: it uses nothing
//! else of the crate, and only the upper layers (worker, cli, bin) use it; its own four layers
//! are checked by `tests/agentshell_layers.rs`.
//!
//! Every reference counts, not only `use` lines: `crate::x::…`, `super::…` (resolved against
//! the file's module path and inline `mod` blocks), `use crate::{x, y::z}` groups, and in the
//! binaries `agentstore::x::…`, wherever they stand in code (comments and string literals are
//! skipped). Arrows that are known, named and not yet straightened are listed in `EXCEPTIONS`
//! with the reason; an exception that no longer occurs fails the test too, so the list only
//! shrinks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layer of each top-level module; higher may use lower.
const LAYERS: &[(&str, u8)] = &[
    ("bin", 5),
    ("cli", 4),
    ("bus", 4),
    ("web", 4),
    ("slackapp", 4),
    ("orchestrator", 3),
    ("queue", 3),
    ("worker", 3),
    ("notify", 3),
    ("permissions", 2),
    ("store", 2),
    ("schema", 2),
    ("systemd", 2),
    ("trust", 2),
    ("model", 1),
];

/// Arrows inside one layer (from, to). Together they must stay free of circles.
const SIDEWAYS: &[(&str, &str)] = &[
    // The CLI talks to the daemons through the bus proxies.
    ("cli", "bus"),
    // The web front end is the D-Bus API in HTTP: it calls the daemons through the proxies.
    ("web", "bus"),
    // `orchestrator web` finds the token where the server does.
    ("cli", "web"),
    // PRD §10 decisions read users and projects; the store validates with the schema.
    ("permissions", "store"),
    ("store", "schema"),
    // The machine's own rules (run-as accounts, programs) are read with the store's
    // configuration reader, from the machine's files, never the store's.
    ("trust", "store"),
    // The notifier is one machine at a time, by the orchestrator's store-lock machinery.
    ("notify", "orchestrator"),
    // The Slack app answers approvals through the queue managers' D-Bus API (AnswerFor).
    ("slackapp", "bus"),
];

/// Who may use `agent/` (it is a library for the worker's `agent` jobs, the CLI and the
/// `agentshell` binary; `systemd` reads credentials with its one credential-file reader,
/// `agent/credentials.rs`, which stands there because `agent/` may use nothing else).
const AGENT_USERS: &[&str] = &["bin", "cli", "worker", "notify", "systemd"];

/// Known upward arrows, each (file, module it uses, why it is still there). Remove the row
/// with the arrow.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

fn layer(m: &str) -> Option<u8> {
    LAYERS.iter().find(|(n, _)| *n == m).map(|(_, l)| *l)
}

/// Why `from` may not use `to`, or None when it may.
fn forbidden(from: &str, to: &str) -> Option<String> {
    if from == to {
        return None;
    }
    if from == "agent" {
        return Some("agent/ stands apart and uses nothing else of the crate".into());
    }
    if to == "agent" {
        return (!AGENT_USERS.contains(&from))
            .then(|| format!("only {AGENT_USERS:?} may use agent/"));
    }
    let (Some(lf), Some(lt)) = (layer(from), layer(to)) else {
        return Some(format!(
            "unknown module in {from} -> {to}: add it to LAYERS"
        ));
    };
    if lt < lf || SIDEWAYS.contains(&(from, to)) {
        None
    } else if lt == lf {
        Some("same layer, not an arrow listed in SIDEWAYS".into())
    } else {
        Some("uses a higher layer".into())
    }
}

// ---------------------------------------------------------------------------------------
// A small Rust lexer: enough to find paths outside comments and literals.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Path, // `::`
    Open,
    Close,
    Comma,
    Other,
}

fn lex(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |i: usize| b.get(i).copied().unwrap_or('\0');
    while i < b.len() {
        let c = b[i];
        if c == '/' && at(i + 1) == '/' {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r'
            && (at(i + 1) == '"' || (at(i + 1) == '#' && matches!(at(i + 2), '"' | '#')))
        {
            // raw string r"…", r#"…"#
            let mut j = i + 1;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the quote
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| at(j + 1 + k) == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push(Tok::Other);
        } else if c == '"' || (c == 'b' && at(i + 1) == '"') {
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            while j < b.len() && b[j] != '"' {
                if b[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            i = j + 1;
            out.push(Tok::Other);
        } else if c == '\'' {
            // a char literal 'x' or '\n' / '\u{..}'; else a lifetime
            if at(i + 1) == '\\' {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
            out.push(Tok::Other);
        } else if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(b[s..i].iter().collect()));
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Tok::Path);
            i += 2;
        } else {
            out.push(match c {
                '{' => Tok::Open,
                '}' => Tok::Close,
                ',' => Tok::Comma,
                c if c.is_whitespace() => {
                    i += 1;
                    continue;
                }
                _ => Tok::Other,
            });
            i += 1;
        }
    }
    out
}

/// The crate-level modules a file's code refers to. `module` is the file's module path
/// (`["queue", "scope"]`; `["bin"]` for a binary, which names the library `agentstore`).
fn referenced(src: &str, module: &[String]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = referenced_paths(src, module)
        .into_iter()
        .filter_map(|p| p.into_iter().next())
        .collect();
    // `self` and names of the file's own module are not arrows to another module
    out.remove("self");
    out
}

/// The crate paths a file's code refers to, resolved from the crate root (`super::x::y` in
/// `queue/scope.rs` → `["queue", "x", "y"]`), each as far as its plain segments go (a group
/// gives the first segment of each of its items).
fn referenced_paths(src: &str, module: &[String]) -> BTreeSet<Vec<String>> {
    let toks = lex(src);
    let mut out = BTreeSet::new();
    // inline `mod name {` blocks: (name, brace depth inside it)
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let ident = |k: usize| match toks.get(k) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    let mut k = 0;
    while k < toks.len() {
        match &toks[k] {
            Tok::Open => depth += 1,
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(name), Some(Tok::Open)) = (ident(k + 1), toks.get(k + 2)) {
                    inline.push((name.to_string(), depth + 1));
                }
            }
            Tok::Ident(w) if matches!(w.as_str(), "crate" | "super" | "agentstore") => {
                // not the tail of a longer path (`x::super` is not valid Rust anyway)
                let after_path = k > 0 && toks[k - 1] == Tok::Path;
                if !after_path && toks.get(k + 1) == Some(&Tok::Path) {
                    let mut here: Vec<String> = module.to_vec();
                    here.extend(inline.iter().map(|(n, _)| n.clone()));
                    let mut j = k;
                    let base: Vec<String> = match w.as_str() {
                        "agentstore" if module.first().is_some_and(|m| m == "bin") => vec![],
                        "agentstore" => {
                            k += 1;
                            continue;
                        }
                        "crate" if module.first().is_some_and(|m| m == "bin") => {
                            k += 1;
                            continue;
                        }
                        "crate" => vec![],
                        _ => {
                            while ident(j) == Some("super") && toks.get(j + 1) == Some(&Tok::Path) {
                                here.pop();
                                j += 2;
                            }
                            j -= 2; // back onto the last `super`
                            here
                        }
                    };
                    let mut next = j + 2;
                    let mut path = base;
                    while let Some(name) = ident(next) {
                        path.push(name.to_string());
                        if toks.get(next + 1) != Some(&Tok::Path) {
                            break;
                        }
                        next += 2;
                    }
                    if toks.get(next) == Some(&Tok::Open) {
                        // a group: the first segment of each item at depth 1
                        let mut d = 0;
                        let mut item_start = true;
                        for t in &toks[next..] {
                            match t {
                                Tok::Open => {
                                    d += 1;
                                    continue;
                                }
                                Tok::Close => {
                                    d -= 1;
                                    if d == 0 {
                                        break;
                                    }
                                }
                                Tok::Comma if d == 1 => {
                                    item_start = true;
                                    continue;
                                }
                                Tok::Ident(s) if d == 1 && item_start => {
                                    let mut item = path.clone();
                                    item.push(s.clone());
                                    out.insert(item);
                                }
                                _ => {}
                            }
                            item_start = false;
                        }
                    } else if !path.is_empty() {
                        out.insert(path);
                    }
                }
            }
            _ => {}
        }
        k += 1;
    }
    out
}

pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/queue/mod.rs` → ["queue"], `src/queue/scope.rs` → ["queue", "scope"],
/// `src/permissions.rs` → ["permissions"], `src/bin/x.rs` → ["bin"].
fn module_of(rel: &Path) -> Vec<String> {
    let parts: Vec<String> = rel
        .iter()
        .skip(1) // src
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return vec!["bin".into()];
    }
    let mut parts = parts;
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

#[test]
fn nothing_imports_upward() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    assert!(files.len() > 50, "found only {} sources", files.len());
    let mut violations = Vec::new();
    let mut used_exceptions = BTreeSet::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let rel = path.strip_prefix(root).unwrap();
        let rel_s = rel.to_string_lossy().to_string();
        if rel_s == "src/lib.rs" {
            continue; // declares the modules
        }
        let module = module_of(rel);
        let from = module[0].clone();
        let text = std::fs::read_to_string(path).unwrap();
        for to in referenced(&text, &module) {
            if to == from {
                continue;
            }
            edges.entry(from.clone()).or_default().insert(to.clone());
            if let Some(why) = forbidden(&from, &to) {
                if EXCEPTIONS.iter().any(|(f, m, _)| *f == rel_s && *m == to) {
                    used_exceptions.insert((rel_s.clone(), to.clone()));
                } else {
                    violations.push(format!("{rel_s} uses {to}: {why}"));
                }
            }
        }
    }
    for (f, m, _) in EXCEPTIONS {
        if !used_exceptions.contains(&(f.to_string(), m.to_string())) {
            violations.push(format!(
                "exception {f} -> {m} no longer occurs: remove it from EXCEPTIONS"
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "layer violations (DESIGN §8):\n{}\n\nedges found: {edges:#?}",
        violations.join("\n")
    );
    // The scan must have seen the arrows every build has, or it sees nothing at all.
    for (from, to) in [
        ("bin", "cli"),
        ("cli", "store"),
        ("queue", "store"),
        ("store", "model"),
    ] {
        assert!(
            edges.get(from).is_some_and(|t| t.contains(to)),
            "the scan missed {from} -> {to}: {edges:#?}"
        );
    }
}

#[test]
fn sideways_arrows_form_no_circle() {
    for &(a, b) in SIDEWAYS {
        assert_eq!(layer(a), layer(b), "{a} -> {b} is not sideways");
        let mut seen = BTreeSet::from([b]);
        let mut todo = vec![b];
        while let Some(n) = todo.pop() {
            assert_ne!(n, a, "SIDEWAYS has a circle through {a} -> {b}");
            for &(x, y) in SIDEWAYS {
                if x == n && seen.insert(y) {
                    todo.push(y);
                }
            }
        }
    }
}

/// Known circles between the modules of one folder, each (folder, its members, why it is
/// still there). A circle found that is not listed fails the test; a listed one that no
/// longer occurs fails it too, so the list only shrinks.
const FOLDER_CIRCLES: &[(&str, &[&str], &str)] = &[
    (
        "agent/tools",
        &[
            "ask_user",
            "delegate",
            "memory_tools",
            "registry",
            "run_command",
        ],
        "the registry builds each tool and the tools reach it back (agentshell, issue 29)",
    ),
    (
        "bus",
        &["listing", "orchestrator"],
        "ListJobs' pages are served by the Orchestrator1 object and use its shared state",
    ),
    (
        "bus",
        &["queue", "watchers"],
        "the watchers' signals are emitted on the Queue1 object that registers them",
    ),
    (
        "cli",
        &[
            "agent",
            "approvals",
            "browse",
            "cancel_unserved",
            "flow",
            "job_view",
            "jobs",
            "machines",
            "messages",
            "remote",
            "tasks",
        ],
        "'read locally or over D-Bus' has no home of its own yet (issue 29)",
    ),
    (
        "cli",
        &["doctor", "doctor_codex"],
        "the Codex checks use doctor's Check type, doctor runs them",
    ),
    (
        "orchestrator",
        &["completion", "tasks"],
        "a task job's end is handled by tasks; a PRD's end by completion, which tasks calls",
    ),
    (
        "orchestrator/tasks",
        &["done", "integrate"],
        "a task done starts the integration, which marks tasks done",
    ),
    (
        "queue",
        &["approval", "handle"],
        "the handle answers approvals through approval's rules, which read the handle's list",
    ),
    (
        "queue",
        &["poison", "starting"],
        "the poison marker names the start it guards; starting writes it",
    ),
    (
        "store",
        &["listing", "listing_docs"],
        "the on-disk index and its document cache read each other's records",
    ),
    (
        "store",
        &["replacing", "safe"],
        "safe's open_read waits out a replacement; replacing opens through safe",
    ),
    (
        "web",
        &["api", "api_tasks"],
        "api routes to api_tasks, which uses api's helpers",
    ),
];

/// The arrows between sibling modules: for each folder (`orchestrator`, `orchestrator/daemon`,
/// …), which of its modules uses which (a file below a sibling counts as that sibling; the
/// folder's own `mod.rs`, which declares them all, is no node).
fn folder_arrows(root: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let modules: Vec<(Vec<String>, PathBuf)> = files
        .into_iter()
        .map(|p| (module_of(p.strip_prefix(root).unwrap()), p))
        .filter(|(m, _)| m.first().is_some_and(|f| f != "bin"))
        .collect();
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for (m, _) in &modules {
        for i in 0..m.len() {
            children
                .entry(m[..i].to_vec())
                .or_default()
                .insert(m[i].clone());
        }
    }
    let mut arrows: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (m, path) in &modules {
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for to in referenced_paths(without_tests(&text), m) {
            let c = m.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if c == 0 || m.len() <= c || to.len() <= c {
                continue;
            }
            let folder = &m[..c];
            if !children.get(folder).is_some_and(|k| k.contains(&to[c])) {
                continue; // an item of the folder's mod.rs, not a sibling module
            }
            arrows
                .entry(folder.join("/"))
                .or_default()
                .entry(m[c].clone())
                .or_default()
                .insert(to[c].clone());
        }
    }
    arrows
}

/// A source file without its tests (`#[cfg(test)] mod tests …` to the end).
fn without_tests(src: &str) -> &str {
    let mut at = 0;
    let mut lines = src.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod tests"))
        {
            return &src[..at];
        }
        at += line.len();
    }
    src
}

/// The circles of a graph: its strongly connected parts of more than one node, each sorted.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for t in graph.get(&n).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (n, r) in &reached {
        if !r.contains(*n) {
            continue;
        }
        let mut part: Vec<String> = r
            .iter()
            .filter(|m| reached.get(m).is_some_and(|back| back.contains(*n)))
            .cloned()
            .collect();
        part.sort();
        if part.len() > 1 && !out.contains(&part) {
            out.push(part);
        }
    }
    out
}

/// No two modules of one folder use each other, directly or around a circle (issue 29 item
/// 4): a circle means neither can be read, tested or moved alone. The known ones are listed
/// in [`FOLDER_CIRCLES`] with why.
#[test]
fn modules_of_one_folder_form_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let arrows = folder_arrows(root);
    // Not blind: arrows every build has between siblings were seen.
    for (folder, from, to) in [
        ("orchestrator", "daemon", "service"),
        ("store", "fsio", "safe"),
        ("queue", "manager", "handle"),
    ] {
        assert!(
            arrows
                .get(folder)
                .and_then(|g| g.get(from))
                .is_some_and(|t| t.contains(to)),
            "the scan missed {folder}: {from} -> {to}"
        );
    }
    let mut found = Vec::new();
    let mut listed = BTreeSet::new();
    for (folder, graph) in &arrows {
        for part in circles(graph) {
            match FOLDER_CIRCLES
                .iter()
                .position(|(f, m, _)| f == folder && m.iter().eq(part.iter()))
            {
                Some(i) => {
                    listed.insert(i);
                }
                None => {
                    let edges: Vec<String> = part
                        .iter()
                        .flat_map(|a| {
                            graph[a]
                                .iter()
                                .filter(|b| part.contains(b))
                                .map(move |b| format!("{a} -> {b}"))
                        })
                        .collect();
                    found.push(format!("{folder}: {part:?} ({})", edges.join(", ")));
                }
            }
        }
    }
    for (i, (f, m, _)) in FOLDER_CIRCLES.iter().enumerate() {
        if !listed.contains(&i) {
            found.push(format!(
                "listed circle {f}: {m:?} no longer occurs: remove it"
            ));
        }
    }
    assert!(
        found.is_empty(),
        "circles between the modules of one folder:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_is_found_and_a_chain_is_not() {
    let g = |edges: &[(&str, &str)]| {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            m.entry(a.to_string()).or_default().insert(b.to_string());
        }
        m
    };
    assert!(circles(&g(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(
        circles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    let paths = referenced_paths(
        "use super::daemon::{DaemonError, X}; fn f() { crate::store::safe::open(); }",
        &["orchestrator".to_string(), "service".to_string()],
    );
    assert!(paths.contains(&vec![
        "orchestrator".to_string(),
        "daemon".into(),
        "DaemonError".into()
    ]));
    assert!(paths.contains(&vec!["store".to_string(), "safe".into(), "open".into()]));
}

fn refs(src: &str, module: &[&str]) -> Vec<String> {
    let m: Vec<String> = module.iter().map(|s| s.to_string()).collect();
    referenced(src, &m).into_iter().collect()
}

#[test]
fn the_scanner_sees_every_form_of_path() {
    // use lines, groups, nested groups
    assert_eq!(refs("use crate::store::Store;", &["queue"]), ["store"]);
    assert_eq!(
        refs(
            "use crate::{model::{Job, Queue}, store, bus::BusError};",
            &["queue"]
        ),
        ["bus", "model", "store"]
    );
    // paths in expressions and types
    assert_eq!(
        refs(
            "fn f() { crate::orchestrator::daemon::cycle(&s); }",
            &["bus", "orchestrator"]
        ),
        ["orchestrator"]
    );
    assert_eq!(
        refs(
            "let x: Option<crate::cli::LauncherArg>;",
            &["queue", "args"]
        ),
        ["cli"]
    );
    // super:: from a mod.rs reaches the crate root; from a leaf, its own module
    assert_eq!(refs("use super::store::Store;", &["queue"]), ["store"]);
    assert_eq!(
        refs("use super::super::cli::X;", &["queue", "args"]),
        ["cli"]
    );
    assert_eq!(
        refs("use super::Rejection;", &["schema", "error_log"]),
        ["schema"]
    );
    assert_eq!(
        refs("use super::{store, model};", &["queue"]),
        ["model", "store"]
    );
    // super:: inside an inline module refers to the file's module
    assert_eq!(
        refs(
            "mod tests { use super::*; use super::super::store; }",
            &["queue"]
        ),
        ["queue", "store"]
    );
    assert_eq!(refs("mod a { } use super::cli;", &["queue"]), ["cli"]);
    // the binaries name the library
    assert_eq!(
        refs("use agentstore::{cli, systemd::x};", &["bin"]),
        ["cli", "systemd"]
    );
    // comments, doc comments and strings are not code
    assert!(
        refs(
            "// crate::bus::X\n/// [`crate::cli`]\n/* crate::bus */",
            &["store"]
        )
        .is_empty()
    );
    assert!(
        refs(
            r#"let s = "crate::bus::X"; let r = r"super::cli";"#,
            &["store"]
        )
        .is_empty()
    );
    assert!(refs(r##"let s = r#"crate::bus "quoted""#;"##, &["store"]).is_empty());
    assert_eq!(refs("let c = '\"'; use crate::bus;", &["store"]), ["bus"]);
    assert_eq!(
        refs("fn f<'a>(x: &'a str) { crate::bus::g() }", &["store"]),
        ["bus"]
    );
}

#[test]
fn the_rule_refuses_what_it_should() {
    assert!(forbidden("queue", "bus").is_some());
    assert!(forbidden("schema", "store").is_some());
    assert!(forbidden("queue", "worker").is_some());
    assert!(forbidden("worker", "queue").is_some());
    assert!(forbidden("model", "store").is_some());
    assert!(forbidden("agent", "store").is_some());
    assert!(forbidden("store", "agent").is_some());
    assert!(forbidden("bus", "cli").is_some());
    assert!(forbidden("cli", "bus").is_none());
    assert!(forbidden("bin", "agent").is_none());
    assert!(forbidden("queue", "store").is_none());
    assert!(forbidden("store", "schema").is_none());
}

/// Relative link targets in a Markdown text: `[text](target)`, anchors and titles dropped.
fn markdown_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split_whitespace().next().unwrap_or("");
        let target = target.split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
        rest = &rest[end..];
    }
    out
}

/// The README and the documents under docs/ link only to files in the repository (a link
/// to the team's workspace, `../shared/…`, is dead for every user of the repository).
#[test]
fn documents_link_only_to_files_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    assert!(docs.iter().any(|d| d.ends_with("docs/architecture.md")));
    let repo = root.canonicalize().unwrap();
    let mut bad = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for link in markdown_links(&text) {
            let target = doc.parent().unwrap().join(&link);
            match target.canonicalize() {
                Ok(t) if t.starts_with(&repo) => {}
                Ok(t) => bad.push(format!(
                    "{}: {link} leaves the repository ({})",
                    doc.display(),
                    t.display()
                )),
                Err(e) => bad.push(format!("{}: {link}: {e}", doc.display())),
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(
        markdown_links("[a](x.md#s) [b](https://e.org) [c](../shared/D.md \"t\")"),
        ["x.md", "../shared/D.md"]
    );
}

/// The words of a PRD §10 refusal, written once in `src/permissions.rs` (`Denied` and its
/// helpers): no other source file spells them outside its tests, so each front door (CLI,
/// D-Bus, web) refuses in the same words and a rule cannot drift in one copy.
const DENIAL_PHRASES: &[&str] = &[
    "only admins can",
    "only an admin can",
    "belongs to another user",
    "} belongs to {",
    "or an admin can create jobs",
];

/// The part of a source file that is not its tests (`#[cfg(test)] mod tests`), without
/// `//` comments.
pub(crate) fn code_outside_tests(src: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = src.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|(_, next)| {
                // An inline test module; `mod tests;` names a file of its own.
                let next = next.trim();
                next.starts_with("mod tests") && !next.ends_with(';')
            })
        {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push((i + 1, code));
    }
    out
}

#[test]
fn prd10_denials_are_worded_only_in_permissions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let home = root.join("src/permissions.rs");
    let mut copies = Vec::new();
    for path in &files {
        if *path == home || path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let src = std::fs::read_to_string(path).unwrap();
        for (n, code) in code_outside_tests(&src) {
            for phrase in DENIAL_PHRASES {
                if code.contains(phrase) {
                    let rel = path.strip_prefix(root).unwrap().display();
                    copies.push(format!("{rel}:{n}: {:?} ({})", phrase, code.trim()));
                }
            }
        }
    }
    assert!(
        copies.is_empty(),
        "PRD §10 refusals spelled outside src/permissions.rs (use permissions::Denied):\n{}",
        copies.join("\n")
    );
    // The scan is not blind: the home of the words holds each phrase.
    let home_src = std::fs::read_to_string(&home).unwrap();
    let home_code: String = code_outside_tests(&home_src)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    for phrase in DENIAL_PHRASES {
        assert!(
            home_code.contains(phrase),
            "{phrase:?} is not in src/permissions.rs: the scan would see nothing"
        );
    }
}

/// Largest a source file may grow (lines); DESIGN/STYLE ask for files under ~700 lines.
const MAX_FILE_LINES: usize = 700;

/// Files still over [`MAX_FILE_LINES`], each with why it is not split yet. A file may leave
/// the list at any time; no file may join it without its reason.
const LONG_FILES: &[(&str, &str)] = &[
    (
        "src/agent/tools/sandbox/mod.rs",
        "the sandbox engineer owns this split (#28)",
    ),
    (
        "src/agent/tools/subsystems/commands.rs",
        "not yet split (issue 29)",
    ),
    (
        "src/cli/browse.rs",
        "its listings and views become the shared command modules (issue 29 item 1)",
    ),
    (
        "src/store/safe.rs",
        "the store's one no-link rule and its fallback walk, now over nix's safe calls; not yet split",
    ),
];

#[test]
fn no_source_file_grows_past_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut long = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let n = std::fs::read_to_string(path).unwrap().lines().count();
        if n > MAX_FILE_LINES && !LONG_FILES.iter().any(|(f, _)| *f == rel) {
            long.push(format!("{rel}: {n} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "source files over {MAX_FILE_LINES} lines (split them, or list them in LONG_FILES with why):\n{}",
        long.join("\n")
    );
}
