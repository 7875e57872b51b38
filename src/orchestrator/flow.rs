//! Issue 17 at submission: a message's `priority`, `after`, `after_any` and `retry` checked
//! and turned into job fields. Unknown dependencies and cycles are refused here, with the
//! field named, before any job file is written.

use super::RouteError;
use crate::model::flow::{MAX_AFTER, parse_priority};
use crate::model::{Job, Message, RetryPolicy, is_safe_id};
use crate::store::Store;
use serde_json::Value;
use std::collections::HashSet;

/// Most jobs a cycle check walks through before it gives up (refusing the submission).
const MAX_WALK: usize = 10_000;

/// What a message asks for beyond the PRD's job fields.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Flow {
    /// `config.priority`.
    pub priority: Option<i32>,
    /// `config.after`.
    pub after: Option<Vec<String>>,
    /// `config.after_any`.
    pub after_any: Option<bool>,
    /// `config.retry`.
    pub retry: Option<RetryPolicy>,
    /// `schema_version` (`None` in a store still at 0.5).
    pub schema_version: Option<String>,
    /// `supporting_data.pipeline`: the pipeline this job is a step of.
    pub pipeline: Option<Value>,
    /// `config.prd` of a step whose PRD the step before it makes.
    pub pending_prd: Option<String>,
}

impl Flow {
    /// Sets the fields on a job being made.
    pub fn apply(self, job: &mut Job) {
        job.schema_version = self.schema_version;
        let c = &mut job.config;
        c.priority = self.priority;
        c.after = self.after;
        c.after_any = self.after_any;
        c.retry = self.retry;
        if let Some(p) = self.pipeline {
            c.supporting_data.insert("pipeline".into(), p);
        }
        if c.prd.is_none() {
            c.prd = self.pending_prd;
        }
    }
}

/// Whether `prd` may not exist yet: the message is a pipeline step whose PRD is the one its
/// create-prd step will make (the completion handler names a PRD after the job that made it,
/// so `prd` is one of the pipeline's own job ids). The step is checked again when it starts.
pub fn prd_pending(msg: &Message, prd: &str) -> bool {
    let Some(p) = msg.content.get("pipeline").filter(|p| p.is_object()) else {
        return false;
    };
    p.get("prd").and_then(Value::as_str) == Some(prd)
        && p.get("steps")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(prd)))
}

