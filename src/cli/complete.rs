//! Completions that come from the store: project, PRD, queue, user and job ids.
//!
//! The shells ask the binary itself (`COMPLETE=bash orchestrator` prints the registration
//! script; clap_complete's environment protocol then calls `orchestrator` with the words
//! typed so far). Each completer reads only folder names under the store the command would
//! use (`--root` on the line being completed, else `AGENT_STORE_ROOT` and the config files),
//! as the calling user: what it cannot read it does not offer. Nothing is parsed, nothing is
//! written, and a missing store simply completes nothing.

use crate::model::JobStatus;
use crate::model::PrdState;
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The store the line being completed names: its `--root DIR` / `--root=DIR`, else the
/// default resolution.
fn root() -> PathBuf {
    let args: Vec<String> = std::env::args().collect();
    let flag = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--root" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--root=").map(str::to_string)
        }
    });
    crate::store::resolve_root(flag.as_deref().map(Path::new)).0
}

/// Names in `dir` (no dot files; `strip` removed from the end, entries without it skipped
/// when it is not empty) that start with `current`.
fn names(dir: &Path, strip: &str, current: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        let name = if strip.is_empty() {
            name
        } else {
            match name.strip_suffix(strip) {
                Some(n) => n,
                None => continue,
            }
        };
        if name.starts_with(current) {
            out.push(name.to_string());
        }
    }
}

fn finish(mut v: Vec<String>) -> Vec<CompletionCandidate> {
    v.sort();
    v.dedup();
    v.into_iter().map(CompletionCandidate::new).collect()
}

fn current(c: &OsStr) -> &str {
    c.to_str().unwrap_or("")
}

/// Project ids (`projects/<id>/`).
pub fn projects(c: &OsStr) -> Vec<CompletionCandidate> {
    let mut v = Vec::new();
    names(&root().join("projects"), "", current(c), &mut v);
    finish(v)
}

/// Queue ids (`Queues/<id>/`).
pub fn queues(c: &OsStr) -> Vec<CompletionCandidate> {
    let mut v = Vec::new();
    names(&root().join("Queues"), "", current(c), &mut v);
    finish(v)
}

/// User ids (`users/<id>.json`).
pub fn users(c: &OsStr) -> Vec<CompletionCandidate> {
    let mut v = Vec::new();
    names(&root().join("users"), ".json", current(c), &mut v);
    finish(v)
}

/// PRD ids of every project (`projects/<p>/<state>_prds/<id>.json`).
pub fn prds(c: &OsStr) -> Vec<CompletionCandidate> {
    let mut v = Vec::new();
    let root = root();
    let Ok(projects) = std::fs::read_dir(root.join("projects")) else {
        return Vec::new();
    };
    for p in projects.flatten() {
        for s in PrdState::ALL {
            names(&p.path().join(s.dir()), ".json", current(c), &mut v);
        }
    }
    finish(v)
}

/// Job ids of every queue, every state (`Queues/<q>/Jobs/<state>_jobs/<id>.json`).
pub fn jobs(c: &OsStr) -> Vec<CompletionCandidate> {
    let mut v = Vec::new();
    let root = root();
    let Ok(queues) = std::fs::read_dir(root.join("Queues")) else {
        return Vec::new();
    };
    for q in queues.flatten() {
        for s in JobStatus::ALL {
            names(
                &q.path().join("Jobs").join(s.dir()),
                ".json",
                current(c),
                &mut v,
            );
        }
    }
    finish(v)
}

/// `#[arg(add = …)]` values.
pub fn project() -> ArgValueCompleter {
    ArgValueCompleter::new(projects)
}
/// See [`project`].
pub fn queue() -> ArgValueCompleter {
    ArgValueCompleter::new(queues)
}
/// See [`project`].
pub fn user() -> ArgValueCompleter {
    ArgValueCompleter::new(users)
}
/// See [`project`].
pub fn prd() -> ArgValueCompleter {
    ArgValueCompleter::new(prds)
}
/// See [`project`].
pub fn job() -> ArgValueCompleter {
    ArgValueCompleter::new(jobs)
}
