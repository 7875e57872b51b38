//! What the approvals tests share (tests/approvals_claude.rs, tests/approvals_agent.rs): the
//! project's users, `busctl call … Answer` as a Unix user, and the Queue1 approval signals;
//! and with tests/worker_agent_real.rs, the set-up of a queue whose jobs run agentshell.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env::{PrivateBus, QueueEnv, job_login};
use futures_util::StreamExt;
use serde_json::json;
use std::os::unix::process::CommandExt;

/// chenry (the job account, a plain user who owns the project) and mallory (`nobody`, a
/// plain user with no claim on it).
pub fn add_users(env: &QueueEnv) {
    let store = env.store();
    std::fs::write(
        store.user_path("chenry"),
        json!({"id": "chenry", "name": "C", "email": "c@x", "permissions": "user",
               "unix_user": job_login()})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        store.user_path("mallory"),
        json!({"id": "mallory", "name": "M", "email": "m@x", "permissions": "user",
               "unix_user": "nobody"})
        .to_string(),
    )
    .unwrap();
}

/// `busctl call … Answer` on `env`'s queue as `uid`; (success, stderr).
pub fn answer_as(
    bus: &PrivateBus,
    env: &QueueEnv,
    uid: u32,
    req: &str,
    allow: bool,
    always: bool,
    message: &str,
) -> (bool, String) {
    let gid = nix::unistd::User::from_uid(uid.into())
        .unwrap()
        .map(|u| u.gid.as_raw())
        .unwrap_or(uid);
    let o = std::process::Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .arg("call")
        .arg(agentstore::bus::queue_bus_name(&env.queue))
        .arg(agentstore::bus::queue_object_path(&env.queue))
        .arg("org.agentstore.Queue1")
        .args(["Answer", "sbbs", req])
        .arg(allow.to_string())
        .arg(always.to_string())
        .arg(message)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The uid of the job account (the project's owner).
pub fn owner_uid() -> u32 {
    nix::unistd::User::from_name(&job_login())
        .unwrap()
        .unwrap()
        .uid
        .as_raw()
}

pub fn nobody() -> u32 {
    nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("user nobody")
        .uid
        .as_raw()
}

/// A request as `ListApprovals` shows it: (job_id, request_id, tool, summary, input_json,
/// deadline).
pub type Requested = (String, String, String, String, String, String);

/// The requests of `env`'s queue as they are asked: each `ApprovalRequested` signal (ids
/// only) followed by the manager's `ListApprovals` (this process is a trusted caller).
pub async fn requests(
    bus: &PrivateBus,
    env: &QueueEnv,
) -> tokio::sync::mpsc::UnboundedReceiver<Requested> {
    let conn = bus.connect().await;
    let proxy = agentstore::bus::queue::queue_proxy(&conn, &env.queue)
        .await
        .unwrap();
    let mut stream = proxy.receive_approval_requested().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _keep = conn;
        while let Some(sig) = stream.next().await {
            let a = sig.args().unwrap();
            let id = a.request_id().clone();
            let listed = proxy.list_approvals().await.unwrap_or_default();
            if let Some(r) = listed.into_iter().find(|r| r.1 == id) {
                let _ = tx.send(r);
            }
        }
    });
    rx
}

/// The request ids of `env`'s queue's `ApprovalAnswered` signals (ids only: the decision is
/// on the job, `runtime.approvals`).
pub async fn answers(
    bus: &PrivateBus,
    env: &QueueEnv,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let conn = bus.connect().await;
    let proxy = agentstore::bus::queue::queue_proxy(&conn, &env.queue)
        .await
        .unwrap();
    let mut stream = proxy.receive_approval_answered().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _keep = (conn, proxy);
        while let Some(sig) = stream.next().await {
            let a = sig.args().unwrap();
            let _ = tx.send(a.request_id().clone());
        }
    });
    rx
}

/// Makes `env`'s queue run agentshell jobs against `server`: the queue's `agentshell_path`,
/// an agentshell home in /tmp, both it and the project folder owned by the unprivileged test
/// user when running as root (the job runs as that user). Returns the home (keep it) and the
/// worker environment for the manager's config.
pub fn agentshell_queue(
    env: &QueueEnv,
    server: &crate::fake_model::FakeModel,
) -> (tempfile::TempDir, Vec<(String, String)>) {
    let home = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    if let Some(u) = crate::claude_env::unprivileged_user() {
        crate::claude_env::chown_recursive(&env.work, u.uid, u.gid);
        crate::claude_env::chown_recursive(home.path(), u.uid, u.gid);
    }
    env.edit_queue(|q| {
        q.config.agentshell_path = Some(env!("CARGO_BIN_EXE_agentshell").to_string())
    });
    let worker_env = vec![
        ("AGENTSHELL_BASE_URL".into(), server.base_url()),
        ("AGENTSHELL_API_KEY".into(), "sk-fake-key-for-tests".into()),
        ("AGENTSHELL_HOME".into(), home.path().display().to_string()),
    ];
    (home, worker_env)
}
