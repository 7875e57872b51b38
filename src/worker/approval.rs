//! The worker's side of approvals (issue 15). While an agent runs, the worker listens on a
//! private abstract Unix socket; the agent's permission requests come in on it (from
//! `agent-worker mcp-approvals`, the MCP server Claude Code starts, or from agentshell), one
//! JSON line each: `{"tool": …, "input": …}`. The worker answers each with one line
//! `{"allow": bool, "message": …}`: by the job's `always` rules, the queue's rules or its
//! default, or — when a human is to be asked — by writing a request file into the store
//! (`Queues/<q>/Jobs/approvals/`, where the queue manager publishes it on D-Bus) and waiting
//! for the answer file, denying at the deadline. Every decision is recorded for
//! `runtime.approvals`.
//!
//! Trust: the store is shared input, so an answer file counts only when it carries the
//! proof of the job's approval key (`ApprovalAnswer::verify`), which only the queue manager
//! that started the job and this worker hold (handed on the gate, never in the store); a
//! planted answer is removed and ignored. Request ids end in random hex, so none can be
//! answered before it is asked. A worker that was handed no key asks no one: what would be
//! asked is denied.
//!
//! A Slurm batch step a root manager runs as the job's own account (the relay, issue 27)
//! cannot reach the store and must hold nothing that signs answers (the agent is that same
//! account): it prints each request on its standard output (the relay file the manager reads
//! with the account's rights, which puts it in the store), and takes an answer from the file
//! the manager appends to only when it carries the manager's Ed25519 signature; the step
//! holds the public key only ([`Answers::Relay`]).
//!
//! Why a socket and files: the agent runs as the job's user and may not write the store
//! (system mode), nor own the queue's bus name; the worker can write the store in both
//! modes, and a file survives a queue-manager restart. The socket is abstract (no file whose
//! owner matters) and only the job's account (or root) may connect (`SO_PEERCRED`).
#![allow(unsafe_code)]

use crate::model::Timestamp;
use crate::model::approval::{
    ApprovalAnswer, ApprovalPolicy, ApprovalRecord, ApprovalRequest, Decision, subject, summary,
};
use crate::store::Store;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// Largest request line read from the socket.
const MAX_LINE: u64 = 4 << 20;

/// How often the worker looks for an answer file.
const POLL: Duration = Duration::from_millis(100);

// The wire format (one `Request` line in, one `Verdict` line out) is agentshell's, defined
// once in `agent::transport::job`: agentshell jobs ask with it, and so does `mcp-approvals`.
use crate::agent::transport::job::Request as Incoming;
pub use crate::agent::transport::job::{Verdict, request};

