//! orchestratord's part in many machines (issue 13): its heartbeat
//! (`machines/<host>/orchestratord.json`), failing the running jobs of machines that stopped
//! reporting (in every queue, while it holds the store lock), and telling when a machine
//! goes stale or comes back (a D-Bus signal through the front end, an event line).

use crate::model::Timestamp;
use crate::store::machines::Heartbeat;
use crate::store::{Event, Record, Store, hostname};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// A machine that went stale or came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineChange {
    /// Its host name.
    pub host: String,
    /// True: it went stale; false: it reports again.
    pub stale: bool,
    /// Its last heartbeat.
    pub last_seen: String,
}

/// The daemon's heartbeat and what it last knew of each machine.
#[derive(Debug)]
pub struct MachineWatch {
    beat: Heartbeat,
    every: Duration,
    next: Instant,
    /// Host → stale, as last seen.
    known: BTreeMap<String, bool>,
}

impl MachineWatch {
    /// A watch for `store`, its first beat due now.
    pub fn new(store: &Store) -> MachineWatch {
        let every = store.config().machines.heartbeat();
        MachineWatch {
            beat: store.new_heartbeat(super::DAEMON, None, every.as_secs()),
            every,
            next: Instant::now(),
            known: BTreeMap::new(),
        }
    }

    /// Time until the next beat.
    pub fn due_in(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }

    /// The hosts stale now, sorted.
    pub fn stale_hosts(&self) -> Vec<String> {
        self.known
            .iter()
            .filter(|(_, s)| **s)
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// Records the orchestrator's role and the epoch of the lock it holds (settling or
    /// read-only too: a `standby` with no epoch holds no lock, which a machine that took the
    /// lock over waits to see) and makes the next beat due now, so other machines learn of it
    /// at once.
    pub fn set_role(&mut self, role: &str, epoch: Option<u64>) {
        self.beat.role = Some(role.to_string());
        self.beat.epoch = epoch;
        self.next = Instant::now();
    }

    /// Writes the last heartbeat, marked stopped.
    pub fn stop(&mut self, store: &Store) {
        self.beat.last_seen = Timestamp::now();
        self.beat.stopped = true;
        if let Err(e) = store.write_heartbeat(&self.beat) {
            tracing::warn!("cannot write the heartbeat: {e}");
        }
    }
}

/// One beat when due: the heartbeat, then (holding the store lock) the jobs of silent
/// machines are failed, and the machines whose state changed are returned.
pub fn beat(
    store: &Store,
    watch: &parking_lot::Mutex<MachineWatch>,
    holds_lock: bool,
) -> Vec<MachineChange> {
    let mut watch = watch.lock();
    if watch.due_in() > Duration::ZERO {
        return Vec::new();
    }
    watch.next = Instant::now() + watch.every;
    watch.beat.last_seen = Timestamp::now();
    if let Err(e) = store.write_heartbeat(&watch.beat) {
        tracing::warn!("cannot write the heartbeat: {e}");
    }
    let machines = store.machines();
    for p in &machines.problems {
        tracing::warn!("machines: {p}");
    }
    let me = hostname();
    let now = Timestamp::now();
    let after = store.config().machines.stale_after_seconds;
    if holds_lock {
        for q in store.queue_ids().unwrap_or_default() {
            // A live manager of the queue fails its lost jobs itself, with the queue's retry
            // policy (only it applies one); orchestratord does it for a queue nobody serves.
            let served = machines.machines.iter().any(|m| {
                !m.is_stale(&now, after)
                    && m.daemons.iter().any(|d| {
                        d.daemon == "queue-manager" && d.queue.as_deref() == Some(&q) && !d.stopped
                    })
            });
            if !served {
                store.fail_lost_jobs(&q, &me, &machines);
            }
        }
    }
    let mut changes = Vec::new();
    for m in &machines.machines {
        let stale = m.is_stale(&now, after) && !m.all_stopped();
        let was = watch.known.insert(m.host.clone(), stale).unwrap_or(false);
        if was == stale {
            continue;
        }
        let last_seen = m.last_seen.to_string();
        let text = if stale {
            format!(
                "machine {} stopped reporting at {last_seen} (silent for {} s)",
                m.host,
                m.silent_for(&now)
            )
        } else {
            format!("machine {} reports again (last seen {last_seen})", m.host)
        };
        if holds_lock && stale {
            store.notice_machine_lost(&m.host, &last_seen, m.silent_for(&now));
        }
        if holds_lock {
            store.record(Record::warn(
                Event::new(
                    super::DAEMON,
                    if stale {
                        "machine_stale"
                    } else {
                        "machine_back"
                    },
                )
                .detail(format!("{} {last_seen}", m.host)),
                text,
            ));
        }
        changes.push(MachineChange {
            host: m.host.clone(),
            stale,
            last_seen,
        });
    }
    changes
}
