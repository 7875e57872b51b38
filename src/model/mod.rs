//! Typed serde structs for the six documents of PRD §4 and the task document (issue 30).
//!
//! The JSON Schemas in `schemas/` are the source of truth; these types mirror them so the
//! daemons can work with fields instead of `serde_json::Value`. Every struct denies unknown
//! fields except the free-form `content` and `supporting_data` maps.

pub mod approval;
mod command;
pub mod flow;
pub mod integration;
mod job;
mod message;
mod mode;
mod prd;
mod project;
mod queue;
pub mod relay;
pub mod strict;
mod task;
mod time;
mod usage;
mod user;

pub use command::{Command, CommandKind, UnknownCommand};
pub use flow::{RetryOn, RetryPolicy};
pub use job::{
    Job, JobConfig, JobRuntime, JobStatus, JobType, RESEARCH_DOCUMENT_KEY, VENVMAN_KEY,
    WORKER_EXIT_STORE_FULL, permission_widening_arg, permission_widening_arg_for, result_text,
};
pub use message::{Message, MessageSource, MessageStatus};
pub use mode::{MODE_ENV, system_mode};
pub use prd::{Prd, PrdState};
pub use project::Project;
pub use queue::{
    IntegrationMode, Launcher, Queue, QueueConfig, QueueRuntime, ResourceLimits, SandboxSetting,
    SlurmConfig,
};
pub use task::{TASK_KEY, Task, TaskRef, TaskStatus};
pub use time::{MAX_CLOCK_SKEW_SECS, Timestamp};
pub use usage::TokenUsage;
pub use user::{NotifyPrefs, Permission, QuietHours, User};

use std::fmt;

/// Longest job timeout accepted anywhere (30 days): the schema's `maximum` for
/// `timeout_seconds` and `max_job_runtime_seconds`, enforced in code too, whatever schema a
/// store carries.
pub const MAX_TIMEOUT_SECONDS: u64 = 30 * 24 * 3600;
/// Most workers one queue may run at once (the schema's `maximum` for `worker_count`).
pub const MAX_WORKER_COUNT: u32 = 1024;
/// Longest `rest_interval` (one day).
pub const MAX_REST_INTERVAL: u64 = 86_400;

/// The seven document kinds; each has one schema named `<kind>.schema.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DocKind {
    /// `users/<id>.json`
    User,
    /// `messaging/{inbox,outbox,…}/<correlation_id>.json`
    Message,
    /// `projects/<id>/project.json`
    Project,
    /// `projects/<id>/<state>_prds/<id>.json`
    Prd,
    /// `Queues/<id>/queue.json`
    Queue,
    /// `Queues/<q>/Jobs/<state>_jobs/<id>.json`
    Job,
    /// `projects/<p>/tasks/<prd>/<id>.json` (issue 30)
    Task,
}

impl DocKind {
    /// All kinds, in PRD order.
    pub const ALL: [DocKind; 7] = [
        DocKind::User,
        DocKind::Message,
        DocKind::Project,
        DocKind::Prd,
        DocKind::Queue,
        DocKind::Job,
        DocKind::Task,
    ];

    /// The schema's short name (`job`, `prd`, …).
    pub fn name(self) -> &'static str {
        match self {
            DocKind::User => "user",
            DocKind::Message => "message",
            DocKind::Project => "project",
            DocKind::Prd => "prd",
            DocKind::Queue => "queue",
            DocKind::Job => "job",
            DocKind::Task => "task",
        }
    }

    /// Parses a schema short name.
    pub fn from_name(name: &str) -> Option<DocKind> {
        DocKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for DocKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Longest id, in bytes: `<id>.json` and the daemons' derived names (`.<id>.json.<pid>.<n>.tmp`,
/// `<id>.duplicate-<n>.json`) stay well within the 255-byte file-name limit.
pub const MAX_ID_BYTES: usize = 200;

/// The one id rule, for every id that becomes a file name (correlation id, job, queue,
/// project, user, PRD): `[A-Za-z0-9][A-Za-z0-9._-]*`, no `..`, at most [`MAX_ID_BYTES`].
/// Checked in code whatever schema a store carries.
pub fn is_safe_id(id: &str) -> bool {
    id_problem(id).is_none()
}

/// Why `id` breaks the id rule, or `None` when it is a safe id.
pub fn id_problem(id: &str) -> Option<&'static str> {
    let mut chars = id.chars();
    match chars.next() {
        None => return Some("is empty"),
        Some(c) if c.is_ascii_alphanumeric() => {}
        Some(_) => return Some("must start with a letter or digit"),
    }
    if id.len() > MAX_ID_BYTES {
        return Some("is longer than 200 bytes");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Some("may hold only letters, digits, '.', '_' and '-'");
    }
    if id.contains("..") {
        return Some("must not contain '..'");
    }
    None
}

/// A safe id derived from any text (a file stem, a rejected correlation id): unsafe characters
/// become `_`, `..` is broken up, the result is cut to fit, and when anything changed a digest
/// of the original is appended so different inputs stay different. Always passes
/// [`is_safe_id`].
pub fn derive_safe_id(text: &str) -> String {
    if is_safe_id(text) {
        return text.to_string();
    }
    let mut id = String::with_capacity(text.len().min(MAX_ID_BYTES));
    for c in text.chars() {
        if id.len() >= MAX_ID_BYTES - 20 {
            break;
        }
        let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            c
        } else {
            '_'
        };
        if c == '.' && id.ends_with('.') {
            id.push('_');
        } else {
            id.push(c);
        }
    }
    if !id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()) {
        id.insert(0, 'm');
    }
    // FNV-1a: stable across builds and machines (the name must be the same after a restart).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    if id.ends_with('.') {
        id.push('_');
    }
    id.push_str(&format!("-{:016x}", h));
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_safe() {
        for t in [
            "",
            ".",
            "..",
            "a..b",
            "-x",
            &"é".repeat(300),
            &"a".repeat(255),
            "x y",
            "a.",
        ] {
            let d = derive_safe_id(t);
            assert!(is_safe_id(&d), "{t:?} -> {d:?}");
        }
        assert_eq!(derive_safe_id("ok-1"), "ok-1");
        assert_ne!(derive_safe_id("x y"), derive_safe_id("x_y"));
    }

    #[test]
    fn safe_ids() {
        for ok in [
            "chenry",
            "test-001",
            "a.b_c-d",
            "550e8400-e29b-41d4-a716-446655440000",
        ] {
            assert!(is_safe_id(ok), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "-x",
            "a/b",
            "../x",
            "a b",
            "é",
            &"x".repeat(201),
            "a..b",
        ] {
            assert!(!is_safe_id(bad), "{bad}");
        }
    }
}
