//! Issue 15: approvals for unattended agentshell jobs. A job of `jobtype: "agent"` runs the
//! REAL `agentshell` binary (through queue-manager + agent-worker) against the fake Anthropic
//! server scripted to `run_command` a `touch`, which agentshell's policy asks about. The ASK
//! goes to the worker's approval channel (`exec --approvals`), so it reaches
//! `org.agentstore.Queue1` on a real (private) dbus-daemon like a Claude Code permission:
//! `busctl call … Answer` as the project owner decides it (a stranger may not), `always`
//! answers the same command (not the tool) for the rest of the job, a deny's reason reaches the model, no answer
//! is a deny at the deadline and the job still finishes, and a queue rule answers without a
//! person. Every decision is on the job (`runtime.approvals`). Running as root, the job runs
//! as the unprivileged test user, as in production.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{approvals_env, fake_model, queue_env};

use agentstore::model::approval::ApprovalPolicy;
use approvals_env::{add_users, agentshell_queue, answers, nobody, owner_uid, requests};
use fake_model::{FakeModel, Script, tool_result_text};
use queue_env::*;
use serde_json::{Value, json};

/// One queue running agentshell jobs against a fake model, a manager on a private bus.
struct Setup {
    env: QueueEnv,
    bus: PrivateBus,
    server: FakeModel,
    m: Option<RunningManager>,
    _agent_home: tempfile::TempDir,
}

impl Setup {
    /// `commands`: the `run_command`s the model asks for, in order, then it answers "Done.".
    async fn new(policy: Option<Value>, commands: &[&str]) -> Setup {
        let mut script = Script::new();
        for c in commands {
            script = script.tool_use("run_command", json!({ "command": c }));
        }
        let server = FakeModel::start(script.text("Done."));
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let (agent_home, worker_env) = agentshell_queue(&env, &server);
        add_users(&env);
        env.edit_queue(|q| {
            q.config.approvals =
                policy.map(|p| serde_json::from_value::<ApprovalPolicy>(p).unwrap());
        });
        let mut cfg = env.manager_config(&bus);
        cfg.worker_env = worker_env;
        let m = RunningManager::start(cfg).await;
        Setup {
            env,
            bus,
            server,
            m: Some(m),
            _agent_home: agent_home,
        }
    }

    fn queue_job(&self, id: &str) {
        let mut j = job(
            "agent",
            json!({"claude_command": "code-researcher", "task_description": "Make the files.",
                   "working_directory": self.env.work, "timeout_seconds": 170}),
        );
        j["config"]["model"] = json!("anthropic/claude-test");
        j["config"]["user"] = json!("chenry");
        self.env.queue_job(id, &j);
    }

    fn answer_as(
        &self,
        uid: u32,
        req: &str,
        allow: bool,
        always: bool,
        message: &str,
    ) -> (bool, String) {
        approvals_env::answer_as(&self.bus, &self.env, uid, req, allow, always, message)
    }

    /// The job's document once it ended, and its state.
    async fn ended(&self, changes: &mut Changes, id: &str) -> (String, Value) {
        let c = changes.ended(id).await;
        (c.new.clone(), self.env.job(&c.new, id))
    }

    /// The texts of the tool results the model got, in the order of its calls.
    fn tool_results(&self) -> Vec<String> {
        self.server
            .issued_tool_uses()
            .iter()
            .map(|u| tool_result_text(&self.server.tool_result_for(&u.id).unwrap()))
            .collect()
    }

    async fn stop(mut self) {
        if let Some(m) = self.m.take() {
            m.stop().await;
        }
    }
}

