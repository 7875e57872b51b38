//! Serving one queue from several machines through a sync engine (issues 13 and 34).
//!
//! A start's claim (one rename of the queued file) is atomic on one filesystem only; across a
//! sync engine two machines could both claim one job. So, unless `machines.shared_filesystem`
//! says the store is one filesystem, one machine serves a queue at a time: the manager that
//! started first among the live ones. The others stand down (start nothing; their running
//! jobs go on) and take over when it is gone.
//!
//! "Gone" is decided from files a sync engine brings late, so it is slow on purpose:
//! - a manager counts as gone when its heartbeat says it stopped cleanly, or when its last
//!   heartbeat is older than `machines.lost_job_grace_seconds` (at least the stale time) —
//!   the time after which its running jobs are failed too. A machine beyond a shorter
//!   partition may still be starting jobs, and its heartbeat may merely be late;
//! - a manager that serves fences itself (starts nothing for the stale time and a heartbeat)
//!   when a manager of the queue that existed while it could not see it appears live again
//!   (a partition healed), or when it was itself stopped or suspended for longer than the
//!   stale time: the other may have served meanwhile and learns only now, through the engine,
//!   that this one is back and outranks it.
//!
//! A partition longer than the lost-job grace may still start a job on both sides; the job's
//! documents stay one (a late copy never replaces the failed one).

use crate::model::Timestamp;
use crate::store::machines::Heartbeat;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

/// How long things take (from config.yaml `machines:`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// A manager whose last heartbeat is older than this is gone.
    pub gone_after: Duration,
    /// A pause longer than this (this manager stopped or suspended) is a lapse.
    pub stale_after: Duration,
    /// How long a fence stands.
    pub fence: Duration,
}

impl Timing {
    /// The timing `machines:` asks for.
    pub(super) fn from_config(m: &crate::store::MachinesConfig) -> Timing {
        let stale = Duration::from_secs(m.stale_after_seconds.max(1));
        Timing {
            gone_after: Duration::from_secs(m.lost_job_grace_seconds).max(stale),
            stale_after: stale,
            fence: stale + m.heartbeat(),
        }
    }
}

/// What one look decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// Another machine's manager, started first, serves the queue now.
    StandDown(String),
    /// No other live manager started first: this one serves.
    Serve,
    /// This manager serves, and starts nothing for `secs` seconds: `hosts` appeared again
    /// (or this manager was paused: `lapsed`).
    Fenced {
        hosts: Vec<String>,
        lapsed: bool,
        secs: u64,
    },
}

/// Whether this manager serves its queue, as decided at the last look.
#[derive(Debug, Default)]
pub(super) struct Handover {
    /// The machine this manager stands down for.
    pub(super) standing_down: Option<String>,
    fence_until: Option<Instant>,
    /// Live managers of the queue on other machines at the last look: host → started.
    live: BTreeMap<String, Timestamp>,
    last_look: Option<(Instant, SystemTime)>,
}

impl Handover {
    /// True when this manager may start jobs now.
    pub(super) fn may_start(&self) -> bool {
        self.standing_down.is_none() && !self.fenced()
    }

    /// True while a fence stands.
    pub(super) fn fenced(&self) -> bool {
        self.fence_until.is_some_and(|t| Instant::now() < t)
    }

