//! A private D-Bus daemon, a temp store with a queue, and an in-process queue manager, for
//! the queue and worker integration tests. Waiting is on events (JobStateChanged signals,
//! property changes), never on sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentstore::bus::Bus;
use agentstore::bus::queue::{Queue1Proxy, queue_proxy};
use agentstore::model::{Launcher, Queue, QueueConfig};
use agentstore::queue::ManagerConfig;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

// The harness, compiled once per test binary: through `tests/common` (declare `mod common;`
// next to this module).
pub use crate::common::bus::*;

/// Guard for one test: a hang fails instead of blocking CI (not a timing assertion).
pub const HANG_GUARD: Duration = Duration::from_secs(180);

/// Login name jobs run as: the test user when root (as the product would), else ourselves.
pub fn job_login() -> String {
    if nix::unistd::geteuid().is_root() {
        crate::claude_env::unprivileged_user().unwrap().name
    } else {
        nix::unistd::User::from_uid(nix::unistd::geteuid())
            .unwrap()
            .unwrap()
            .name
    }
}

/// A temp store with queue `q`, user chenry (admin, unix_user = [`job_login`]) and project
/// TestProject owned by chenry.
pub struct QueueEnv {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub queue: String,
    pub work: PathBuf,
}

impl QueueEnv {
    pub fn new(worker_count: u32) -> QueueEnv {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("AgentStore");
        let (store, _) = agentstore::store::Store::init(&root).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join(".claude/commands")).unwrap();
        // The job account must be able to enter the temp dirs.
        for p in [
            dir.path(),
            &work,
            &work.join(".claude"),
            &work.join(".claude/commands"),
        ] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let login = job_login();
        std::fs::write(
            store.user_path("chenry"),
            json!({"id": "chenry", "name": "Christopher Henry", "email": "chenry@anl.gov",
                   "permissions": "admin", "unix_user": login})
            .to_string(),
        )
        .unwrap();
        let now = agentstore::model::Timestamp::now().to_string();
        std::fs::create_dir_all(store.project_path("TestProject").parent().unwrap()).unwrap();
        std::fs::write(
            store.project_path("TestProject"),
            json!({"id": "TestProject", "directory": work, "create_time": now,
                   "update_time": now, "owner": "chenry", "default_queue": "poplar"})
            .to_string(),
        )
        .unwrap();
        let mut cfg = QueueConfig::defaults("q1");
        cfg.worker_count = worker_count;
        cfg.rest_interval = 60;
        cfg.launcher = Some(Launcher::Direct);
        store.add_queue(cfg).unwrap();
        QueueEnv {
            dir,
            root,
            queue: "q1".into(),
            work,
        }
    }

    pub fn store(&self) -> agentstore::store::Store {
        agentstore::store::Store::open(&self.root).unwrap()
    }

    /// Edits queue.json (the file as it is, as a user would).
    pub fn edit_queue(&self, f: impl FnOnce(&mut Queue)) {
        let store = self.store();
        let mut q = store.queue_file(&self.queue).unwrap();
        f(&mut q);
        store
            .write_doc(
                agentstore::model::DocKind::Queue,
                &store.queue_path(&self.queue),
                &q,
            )
            .unwrap();
    }

    /// The queue as readers show it: queue.json's config with the runtime every machine's
    /// manager wrote (`Queues/<q>/runtime@<host>.json`).
    pub fn queue_json(&self) -> Value {
        serde_json::to_value(self.store().queue(&self.queue).unwrap()).unwrap()
    }

    pub fn dir(&self, state: &str) -> PathBuf {
        self.root
            .join("Queues")
            .join(&self.queue)
            .join("Jobs")
            .join(format!("{state}_jobs"))
    }

    pub fn job_file(&self, state: &str, id: &str) -> PathBuf {
        self.dir(state).join(format!("{id}.json"))
    }

    pub fn job(&self, state: &str, id: &str) -> Value {
        read_json(&self.job_file(state, id))
    }

    pub fn count(&self, state: &str) -> usize {
        agentstore::store::scan_dir(&self.dir(state))
            .unwrap()
            .documents
            .len()
    }

    /// Writes a job into queued_jobs/ atomically (as the orchestrator does).
    pub fn queue_job(&self, id: &str, job: &Value) {
        let path = self.job_file("queued", id);
        agentstore::store::write_json_atomic(&path, job).unwrap();
    }

    /// A manager config for this store on `bus`.
    pub fn manager_config(&self, bus: &PrivateBus) -> ManagerConfig {
        let mut c = ManagerConfig::new(&self.root, &self.queue);
        c.bus = Some(Bus::Address(bus.address.clone()));
        c.launcher = Some(Launcher::Direct);
        c.worker = PathBuf::from(env!("CARGO_BIN_EXE_agent-worker"));
        c
    }
}

