//! Notices about machines and PRD task graphs (issue 31), one call per hook as in
//! [`super::notice_hooks`]: a machine lost (for the admins), a PRD's tasks written, all of
//! them done, the graph blocked (a task's job failed, or the integration needs a person).
//! Ids are derived from what they are
//! about, so a hook that runs again — on this machine after a restart or on another that
//! took over — emits nothing new.

use super::Store;
use super::notices::{Notice, NoticeKind, clip};
use crate::model::{Job, JobStatus, Prd, TaskRef};

impl Store {
    /// Who a PRD's notices are for: its owner, else its project's owner.
    fn notice_user_of_prd(&self, prd: &Prd) -> Option<String> {
        Some(prd.owner.clone())
            .filter(|o| !o.is_empty())
            .or_else(|| self.project(&prd.project).ok().map(|p| p.owner))
    }

    /// Machine `host` stopped reporting (last heartbeat `last_seen`, silent for `silent_s`
    /// seconds): a notice for the admins, one per silence (a machine lost again after it came
    /// back is a new notice).
    pub fn notice_machine_lost(&self, host: &str, last_seen: &str, silent_s: u64) {
        let n = Notice::new(
            NoticeKind::MachineLost,
            &format!("{host}/{last_seen}"),
            None,
            &format!("Machine {} stopped reporting", clip(host, 80)),
        )
        .body(&format!(
            "Its last heartbeat was at {last_seen} ({silent_s} s ago). Its running jobs are failed as lost (and retried where their policy says so).\n\nSee: orchestrator list-machines"
        ));
        self.notify(n);
    }

    /// PRD `prd_id`'s task graph was written: `tasks` are its task ids.
    pub fn notice_tasks_created(&self, prd_id: &str, tasks: &[String]) {
        let Ok((_, _, prd)) = self.find_prd(prd_id) else {
            return;
        };
        let user = self.notice_user_of_prd(&prd);
        let mut n = Notice::new(
            NoticeKind::TasksCreated,
            prd_id,
            user.as_deref(),
            &format!("PRD {prd_id}: {} task(s) created", tasks.len()),
        )
        .body(&format!(
            "{}\n\nTasks: {}\n\nSee: orchestrator list-tasks --prd {prd_id}",
            clip(&prd.title, 200),
            clip(&tasks.join(", "), 2000)
        ));
        n.project = Some(prd.project.clone());
        self.notify(n);
    }

    /// Every task of PRD `prd_id` is done (`count` of them): its integration is queued.
    pub fn notice_graph_done(&self, prd_id: &str, count: usize) {
        let Ok((_, _, prd)) = self.find_prd(prd_id) else {
            return;
        };
        let user = self.notice_user_of_prd(&prd);
        let mut n = Notice::new(
            NoticeKind::GraphDone,
            prd_id,
            user.as_deref(),
            &format!("PRD {prd_id}: all {count} task(s) done"),
        )
        .body(&format!(
            "{}\n\nEvery task's branch is committed; their integration (one branch, merged in dependency order, checked) is queued.\n\nSee: orchestrator view-prd {prd_id}",
            clip(&prd.title, 200)
        ));
        n.project = Some(prd.project.clone());
        self.notify(n);
    }

    /// PRD `prd_id`'s task graph cannot go on by itself: `what` names the step it is stuck
    /// at (one notice per step: `task A/job-1`, `integration/job-9`), `why` says what a
    /// person has to look at.
    pub fn notice_graph_blocked(&self, prd_id: &str, what: &str, why: &str) {
        let Ok((_, _, prd)) = self.find_prd(prd_id) else {
            return;
        };
        let user = self.notice_user_of_prd(&prd);
        let mut n = Notice::new(
            NoticeKind::GraphBlocked,
            &format!("{prd_id}/{what}"),
            user.as_deref(),
            &format!("PRD {prd_id}: blocked at {}", clip(what, 120)),
        )
        .body(&format!(
            "{}\n\n{}\n\nSee: orchestrator view-prd {prd_id} and orchestrator list-tasks --prd {prd_id}",
            clip(&prd.title, 200),
            clip(why, 2000)
        ));
        n.project = Some(prd.project.clone());
        self.notify(n);
    }

    /// Task job `job_id` of `queue` failed (`job`, its document): the graph is blocked at
    /// that task, unless the job's retry policy already queued its next attempt (that
    /// attempt's own end decides) or it failed only because a task it waited on failed (that
    /// task's notice says where the graph stopped). Called wherever a job's end is noticed
    /// ([`Store::notice_job_ended`]), so every way a task's job fails (the worker, a timeout,
    /// a lost machine, a cancel) tells the PRD's owner once.
    pub fn notice_task_failed(&self, queue: &str, job_id: &str, job: &Job) {
        let Some(r) = TaskRef::of_job(job) else {
            return;
        };
        if crate::model::flow::stopped_by_dependency(job) {
            return;
        }
        let next = crate::model::flow::retry_id(job_id);
        if JobStatus::ALL
            .iter()
            .any(|s| super::safe::is_file(&self.job_path(queue, *s, &next)))
        {
            return;
        }
        self.notice_graph_blocked(
            &r.prd,
            &format!("task {}/{job_id}", r.task),
            &format!(
                "Task {} failed: {}\nThe tasks that depend on it wait. Retry it with: orchestrator retry-task {}/{}",
                r.task,
                job.runtime.error.as_deref().unwrap_or("no error recorded"),
                r.prd,
                r.task
            ),
        );
    }
}
