//! Issue 15: approvals for unattended Claude Code jobs, with the REAL Claude Code CLI against
//! the fake Anthropic server scripted to `Write` a file. The worker gives `claude -p` its
//! `agent-worker mcp-approvals` server as `--permission-prompt-tool`; the request reaches
//! `org.agentstore.Queue1` on a real (private) dbus-daemon; `busctl call … Answer` as a Unix
//! user decides it (PRD §10: the project's owner may, a stranger may not); a deny's reason
//! reaches the agent; no answer is a deny at the deadline and the job still finishes; a queue
//! rule answers without a person. Running as root, the job runs as the unprivileged test
//! user, as in production.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{approvals_env, claude_env, fake_model, queue_env};

use agentstore::model::approval::ApprovalPolicy;
use approvals_env::{add_users, answers, nobody, owner_uid, requests};
use claude_env::{ClaudeHome, chown_recursive, claude_env, require_claude, unprivileged_user};
use fake_model::{FakeModel, Script, tool_result_text};
use queue_env::*;
use serde_json::{Value, json};
use std::path::PathBuf;

const WRITER: &str = "---\ndescription: Write a file\n---\nWrite the file as asked: $ARGUMENTS\n";

/// Removes the command file on drop (the test user's home is shared between runs).
struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One queue with the real `claude`, a fake API scripted to write `target`, and a manager on
/// a private bus.
struct Setup {
    _machine: tempfile::TempDir,
    env: QueueEnv,
    bus: PrivateBus,
    server: FakeModel,
    command: String,
    target: PathBuf,
    m: Option<RunningManager>,
    _home: Option<ClaudeHome>,
    _cleanup: Option<RemoveOnDrop>,
}

impl Setup {
    async fn new(policy: Option<Value>) -> Setup {
        let claude = require_claude();
        let env = QueueEnv::new(1);
        let target = env.work.join("approved.txt");
        let server = FakeModel::start(
            Script::new()
                .tool_use(
                    "Write",
                    json!({"file_path": target, "content": "written after approval\n"}),
                )
                .text("Done."),
        );
        let bus = PrivateBus::start();
        let command = format!("writer-{}", uuid::Uuid::new_v4().simple());
        let (home, temp_home, cleanup) = match unprivileged_user() {
            Some(u) => {
                let pw = nix::unistd::User::from_name(&u.name).unwrap().unwrap();
                let cmds = pw.dir.join(".claude/commands");
                std::fs::create_dir_all(&cmds).unwrap();
                let file = cmds.join(format!("{command}.md"));
                std::fs::write(&file, WRITER).unwrap();
                chown_recursive(&pw.dir, u.uid, u.gid);
                chown_recursive(&env.work, u.uid, u.gid);
                (pw.dir.clone(), None, Some(RemoveOnDrop(file)))
            }
            None => {
                let h = ClaudeHome::new();
                h.add_command(&command, WRITER);
                (h.path().to_path_buf(), Some(h), None)
            }
        };
        add_users(&env);
        env.edit_queue(|q| {
            q.config.claude_cli_path = claude.display().to_string();
            // The default permission mode: a Write needs a permission.
            q.config.claude_default_args = vec!["-p".into()];
            q.config.approvals =
                policy.map(|p| serde_json::from_value::<ApprovalPolicy>(p).unwrap());
        });
        let mut cfg = env.manager_config(&bus);
        cfg.worker_env = claude_env(&home, &server.base_url());
        let (machine, var) = machine_config(&[&claude], &[]);
        cfg.worker_env.push(var);
        let m = RunningManager::start(cfg).await;
        Setup {
            _machine: machine,
            env,
            bus,
            server,
            command,
            target,
            m: Some(m),
            _home: temp_home,
            _cleanup: cleanup,
        }
    }

    fn queue_job(&self, id: &str) {
        let mut j = job(
            "claude",
            json!({"claude_command": self.command, "task_description": "approved.txt",
                   "working_directory": self.env.work, "timeout_seconds": 170}),
        );
        j["config"]["user"] = json!("chenry");
        self.env.queue_job(id, &j);
    }