/// Reads `content.priority`, `content.after`, `content.after_any` and `content.retry` of
/// `msg` for the job `id` about to be made.
pub fn job_flow(
    store: &Store,
    msg: &Message,
    id: &str,
    who: &crate::permissions::Caller,
) -> Result<Flow, RouteError> {
    let invalid = RouteError::Invalid;
    // A store not yet migrated keeps its v0.5 schema copies: its jobs get no new field.
    let current = crate::model::flow::compare_versions(
        store.config().schema_version(),
        crate::model::flow::SCHEMA_VERSION,
    )
    .is_some_and(|o| o.is_ge());
    if !current {
        if let Some(k) = ["priority", "after", "after_any", "retry", "pipeline"]
            .into_iter()
            .find(|k| msg.content.get(*k).is_some_and(|v| !v.is_null()))
        {
            return Err(invalid(format!(
                "content.{k}: this store is at schema version {}, which has no {k}; upgrade it with `orchestrator migrate` first",
                store.config().schema_version()
            )));
        }
        return Ok(Flow::default());
    }
    // Written even when not asked for, so every listing and D-Bus answer shows it.
    let priority = match msg.content.get("priority") {
        None | Some(Value::Null) => Some(crate::model::flow::PRIORITY_NORMAL),
        Some(Value::String(s)) => {
            Some(parse_priority(s).map_err(|e| invalid(format!("content.{e}")))?)
        }
        Some(Value::Number(n)) => Some(
            n.as_i64()
                .map(|n| n.to_string())
                .ok_or_else(|| invalid(format!("content.priority {n} is not a whole number")))
                .and_then(|s| parse_priority(&s).map_err(|e| invalid(format!("content.{e}"))))?,
        ),
        Some(_) => {
            return Err(invalid(
                "content.priority must be low, normal, high or a whole number".into(),
            ));
        }
    };
    let after = match msg.content.get("after") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(split_ids(s)),
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid("content.after must be an array of job ids".into()))?,
        ),
        Some(_) => {
            return Err(invalid(
                "content.after must be an array of job ids (or one comma-separated string)".into(),
            ));
        }
    };
    // A pipeline's steps may arrive out of order through the inbox: the steps BEFORE this
    // job in its own pipeline need not exist yet (a step whose predecessor never comes fails
    // when it would start). Only those: a pipeline of at most four steps naming this job, so
    // `pipeline.steps` cannot wave through any other unknown id.
    let steps: Vec<&str> = msg
        .content
        .get("pipeline")
        .and_then(|p| p.get("steps"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let own: Vec<String> = match steps.iter().position(|s| *s == id) {
        Some(at) if steps.len() <= crate::model::flow::PIPELINE_STEPS.len() => {
            steps[..at].iter().map(|s| s.to_string()).collect()
        }
        _ => Vec::new(),
    };
    let after = match after {
        Some(list) if !list.is_empty() => Some(check_after(store, who, id, list, &own)?),
        _ => None,
    };
    let after_any = match msg.content.get("after_any") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(invalid("content.after_any must be true or false".into())),
    };
    if after_any == Some(true) && after.is_none() {
        return Err(invalid(
            "content.after_any needs content.after (the jobs to wait for)".into(),
        ));
    }
    let pipeline = match msg.content.get("pipeline") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => return Err(invalid("content.pipeline must be an object".into())),
    };
    let pending_prd = match msg.content.get("prd").and_then(Value::as_str) {
        Some(p) if prd_pending(msg, p) => Some(p.to_string()),
        _ => None,
    };
    let retry = match msg.content.get("retry") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_retry(v).map_err(|e| invalid(format!("content.retry: {e}")))?),
    };
    Ok(Flow {
        priority,
        after,
        after_any,
        retry,
        schema_version: Some(crate::model::flow::SCHEMA_VERSION.to_string()),
        pipeline,
        pending_prd,
    })
}

