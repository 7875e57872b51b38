use super::Timestamp;
use serde::{Deserialize, Serialize};

/// `projects/<id>/project.json` (PRD §4.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// Project id, also the folder name.
    pub id: String,
    /// Working directory of the project's jobs.
    pub directory: String,
    /// Git remote.
    #[serde(default)]
    pub git_repository: Option<String>,
    /// Creation time.
    pub create_time: Timestamp,
    /// Last change.
    pub update_time: Timestamp,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Owning user id.
    pub owner: String,
    /// Other user ids.
    #[serde(default)]
    pub collaborators: Vec<String>,
    /// Where `research-code` output is written.
    #[serde(default)]
    pub code_research_document: Option<String>,
    /// Queue for this project's jobs.
    pub default_queue: String,
    /// The project's check (argv, e.g. its tests), run on the integration branch of a PRD's
    /// tasks (issue 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_command: Option<Vec<String>>,
    /// A git remote (a remote's name, a URL or a path such as a bare repository) the worker
    /// pushes each task's branch and the integration branch to after it commits (issue 30);
    /// absent: nothing is pushed anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_remote: Option<String>,
}