    /// `busctl call … Answer` as `uid`; (success, stderr).
    fn answer_as(&self, uid: u32, req: &str, allow: bool, message: &str) -> (bool, String) {
        approvals_env::answer_as(&self.bus, &self.env, uid, req, allow, false, message)
    }

    /// The job's document once it ended, and its state.
    async fn ended(&self, changes: &mut Changes, id: &str) -> (String, Value) {
        let c = changes.ended(id).await;
        (c.new.clone(), self.env.job(&c.new, id))
    }

    /// The text of the tool result the agent got for the scripted Write.
    fn write_result(&self) -> String {
        let uses = self.server.issued_tool_uses();
        assert_eq!(uses.len(), 1, "{uses:?}");
        let block = self.server.tool_result_for(&uses[0].id).unwrap();
        tool_result_text(&block)
    }

    async fn stop(mut self) {
        if let Some(m) = self.m.take() {
            m.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_on_dbus_allows_the_write_and_a_stranger_is_refused() {
    guarded(async {
        let s = Setup::new(Some(json!({"deadline_seconds": 120}))).await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        let mut answered = answers(&s.bus, &s.env).await;
        s.queue_job("allow-1");
        let (job_id, req, tool, summary, input, deadline) = reqs.recv().await.unwrap();
        assert_eq!((job_id.as_str(), tool.as_str()), ("allow-1", "Write"));
        assert!(
            req.starts_with("allow-1-a1-") && req.len() == "allow-1-a1-".len() + 24,
            "{req}"
        );
        assert!(summary.contains("approved.txt"), "{summary}");
        let input: Value = serde_json::from_str(&input).unwrap();
        assert_eq!(input["file_path"], json!(s.target));
        assert!(deadline.ends_with('Z'), "{deadline}");
        // ListApprovals lists it while it waits.
        let pending = changes.proxy.list_approvals().await.unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].1, req);
        assert!(!s.target.exists());

        if nix::unistd::geteuid().is_root() {
            let (ok, err) = s.answer_as(nobody(), &req, true, "");
            assert!(!ok, "a stranger's Answer must be refused");
            // As an unknown request is: the stranger may not see the job.
            assert!(err.contains("not waiting"), "{err}");
            assert_eq!(changes.proxy.list_approvals().await.unwrap().len(), 1);
        }
        let owner = owner_uid();
        let (ok, err) = s.answer_as(owner, &req, true, "");
        assert!(ok, "the project owner may answer: {err}");
        let r = answered.recv().await.unwrap();
        assert_eq!(r, req);
        // A second answer is refused: the first stands.
        let (ok, err) = s.answer_as(owner, &req, false, "too late");
        assert!(!ok && err.contains("not waiting"), "{err}");

        let (state, doc) = s.ended(&mut changes, "allow-1").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert_eq!(
            std::fs::read_to_string(&s.target).unwrap(),
            "written after approval\n"
        );
        let a = &rt["approvals"];
        assert_eq!(a.as_array().unwrap().len(), 1, "{rt}");
        assert_eq!(a[0]["request_id"], req);
        assert_eq!(a[0]["tool"], "Write");
        assert_eq!(a[0]["allow"], true);
        assert_eq!(a[0]["by"], "chenry");
        assert!(a[0]["at"].as_str().unwrap().ends_with('Z'));
        assert!(changes.proxy.list_approvals().await.unwrap().is_empty());
        // The request files are gone with the job.
        let dir = s.env.store().approvals_dir(&s.env.queue);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        s.stop().await;
    })
    .await
}

/// A stand-in desktop notification service: each Notify's (summary, body).
struct Notifications(tokio::sync::mpsc::UnboundedSender<(String, String)>);

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Notifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        _app_name: &str,
        _replaces_id: u32,
        _app_icon: &str,
        summary: &str,
        body: &str,
        _actions: Vec<String>,
        _hints: std::collections::HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        let _ = self.0.send((summary.to_string(), body.to_string()));
        1
    }
}

