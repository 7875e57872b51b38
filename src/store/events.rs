//! The store's own record of what happened where (DESIGN §5, PRD §13.1):
//! one JSON line per event in `logs/events-YYYY-MM.jsonl`, readable from any synced machine.

use super::{Store, append_line_locked};
use crate::model::Timestamp;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One event line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened.
    pub timestamp: Timestamp,
    /// What happened: `message_answered`, `job_created`, `job_started`, `job_finished`,
    /// `job_failed`, `daemon_started`, `daemon_stopped`, …
    pub event: String,
    /// Machine it happened on.
    pub host: String,
    /// Process that wrote it (`orchestratord`, `queue-manager`, `agent-worker`, …).
    pub daemon: String,
    /// Its PID.
    pub pid: u32,
    /// Job concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Queue concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Message concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Project concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// This machine's host name.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}

impl Event {
    /// A new event of kind `event` written by `daemon` on this host, now.
    pub fn new(daemon: &str, event: &str) -> Event {
        Event {
            timestamp: Timestamp::now(),
            event: event.to_string(),
            host: hostname(),
            daemon: daemon.to_string(),
            pid: std::process::id(),
            job_id: None,
            queue: None,
            correlation_id: None,
            project: None,
            detail: None,
        }
    }

    /// Sets the job.
    pub fn job(mut self, id: &str) -> Event {
        self.job_id = Some(id.to_string());
        self
    }

    /// Sets the queue.
    pub fn queue(mut self, q: &str) -> Event {
        self.queue = Some(q.to_string());
        self
    }

    /// Sets the message.
    pub fn correlation(mut self, id: &str) -> Event {
        self.correlation_id = Some(id.to_string());
        self
    }

    /// Sets the project.
    pub fn project(mut self, p: &str) -> Event {
        self.project = Some(p.to_string());
        self
    }

    /// Sets the detail text.
    pub fn detail(mut self, d: impl Into<String>) -> Event {
        self.detail = Some(d.into());
        self
    }
}

impl Store {
    /// The event log file for the month of `at`.
    pub fn events_path(&self, at: &Timestamp) -> PathBuf {
        let month = at.0.format("%Y-%m").to_string();
        self.root
            .join(self.config.logging.events_file.replace("{YYYY-MM}", &month))
    }

    /// Appends an event; failures are logged, never fatal (the journal has it too).
    pub fn record_event(&self, event: &Event) {
        let path = self.events_path(&event.timestamp);
        let mut event = event.clone();
        if let Some(d) = event.detail.as_mut() {
            *d = crate::schema::quote_limited(d, crate::schema::MAX_QUOTE_BYTES);
        }
        let result = serde_json::to_vec(&event)
            .map_err(std::io::Error::other)
            .and_then(|line| append_line_locked(&path, &line));
        if let Err(e) = result {
            tracing::warn!("cannot append to {}: {e}", path.display());
        }
    }

    /// Appends a human-readable line to a per-daemon log under `logs/` (e.g.
    /// `orchestrator.log`, `queue-poplar.log`), as the PRD's layout names them.
    pub fn append_daemon_log(&self, file: &str, text: &str) {
        let path = self.logs_dir().join(file);
        // One line per entry, whatever the text holds (a job file name may hold newlines).
        let text = crate::schema::quote_limited(text, 4 * crate::schema::MAX_QUOTE_BYTES)
            .replace(['\n', '\r'], "\\n");
        let line = format!("{} {} {}", Timestamp::now(), hostname(), text);
        if let Err(e) = append_line_locked(&path, line.as_bytes()) {
            tracing::warn!("cannot append to {}: {e}", path.display());
        }
    }
}
