//! The Slack app's memory of the envelopes it has seen (issue 31), kept in the store so a
//! replayed envelope is refused after a restart of the notifier, here or on the machine that
//! takes over: one JSON line per envelope in this machine's file of the shared log
//! `logs/slack-envelopes.jsonl` (`slack-envelopes@<host>.jsonl`, capped and rotated like
//! every store log); a starting app reads every machine's lines and remembers the newest
//! [`REMEMBERED`].
//!
//! An envelope is remembered when it arrives, before it is handled: one whose handling a kill
//! cut short is refused when Slack sends it again (said so to the member), never done twice.

use crate::model::Timestamp;
use crate::store::{Store, append_line_locked, hostname, perhost};
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;

/// How many envelope ids are remembered.
pub const REMEMBERED: usize = 10_000;

/// The longest envelope id taken (Slack's are UUIDs).
const MAX_ID: usize = 128;

/// One line of the log.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    at: Timestamp,
    envelope: String,
}

/// The envelopes seen, newest last, and this machine's file.
#[derive(Debug)]
pub struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
    own: Option<PathBuf>,
}

impl Seen {
    /// The shared log's name (each machine writes `<stem>@<host>.jsonl`).
    pub fn path(store: &Store) -> PathBuf {
        store.logs_dir().join("slack-envelopes.jsonl")
    }

    /// A memory kept only in this process (tests of the parts that use it).
    pub fn in_memory() -> Seen {
        Seen {
            set: HashSet::new(),
            order: VecDeque::new(),
            own: None,
        }
    }

    /// Every machine's envelopes, the newest [`REMEMBERED`]. Lines that cannot be read are
    /// skipped (counted in one warning).
    pub fn load(store: &Store) -> Seen {
        let path = Self::path(store);
        let lines = perhost::read_lines(&path).unwrap_or_else(|e| {
            tracing::warn!("cannot read {}: {e}", path.display());
            Vec::new()
        });
        let mut bad = 0usize;
        let mut read: Vec<Line> = lines
            .into_iter()
            .filter_map(|l| {
                let line = serde_json::from_str::<Line>(&l.text)
                    .ok()
                    .filter(|x| usable(&x.envelope));
                bad += usize::from(line.is_none());
                line
            })
            .collect();
        if bad > 0 {
            tracing::warn!("{}: {bad} lines are not envelopes; skipped", path.display());
        }
        read.sort_by_key(|a| a.at);
        let mut seen = Seen::in_memory();
        for l in read.into_iter().rev().take(REMEMBERED).rev() {
            seen.remember(l.envelope);
        }
        seen.own = Some(perhost::host_path(&path, &hostname()));
        seen
    }

    fn remember(&mut self, id: String) -> bool {
        if !self.set.insert(id.clone()) {
            return false;
        }
        self.order.push_back(id);
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    /// Records envelope `id`; false when it was seen before (a replay) or is not an id that
    /// can be remembered. A line that cannot be written costs a warning: the id is still
    /// remembered by this process.
    pub fn first_sight(&mut self, id: &str) -> bool {
        if !usable(id) {
            tracing::warn!("slack: an envelope id that is not a short printable id, refused");
            return false;
        }
        if !self.remember(id.to_string()) {
            return false;
        }
        if let Some(own) = &self.own {
            let line = Line {
                at: Timestamp(chrono::Utc::now()),
                envelope: id.to_string(),
            };
            let written = serde_json::to_vec(&line)
                .map_err(std::io::Error::other)
                .and_then(|l| {
                    if let Some(dir) = own.parent() {
                        crate::store::safe::create_dir_all(dir)?;
                    }
                    append_line_locked(own, &l)
                });
            if let Err(e) = written {
                tracing::warn!(
                    "slack: envelope {id} not recorded in {} ({e}); a replay after a restart would not be recognised",
                    own.display()
                );
            }
        }
        true
    }
}

fn usable(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID && id.chars().all(|c| c.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_is_refused_after_a_reload_and_the_oldest_are_forgotten() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(&d.path().join("S")).unwrap();
        let mut s = Seen::load(&store);
        assert!(s.first_sight("e-1"));
        assert!(!s.first_sight("e-1"));
        assert!(!s.first_sight(""), "no id");
        assert!(!s.first_sight(&"x".repeat(200)), "too long");
        assert!(!s.first_sight("a b"), "not printable");
        let mut again = Seen::load(&store);
        assert!(!again.first_sight("e-1"), "remembered across a reload");
        assert!(again.first_sight("e-2"));
        let mut m = Seen::in_memory();
        for i in 0..=REMEMBERED {
            assert!(m.first_sight(&format!("m-{i}")));
        }
        assert!(m.first_sight("m-0"), "the oldest is forgotten");
        assert!(!m.first_sight(&format!("m-{REMEMBERED}")));
    }
}
