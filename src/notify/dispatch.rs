//! One delivery pass: every pending notice, oldest first, to every target that has not had
//! it, recorded in the ledger step by step.
//!
//! Order: a sink that fails transiently is paused (bounded, doubling backoff) and nothing
//! later goes to it in this pass, so when it is back its backlog arrives in the order the
//! notices were emitted. A delivery is given up — recorded `dead` with the error — when the
//! sink refuses it for good (no address, a refused recipient) or when it has failed for
//! longer than `notify.retry.give_up_after_secs`. A notice whose every delivery is done moves
//! to `notifications/delivered/`.

use super::ledger::{Entry, Ledger, Step};
use super::{Delivery, Sink, SinkError, route};
use crate::model::{Timestamp, User};
use crate::store::notices::{Notice, NoticeKind};
use crate::store::notify_config::NotifyConfig;
use crate::store::{Store, move_no_replace, read_limited, safe};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Deliveries the sinks took.
    pub sent: usize,
    /// Attempts that failed and will be tried again.
    pub failed: usize,
    /// Deliveries given up.
    pub dead: usize,
    /// Deliveries left for later (a paused sink, quiet hours).
    pub waiting: usize,
    /// Notices completed (moved to `delivered/`).
    pub completed: usize,
    /// The soonest a waiting delivery may be tried again, if any is waiting.
    pub next_try: Option<Duration>,
}

/// The notifier's state between passes: the ledger, the sinks and their pauses.
pub struct Dispatcher {
    store: Store,
    cfg: NotifyConfig,
    sinks: BTreeMap<String, Box<dyn Sink>>,
    ledger: Ledger,
    paused: HashMap<String, Instant>,
    warned: HashSet<String>,
}

impl Dispatcher {
    /// A dispatcher for `store` with the machine's `cfg` and its sinks.
    pub fn new(store: Store, cfg: NotifyConfig) -> Dispatcher {
        let sinks = super::sinks::from_config(&cfg);
        Dispatcher::with_sinks(store, cfg, sinks)
    }

