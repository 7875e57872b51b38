//! A PRD's integration (issue 30): what the orchestrator asks the worker to merge
//! (`supporting_data.integrate` of the integration job) and what came of it (the job's
//! output).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `supporting_data` key of an integration job.
pub const INTEGRATE_KEY: &str = "integrate";

/// What the orchestrator asks for (`supporting_data.integrate`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    /// PRD id.
    pub prd: String,
    /// The integration branch.
    pub branch: String,
    /// The tasks' branches, in dependency order.
    pub tasks: Vec<PlannedTask>,
    /// The project's check command (argv), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_command: Option<Vec<String>>,
}

/// One task's branch to merge.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlannedTask {
    /// Task id.
    pub task: String,
    /// Its branch.
    pub branch: String,
    /// The commit its job recorded (the branch must hold it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Its title (for the agent that resolves a conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// What an integration came to (the job's output).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Report {
    /// `merged` (and the check green or absent), `conflict`, `check_failed`, or
    /// `not_git` (nothing to merge).
    pub status: String,
    /// The integration branch.
    pub branch: String,
    /// Where it started (the project's current commit, or the branch's earlier head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Its head after the merges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Tasks merged, in order.
    pub merged: Vec<String>,
    /// The task whose branch did not merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_task: Option<String>,
    /// The files in conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflict_files: Vec<String>,
    /// The check: command, exit status, end of its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Value>,
    /// How it merged: `merge` (plain git) or `agent` (conflicts handed to the job's agent,
    /// per the queue's `integration` setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Conflicts the agent resolved (accepted: no marker left, the merge committed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<Resolution>,
    /// Where the integration branch was pushed, or why it could not be (the project's
    /// `push_remote`; absent: nothing configured, nothing pushed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<String>,
    /// One line for people.
    pub summary: String,
}

/// A conflict the job's agent resolved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Resolution {
    /// The task whose branch conflicted.
    pub task: String,
    /// The files in conflict.
    pub files: Vec<String>,
    /// The merge commit.
    pub commit: String,
}
