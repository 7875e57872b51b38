use super::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `projects/<p>/<state>_prds/<id>.json` (PRD §4.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prd {
    /// PRD id, also the file stem.
    pub id: String,
    /// Project id.
    pub project: String,
    /// Title.
    pub title: String,
    /// Version string.
    pub version: String,
    /// Owning user id.
    pub owner: String,
    /// Lifecycle state; matches the folder it lives in.
    pub status: PrdState,
    /// Creation time.
    pub created_time: Timestamp,
    /// Last change.
    pub update_time: Timestamp,
    /// Structured content (problem, goals, requirements, acceptance criteria); free-form.
    pub content: Map<String, Value>,
    /// Ids of jobs made for this PRD (provenance).
    pub jobs: Vec<String>,
    /// Set when the PRD is complete.
    #[serde(default)]
    pub implementation_report: Option<Value>,
}

impl Prd {
    /// The PRD as plain text for a prompt.
    pub fn to_prompt(&self) -> String {
        let mut s = format!("# {} (version {})\n", self.title, self.version);
        for (k, v) in &self.content {
            s.push_str(&format!("\n## {}\n", k.replace('_', " ")));
            match v {
                Value::String(t) => s.push_str(&format!("{t}\n")),
                Value::Array(items) => {
                    for i in items {
                        match i {
                            Value::String(t) => s.push_str(&format!("- {t}\n")),
                            other => s.push_str(&format!("- {other}\n")),
                        }
                    }
                }
                other => s.push_str(&format!("{other}\n")),
            }
        }
        s
    }
}

/// PRD state, one folder each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrdState {
    /// `queued_prds/`
    Queued,
    /// `running_prds/`
    Running,
    /// `finished_prds/`
    Complete,
    /// `review_prds/`: its tasks are done but their integration needs a person (a merge
    /// conflict, a red check; issue 30).
    Review,
}

impl PrdState {
    /// All states.
    pub const ALL: [PrdState; 4] = [
        PrdState::Queued,
        PrdState::Running,
        PrdState::Review,
        PrdState::Complete,
    ];

    /// The folder name of this state.
    pub fn dir(self) -> &'static str {
        match self {
            PrdState::Queued => "queued_prds",
            PrdState::Running => "running_prds",
            PrdState::Complete => "finished_prds",
            PrdState::Review => "review_prds",
        }
    }

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            PrdState::Queued => "queued",
            PrdState::Running => "running",
            PrdState::Complete => "complete",
            PrdState::Review => "review",
        }
    }
}