struct Shared {
    root: PathBuf,
    queue: String,
    job_id: String,
    policy: ApprovalPolicy,
    peer_uid: u32,
    answers: Answers,
    seq: AtomicU64,
    job_rules: Mutex<Vec<JobRule>>,
    records: Mutex<Vec<ApprovalRecord>>,
    issued: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// How the worker tells its queue manager's answers from forged ones.
#[derive(Debug, Clone)]
pub enum Answers {
    /// Handed nothing: what would be asked of a person is denied.
    Unkeyed,
    /// Through the store: answers signed with the job's approval key (handed on the gate).
    Store(String),
    /// A relay step's: requests printed on standard output after
    /// [`ASK_MARKER`](crate::model::relay::ASK_MARKER), answers read from `file` (the
    /// account's own, appended to by the manager), taken only when signed by the holder of
    /// `public_key`'s private half (the manager).
    Relay {
        /// The file the manager appends its answers to.
        file: PathBuf,
        /// The public half of the manager's signing key for this job (hex).
        public_key: String,
    },
}

/// The listening side, for the life of one agent run.
pub struct Broker {
    name: String,
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Broker {
    /// Listens on a new abstract socket for job `job_id` of `queue`; only `peer_uid` (the
    /// agent's account) and root may connect.
    pub fn start(
        root: PathBuf,
        queue: &str,
        job_id: &str,
        policy: ApprovalPolicy,
        peer_uid: u32,
        answers: Answers,
    ) -> std::io::Result<Broker> {
        let name = format!("agentstore-approvals-{}", uuid::Uuid::new_v4().simple());
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let listener = UnixListener::bind_addr(&addr)?;
        let shared = Arc::new(Shared {
            root,
            queue: queue.to_string(),
            job_id: job_id.to_string(),
            policy,
            peer_uid,
            answers,
            seq: AtomicU64::new(0),
            job_rules: Mutex::new(Vec::new()),
            records: Mutex::new(Vec::new()),
            issued: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("approvals".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(Broker {
            name,
            shared,
            accept: Some(accept),
        })
    }

    /// The socket's abstract name (without the leading NUL).
    pub fn socket_name(&self) -> &str {
        &self.name
    }

    /// The seconds a request waits for a human.
    pub fn deadline_seconds(&self) -> u64 {
        self.shared.policy.deadline()
    }

    /// Stops listening, removes this job's request and answer files and returns what was
    /// decided, in order.
    pub fn finish(mut self) -> Vec<ApprovalRecord> {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        if let Ok(addr) = SocketAddr::from_abstract_name(self.name.as_bytes()) {
            let _ = UnixStream::connect_addr(&addr);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        if let Ok(store) = Store::open(&self.shared.root) {
            for id in self.shared.issued.lock().iter() {
                store.remove_approval(&self.shared.queue, id);
            }
        }
        let mut records = self.shared.records.lock().clone();
        records.sort_by(|a, b| (a.at, &a.request_id).cmp(&(b.at, &b.request_id)));
        records
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        match peer_uid(&conn) {
            Some(uid) if uid == shared.peer_uid || uid == 0 => {}
            other => {
                tracing::warn!(job_id = %shared.job_id, "approval socket: refused a connection from uid {other:?}");
                continue;
            }
        }
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("approval".into())
            .spawn(move || serve(conn, &s));
    }
}

fn peer_uid(conn: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor and a buffer of the size given; the result is checked.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

fn serve(conn: UnixStream, shared: &Shared) {
    let mut line = String::new();
    let read = {
        use std::io::Read;
        let mut r = BufReader::new((&conn).take(MAX_LINE));
        r.read_line(&mut line)
    };
    let verdict = match read {
        Ok(_) => match serde_json::from_str::<Incoming>(line.trim()) {
            Ok(req) => decide(shared, &req.tool, req.input),
            Err(e) => Verdict {
                allow: false,
                message: format!("approval request is not valid JSON: {e}"),
            },
        },
        Err(e) => Verdict {
            allow: false,
            message: format!("approval request could not be read: {e}"),
        },
    };
    let mut out = serde_json::to_vec(&verdict).unwrap_or_default();
    out.push(b'\n');
    let mut w = &conn;
    let _ = w.write_all(&out);
}

fn record(
    shared: &Shared,
    request_id: &str,
    tool: &str,
    summary: &str,
    v: &Verdict,
    by: &str,
    always: bool,
) {
    let message = (!v.message.is_empty()).then(|| v.message.clone());
    shared.records.lock().push(ApprovalRecord {
        request_id: request_id.to_string(),
        tool: tool.to_string(),
        summary: summary.to_string(),
        allow: v.allow,
        always,
        by: by.to_string(),
        at: Timestamp::now(),
        message,
    });
    tracing::info!(job_id = %shared.job_id, queue = %shared.queue, request_id,
        "approval: {tool} {} by {by}", if v.allow { "allowed" } else { "denied" });
}

/// Decides one request (see the module text).
fn decide(shared: &Shared, tool: &str, input: Value) -> Verdict {
    let n = shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let request_id = new_request_id(&shared.job_id, n);
    let subj = subject(&input);
    let sum = summary(tool, &input);
    let job_rule = shared
        .job_rules
        .lock()
        .iter()
        .find(|r| r.matches(tool, &subj))
        .map(|r| r.decision);
    let (decision, by) = match job_rule {
        Some(d) => (d, "job rule"),
        None => match shared.policy.decide(&[], tool, &subj) {
            (d, Some(_)) => (d, "queue rule"),
            (d, None) => (d, "queue default"),
        },
    };
    match decision {
        Decision::Allow | Decision::Deny => {
            let allow = decision == Decision::Allow;
            let v = Verdict {
                allow,
                message: if allow {
                    String::new()
                } else {
                    format!("{tool} denied by the {by} of queue {}", shared.queue)
                },
            };
            record(shared, &request_id, tool, &sum, &v, by, false);
            v
        }
        Decision::Ask => ask(shared, &request_id, tool, &sum, input),
    }
}

fn ask(shared: &Shared, request_id: &str, tool: &str, sum: &str, input: Value) -> Verdict {
    let req_input = input.clone();
    let secs = shared.policy.deadline();
    let now = Timestamp::now();
    let req = ApprovalRequest {
        request_id: request_id.to_string(),
        job_id: shared.job_id.clone(),
        tool: tool.to_string(),
        summary: sum.to_string(),
        input,
        requested_at: now,
        deadline: now.plus_secs(secs),
    };
    let deny = |message: String| Verdict {
        allow: false,
        message,
    };
    let asked = match &shared.answers {
        Answers::Unkeyed => Err(format!(
            "{tool} needs a person's approval, and this job's worker was started without the key that tells its queue manager's answers from forged ones: denied"
        )),
        Answers::Store(key) => ask_in_store(shared, &req, key),
        Answers::Relay { file, public_key } => ask_through_relay(shared, &req, file, public_key),
    };
    let answer = match asked {
        Ok(a) => a,
        Err(message) => {
            let v = deny(message);
            record(shared, request_id, tool, sum, &v, "worker", false);
            return v;
        }
    };
    if answer.always {
        shared.job_rules.lock().push(JobRule {
            tool: tool.to_string(),
            subject: subject(&req_input),
            decision: if answer.allow {
                Decision::Allow
            } else {
                Decision::Deny
            },
        });
    }
    let message = if answer.allow || !answer.message.is_empty() {
        answer.message.clone()
    } else {
        format!("denied by {}", answer.by)
    };
    let v = Verdict {
        allow: answer.allow,
        message,
    };
    record(shared, request_id, tool, sum, &v, &answer.by, answer.always);
    v
}

/// The denial at a request's deadline (`key`: signed for the store).
fn deadline_answer(request_id: &str, secs: u64) -> ApprovalAnswer {
    ApprovalAnswer {
        request_id: request_id.to_string(),
        allow: false,
        always: false,
        message: format!("no answer within {secs} s: denied"),
        by: "deadline".into(),
        at: Timestamp::now(),
        proof: String::new(),
    }
}

/// Asks through the store: writes the request, waits for the manager's signed answer (or
/// writes the deadline's). `Err`: why it could not be asked.
fn ask_in_store(
    shared: &Shared,
    req: &ApprovalRequest,
    key: &str,
) -> Result<ApprovalAnswer, String> {
    let request_id = req.request_id.as_str();
    let secs = shared.policy.deadline();
    let store =
        Store::open(&shared.root).map_err(|e| format!("the approval could not be asked: {e}"))?;
    shared.issued.lock().push(request_id.to_string());
    store
        .write_approval_request(&shared.queue, req)
        .map_err(|e| {
            format!(
                "the approval could not be asked ({}: {e})",
                store
                    .approval_request_path(&shared.queue, request_id)
                    .display()
            )
        })?;
    let end = Instant::now() + Duration::from_secs(secs);
    Ok(loop {
        if let Some(a) = valid_answer(&store, shared, request_id, key) {
            break a;
        }
        if Instant::now() >= end || shared.stop.load(Ordering::SeqCst) {
            let mine = deadline_answer(request_id, secs).sign(key);
            match store.write_approval_answer(&shared.queue, &mine) {
                Ok(true) => break mine,
                // Someone answered in the meantime: theirs stands if it is the manager's.
                Ok(false) => match valid_answer(&store, shared, request_id, key) {
                    Some(a) => break a,
                    None => break mine,
                },
                Err(e) => {
                    tracing::warn!(job_id = %shared.job_id, "cannot write the deadline answer: {e}");
                    break mine;
                }
            }
        }
        std::thread::sleep(POLL);
    })
}

/// How often a relay step reads its answers file (the account's home, often on a network
/// filesystem shared with the compute nodes).
const RELAY_POLL: Duration = Duration::from_millis(250);

/// The most of a relay answers file read (each answer is a few KiB; a job asks at most
/// `MAX_RELAYED_REQUESTS` of the manager).
const RELAY_ANSWERS_LIMIT: u64 = 8 << 20;

/// Asks through the relay: prints the request for the manager, waits for an answer in
/// `file` signed by the holder of `public_key`'s private half; denied at the deadline.
fn ask_through_relay(
    shared: &Shared,
    req: &ApprovalRequest,
    file: &std::path::Path,
    public_key: &str,
) -> Result<ApprovalAnswer, String> {
    let secs = shared.policy.deadline();
    let line =
        serde_json::to_string(req).map_err(|e| format!("the approval could not be asked: {e}"))?;
    // One write of a whole line, starting on a line of its own.
    let text = format!("\n{}{line}\n", crate::model::relay::ASK_MARKER);
    {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| format!("the approval could not be asked (standard output: {e})"))?;
    }
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(a) = relayed_answer(file, &req.request_id, public_key) {
            return Ok(a);
        }
        if Instant::now() >= end || shared.stop.load(Ordering::SeqCst) {
            return Ok(deadline_answer(&req.request_id, secs));
        }
        std::thread::sleep(RELAY_POLL);
    }
}

/// The manager's answer to `request_id` in a relay answers file: the first line that is an
/// answer to it signed by the holder of `public_key`'s private half. Any other line (written
/// by the account, or the agent) is no answer.
fn relayed_answer(
    file: &std::path::Path,
    request_id: &str,
    public_key: &str,
) -> Option<ApprovalAnswer> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    f.take(RELAY_ANSWERS_LIMIT).read_to_end(&mut text).ok()?;
    text.split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<ApprovalAnswer>(l).ok())
        .find(|a| a.request_id == request_id && a.verify_relayed(public_key))
}

/// What a person's "always" answer covers for the rest of the job: this tool with this very
/// subject (Bash's or agentshell's whole command line, a file tool's path, else the whole
/// input), never the tool as a whole: "always" for `git status` must not let `rm -rf .` or
/// `cp ../secret x` run unasked (issue 28). Compared exactly, not as a glob (a command may
/// hold `*` and `?`), and only the subject as the person saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JobRule {
    tool: String,
    subject: String,
    decision: Decision,
}

impl JobRule {
    fn matches(&self, tool: &str, subject: &str) -> bool {
        self.tool == tool && self.subject == subject
    }
}

/// A new request id of job `job_id`: `<job_id>-a<n>-<24 random hex digits>`. The number is
/// for people; the random part makes it unguessable, so no answer can be planted before the
/// request exists.
pub fn new_request_id(job_id: &str, n: u64) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{job_id}-a{n}-{}", &random[..24])
}

/// The job's approval key from the gate's third line (`None`: none handed, or not one).
pub fn handed_key(line: &str) -> Option<String> {
    let k = line.trim();
    uuid::Uuid::parse_str(k).ok().map(|_| k.to_string())
}

/// The answer to `request_id` when its queue manager (or this worker) wrote it: signed with
/// the job's `key`. One that is not is removed (so the manager's can take its place) and
/// logged, never taken.
fn valid_answer(
    store: &Store,
    shared: &Shared,
    request_id: &str,
    key: &str,
) -> Option<ApprovalAnswer> {
    let a = store.approval_answer(&shared.queue, request_id)?;
    if a.request_id == request_id && a.verify(key) {
        return Some(a);
    }
    tracing::warn!(job_id = %shared.job_id, queue = %shared.queue, request_id,
        "approval: an answer not written by this job's queue manager (no valid proof) was removed and ignored");
    let _ = crate::store::safe::remove_file(&store.approval_answer_path(&shared.queue, request_id));
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_covers_the_same_subject_only() {
        let r = JobRule {
            tool: "Bash".into(),
            subject: "git status".into(),
            decision: Decision::Allow,
        };
        assert!(r.matches("Bash", "git status"));
        for other in ["rm -rf .", "git status; rm -rf .", "git status ", "git"] {
            assert!(!r.matches("Bash", other), "{other}");
        }
        assert!(!r.matches("run_command", "git status"));
        // A subject that looks like a glob is only itself.
        let g = JobRule {
            subject: "ls *".into(),
            ..r
        };
        assert!(g.matches("Bash", "ls *"));
        assert!(!g.matches("Bash", "ls ../outside_secret.txt"));
    }
}
