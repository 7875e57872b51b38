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
use std::time::Duration;
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

/// The Slurm side of a manager. Its fields are this file's alone: what the supervisor
/// may do with them is the methods below.
#[derive(Debug, Default)]
pub(in crate::queue) struct SlurmState {
    jobs: HashMap<String, Tracked>,
    /// Next poll.
    poll_at: Option<Instant>,
    /// Why Slurm cannot be used now (shown as the queue's `slurm_status`).
    status: Option<String>,
    /// The partition's limits and when they were read (`sinfo`, at most once a minute).
    partition: Option<(Instant, Option<PartitionLimits>)>,
    /// The partitions that `sinfo` listed then (None: it did not answer).
    partitions: Option<Vec<String>>,
    /// Queued jobs an sbatch of this manager may have submitted without their record.
    unsure: HashSet<String>,
    /// The shared-store probe: its Slurm job id and the file it writes, while it runs.
    probe: Option<(String, std::path::PathBuf)>,
    /// Whether the probe was submitted (once per manager).
    probed: bool,
    /// The probe found the store not shared: nothing more is submitted.
    unshared: bool,
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

    /// Starts tracking job `id` (submitted now, or found in Slurm).
    pub(super) fn track(&mut self, id: &str, t: Tracked) {
        self.jobs.insert(id.to_string(), t);
    }

    /// Stops tracking job `id` (to settle it): what was known of it.
    pub(super) fn untrack(&mut self, id: &str) -> Option<Tracked> {
        self.jobs.remove(id)
    }

    /// What is known of job `id` in Slurm.
    pub(super) fn job(&self, id: &str) -> Option<&Tracked> {
        self.jobs.get(id)
    }

    /// What is known of job `id` in Slurm, to change.
    pub(super) fn job_mut(&mut self, id: &str) -> Option<&mut Tracked> {
        self.jobs.get_mut(id)
    }

    /// The jobs in Slurm.
    pub(super) fn jobs(&self) -> impl Iterator<Item = (&String, &Tracked)> {
        self.jobs.iter()
    }

    /// Whether Slurm may be used (the probe did not find the store unshared).
    pub(super) fn store_shared(&self) -> bool {
        !self.unshared
    }

    /// Whether job `id` may have been submitted by an sbatch of ours without its record.
    pub(super) fn unsure(&self, id: &str) -> bool {
        self.unsure.contains(id)
    }

    /// An sbatch for job `id` is on its way (from now on a submission may exist).
    pub(super) fn submitting(&mut self, id: &str) {
        self.unsure.insert(id.to_string());
    }

    /// Job `id`'s submission is settled (recorded, or refused by Slurm).
    pub(super) fn settled(&mut self, id: &str) {
        self.unsure.remove(id);
    }

    /// Whether the shared-store probe is still to be submitted; marks it submitted.
    pub(super) fn take_probe_turn(&mut self) -> bool {
        !std::mem::replace(&mut self.probed, true)
    }

    /// The probe was submitted as Slurm job `sid`, reading `file` (None: sbatch failed, it
    /// goes again with the next job); looked at at once.
    pub(super) fn probe_submitted(&mut self, probe: Option<(String, std::path::PathBuf)>) {
        match probe {
            Some(p) => {
                self.probe = Some(p);
                self.poll_now();
            }
            None => self.probed = false,
        }
    }