pub fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// A job document (PRD §4.6) with the given fields of `config` overridden.
pub fn job(jobtype: &str, overrides: Value) -> Value {
    let mut j = json!({
        "config": {
            "project": "TestProject", "working_directory": "/tmp",
            "queue_time": agentstore::model::Timestamp::now().to_string(),
            "jobtype": jobtype, "claude_command": "noop", "claude_extra_args": [],
            "task_description": "Test job", "supporting_data": {}, "timeout_seconds": 60
        },
        "runtime": {
            "status": "queued", "start_time": null, "finish_time": null, "process_id": null,
            "llm_process_id": null, "error": null, "output": null
        }
    });
    for (k, v) in overrides.as_object().unwrap() {
        j["config"][k] = v.clone();
    }
    j
}

/// A noop job that sleeps `secs`.
pub fn noop(secs: f64) -> Value {
    job("noop", json!({"supporting_data": {"sleep_seconds": secs}}))
}

/// A manager running in this process; stops on drop of `stop`.
pub struct RunningManager {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RunningManager {
    /// Starts the manager and returns once it is ready (runtime reset, name owned).
    pub async fn start(cfg: ManagerConfig) -> RunningManager {
        let m = agentstore::bus::queue::start_manager(cfg).await.unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            m.run(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        RunningManager {
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops the manager (jobs keep running) and waits until it has.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }
}

/// One JobStateChanged signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub id: String,
    pub old: String,
    pub new: String,
}

/// Collects JobStateChanged signals of a queue, in order.
pub struct Changes {
    rx: mpsc::UnboundedReceiver<Change>,
    pub seen: Vec<Change>,
    pub proxy: Queue1Proxy<'static>,
    _task: tokio::task::JoinHandle<()>,
}

impl Changes {
    /// Subscribes before anything happens (call before queueing jobs).
    pub async fn subscribe(bus: &PrivateBus, queue: &str) -> Changes {
        let conn = bus.connect().await;
        let proxy = queue_proxy(&conn, queue).await.unwrap();
        let mut stream = proxy.receive_job_state_changed().await.unwrap();
        // The signal goes only to connections that asked (issue 27): asked of each manager
        // that takes the queue's name, with the changes it made before the ask.
        watch_each_owner(&conn, queue).await;
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let _conn = conn;
            while let Some(sig) = stream.next().await {
                let a = sig.args().unwrap();
                let _ = tx.send(Change {
                    id: a.id().clone(),
                    old: a.old().clone(),
                    new: a.new().clone(),
                });
            }
        });
        Changes {
            rx,
            seen: Vec::new(),
            proxy,
            _task: task,
        }
    }

    /// The next signal.
    pub async fn next(&mut self) -> Change {
        let c = self.rx.recv().await.expect("signal stream ended");
        self.seen.push(c.clone());
        c
    }

    /// Waits for job `id` to end (finished or failed); returns the change.
    pub async fn ended(&mut self, id: &str) -> Change {
        loop {
            let c = self.next().await;
            if c.id == id && (c.new == "finished" || c.new == "failed") {
                return c;
            }
        }
    }

