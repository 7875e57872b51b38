//! What the Slurm supervisor knows of the queue's Slurm jobs, and what one `squeue` answer
//! means for them ([`SlurmState::observe`]: which to release, which are over their time,
//! which ended). Its fields are the `slurm` folder's alone: the rest of the queue manager
//! reads them through the methods below; the folder's other files run the Slurm commands and
//! settle what [`SlurmState::observe`] decides.

use super::SlurmJob;
use super::relay::Relay;
use super::{BUSY_POLL, EndCause, JOB_NAME_PREFIX, PartitionLimits, SETTLE_GRACE, SUBMIT_BATCH};
use super::{add_secs, is_slurm_job_id, is_terminal};
use std::collections::{HashMap, HashSet};
use tokio::time::Instant;

/// A job of the queue handed to Slurm.
#[derive(Debug)]
pub(in crate::queue::slurm) struct Tracked {
    pub(super) slurm_id: String,
    pub(super) limit: u64,
    pub(super) state: String,
    pub(super) end: Option<EndCause>,
    /// When it was first seen ended (or gone from Slurm) with its file still running.
    pub(super) ended_at: Option<Instant>,
    /// Run as its own account: where its end is read from (root manager only).
    pub(super) relay: Option<Relay>,
    /// How much of its relay file was read for approval requests.
    pub(super) asks_read: u64,
    /// The approval requests it relayed (put in the store).
    pub(super) asked: Vec<String>,
}

impl Tracked {
    /// A job whose Slurm job is `slurm_id`, in Slurm's `state` as far as known (`""`: not
    /// looked at yet).
    pub(super) fn new(slurm_id: &str, limit: u64, state: &str, relay: Option<Relay>) -> Tracked {
        Tracked {
            slurm_id: slurm_id.to_string(),
            limit,
            state: state.to_string(),
            end: None,
            ended_at: None,
            relay,
            asks_read: 0,
            asked: Vec::new(),
        }
    }
}

/// The Slurm side of a manager.
#[derive(Debug, Default)]
pub(in crate::queue) struct SlurmState {
    pub(super) jobs: HashMap<String, Tracked>,
    /// Next poll.
    pub(super) poll_at: Option<Instant>,
    /// Why Slurm cannot be used now (shown as the queue's `slurm_status`).
    pub(super) status: Option<String>,
    /// Slurm commands run so far.
    pub(super) calls: u64,
    /// The partition's limits and when they were read (`sinfo`, at most once a minute).
    pub(super) partition: Option<(Instant, Option<PartitionLimits>)>,
    /// The partitions that `sinfo` listed then (None: it did not answer).
    pub(super) partitions: Option<Vec<String>>,
    /// Queued jobs an sbatch of this manager may have submitted without their record.
    pub(super) unsure: HashSet<String>,
    /// The shared-store probe: its Slurm job id and the file it writes, while it runs.
    pub(super) probe: Option<(String, std::path::PathBuf)>,
    /// Whether the probe was submitted (once per manager).
    pub(super) probed: bool,
    /// The probe found the store not shared: nothing more is submitted.
    pub(super) unshared: bool,
}

/// What one `squeue` answer means for the tracked jobs ([`SlurmState::observe`]).
#[derive(Debug, Default, PartialEq)]
pub(in crate::queue::slurm) struct Seen {
    /// Slurm jobs held by our own `sbatch --hold` (`JobHeldUser`): to release.
    pub(super) release: Vec<String>,
    /// Jobs running past their time limit: to cancel.
    pub(super) over: Vec<String>,
    /// Jobs to settle: `None` when the worker wrote its end (the running file left),
    /// else Slurm's last word on a job it ended (seen ended for [`SETTLE_GRACE`]).
    pub(super) ended: Vec<(String, Option<SlurmJob>)>,
}

impl SlurmState {
    /// Jobs running in Slurm now, and jobs pending there.
    pub(in crate::queue) fn counts(&self) -> (usize, usize) {
        let running = self
            .jobs
            .values()
            .filter(|t| !matches!(t.state.as_str(), "PENDING" | ""))
            .count();
        (running, self.jobs.len() - running)
    }

    /// How many jobs are in Slurm.
    pub(in crate::queue) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether job `id` is in Slurm.
    pub(in crate::queue) fn tracks(&self, id: &str) -> bool {
        self.jobs.contains_key(id)
    }

    /// The ids of the jobs in Slurm.
    pub(in crate::queue) fn job_ids(&self) -> impl Iterator<Item = &String> {
        self.jobs.keys()
    }

    /// Why Slurm cannot be used now, if it cannot.
    pub(in crate::queue) fn status(&self) -> Option<String> {
        self.status.clone()
    }