/// `orchestrator ARGS` against the test's store and bus (as this process's user: trusted).
fn cli(s: &Setup, args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .env("AGENT_STORE_ROOT", &s.env.root)
        .env("HOME", s.env.dir.path())
        .env("AGENTSTORE_BUS", "session")
        .env("DBUS_SESSION_BUS_ADDRESS", &s.bus.address)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_writes_nothing_and_the_agent_sees_the_reason() {
    guarded(async {
        let s = Setup::new(None).await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        // A desktop is there: the request shows up as a notification.
        let (ntx, mut notes) = tokio::sync::mpsc::unbounded_channel();
        let _desktop = zbus::connection::Builder::address(s.bus.address.as_str())
            .name("org.freedesktop.Notifications")
            .serve_at("/org/freedesktop/Notifications", Notifications(ntx))
            .build()
            .await
            .unwrap();
        s.queue_job("deny-1");
        let (_, req, ..) = reqs.recv().await.unwrap();
        let (title, body) = notes.recv().await.unwrap();
        assert!(
            title.contains("deny-1") && title.contains("Write"),
            "{title}"
        );
        assert!(
            body.contains(&format!("orchestrator approve deny-1 {req}")),
            "{body}"
        );
        // The CLI lists it and denies it by its short number.
        let listed: Value =
            serde_json::from_str(&cli(&s, &["--format", "json", "approvals"])).unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
        assert_eq!(listed[0]["request_id"], req);
        assert_eq!(listed[0]["queue"], s.env.queue);
        assert_eq!(listed[0]["input"]["file_path"], json!(s.target));
        let said = cli(
            &s,
            &[
                "deny",
                "deny-1",
                "1",
                "--reason",
                "not in this repository, please",
            ],
        );
        // Named as `approvals` names it (a1; the whole id is in --format json).
        assert!(said.contains("Denied request a1 of job deny-1"), "{said}");
        let (state, doc) = s.ended(&mut changes, "deny-1").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(!s.target.exists());
        let result = s.write_result();
        assert!(
            result.contains("not in this repository, please"),
            "the agent sees the reason: {result}"
        );
        assert_eq!(rt["approvals"][0]["allow"], false, "{rt}");
        assert_eq!(
            rt["approvals"][0]["message"],
            "not in this repository, please"
        );
        s.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_is_a_deny_at_the_deadline_and_the_job_finishes() {
    guarded(async {
        let s = Setup::new(Some(json!({"deadline_seconds": 3}))).await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        let mut answered = answers(&s.bus, &s.env).await;
        s.queue_job("late-1");
        let (_, req, ..) = reqs.recv().await.unwrap();
        let r = answered.recv().await.unwrap();
        assert_eq!(r, req);
        let (state, doc) = s.ended(&mut changes, "late-1").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(!s.target.exists());
        let result = s.write_result();
        assert!(result.contains("no answer within 3 s"), "{result}");
        assert_eq!(rt["approvals"][0]["by"], "deadline", "{rt}");
        assert_eq!(rt["approvals"][0]["allow"], false);
        s.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_rule_answers_without_a_person() {
    guarded(async {
        // Writes in the work folder are allowed by rule; anything else would be denied at
        // once (default deny), so a human is never asked.
        let s = Setup::new(None).await;
        let pattern = format!("{}/*", s.env.work.display());
        s.env.edit_queue(|q| {
            q.config.approvals = Some(
                serde_json::from_value(json!({
                    "rules": [{"tool": "Write", "pattern": pattern, "decision": "allow"}],
                    "default": "deny", "deadline_seconds": 60
                }))
                .unwrap(),
            );
        });
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        s.queue_job("rule-1");
        let (state, doc) = s.ended(&mut changes, "rule-1").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert_eq!(
            std::fs::read_to_string(&s.target).unwrap(),
            "written after approval\n"
        );
        assert_eq!(rt["approvals"][0]["by"], "queue rule", "{rt}");
        assert_eq!(rt["approvals"][0]["allow"], true);
        assert!(reqs.try_recv().is_err(), "nobody was asked");
        s.stop().await;
    })
    .await
}