    /// Waits for job `id` to reach `new`; returns the change.
    pub async fn until(&mut self, id: &str, new: &str) -> Change {
        if let Some(c) = self.seen.iter().find(|c| c.id == id && c.new == new) {
            return c.clone();
        }
        loop {
            let c = self.next().await;
            if c.id == id && c.new == new {
                return c;
            }
        }
    }
}

/// Calls `WatchJobs(replay)` of each manager that owns `queue`'s bus name on `conn`, now and
/// whenever the name gets a new owner (a restarted manager).
pub async fn watch_each_owner(conn: &zbus::Connection, queue: &str) {
    let name = agentstore::bus::queue_bus_name(queue);
    let dbus = zbus::fdo::DBusProxy::new(conn).await.unwrap();
    let mut owners = dbus.receive_name_owner_changed().await.unwrap();
    let proxy = queue_proxy(conn, queue).await.unwrap();
    let bus_name = zbus::names::BusName::try_from(name.clone()).unwrap();
    if dbus.name_has_owner(bus_name).await.unwrap_or(false) {
        proxy.watch_jobs(true).await.unwrap();
    }
    tokio::spawn(async move {
        while let Some(sig) = owners.next().await {
            let Ok(a) = sig.args() else { continue };
            if a.name().as_str() == name && a.new_owner().is_some() {
                // The new owner may not answer at once (a loaded machine): asked again until
                // it does; a manager that is gone again before the call: the next owner is
                // asked.
                for _ in 0..100 {
                    match proxy.watch_jobs(true).await {
                        Ok(()) => break,
                        Err(e) => {
                            eprintln!("WatchJobs of the new owner of {name}: {e}; asking again");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                    }
                }
            }
        }
    });
}

/// orchestratord's proxy on `bus` once it owns its name (awaited: [`crate::wait::name_owned`]).
pub async fn orchestrator_on(
    bus: &PrivateBus,
) -> agentstore::bus::orchestrator::Orchestrator1Proxy<'static> {
    let conn = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    crate::wait::within(
        HANG_GUARD,
        "orchestratord's name on the bus",
        crate::wait::name_owned(&dbus, "org.agentstore.Orchestrator1"),
    )
    .await;
    agentstore::bus::orchestrator::Orchestrator1Proxy::new(&conn)
        .await
        .unwrap()
}

/// Runs `f` under the hang guard.
pub async fn guarded<F: std::future::Future<Output = T>, T>(f: F) -> T {
    crate::wait::within(HANG_GUARD, "the test to end (hang guard)", f).await
}

/// This machine's own configuration for a test's in-process manager and its workers
/// (per-user mode: `$XDG_CONFIG_HOME/agentstore/config.yaml`), listing `claude` and
/// `agentshell` as programs a queue may name (issue 27), in a folder only this account can
/// change. Returns the folder (keep it) and the variable for the workers' environment.
pub fn machine_config(
    claude: &[&Path],
    agentshell: &[&Path],
) -> (tempfile::TempDir, (String, String)) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = dir.path().join("agentstore");
    std::fs::create_dir(&conf).unwrap();
    let list = |ps: &[&Path]| {
        ps.iter()
            .map(|p| format!("    - {:?}\n", p.display().to_string()))
            .collect::<String>()
    };
    std::fs::write(
        conf.join("config.yaml"),
        format!(
            "programs:\n  claude:\n{}  agentshell:\n{}",
            list(claude),
            list(agentshell)
        ),
    )
    .unwrap();
    let var = (
        "XDG_CONFIG_HOME".to_string(),
        dir.path().display().to_string(),
    );
    (dir, var)
}

pub use crate::common::fake_claude;

/// Awaits two heartbeat passes of `host`'s manager of `queue`, the first `span` from now
/// ([`crate::wait::passes`]).
pub fn manager_passes(root: &Path, host: &str, queue: &str, span: Duration) {
    crate::wait::passes(root, host, &format!("queue-manager.{queue}.json"), span)
}

pub use crate::wait::events;