/// The agent's JSON result in `runtime.output`.
fn agent_result(rt: &Value) -> Value {
    serde_json::from_str(rt["output"].as_str().unwrap().trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_on_dbus_runs_the_command_and_always_covers_the_next() {
    guarded(async {
        let s = Setup::new(
            Some(json!({"deadline_seconds": 120})),
            // "always" on the first covers the same command again, not the next one (issue
            // 28: an "always" for one command let every use of the tool run unasked).
            &["touch first.txt", "touch first.txt", "touch second.txt"],
        )
        .await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        let mut answered = answers(&s.bus, &s.env).await;
        s.queue_job("agent-allow");
        let (job_id, req, tool, summary, input, _) = reqs.recv().await.unwrap();
        assert_eq!(
            (job_id.as_str(), tool.as_str()),
            ("agent-allow", "run_command")
        );
        // Numbered for people, unguessable after the number.
        assert!(
            req.starts_with("agent-allow-a1-") && req.len() == "agent-allow-a1-".len() + 24,
            "{req}"
        );
        assert_eq!(summary, "run_command: touch first.txt");
        let input: Value = serde_json::from_str(&input).unwrap();
        assert_eq!(input["command"], "touch first.txt");
        let pending = changes.proxy.list_approvals().await.unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert!(!s.env.work.join("first.txt").exists());

        if nix::unistd::geteuid().is_root() {
            let (ok, err) = s.answer_as(nobody(), &req, true, true, "");
            assert!(!ok, "a stranger's Answer must be refused");
            // As an unknown request is: the stranger may not see the job.
            assert!(err.contains("not waiting"), "{err}");
        }
        let (ok, err) = s.answer_as(owner_uid(), &req, true, true, "");
        assert!(ok, "the project owner may answer: {err}");
        let r = answered.recv().await.unwrap();
        assert_eq!(r, req);

        // The same command again ran by the job rule `always` made; another command of the
        // same tool is asked again, and denied.
        let (_, req3, _, summary3, ..) = reqs.recv().await.unwrap();
        assert_eq!(summary3, "run_command: touch second.txt");
        let (ok, err) = s.answer_as(owner_uid(), &req3, false, false, "not that one");
        assert!(ok, "{err}");
        let (state, doc) = s.ended(&mut changes, "agent-allow").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(s.env.work.join("first.txt").exists());
        assert!(
            !s.env.work.join("second.txt").exists(),
            "always for one command let another run"
        );
        assert!(reqs.try_recv().is_err(), "asked once more than needed");
        let a = rt["approvals"].as_array().unwrap();
        assert_eq!(a.len(), 3, "{rt}");
        assert_eq!(
            (&a[0]["request_id"], &a[0]["tool"], &a[0]["allow"]),
            (&json!(req), &json!("run_command"), &json!(true))
        );
        assert_eq!(
            (&a[0]["by"], &a[0]["always"]),
            (&json!("chenry"), &json!(true))
        );
        assert_eq!(
            (&a[1]["by"], &a[1]["allow"], &a[1]["summary"]),
            (
                &json!("job rule"),
                &json!(true),
                &json!("run_command: touch first.txt")
            )
        );
        assert_eq!(
            (&a[2]["by"], &a[2]["allow"], &a[2]["request_id"]),
            (&json!("chenry"), &json!(false), &json!(req3))
        );
        let out = agent_result(rt);
        assert_eq!(out["result"], "Done.", "{out}");
        assert!(changes.proxy.list_approvals().await.unwrap().is_empty());
        let dir = s.env.store().approvals_dir(&s.env.queue);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        s.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_runs_nothing_and_the_model_sees_the_reason() {
    guarded(async {
        let s = Setup::new(None, &["touch denied.txt"]).await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        s.queue_job("agent-deny");
        let (_, req, ..) = reqs.recv().await.unwrap();
        let (ok, err) = s.answer_as(
            owner_uid(),
            &req,
            false,
            false,
            "use the scratch folder instead",
        );
        assert!(ok, "{err}");
        let (state, doc) = s.ended(&mut changes, "agent-deny").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(!s.env.work.join("denied.txt").exists());
        let results = s.tool_results();
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(
            results[0].contains("use the scratch folder instead") && results[0].contains("denied"),
            "the model sees the reason: {}",
            results[0]
        );
        assert_eq!(rt["approvals"][0]["allow"], false, "{rt}");
        assert_eq!(rt["approvals"][0]["by"], "chenry");
        assert_eq!(
            rt["approvals"][0]["message"],
            "use the scratch folder instead"
        );
        let out = agent_result(rt);
        let denials = out["permission_denials"].as_array().unwrap();
        assert_eq!(denials.len(), 1, "{out}");
        assert!(
            denials[0]["reason"]
                .as_str()
                .unwrap()
                .contains("use the scratch folder instead"),
            "{out}"
        );
        s.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_is_a_deny_at_the_deadline_and_the_job_finishes() {
    guarded(async {
        let s = Setup::new(Some(json!({"deadline_seconds": 2})), &["touch late.txt"]).await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        let mut answered = answers(&s.bus, &s.env).await;
        s.queue_job("agent-late");
        let (_, req, ..) = reqs.recv().await.unwrap();
        let r = answered.recv().await.unwrap();
        assert_eq!(r, req);
        let (state, doc) = s.ended(&mut changes, "agent-late").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(!s.env.work.join("late.txt").exists());
        let results = s.tool_results();
        assert!(
            results[0].contains("no answer within 2 s"),
            "{}",
            results[0]
        );
        assert_eq!(rt["approvals"][0]["by"], "deadline", "{rt}");
        assert_eq!(rt["approvals"][0]["allow"], false);
        s.stop().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_rule_answers_without_a_person() {
    guarded(async {
        // `touch` is allowed by rule; anything else is denied at once (default deny), so a
        // person is never asked.
        let s = Setup::new(
            Some(json!({
                "rules": [{"tool": "run_command", "pattern": "touch *", "decision": "allow"}],
                "default": "deny", "deadline_seconds": 60
            })),
            &["touch ruled.txt", "rm -f NOTES.md"],
        )
        .await;
        std::fs::write(s.env.work.join("NOTES.md"), "keep me\n").unwrap();
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        s.queue_job("agent-rule");
        let (state, doc) = s.ended(&mut changes, "agent-rule").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(s.env.work.join("ruled.txt").exists());
        assert_eq!(
            std::fs::read_to_string(s.env.work.join("NOTES.md")).unwrap(),
            "keep me\n"
        );
        let a = rt["approvals"].as_array().unwrap();
        assert_eq!(a.len(), 2, "{rt}");
        assert_eq!(
            (&a[0]["by"], &a[0]["allow"]),
            (&json!("queue rule"), &json!(true))
        );
        assert_eq!(
            (&a[1]["by"], &a[1]["allow"]),
            (&json!("queue default"), &json!(false))
        );
        let results = s.tool_results();
        assert!(
            results[1].contains("denied by the queue default"),
            "{}",
            results[1]
        );
        assert!(reqs.try_recv().is_err(), "nobody was asked");
        s.stop().await;
    })
    .await
}

/// Issue 27 item 5: the store is shared input. An answer planted for the id a request used
/// to get (`<job>-a1`) before it is asked, and one planted for the real (unguessable) id
/// once it is, carry no proof of the manager's key: neither is taken for a person's answer.
/// The command does not run, the request stays listed, and its deadline denies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_answer_is_never_taken_for_a_persons() {
    guarded(async {
        use agentstore::model::{Timestamp, approval::ApprovalAnswer};
        let s = Setup::new(Some(json!({"deadline_seconds": 3})), &["touch forged.txt"]).await;
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        let store = s.env.store();
        let q = s.env.queue.clone();
        let forged = |id: &str| ApprovalAnswer {
            request_id: id.to_string(),
            allow: true,
            always: true,
            message: String::new(),
            by: "chenry".into(),
            at: Timestamp::now(),
            proof: String::new(),
        };
        assert!(
            store
                .write_approval_answer(&q, &forged("agent-forged-a1"))
                .unwrap()
        );
        s.queue_job("agent-forged");
        let (_, req, ..) = tokio::time::timeout(std::time::Duration::from_secs(20), reqs.recv())
            .await
            .expect("the request was never published: a planted answer took its place")
            .unwrap();
        assert_ne!(req, "agent-forged-a1");
        let mut a = forged(&req);
        a.proof = "0123456789abcdef0123456789abcdef".into();
        let path = store.approval_answer_path(&q, &req);
        std::fs::write(&path, serde_json::to_vec(&a).unwrap()).unwrap();
        let (state, doc) = s.ended(&mut changes, "agent-forged").await;
        let rt = &doc["runtime"];
        assert_eq!(state, "finished", "{rt}");
        assert!(
            !s.env.work.join("forged.txt").exists(),
            "a planted answer ran the command"
        );
        assert_eq!(rt["approvals"][0]["request_id"], json!(req), "{rt}");
        assert_eq!(rt["approvals"][0]["by"], "deadline", "{rt}");
        assert_eq!(rt["approvals"][0]["allow"], false, "{rt}");
        s.stop().await;
    })
    .await
}

/// Issue 34 (the soak with both machines serving both queues: 457 of 2,237 requests answered
/// twice): another machine's manager of the same queue — here a standby over a sync engine,
/// a real `queue-manager` process as machine `z-approvals-beta` with its own state (its own
/// master key, as on another computer) — sees the same `Jobs/approvals/`, but only the
/// manager that runs the job publishes, answers and records its request. Before, the other
/// published and recorded every request again, and either recorded the answer again or
/// removed it as unsigned; an answer given to it now names the machine to ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_machines_manager_of_the_queue_leaves_a_request_to_the_one_running_its_job() {
    guarded(async {
        let s = Setup::new(Some(json!({"deadline_seconds": 120})), &["touch first.txt"]).await;
        // Beta beats every second (the waits below are for its beats).
        let cfg = s.env.root.join("config.yaml");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str("machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 120\n");
        std::fs::write(&cfg, text).unwrap();
        // This machine's manager beats first, so beta is the second (started in the same
        // second, the host names decide: this machine's key is `m-…`, beta's sorts after).
        let beats = |dir: &std::path::Path| {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten().any(|m| {
                        m.path()
                            .join(format!("queue-manager.{}.json", s.env.queue))
                            .is_file()
                    })
                })
                .unwrap_or(false)
        };
        let machines = s.env.root.join("machines");
        tokio::task::block_in_place(|| {
            crate::wait::wait_until(HANG_GUARD, "this machine's manager beating", || {
                beats(&machines)
            })
        });
        let beta_state = tempfile::tempdir().unwrap();
        let beta_bus = PrivateBus::start();
        let _beta = crate::daemons::queue_manager(&s.env.root, &s.env.queue)
            .bus(&beta_bus.address)
            .host("z-approvals-beta")
            .env("STATE_DIRECTORY", beta_state.path())
            .spawn();
        let beat = s.env.root.join(format!(
            "machines/z-approvals-beta/queue-manager.{}.json",
            s.env.queue
        ));
        let beta_beats = || std::fs::metadata(&beat).and_then(|m| m.modified()).ok();
        let wait = |what: &str, cond: &dyn Fn() -> bool| {
            // The manager under test runs on this runtime: let it, while this waits.
            tokio::task::block_in_place(|| crate::wait::wait_until(HANG_GUARD, what, cond))
        };
        // Beta stands down while this machine serves the queue (a sync engine's store): the
        // job is this machine's.
        wait("beta standing down", &|| {
            events(&s.env.root)
                .iter()
                .any(|e| e["event"] == "queue_served_elsewhere" && e["host"] == "z-approvals-beta")
        });
        let mut changes = Changes::subscribe(&s.bus, &s.env.queue).await;
        let mut reqs = requests(&s.bus, &s.env).await;
        s.queue_job("agent-two");
        let (job_id, req, ..) = reqs.recv().await.unwrap();
        assert_eq!(job_id, "agent-two");
        // Beta has seen the request file: a heartbeat of its loop after it appeared.
        let asked = std::time::SystemTime::now();
        wait("a beat of beta after the request", &|| {
            beta_beats().is_some_and(|t| t > asked)
        });
        // Asked of beta, the answer names the machine to ask.
        let o = std::process::Command::new("busctl")
            .arg(format!("--address={}", beta_bus.address))
            .arg("call")
            .arg(agentstore::bus::queue_bus_name(&s.env.queue))
            .arg(agentstore::bus::queue_object_path(&s.env.queue))
            .arg("org.agentstore.Queue1")
            .args(["Answer", "sbbs", &req, "true", "false", ""])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "beta took the answer");
        assert!(err.contains("answer it there"), "{err}");
        let (ok, err) = s.answer_as(owner_uid(), &req, true, false, "");
        assert!(ok, "{err}");
        let (state, doc) = s.ended(&mut changes, "agent-two").await;
        assert_eq!(state, "finished", "{}", doc["runtime"]);
        assert!(s.env.work.join("first.txt").exists(), "{}", doc["runtime"]);
        let ended = std::time::SystemTime::now();
        wait("a beat of beta after the job ended", &|| {
            beta_beats().is_some_and(|t| t > ended)
        });
        let events = events(&s.env.root);
        for what in ["approval_requested", "approval_answered"] {
            let of_job: Vec<&Value> = events
                .iter()
                .filter(|e| e["event"] == what && e["job_id"] == "agent-two")
                .collect();
            assert_eq!(of_job.len(), 1, "{what}: {of_job:?}");
            assert_ne!(of_job[0]["host"], "z-approvals-beta", "{what}");
        }
        s.stop().await;
    })
    .await
}
