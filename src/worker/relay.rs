//! The Slurm relay (issue 27): a batch step submitted by a root queue manager runs as the job's
//! own account, which cannot read or write the store. It gets the job and the queue's settings
//! on stdin (the batch script Slurm keeps for the job and its account), runs the job as the
//! worker always does against a scratch store of its own (a private folder in `$TMPDIR`), and
//! ends by printing the job's final document on one line of its standard output after
//! [`END_MARKER`](crate::model::relay::END_MARKER). That output is the job's `--output=` file, which Slurm opens as the account
//! in the account's own folder; the queue manager reads it back with the account's rights and
//! takes from it only what the job says about its own run (docs/trust-model.md).
//!
//! The step holds no approval key (the account could read it and sign answers to its own
//! requests). A person-approval it asks for goes out on the same output (the manager puts it
//! in the store, where its owner lists and answers it); the answer comes back in a file of the
//! account's own (the third input line names it), signed by the manager with a key whose
//! public half alone the step holds ([`crate::worker::approval::Answers::Relay`]).

use super::{WorkerArgs, WorkerError, run_job};
use crate::model::relay::{END_MARKER, Handover};
use crate::model::{DocKind, Job, JobStatus, QueueConfig};
use crate::store::Store;
use crate::worker::approval::Answers;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

/// The most read from stdin (the job and the queue's settings).
const MAX_INPUT: u64 = 16 << 20;

/// Runs the job handed on stdin as this account; prints its end after [`END_MARKER`].
/// `store_root`: the queue's real store (never opened here; a research document inside it is
/// the orchestrator's to write).
pub fn run(queue: &str, job_id: &str, store_root: Option<&Path>) -> Result<JobStatus, WorkerError> {
    let mut input = std::io::stdin().lock().take(MAX_INPUT);
    let (mut job_line, mut config_line, mut handover_line) =
        (String::new(), String::new(), String::new());
    let failed = |what: &str, e: &dyn std::fmt::Display| WorkerError::Relay(format!("{what}: {e}"));
    input
        .read_line(&mut job_line)
        .and_then(|_| input.read_line(&mut config_line))
        .and_then(|_| input.read_line(&mut handover_line))
        .map_err(|e| failed("reading the job on stdin", &e))?;
    // Without it (a manager of an earlier version) nothing is asked of a person.
    let answers = match serde_json::from_str::<Handover>(handover_line.trim_end()) {
        Ok(h) => Answers::Relay {
            file: h.answers,
            public_key: h.public_key,
        },
        Err(_) => Answers::Unkeyed,
    };
    let config: QueueConfig = serde_json::from_str(config_line.trim_end())
        .map_err(|e| failed("the queue's settings handed on stdin", &e))?;
    let mut job: serde_json::Value = serde_json::from_str(job_line.trim_end())
        .map_err(|e| failed("the job handed on stdin", &e))?;
    if let (Some(root), Some(data)) = (
        store_root,
        job.pointer_mut("/config/supporting_data")
            .and_then(|d| d.as_object_mut()),
    ) {
        let inside = data
            .get(crate::model::RESEARCH_DOCUMENT_KEY)
            .and_then(|v| v.as_str())
            .is_some_and(|d| Path::new(d).starts_with(root));
        if inside {
            data.remove(crate::model::RESEARCH_DOCUMENT_KEY);
        }
    }
    let scratch = Scratch::new(job_id).map_err(|e| failed("a scratch folder in $TMPDIR", &e))?;
    let store = Store::open(&scratch.0)?;
    let running = store.job_path(queue, JobStatus::Running, job_id);
    let bytes = serde_json::to_vec_pretty(&job).map_err(|e| failed("the job", &e))?;
    [JobStatus::Running, JobStatus::Finished, JobStatus::Failed]
        .iter()
        .try_for_each(|s| crate::store::safe::create_dir_all(&store.jobs_dir(queue, *s)))
        .and_then(|_| crate::store::write_atomic(&running, &bytes))
        .map_err(|e| failed("the job's scratch copy", &e))?;
    let args = WorkerArgs {
        root: scratch.0.clone(),
        queue: queue.to_string(),
        job_id: job_id.to_string(),
        run_as: None,
        gate: false,
    };
    let (status, at) = run_job(&args, store, Some(config), &answers)?;
    let end = Store::open(&scratch.0)?;
    let done: Job = end.read_doc(DocKind::Job, &at)?;
    let line = serde_json::to_string(&done).map_err(|e| failed("the job's end", &e))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{END_MARKER}{line}")
        .and_then(|_| out.flush())
        .map_err(|e| failed("writing the job's end to stdout", &e))?;
    Ok(status)
}

/// A private folder removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(job_id: &str) -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let name: String = job_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(64)
            .collect();
        let dir = std::env::temp_dir().join(format!(
            "agentstore-relay-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
