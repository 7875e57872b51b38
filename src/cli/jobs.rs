//! Commands that talk to a running queue manager over D-Bus: `cancel-job`, `logs`, and the
//! live state `list-queues`/`view-queue` show when a manager is up.

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, open_store};
use crate::bus::Bus;
use crate::bus::queue::{QueueState, live_state, queue_proxy};
use crate::model::JobStatus;
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// Upper bound for talking to the bus from the CLI (a wedged bus must not hang a listing).
pub(super) const BUS_LIMIT: Duration = Duration::from_secs(5);

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the async runtime: {e}")))
}

pub(super) async fn connect(bus: &Bus) -> zbus::Result<zbus::Connection> {
    bus.builder().build().await
}

/// Live state of each queue whose manager answers on `bus` (none: no live state); queues
/// without one are absent. Never fails: the files are the fallback.
pub(super) fn live_states(bus: Option<&Bus>, queues: &[String]) -> HashMap<String, QueueState> {
    let Some(bus) = bus else {
        return HashMap::new();
    };
    let Ok(rt) = runtime() else {
        return HashMap::new();
    };
    rt.block_on(async {
        let work = async {
            let mut out = HashMap::new();
            let Ok(conn) = connect(bus).await else {
                return out;
            };
            for q in queues {
                if let Some(s) = live_state(&conn, q).await {
                    out.insert(q.clone(), s);
                }
            }
            out
        };
        tokio::time::timeout(BUS_LIMIT, work)
            .await
            .unwrap_or_default()
    })
}

/// Awaits `call` to queue `queue`'s manager for at most [`BUS_LIMIT`], with the errors a user
/// reads (no manager, refused, no answer in time).
pub(super) async fn queue_call<T>(
    queue: &str,
    bus: &Bus,
    call: impl std::future::Future<Output = zbus::Result<T>>,
) -> Result<T, CliError> {
    match tokio::time::timeout(BUS_LIMIT, call).await {
        Ok(r) => r.map_err(|e| bus_error(e, queue, bus)),
        Err(_) => Err(CliError::new(format!(
            "the queue manager for {queue} did not answer within {} s",
            BUS_LIMIT.as_secs()
        ))),
    }
}

pub(super) fn bus_error(e: zbus::Error, queue: &str, bus: &Bus) -> CliError {
    let text = e.to_string();
    if text.contains("ServiceUnknown") || text.contains("NameHasNoOwner") {
        let user = if bus.is_system() { "" } else { " --user" };
        return CliError::new(format!(
            "the queue manager for {queue} is not running on the {bus} bus \
             (start it with `systemctl{user} start queue-manager@{queue}`)"
        ));
    }
    match e {
        zbus::Error::MethodError(name, msg, _) => {
            let name = name.as_str();
            let short = name.rsplit('.').next().unwrap_or(name);
            CliError::new(format!("{short}: {}", msg.unwrap_or_default()))
        }
        other => CliError::new(format!("D-Bus ({bus} bus): {other}")),
    }
}

/// `cancel-job ID`: asks the job's queue manager to cancel it.
pub(super) fn cancel_job(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    let loc = store.find_job(id)?;
    if !matches!(loc.status, JobStatus::Queued | JobStatus::Running) {
        return Err(CliError::new(format!(
            "job {id} has already {}",
            loc.status.name()
        )));
    }
    let bus = g.first_bus();
    let rt = runtime()?;
    let asked = rt.block_on(async {
        let call = async {
            let conn = connect(&bus).await?;
            queue_proxy(&conn, &loc.queue).await?.cancel_job(id).await
        };
        queue_call(&loc.queue, &bus, call).await
    });
    // No manager to ask: a job waiting in a queue nobody serves is cancelled here.
    let unserved = match asked {
        Ok(()) => None,
        Err(e) => match super::cancel_unserved::cancel_if_unserved(g, &store, &loc, id) {
            Ok(Some(why)) => Some(why),
            Ok(None) => return Err(e),
            Err(here) => {
                return Err(CliError::new(format!(
                    "{}; cancelling it here failed too: {}",
                    e.message, here.message
                )));
            }
        },
    };
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({"job_id": id, "queue": loc.queue, "cancelled": true}),
        )?,
        Format::Text => match unserved {
            None => writeln!(out, "Cancelled job {id} (queue {})", loc.queue)?,
            Some(why) => writeln!(
                out,
                "Cancelled job {id} (queue {}; {why}, so the CLI took it from the queue)",
                loc.queue
            )?,
        },
    }
    Ok(())
}

fn job_done(store: &crate::store::Store, id: &str) -> bool {
    store
        .find_job(id)
        .is_ok_and(|l| matches!(l.status, JobStatus::Finished | JobStatus::Failed))
}

/// `logs ID [--follow SECONDS]`: the job's live output from the journal (`JOB_ID=` field);
/// where there is no journal, the output stored in the job file.
pub(super) fn logs(g: &GlobalArgs, out: &mut dyn Write, id: &str) -> CliResult {
    let store = open_store(g)?;
    store.find_job(id)?;
    let deadline = g.follow.map(|s| Instant::now() + Duration::from_secs(s));
    if crate::systemd::journal_readable() {
        let mut cmd = std::process::Command::new("journalctl");
        cmd.args(["--no-pager", "-o", "cat"]);
        if deadline.is_some() {
            cmd.arg("--follow");
        }
        // `--` before the match: nothing after it is read as an option.
        cmd.arg("--").arg(format!("JOB_ID={id}"));
        let mut child = cmd
            .spawn()
            .map_err(|e| CliError::new(format!("journalctl: {e}")))?;
        if let Some(d) = deadline {
            // Follow until the job has ended (or the time is up), then stop journalctl.
            while Instant::now() < d && !job_done(&store, id) {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            // Let the last lines through before stopping.
            std::thread::sleep(Duration::from_millis(500));
            let _ = child.kill();
        }
        let _ = child.wait();
        return Ok(());
    }
    if let Some(d) = deadline {
        while Instant::now() < d && !job_done(&store, id) {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let loc = store.find_job(id)?;
    let job = store.job(&loc)?;
    if g.verbose {
        super::render::eprint_message(
            "",
            "no systemd journal here; showing the output stored in the job file",
        );
    }
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({"job_id": id, "status": loc.status.name(),
                "output": job.runtime.output, "error": job.runtime.error}),
        )?,
        Format::Text => {
            if let Some(o) = &job.runtime.output {
                out.write_all(o.as_bytes())?;
                if !o.ends_with('\n') {
                    writeln!(out)?;
                }
            }
            if let Some(e) = &job.runtime.error {
                writeln!(out, "error: {e}")?;
            }
        }
    }
    Ok(())
}
