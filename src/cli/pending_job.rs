//! A job asked for but not made yet (issue 32). The CLI prints `Job queued: <id>` as soon as
//! it has written the request into `messaging/inbox/` (the id is the one the orchestrator will
//! give the job); until an orchestratord routes it — seconds on a machine whose
//! `agentstore-orchestrator.path` is active, longer through a sync engine, never without one —
//! there is no job file, and `view-job <id>` said only "job not found". It now says where the
//! request waits, and `view-job --follow` waits for the job instead of failing at once.

use crate::model::Message;
use crate::permissions::Caller;
use crate::store::{Scanned, Store, scan_each};

/// The most inbox files looked at: the inbox holds what is not routed yet, a handful.
const MAX_SCANNED: usize = 10_000;

/// Why job `id` is not there yet, when a request `who` may see waits in `messaging/inbox/`
/// that will make it: the request's command, project, time and file, and what routes it.
pub(super) fn waiting_request(store: &Store, who: &Caller, id: &str) -> Option<String> {
    let dir = store.messaging_dir("inbox");
    let mut found: Option<(String, Message)> = None;
    let mut seen = 0usize;
    let _ = scan_each(&dir, |entry| {
        let Scanned::Document(name) = entry else {
            return;
        };
        seen += 1;
        if found.is_some() || seen > MAX_SCANNED || !name.ends_with(".json") {
            return;
        }
        let Ok(msg) = store.message(&dir.join(name)) else {
            return;
        };
        if crate::orchestrator::job_id_for(&msg.correlation_id) == id
            && who.can_see_message(msg.user.as_deref())
        {
            found = Some((name.to_string(), msg));
        }
    });
    let (file, msg) = found?;
    let project = msg
        .project
        .as_deref()
        .map(|p| format!(", project {p}"))
        .unwrap_or_default();
    Some(format!(
        "job {id} is not made yet: its request ({}{project}, sent {}) waits in messaging/inbox/{file} \
         for an orchestrator to route it. That takes seconds where agentstore-orchestrator.path \
         is active (`orchestrator doctor` checks this machine's units), longer when another \
         machine routes through the sync engine; `view-job {id} --follow 60` waits for it",
        msg.command, msg.queue_time
    ))
}
