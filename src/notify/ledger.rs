//! The notifier's record of what it did: one JSON line per step, in this machine's file of
//! the shared log `logs/notify-ledger.jsonl` (`notify-ledger@<host>.jsonl`,
//! [`crate::store::perhost`]); readers merge every machine's file.
//!
//! A delivery is done when any machine recorded it `sent` or `dead`. A `begin` with nothing
//! after it means an attempt was cut short (a kill, a power loss): the delivery is
//! *uncertain* and the sink checks before sending again where it can.

use crate::model::Timestamp;
use crate::store::{Store, append_line_locked, hostname, perhost};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;

/// What happened to a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// An attempt starts.
    Begin,
    /// The sink took it.
    Sent,
    /// The attempt failed; it is tried again.
    Failed,
    /// Given up: it could not be delivered (the error says why).
    Dead,
}

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When.
    pub at: Timestamp,
    /// The delivery key (`<notice>/<user>/<sink>`).
    pub key: String,
    /// What happened.
    pub step: Step,
    /// The notice's kind (`job_failed`), for listings.
    #[serde(default)]
    pub kind: String,
    /// The notice's title, for listings.
    #[serde(default)]
    pub title: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The machine that wrote the line.
    #[serde(default)]
    pub host: String,
}

/// What the ledger says of one delivery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// Sent or given up.
    pub done: bool,
    /// An attempt began and did not end.
    pub open: bool,
    /// Failures since the last success.
    pub failures: u32,
    /// When the first of them happened.
    pub first_failure: Option<Timestamp>,
}

/// Every machine's ledger, merged, and this machine's file to append to.
#[derive(Debug)]
pub struct Ledger {
    own: PathBuf,
    states: HashMap<String, State>,
}

impl Ledger {
    /// The shared log's PRD-style name (each machine writes `<stem>@<host>.jsonl`).
    pub fn path(store: &Store) -> PathBuf {
        store.logs_dir().join("notify-ledger.jsonl")
    }

    /// Every line of every machine's ledger, in file order (unparseable lines skipped).
    pub fn entries(store: &Store) -> std::io::Result<Vec<Entry>> {
        Ok(perhost::read_lines(&Self::path(store))?
            .into_iter()
            .filter_map(|l| serde_json::from_str::<Entry>(&l.text).ok())
            .collect())
    }

    /// Reads every machine's ledger. A line that is not an entry is skipped with a count in
    /// one warning.
    pub fn load(store: &Store) -> Ledger {
        let path = Self::path(store);
        let own = perhost::host_path(&path, &hostname());
        let mut states: HashMap<String, State> = HashMap::new();
        let lines = perhost::read_lines(&path).unwrap_or_else(|e| {
            tracing::warn!("cannot read the notify ledger {}: {e}", path.display());
            Vec::new()
        });
        let mut bad = 0usize;
        for l in lines {
            match serde_json::from_str::<Entry>(&l.text) {
                Ok(e) => apply(states.entry(e.key.clone()).or_default(), &e),
                Err(_) => bad += 1,
            }
        }
        if bad > 0 {
            tracing::warn!("notify ledger: {bad} lines are not entries; skipped");
        }
        Ledger { own, states }
    }

    /// What is known of `key`.
    pub fn state(&self, key: &str) -> State {
        self.states.get(key).cloned().unwrap_or_default()
    }

    /// Appends `entry` to this machine's ledger and applies it. The entry counts for this
    /// process even when the line cannot be written (the error says why).
    pub fn record(&mut self, mut entry: Entry) -> std::io::Result<()> {
        entry.host = hostname();
        let line = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        if let Some(dir) = self.own.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let written = append_line_locked(&self.own, &line);
        apply(self.states.entry(entry.key.clone()).or_default(), &entry);
        written
    }
}

fn apply(s: &mut State, e: &Entry) {
    match e.step {
        Step::Begin => s.open = !s.done,
        Step::Sent | Step::Dead => {
            s.done = true;
            s.open = false;
        }
        Step::Failed => {
            s.open = false;
            s.failures += 1;
            s.first_failure.get_or_insert(e.at);
        }
    }
}
