//! Typed serde structs for the six documents of PRD §4.
//!
//! The JSON Schemas in `schemas/` are the source of truth; these types mirror them so the
//! daemons can work with fields instead of `serde_json::Value`. Every struct denies unknown
//! fields except the free-form `content` and `supporting_data` maps.

mod job;
mod message;
mod prd;
mod project;
mod queue;
pub mod strict;
mod time;
mod user;

pub use job::{Job, JobConfig, JobRuntime, JobStatus, JobType, permission_widening_arg};
pub use message::{Message, MessageSource, MessageStatus};
pub use prd::{Prd, PrdState};
pub use project::Project;
pub use queue::{Launcher, Queue, QueueConfig, QueueRuntime, ResourceLimits};
pub use time::Timestamp;
pub use user::{Permission, User};

use std::fmt;

/// Longest job timeout accepted anywhere (30 days): the schema's `maximum` for
/// `timeout_seconds` and `max_job_runtime_seconds`, enforced in code too, whatever schema a
/// store carries.
pub const MAX_TIMEOUT_SECONDS: u64 = 30 * 24 * 3600;
/// Most workers one queue may run at once (the schema's `maximum` for `worker_count`).
pub const MAX_WORKER_COUNT: u32 = 1024;
/// Longest `rest_interval` (one day).
pub const MAX_REST_INTERVAL: u64 = 86_400;

/// The six document kinds; each has one schema named `<kind>.schema.json`.
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
}

impl DocKind {
    /// All kinds, in PRD order.
    pub const ALL: [DocKind; 6] = [
        DocKind::User,
        DocKind::Message,
        DocKind::Project,
        DocKind::Prd,
        DocKind::Queue,
        DocKind::Job,
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

/// True when `id` is a safe file-name id (`[A-Za-z0-9][A-Za-z0-9._-]*`, at most 255 bytes).
pub fn is_safe_id(id: &str) -> bool {
    let mut chars = id.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    id.len() <= 255 && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            &"x".repeat(256),
        ] {
            assert!(!is_safe_id(bad), "{bad}");
        }
    }
}
