//! Issue 17 on the command line: `--priority`, `--after`, `--after-any` and the retry options
//! of the agent commands, sent as message content the orchestrator checks.

use clap::Args;
use serde_json::{Map, Value, json};

/// Priority, dependency and retry options of the agent commands.
#[derive(Debug, Args, Clone, Default)]
pub struct FlowArgs {
    /// Start order in the queue: low, normal (default), high or a number from -1000 to 1000
    /// (higher starts first; equal priorities start oldest first).
    #[arg(long, value_name = "low|normal|high|N", value_parser = parse_priority_arg, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// Start only after these jobs finished (comma-separated job ids, any queue); if one of
    /// them failed, this job fails with "dependency <id> failed".
    #[arg(long, value_name = "JOB[,JOB…]", value_delimiter = ',')]
    pub after: Vec<String>,
    /// With --after: start once the jobs ended, whether they finished or failed.
    #[arg(long, requires = "after")]
    pub after_any: bool,
    /// Retry this job automatically: attempts in all, the first run included (replaces the
    /// queue's retry policy).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// With --max-attempts: seconds to wait before each new attempt (default 0).
    #[arg(long, value_name = "SECONDS", requires = "max_attempts")]
    pub retry_backoff: Option<u64>,
    /// With --max-attempts: the failures to retry (comma-separated: worker_died, timeout,
    /// api_error, machine_lost; default all but api_error).
    #[arg(
        long,
        value_name = "KIND[,KIND…]",
        value_delimiter = ',',
        requires = "max_attempts"
    )]
    pub retry_on: Vec<String>,
}

fn parse_priority_arg(s: &str) -> Result<i32, String> {
    crate::model::flow::parse_priority(s)
}

impl FlowArgs {
    /// Adds the options given to a message's content.
    pub fn add_to(&self, c: &mut Map<String, Value>) {
        if let Some(p) = self.priority {
            c.insert("priority".into(), json!(p));
        }
        let after: Vec<&str> = self
            .after
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if !after.is_empty() {
            c.insert("after".into(), json!(after));
        }
        if self.after_any {
            c.insert("after_any".into(), json!(true));
        }
        if let Some(n) = self.max_attempts {
            let mut r = Map::new();
            r.insert("max_attempts".into(), json!(n));
            if let Some(b) = self.retry_backoff {
                r.insert("backoff_seconds".into(), json!(b));
            }
            if !self.retry_on.is_empty() {
                r.insert("on".into(), json!(self.retry_on));
            }
            c.insert("retry".into(), Value::Object(r));
        }
    }
}