    /// Whether the probe is in Slurm (looked up with the jobs).
    pub(super) fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The partition's limits read less than `ttl` ago (the outer None: to read again).
    pub(super) fn partition_limits(&self, ttl: Duration) -> Option<Option<PartitionLimits>> {
        self.partition
            .as_ref()
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, l)| l.clone())
    }

    /// What `sinfo` said: the partitions it listed (None: it did not answer) and the
    /// queue's partition's limits.
    pub(super) fn read_partitions(
        &mut self,
        partitions: Option<Vec<String>>,
        limits: Option<PartitionLimits>,
    ) {
        self.partitions = partitions;
        self.partition = Some((Instant::now(), limits));
    }

    /// The partitions `sinfo` listed last (None: it did not answer).
    pub(super) fn partitions(&self) -> Option<&[String]> {
        self.partitions.as_deref()
    }

    /// Schedules the next poll `every` seconds from now.
    pub(super) fn poll_in(&mut self, every: u64) {
        self.poll_at = Some(add_secs(Instant::now(), every));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One `squeue` line of job `id`'s Slurm job `sid`.
    fn listed(id: &str, sid: &str, state: &str, reason: &str, elapsed: u64) -> SlurmJob {
        SlurmJob {
            id: sid.into(),
            name: format!("{JOB_NAME_PREFIX}{id}"),
            state: state.into(),
            reason: reason.into(),
            elapsed,
        }
    }

    #[test]
    fn an_squeue_answer_releases_our_holds_and_cancels_what_is_over_its_time() {
        let mut s = SlurmState::default();
        s.adopt("held", Tracked::new("11", 60, "", None));
        s.adopt("admin-held", Tracked::new("12", 60, "", None));
        s.adopt("late", Tracked::new("13", 60, "", None));
        s.adopt("busy", Tracked::new("14", 60, "", None));
        let now = Instant::now();
        s.poll_at = Some(now + std::time::Duration::from_secs(30));
        let answer = [
            listed("held", "11", "PENDING", "JobHeldUser", 0),
            listed("admin-held", "12", "PENDING", "JobHeldAdmin", 0),
            listed("late", "13", "RUNNING", "None", 60),
            listed("busy", "14", "RUNNING", "None", 59),
        ];
        let seen = s.observe(&answer, |_| true, now);
        assert_eq!(seen.release, ["11"], "our own hold only");
        assert_eq!(seen.over, ["late"]);
        assert!(seen.ended.is_empty());
        assert_eq!(s.counts(), (2, 2));
        assert_eq!(
            s.poll_at,
            Some(now + BUSY_POLL),
            "states changed: look again soon"
        );
        // A job already being stopped is not cancelled again.
        s.jobs.get_mut("late").unwrap().end = Some(EndCause::Timeout);
        let seen = s.observe(&answer, |_| true, now);
        assert!(seen.over.is_empty());
    }

    #[test]
    fn a_job_ends_at_once_when_its_worker_wrote_it_and_after_a_grace_when_slurm_says_so() {
        let mut s = SlurmState::default();
        s.adopt("wrote", Tracked::new("21", 600, "RUNNING", None));
        s.adopt("failed", Tracked::new("22", 600, "RUNNING", None));
        s.adopt("gone", Tracked::new("23", 600, "RUNNING", None));
        s.adopt("forged", Tracked::new("1;rm", 600, "RUNNING", None));
        let t0 = Instant::now();
        s.poll_at = Some(t0 + std::time::Duration::from_secs(30));
        // 21 is listed under another job's name: not ours, so "wrote" is judged by its file.
        let answer = [
            listed("other", "21", "RUNNING", "None", 5),
            listed("failed", "22", "FAILED", "NonZeroExitCode", 5),
        ];
        let seen = s.observe(&answer, |id| id != "wrote", t0);
        assert_eq!(seen.ended, [("wrote".to_string(), None)]);
        assert!(s.tracks("wrote"), "settling it is the caller's");
        assert_eq!(s.poll_at, Some(t0 + BUSY_POLL));
        s.jobs.remove("wrote");
        // Seen ended (or unlisted) less than SETTLE_GRACE ago: the worker may still write.
        let seen = s.observe(&answer, |_| true, t0 + SETTLE_GRACE / 2);
        assert!(seen.ended.is_empty(), "{seen:?}");
        let seen = s.observe(&answer, |_| true, t0 + SETTLE_GRACE);
        let ended: Vec<_> = seen
            .ended
            .iter()
            .map(|(id, j)| {
                (
                    id.as_str(),
                    j.as_ref().map(|j| (j.state.as_str(), j.reason.as_str())),
                )
            })
            .collect();
        assert_eq!(
            ended,
            [
                ("failed", Some(("FAILED", "NonZeroExitCode"))),
                (
                    "forged",
                    Some((
                        "UNKNOWN",
                        "its runtime.slurm_job_id \"1;rm\" is not a Slurm job id"
                    ))
                ),
                (
                    "gone",
                    Some(("UNKNOWN", "no longer listed by squeue as agentstore-gone"))
                ),
            ]
        );
        // Back in a live state, a job's grace starts again.
        let back = [listed("failed", "22", "RUNNING", "None", 6)];
        s.observe(&back, |_| true, t0 + SETTLE_GRACE);
        assert_eq!(s.jobs["failed"].ended_at, None);
    }

    #[test]
    fn nothing_tracked_means_no_poll_due() {
        let mut s = SlurmState::default();
        s.poll_now();
        assert_eq!(s.deadline(), None);
        s.adopt("j", Tracked::new("1", 60, "", None));
        assert!(s.deadline().is_some_and(|at| at <= Instant::now()));
        assert!(s.tracks("j") && !s.tracks("k"));
        assert_eq!(s.job_ids().collect::<Vec<_>>(), ["j"]);
    }

    #[test]
    fn a_probe_that_did_not_complete_stops_all_submissions() {
        let mut s = SlurmState::default();
        assert_eq!(s.free(usize::MAX), SUBMIT_BATCH);
        s.adopt("j", Tracked::new("1", 60, "", None));
        assert_eq!(s.free(3), 2);
        assert_eq!(s.free(0), 0);
        s.probe = Some(("7".into(), "/store/logs/.slurm-probe-q-1".into()));
        let pending = [listed("probe-q", "7", "PENDING", "Priority", 0)];
        assert_eq!(s.probe_ended(&pending), None, "not ended yet");
        let done = [listed("probe-q", "7", "COMPLETED", "None", 1)];
        let (sid, _, state) = s.probe_ended(&done).unwrap();
        assert_eq!((sid.as_str(), state.as_str()), ("7", "COMPLETED"));
        assert!(s.probe.is_none() && !s.unshared);
        assert_eq!(s.free(3), 2);
        // A probe Slurm no longer lists ended too (UNKNOWN): the store is not shared.
        s.probe = Some(("8".into(), "/store/logs/.slurm-probe-q-1".into()));
        let (_, _, state) = s.probe_ended(&[]).unwrap();
        assert_eq!(state, "UNKNOWN");
        assert!(s.unshared);
        assert_eq!(s.free(usize::MAX), 0);
    }

    #[test]
    fn the_status_says_when_it_changed() {
        let mut s = SlurmState::default();
        assert_eq!(s.set_status(None), None);
        assert_eq!(s.set_status(Some("down".into())), Some(Some("down".into())));
        assert_eq!(s.set_status(Some("down".into())), None);
        assert_eq!(s.status(), Some("down".into()));
        assert_eq!(s.set_status(None), Some(None));
    }
}