    /// How many more jobs may go to Slurm now, with at most `max` there: none once the
    /// probe found the store not shared; at most [`SUBMIT_BATCH`] at once.
    pub(super) fn free(&self, max: usize) -> usize {
        if self.unshared {
            return 0;
        }
        max.saturating_sub(self.jobs.len()).min(SUBMIT_BATCH)
    }

    /// Sets why Slurm cannot be used (None: it can); the new status when it changed.
    pub(super) fn set_status(&mut self, status: Option<String>) -> Option<Option<String>> {
        let changed = status != self.status;
        self.status = status;
        changed.then(|| self.status.clone())
    }

    /// Counts `n` Slurm commands run.
    pub(super) fn count_calls(&mut self, n: u64) {
        self.calls = self.calls.saturating_add(n);
    }

    /// The shared-store probe once Slurm ended it (its Slurm job id, file and end state; the
    /// probe is then forgotten, and the store taken as not shared unless it COMPLETED:
    /// it completes only when it read this manager's token from the file).
    pub(super) fn probe_ended(
        &mut self,
        listed: &[SlurmJob],
    ) -> Option<(String, std::path::PathBuf, String)> {
        let (sid, _) = self.probe.as_ref()?;
        let state = listed
            .iter()
            .find(|j| j.id == *sid)
            .map_or("UNKNOWN", |j| j.state.as_str())
            .to_string();
        if !is_terminal(&state) {
            return None;
        }
        let (sid, file) = self.probe.take()?;
        if state != "COMPLETED" {
            self.unshared = true;
        }
        Some((sid, file, state))
    }

    /// Starts tracking job `id` and looks at it at once.
    pub(super) fn adopt(&mut self, id: &str, t: Tracked) {
        self.jobs.insert(id.to_string(), t);
        self.poll_now();
    }

    /// The next poll is due now.
    pub(super) fn poll_now(&mut self) {
        self.poll_at = Some(Instant::now());
    }

    /// Nothing in Slurm to look at: no job, no probe.
    pub(super) fn idle(&self) -> bool {
        self.jobs.is_empty() && self.probe.is_none()
    }

    /// When the next poll is due (None: nothing to look at).
    pub(super) fn deadline(&self) -> Option<Instant> {
        if self.idle() { None } else { self.poll_at }
    }

    /// Reads one `squeue` answer (`listed`) at `now`: each tracked job's state, whether its
    /// running file is still there (`running`), its time limit and Slurm's end; the next
    /// poll comes sooner while anything changes or ends.
    pub(super) fn observe(
        &mut self,
        listed: &[SlurmJob],
        running: impl Fn(&str) -> bool,
        now: Instant,
    ) -> Seen {
        let mut seen = Seen::default();
        let mut changed = false;
        let mut ids: Vec<&String> = self.jobs.keys().collect();
        ids.sort();
        let ids: Vec<String> = ids.into_iter().cloned().collect();
        for id in ids {
            let running_file = running(&id);
            let Some(t) = self.jobs.get_mut(&id) else {
                continue;
            };
            if !running_file {
                // The worker wrote its end (or the file was taken away).
                changed = true;
                seen.ended.push((id, None));
                continue;
            }
            let name = format!("{JOB_NAME_PREFIX}{id}");
            let me = listed
                .iter()
                .find(|j| j.id == t.slurm_id && j.name == name)
                .cloned()
                .unwrap_or_else(|| SlurmJob {
                    id: t.slurm_id.clone(),
                    name: name.clone(),
                    state: "UNKNOWN".to_string(),
                    reason: if is_slurm_job_id(&t.slurm_id) {
                        format!("no longer listed by squeue as {name}")
                    } else {
                        format!(
                            "its runtime.slurm_job_id {:?} is not a Slurm job id",
                            t.slurm_id
                        )
                    },
                    elapsed: 0,
                });
            // Our own hold (sbatch --hold: JobHeldUser), never an administrator's.
            if me.state == "PENDING" && me.reason == "JobHeldUser" {
                seen.release.push(me.id.clone());
            }
            changed |= t.state != me.state;
            t.state = me.state.clone();
            if !is_terminal(&me.state) {
                t.ended_at = None;
                if me.state == "RUNNING" && t.end.is_none() && me.elapsed >= t.limit {
                    seen.over.push(id);
                }
                continue;
            }
            match t.ended_at {
                None => t.ended_at = Some(now),
                Some(at) if now.duration_since(at) >= SETTLE_GRACE => {
                    seen.ended.push((id, Some(me)))
                }
                Some(_) => {}
            }
        }
        if self.jobs.values().any(|t| t.ended_at.is_some()) {
            let soon = add_secs(now, SETTLE_GRACE.as_secs());
            self.poll_at = self.poll_at.map(|at| at.min(soon));
        }
        if changed {
            let soon = now + BUSY_POLL;
            self.poll_at = self.poll_at.map(|at| at.min(soon));
        }
        seen
    }
}