/// Splits `a,b , c` into ids (empty pieces dropped).
pub fn split_ids(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// A retry policy from JSON, bounds checked.
pub fn parse_retry(v: &Value) -> Result<RetryPolicy, String> {
    let p: RetryPolicy = serde_json::from_value(v.clone()).map_err(|e| {
        format!("{e} (expected {{\"max_attempts\": N, \"backoff_seconds\": S, \"on\": [worker_died, timeout, api_error, machine_lost]}})")
    })?;
    if !(1..=crate::model::flow::MAX_ATTEMPTS).contains(&p.max_attempts) {
        return Err(format!(
            "max_attempts {} must be from 1 to {}",
            p.max_attempts,
            crate::model::flow::MAX_ATTEMPTS
        ));
    }
    if p.backoff_seconds > crate::model::flow::MAX_BACKOFF_SECONDS {
        return Err(format!(
            "backoff_seconds {} must be at most {} (one day)",
            p.backoff_seconds,
            crate::model::flow::MAX_BACKOFF_SECONDS
        ));
    }
    Ok(p)
}

/// Checks the dependencies of job `id`: each a safe id of an existing job that `who` may
/// see (any queue, any state; PRD §10 — another user's private job is as unknown as a
/// missing one), none the job itself, no more than [`MAX_AFTER`], and no cycle back to `id`
/// through the dependencies' own `after` lists.
pub fn check_after(
    store: &Store,
    who: &crate::permissions::Caller,
    id: &str,
    list: Vec<String>,
    may_be_pending: &[String],
) -> Result<Vec<String>, RouteError> {
    let invalid = RouteError::Invalid;
    if list.len() > MAX_AFTER {
        return Err(invalid(format!(
            "content.after names {} jobs; at most {MAX_AFTER}",
            list.len()
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for dep in list {
        if !is_safe_id(&dep) {
            return Err(invalid(format!("content.after: {dep:?} is not a job id")));
        }
        if dep == id {
            return Err(invalid(format!(
                "content.after: job {id} cannot wait for itself"
            )));
        }
        let seen = || crate::permissions::sees_job(store, who, &dep);
        // A pipeline's earlier step may not be here yet; one that is must be visible.
        let pending = may_be_pending.contains(&dep) && store.find_job(&dep).is_err();
        if !pending && !seen() {
            return Err(RouteError::NotFound(format!(
                "content.after: {}",
                crate::permissions::unknown_job(&dep)
            )));
        }
        if !out.contains(&dep) {
            out.push(dep);
        }
    }
    // A cycle can only close through a job that already waits (directly or not) for `id`.
    let mut seen: HashSet<String> = HashSet::new();
    let mut stack: Vec<(String, Vec<String>)> =
        out.iter().map(|d| (d.clone(), vec![d.clone()])).collect();
    while let Some((cur, path)) = stack.pop() {
        if !seen.insert(cur.clone()) {
            continue;
        }
        if seen.len() > MAX_WALK {
            return Err(invalid(format!(
                "content.after: the dependencies reach more than {MAX_WALK} jobs; cannot check them for cycles"
            )));
        }
        let Ok(loc) = store.find_job(&cur) else {
            continue;
        };
        let Ok(job) = store.job(&loc) else { continue };
        for next in job.config.after.unwrap_or_default() {
            let mut p = path.clone();
            p.push(next.clone());
            if next == id {
                return Err(invalid(format!(
                    "content.after: dependency cycle {id} -> {} -> {id}",
                    p[..p.len() - 1].join(" -> ")
                )));
            }
            stack.push((next, p));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_self_and_cyclic_dependencies_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(&d.path().join("S")).unwrap();
        let job = |after: &[&str]| {
            serde_json::json!({"schema_version": "0.6", "config": {"project": "P",
                "working_directory": "/tmp", "queue_time": "2025-01-01T00:00:00Z",
                "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [],
                "task_description": "t", "supporting_data": {}, "timeout_seconds": 60,
                "after": after},
              "runtime": {"status": "queued", "start_time": null, "finish_time": null,
                "process_id": null, "llm_process_id": null, "error": null, "output": null}})
        };
        let put = |id: &str, after: &[&str]| {
            crate::store::write_json_atomic(
                &store.job_path("poplar", crate::model::JobStatus::Queued, id),
                &job(after),
            )
            .unwrap()
        };
        // new ← a ← b: a job waiting (through b) for the one being submitted.
        put("a", &["new"]);
        put("b", &["a"]);
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let e = check_after(
            &store,
            &crate::permissions::Caller::Trusted,
            "new",
            v(&["b"]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cycle new -> b -> a -> new"), "{e}");
        let e = check_after(
            &store,
            &crate::permissions::Caller::Trusted,
            "new",
            v(&["new"]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot wait for itself"), "{e}");
        let e = check_after(
            &store,
            &crate::permissions::Caller::Trusted,
            "new",
            v(&["ghost"]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown job ghost"), "{e}");
        let e = check_after(
            &store,
            &crate::permissions::Caller::Trusted,
            "new",
            v(&["../x"]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is not a job id"), "{e}");
        put("c", &[]);
        assert_eq!(
            check_after(
                &store,
                &crate::permissions::Caller::Trusted,
                "new",
                v(&["c", "c"]),
                &[]
            )
            .unwrap(),
            ["c"]
        );
        assert!(
            check_after(
                &store,
                &crate::permissions::Caller::Trusted,
                "new",
                v(&["ghost"]),
                &v(&["ghost"])
            )
            .is_ok()
        );
    }
}