    /// A dispatcher with the given sinks (`orchestrator notify test` uses one).
    pub fn with_sinks(
        store: Store,
        cfg: NotifyConfig,
        sinks: BTreeMap<String, Box<dyn Sink>>,
    ) -> Dispatcher {
        let ledger = Ledger::load(&store);
        Dispatcher {
            store,
            cfg,
            sinks,
            ledger,
            paused: HashMap::new(),
            warned: HashSet::new(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The pending notices, oldest first (ties by id). One that cannot be read or checked is
    /// left where it is, with one warning.
    fn pending(&mut self) -> Vec<Notice> {
        let dir = self.store.notices_pending_dir();
        let entries = match safe::list_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!("cannot list {}: {e}", dir.display());
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for e in entries {
            let Some(name) = e.name.to_str() else {
                continue;
            };
            if e.kind != safe::EntryKind::File || crate::store::is_ignored(name) {
                continue;
            }
            let path = dir.join(name);
            let parsed = read_limited(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Notice>(&b).map_err(|e| e.to_string()))
                .and_then(|n| {
                    n.check()?;
                    if format!("{}.json", n.id) != name {
                        return Err(format!("its id {} is not its file name", n.id));
                    }
                    Ok(n)
                });
            match parsed {
                Ok(n) => out.push(n),
                Err(why) => {
                    if self.warned.insert(name.to_string()) {
                        tracing::warn!("notice {} is not delivered: {why}", path.display());
                    }
                }
            }
        }
        out.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
        out
    }

    fn record(&mut self, d: &Delivery, step: Step, error: Option<String>) {
        let entry = Entry {
            at: Timestamp(chrono::Utc::now()),
            key: d.key.clone(),
            step,
            kind: d.notice.kind.name().to_string(),
            title: d.notice.title.clone(),
            error,
            host: String::new(),
        };
        if let Err(e) = self.ledger.record(entry) {
            tracing::warn!(delivery = %d.key, "notify ledger not written: {e}");
        }
    }

    /// Delivers what is due now.
    pub async fn pass(&mut self) -> PassReport {
        let mut report = PassReport::default();
        let users: Vec<User> = self
            .store
            .users(&mut |e| tracing::warn!("user document skipped for notices: {e}"))
            .unwrap_or_default();
        let now = Instant::now();
        self.paused.retain(|_, until| *until > now);
        let mut blocked: HashSet<String> = self.paused.keys().cloned().collect();
        let give_up = self.cfg.retry.give_up_after_secs;
        // Read once per pass, and only when a job's end is pending.
        let mut threads: Option<HashSet<String>> = None;
        for notice in self.pending() {
            // A notice for a user whose document exists but cannot be read now (a hand edit
            // that broke it) waits for it to be fixed: completing it would drop it unsent.
            if let Some(id) = notice.user.as_deref()
                && !users.iter().any(|u| u.id == id)
                && crate::model::is_safe_id(id)
                && self.store.user_path(id).exists()
            {
                tracing::warn!(
                    notice = %notice.id,
                    "notice for {id} waits: users/{id}.json cannot be read (see the line above); it is sent once the document is fixed"
                );
                report.waiting += 1;
                continue;
            }
            let mut targets = route::targets(&notice, &users, &self.cfg);
            self.thread_target(&notice, &users, &mut threads, &mut targets);
            let mut complete = true;
            for t in targets {
                let part = if t.thread.is_some() {
                    super::SLACK_THREAD
                } else {
                    t.sink.as_str()
                };
                let key = Delivery::key_for(&notice.id, Some(&t.user.id), part);
                let state = self.ledger.state(&key);
                if state.done {
                    continue;
                }
                let d = Delivery {
                    key,
                    notice: notice.clone(),
                    user: Some(t.user.clone()),
                    sink: t.sink.clone(),
                    uncertain: state.open,
                    thread: t.thread.clone(),
                };
                if !self.sinks.contains_key(&t.sink) {
                    let why = format!(
                        "sink {} is not configured on this machine (config.yaml notify:)",
                        t.sink
                    );
                    self.record(&d, Step::Dead, Some(why));
                    report.dead += 1;
                    continue;
                }
                if blocked.contains(&t.sink) || t.quiet_for.is_some() {
                    complete = false;
                    report.waiting += 1;
                    continue;
                }
                self.record(&d, Step::Begin, None);
                let result = match self.sinks.get(&t.sink) {
                    Some(sink) => sink.deliver(&d).await,
                    None => Err(SinkError::Permanent("no such sink".into())),
                };
                match result {
                    Ok(()) => {
                        self.record(&d, Step::Sent, None);
                        report.sent += 1;
                    }
                    Err(SinkError::Permanent(why)) => {
                        tracing::warn!(delivery = %d.key, "notice not deliverable: {why}");
                        self.record(&d, Step::Dead, Some(why));
                        report.dead += 1;
                    }
                    Err(SinkError::Transient(why)) => {
                        let first = state.first_failure.unwrap_or_else(Timestamp::now);
                        let failing_for = first.seconds_until(&Timestamp::now());
                        if failing_for >= give_up as f64 {
                            let why = format!(
                                "given up after {} attempts over {failing_for:.0} s: {why}",
                                state.failures + 1
                            );
                            tracing::warn!(delivery = %d.key, "{why}");
                            self.record(&d, Step::Dead, Some(why));
                            report.dead += 1;
                            continue;
                        }
                        tracing::info!(delivery = %d.key, "delivery failed, tried again later: {why}");
                        self.record(&d, Step::Failed, Some(why));
                        report.failed += 1;
                        complete = false;
                        let wait = self.cfg.retry.backoff(state.failures + 1);
                        self.paused.insert(t.sink.clone(), Instant::now() + wait);
                        blocked.insert(t.sink.clone());
                    }
                }
            }
            if complete {
                self.complete(&notice);
                report.completed += 1;
            }
        }
        let now = Instant::now();
        report.next_try = self
            .paused
            .values()
            .map(|u| u.saturating_duration_since(now))
            .min();
        report
    }

    /// A job asked for with a Slack command ends: its notice is answered in the command's
    /// thread ([`super::threads`]), for the job's own user, whatever sinks and events they
    /// chose (it is the answer to what they asked, not a notification), and it replaces
    /// their direct message at Slack for this notice (one message in Slack, in the thread).
    fn thread_target(
        &self,
        notice: &Notice,
        users: &[User],
        threads: &mut Option<HashSet<String>>,
        targets: &mut Vec<route::Target>,
    ) {
        if !matches!(notice.kind, NoticeKind::JobFinished | NoticeKind::JobFailed) {
            return;
        }
        let (Some(q), Some(j), Some(u)) = (&notice.queue, &notice.job_id, &notice.user) else {
            return;
        };
        let threads = threads.get_or_insert_with(|| super::threads::recorded(&self.store));
        let Some((t, job)) = super::threads::thread_of_job(&self.store, threads, q, j, u) else {
            return;
        };
        let Some(user) = users.iter().find(|x| &x.id == u) else {
            return;
        };
        targets.retain(|x| !(x.user.id == *u && x.sink == "slack"));
        targets.push(route::Target {
            user: user.clone(),
            sink: "slack".into(),
            quiet_for: None,
            thread: Some(super::ThreadReply {
                ts: t.ts,
                text: super::threads::reply_for(j, &job, super::sinks::slack::MAX_TEXT),
            }),
        });
    }

    /// Moves a notice whose deliveries are all done to `delivered/`.
    fn complete(&self, n: &Notice) {
        let name = format!("{}.json", n.id);
        let from = self.store.notices_pending_dir().join(&name);
        let to_dir = self.store.notices_delivered_dir();
        let moved = safe::create_dir_all(&to_dir).and_then(|()| {
            match move_no_replace(&from, &to_dir.join(&name)) {
                // Already there (emitted again after it was delivered): the pending copy goes.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => safe::remove_file(&from),
                r => r,
            }
        });
        if let Err(e) = moved {
            tracing::warn!("notice {} not moved to delivered/: {e}", from.display());
        }
    }
}