    /// One look at the heartbeats of this queue's managers on other machines (`others`),
    /// this manager having started at `me` (its start, its host).
    pub(super) fn look(
        &mut self,
        me: (&Timestamp, &str),
        others: &[&Heartbeat],
        now: &Timestamp,
        t: &Timing,
    ) -> Vec<Change> {
        let age = |d: &Heartbeat| {
            u64::try_from(now.0.signed_duration_since(d.last_seen.0).num_seconds()).unwrap_or(0)
        };
        let live: Vec<&Heartbeat> = others
            .iter()
            .copied()
            .filter(|d| !d.stopped && age(d) < t.gone_after.as_secs())
            .collect();
        let first = live
            .iter()
            .filter(|d| (&d.started, d.host.as_str()) < me)
            .min_by(|a, b| (&a.started, a.host.as_str()).cmp(&(&b.started, b.host.as_str())))
            .map(|d| d.host.clone());
        let mut changes = Vec::new();
        if first != self.standing_down {
            changes.push(match &first {
                Some(h) => Change::StandDown(h.clone()),
                None => Change::Serve,
            });
            self.standing_down = first;
        }
        let now_i = Instant::now();
        if let Some((at, wall)) = self.last_look {
            let paused = now_i
                .duration_since(at)
                .max(wall.elapsed().unwrap_or_default());
            let lapsed = paused > t.stale_after;
            // Back in sight: live now, not at the last look, and already running then (a
            // manager started since then saw this one and stood down).
            let seen_since = Timestamp(chrono::DateTime::<chrono::Utc>::from(wall));
            let back: Vec<String> = live
                .iter()
                .filter(|d| !self.live.contains_key(&d.host) && d.started < seen_since)
                .map(|d| d.host.clone())
                .collect();
            if self.standing_down.is_none() && !live.is_empty() && (lapsed || !back.is_empty()) {
                self.fence_until = Some(now_i + t.fence);
                changes.push(Change::Fenced {
                    hosts: if back.is_empty() {
                        live.iter().map(|d| d.host.clone()).collect()
                    } else {
                        back
                    },
                    lapsed,
                    secs: t.fence.as_secs(),
                });
            }
        }
        self.live = live.iter().map(|d| (d.host.clone(), d.started)).collect();
        self.last_look = Some((now_i, SystemTime::now()));
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(host: &str, started_ago: i64, seen_ago: i64) -> Heartbeat {
        let mut h = Heartbeat::new("queue-manager", Some("oak"), 1);
        let now = Timestamp::now();
        h.host = host.into();
        h.started = Timestamp(now.0 - chrono::Duration::seconds(started_ago));
        h.last_seen = Timestamp(now.0 - chrono::Duration::seconds(seen_ago));
        h
    }

    fn timing() -> Timing {
        Timing {
            gone_after: Duration::from_secs(60),
            stale_after: Duration::from_secs(3),
            fence: Duration::from_millis(400),
        }
    }

    /// A manager started first serves until it has been silent for the lost-job grace, not
    /// merely the stale time: its heartbeat may be late, or it may be beyond a partition and
    /// still starting jobs. A clean stop hands the queue over at once.
    #[test]
    fn the_first_manager_serves_until_gone_for_the_lost_job_grace_or_stopped() {
        let me_started = Timestamp(Timestamp::now().0 - chrono::Duration::seconds(100));
        let me = (&me_started, "beta");
        let mut h = Handover::default();
        let now = Timestamp::now();
        let alpha = hb("alpha", 1000, 1);
        assert_eq!(
            h.look(me, &[&alpha], &now, &timing()),
            vec![Change::StandDown("alpha".into())]
        );
        assert!(!h.may_start());
        // Silent past the stale time, well within the grace: still served there.
        let late = hb("alpha", 1000, 30);
        assert!(h.look(me, &[&late], &now, &timing()).is_empty());
        assert!(!h.may_start());
        // Silent past the grace: this one serves.
        let gone = hb("alpha", 1000, 61);
        assert_eq!(h.look(me, &[&gone], &now, &timing()), vec![Change::Serve]);
        assert!(h.may_start());
        // A clean stop hands it over at once too.
        let mut h = Handover::default();
        let mut stopped = hb("alpha", 1000, 1);
        h.look(me, &[&stopped], &now, &timing());
        stopped.stopped = true;
        assert_eq!(
            h.look(me, &[&stopped], &now, &timing()),
            vec![Change::Serve]
        );
        // A manager started after this one never makes it stand down.
        let mut h = Handover::default();
        let newer = hb("gamma", 10, 1);
        assert!(h.look(me, &[&newer], &now, &timing()).is_empty());
        assert!(h.may_start());
    }

    /// A manager that was out of sight (a partition longer than the grace) and is back may
    /// have served meanwhile: the one that serves starts nothing for the fence, time for the
    /// other to learn that it is outranked. A manager that starts while this one watches
    /// fences nothing (it saw this one and stands down).
    #[test]
    fn a_manager_back_in_sight_or_a_pause_of_this_one_fences_the_server() {
        let me_started = Timestamp(Timestamp::now().0 - chrono::Duration::seconds(1000));
        let me = (&me_started, "alpha");
        let mut h = Handover::default();
        let now = Timestamp::now();
        assert!(h.look(me, &[], &now, &timing()).is_empty());
        // beta, running since long before this look, appears (the partition healed).
        let beta = hb("beta", 500, 1);
        let changes = h.look(me, &[&beta], &now, &timing());
        assert!(
            matches!(&changes[..], [Change::Fenced { hosts, lapsed: false, .. }] if hosts == &["beta"]),
            "{changes:?}"
        );
        assert!(!h.may_start());
        std::thread::sleep(timing().fence);
        assert!(h.look(me, &[&beta], &now, &timing()).is_empty());
        assert!(h.may_start(), "the fence ends");
        // A new manager started after the last look: no fence.
        std::thread::sleep(Duration::from_millis(1100));
        let gamma = hb("gamma", 0, 0);
        assert!(h.look(me, &[&beta, &gamma], &now, &timing()).is_empty());
        assert!(h.may_start());
        // This manager paused past the stale time while others are live: fenced.
        std::thread::sleep(timing().stale_after + Duration::from_millis(50));
        let changes = h.look(me, &[&beta, &gamma], &now, &timing());
        assert!(
            matches!(&changes[..], [Change::Fenced { lapsed: true, .. }]),
            "{changes:?}"
        );
        assert!(!h.may_start());
    }
}
