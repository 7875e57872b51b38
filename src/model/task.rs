use super::Timestamp;
use serde::{Deserialize, Serialize};

/// `projects/<p>/tasks/<prd>/<id>.json` (issue 30): one implementation task of a PRD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Schema version of the document (absent means 0.6, where tasks began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// Task id, unique within its PRD; the file stem.
    pub id: String,
    /// PRD id.
    pub prd: String,
    /// Project id (the PRD's).
    pub project: String,
    /// Short title.
    pub title: String,
    /// What to do.
    pub description: String,
    /// When it is done.
    pub acceptance_criteria: Vec<String>,
    /// Tasks first: `task` (same PRD) or `prd/task`.
    pub depends_on: Vec<String>,
    /// Where it stands.
    pub status: TaskStatus,
    /// Jobs that worked on it, oldest first.
    pub jobs: Vec<String>,
    /// Git branch of its work (`agentstore/<prd>/<task>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Commit its job produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Why it failed or needs review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Created.
    pub created_time: Timestamp,
    /// Last changed.
    pub update_time: Timestamp,
}

impl Task {
    /// The task's dependencies, resolved against its own PRD.
    pub fn dependencies(&self) -> Vec<TaskRef> {
        self.depends_on
            .iter()
            .map(|d| TaskRef::parse(d, &self.prd))
            .collect()
    }

    /// The branch name of a task: `agentstore/<prd>/<task>`.
    pub fn branch_name(prd: &str, task: &str) -> String {
        format!("agentstore/{prd}/{task}")
    }
}

/// A reference to a task: its PRD and id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskRef {
    /// PRD id.
    pub prd: String,
    /// Task id.
    pub task: String,
}

/// `supporting_data` key of a task job: which task, its branch and the branches it starts
/// from.
pub const TASK_KEY: &str = "task";

impl TaskRef {
    /// The task job `job` works on, from its `supporting_data.task` (`None`: not a task's
    /// job).
    pub fn of_job(job: &super::Job) -> Option<TaskRef> {
        let t = job.config.supporting_data.get(TASK_KEY)?;
        Some(TaskRef {
            prd: t.get("prd")?.as_str()?.to_string(),
            task: t.get("id")?.as_str()?.to_string(),
        })
    }

    /// `task` (of `own_prd`) or `prd/task`.
    pub fn parse(text: &str, own_prd: &str) -> TaskRef {
        match text.split_once('/') {
            Some((prd, task)) => TaskRef {
                prd: prd.to_string(),
                task: task.to_string(),
            },
            None => TaskRef {
                prd: own_prd.to_string(),
                task: text.to_string(),
            },
        }
    }
}

impl std::fmt::Display for TaskRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.prd, self.task)
    }
}

/// Task state (a field, not a folder: a task's file never moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Not queued yet, or queued behind tasks that are not done.
    Pending,
    /// Queued with nothing to wait for.
    Ready,
    /// Its job runs.
    Running,
    /// Done but a person must look (a conflict, a red check).
    Review,
    /// Its job finished and its work is committed.
    Done,
    /// Its job failed.
    Failed,
    /// Cancelled by a person.
    Cancelled,
}

impl TaskStatus {
    /// All states.
    pub const ALL: [TaskStatus; 7] = [
        TaskStatus::Pending,
        TaskStatus::Ready,
        TaskStatus::Running,
        TaskStatus::Review,
        TaskStatus::Done,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Ready => "ready",
            TaskStatus::Running => "running",
            TaskStatus::Review => "review",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Parses a JSON name.
    pub fn from_name(name: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether the task has ended (nothing will run for it unless retried).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::Review
        )
    }
}
