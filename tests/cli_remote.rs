//! Browsing a store the user cannot read (the packaged system store is owned by the
//! `agentstore` user, mode 0750): the CLI asks orchestratord over D-Bus, and the daemon maps
//! the caller's Unix user to users/<id>.json and applies PRD §10.
//! Needs root (to run the CLI as `nobody`); CI runs as root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::TestEnv;
use common::bus::KillOnDrop;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

/// A store only root may read (0750), users `nob` (Unix user nobody, owner of project Mine)
/// and chenry (admin, owner of Theirs), both projects in queue poplar, a bus every local
/// user may connect to (like the system bus) and orchestratord serving the store on it.
struct Unreadable {
    env: TestEnv,
    addr: String,
    _bus: KillOnDrop,
    _daemon: KillOnDrop,
}

impl Unreadable {
    fn new() -> Unreadable {
        let env = TestEnv::initialised();
        env.ok(&[
            "add-user",
            "nob",
            "--name",
            "N",
            "--email",
            "n@x",
            "--unix-user",
            "nobody",
        ]);
        for (p, owner) in [("Mine", "nob"), ("Theirs", "chenry")] {
            env.ok(&[
                "add-project",
                p,
                "--directory",
                "/tmp",
                "--owner",
                owner,
                "--default-queue",
                "poplar",
            ]);
        }
        env.ok(&["set-queue", "poplar", "--worker-count", "1"]);
        std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o750)).unwrap();
        let sock = env.dir.path().join("bus.sock");
        let conf = env.dir.path().join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>custom</type><listen>unix:path={}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/></policy></busconfig>"#,
                sock.display()
            ),
        )
        .unwrap();
        let mut bus = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut addr = String::new();
        let pipe = bus.stdout.take().unwrap();
        let bus = KillOnDrop(bus);
        BufReader::new(pipe).read_line(&mut addr).unwrap();
        let addr = addr.trim().to_string();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
        let daemon = crate::daemons::orchestratord(&env.root)
            .bus("session")
            .env("DBUS_SESSION_BUS_ADDRESS", &addr)
            .spawn();
        common::bus::wait_until(std::time::Duration::from_secs(30), "orchestratord", || {
            env.root.join(".orchestrator.lock").exists()
        });
        Unreadable {
            env,
            addr,
            _bus: bus,
            _daemon: daemon,
        }
    }

    /// The CLI run as Unix user nobody.
    fn as_nobody(&self, args: &[&str]) -> Output {
        Command::new("runuser")
            .args([
                "-u",
                "nobody",
                "--",
                "env",
                "HOME=/nonexistent",
                "AGENTSTORE_BUS=session",
            ])
            .arg(format!("DBUS_SESSION_BUS_ADDRESS={}", self.addr))
            .arg(env!("CARGO_BIN_EXE_orchestrator"))
            .arg("--root")
            .arg(&self.env.root)
            .args(args)
            .output()
            .unwrap()
    }
}

fn needs_root(what: &str) -> bool {
    if nix::unistd::getuid().is_root() {
        return false;
    }
    common::bus::skip(what, "needs root to run the CLI as user nobody");
    true
}

#[test]
fn unreadable_store_is_browsed_over_dbus_as_the_callers_user() {
    if needs_root("browsing an unreadable store over D-Bus") {
        return;
    }
    let w = Unreadable::new();
    let env = &w.env;
    let as_nobody = |args: &[&str]| w.as_nobody(args);
    let o = as_nobody(&["list-projects"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("Mine") && !text.contains("Theirs"), "{text}");
    let o = as_nobody(&["list-users"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    let o = as_nobody(&["view-project", "Theirs"]);
    assert_eq!(o.status.code(), Some(1));
    let o = as_nobody(&["--format", "json", "view-project", "Mine"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["owner"], "nob");
    // Reading the files directly really is refused to this user.
    let o = Command::new("runuser")
        .args(["-u", "nobody", "--", "ls"])
        .arg(&env.root)
        .output()
        .unwrap();
    assert!(!o.status.success());
}

/// A job document of project `project` in queue poplar that ended `days` ago in `state`.
fn ended(w: &Unreadable, state: &str, id: &str, project: &str, days: i64) -> std::path::PathBuf {
    let t = (chrono::Utc::now() - chrono::TimeDelta::days(days))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut j: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/test-job-001.json")).unwrap();
    j["config"]["project"] = project.into();
    j["config"]["queue_time"] = t.clone().into();
    j["runtime"]["status"] = state.into();
    j["runtime"]["start_time"] = t.clone().into();
    j["runtime"]["finish_time"] = t.into();
    j["runtime"]["handled"] = true.into();
    if state == "failed" {
        j["runtime"]["error"] = "Worker harness process died".into();
    }
    let dir = w.env.root.join(format!("Queues/poplar/Jobs/{state}_jobs"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{id}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
    path
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// retry, archive and migrate write the store, which this user may not even read: the CLI
/// asks orchestratord, which writes as itself and applies PRD §10 to the caller's Unix user
/// (retry: the project's owner; archive and migrate: admins).
#[test]
fn upkeep_of_an_unreadable_store_is_done_by_orchestratord_for_the_callers_user() {
    if needs_root("retry/archive/migrate of an unreadable store over D-Bus") {
        return;
    }
    let w = Unreadable::new();
    let root = w.env.root.clone();
    ended(&w, "failed", "mine-failed", "Mine", 1);
    ended(&w, "failed", "theirs-failed", "Theirs", 1);
    let old = ended(&w, "finished", "old-done", "Mine", 40);

    let o = w.as_nobody(&["--format", "json", "retry", "mine-failed"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["retry_of"], "mine-failed", "{rows}");
    let new_id = rows[0]["job_id"].as_str().unwrap();
    let queued = root.join(format!("Queues/poplar/Jobs/queued_jobs/{new_id}.json"));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&queued).unwrap()).unwrap();
    assert_eq!(doc["config"]["retry_of"], "mine-failed");
    assert_eq!(doc["config"]["attempt"], 2);

    // Someone else's project: refused, nothing written.
    let before = std::fs::read_dir(root.join("Queues/poplar/Jobs/queued_jobs"))
        .unwrap()
        .count();
    let o = w.as_nobody(&["retry", "theirs-failed"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    let after = std::fs::read_dir(root.join("Queues/poplar/Jobs/queued_jobs"))
        .unwrap()
        .count();
    assert_eq!(before, after);
    // An unknown job is named.
    let o = w.as_nobody(&["retry", "no-such-job"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no-such-job"), "{}", stderr(&o));

    // archive and migrate are for admins.
    let o = w.as_nobody(&["archive", "--older-than", "30d"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Permission denied: only an admin can archive jobs"),
        "{}",
        stderr(&o)
    );
    assert!(old.exists());
    let o = w.as_nobody(&["migrate", "--dry-run"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("only an admin can migrate"),
        "{}",
        stderr(&o)
    );

    // Once nob is an admin, both are carried out by the daemon.
    let upath = root.join("users/nob.json");
    let mut user: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&upath).unwrap()).unwrap();
    user["permissions"] = "admin".into();
    std::fs::write(&upath, serde_json::to_vec_pretty(&user).unwrap()).unwrap();
    let o = w.as_nobody(&["archive", "--older-than", "30d"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("old-done") && text.contains("1 of"), "{text}");
    assert!(!old.exists());
    let month = (chrono::Utc::now() - chrono::TimeDelta::days(40))
        .format("%Y-%m")
        .to_string();
    assert!(
        root.join(format!(
            "Queues/poplar/Jobs/archive/{month}/finished_jobs/old-done.json"
        ))
        .exists()
    );
    let o = w.as_nobody(&["--format", "json", "migrate", "--dry-run"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["dry_run"], true, "{r}");
    assert_eq!(r["to"], "0.6", "{r}");
}

#[test]
fn login_to_an_unreadable_store_is_checked_by_orchestratord() {
    if needs_root("logging in to an unreadable store over D-Bus") {
        return;
    }
    let w = Unreadable::new();
    let home = w.env.dir.path().join("nobody-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let login = |name: &str| {
        Command::new("runuser")
            .args(["-u", "nobody", "--", "env", "AGENTSTORE_BUS=session"])
            .arg(format!("HOME={}", home.display()))
            .arg(format!("DBUS_SESSION_BUS_ADDRESS={}", w.addr))
            .arg(env!("CARGO_BIN_EXE_orchestrator"))
            .arg("--root")
            .arg(&w.env.root)
            .args(["login", name])
            .output()
            .unwrap()
    };
    let o = login("nob");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Logged in as nob"));
    let session = std::fs::read_to_string(home.join(".orchestrator_config.json")).unwrap();
    assert!(session.contains("\"nob\""), "{session}");
    // A name the daemon does not know (or may not show) is refused, and the session kept.
    let o = login("nosuchuser");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let session = std::fs::read_to_string(home.join(".orchestrator_config.json")).unwrap();
    assert!(session.contains("\"nob\""), "{session}");
}

/// `list-messages` / `view-message` on a store the user cannot read go through
/// orchestratord, which shows the caller's own messages only (PRD §10) — text and JSON.
#[test]
fn messages_of_an_unreadable_store_are_browsed_over_dbus() {
    if needs_root("browsing messages of an unreadable store over D-Bus") {
        return;
    }
    let w = Unreadable::new();
    for (name, user, project) in [("mine-1", "nob", "Mine"), ("theirs-1", "chenry", "Theirs")] {
        w.env.write(
            &format!("messaging/processed_inbox/{name}.json"),
            &serde_json::json!({"correlation_id": name, "source": "user", "project": project,
                "queue_time": "2026-01-02T00:00:00Z", "command": "research-code",
                "content": {"task": format!("task of {user}")}, "status": "queued", "user": user})
            .to_string(),
        );
    }
    let o = w.as_nobody(&["--format", "json", "list-messages"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["total"], 1, "{v}");
    assert_eq!(v["messages"][0]["id"], "mine-1");
    assert_eq!(v["messages"][0]["answer"], serde_json::Value::Null);
    let o = w.as_nobody(&["list-messages"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("mine-1") && !text.contains("theirs-1"),
        "{text}"
    );
    let o = w.as_nobody(&["--format", "json", "view-message", "mine-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["request"]["content"]["task"], "task of nob");
    let o = w.as_nobody(&["view-message", "theirs-1"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("Permission denied: message theirs-1 belongs to another user"),
        "{err}"
    );
    assert!(!err.contains("task of chenry"), "{err}");
    let o = w.as_nobody(&["list-messages", "--user", "chenry"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
}

/// Issue 33: `list-jobs` as a text table over D-Bus needs no temporary file: with a TMPDIR
/// the caller cannot write (here one that does not exist) the table is still printed.
#[test]
fn list_jobs_text_over_dbus_needs_no_temporary_folder() {
    if needs_root("running the CLI as user nobody") {
        return;
    }
    let w = Unreadable::new();
    ended(&w, "finished", "tmpless-1", "Mine", 0);
    for tmpdir in ["/nonexistent/agentstore-tmp", "/root"] {
        let o = Command::new("runuser")
            .args([
                "-u",
                "nobody",
                "--",
                "env",
                "HOME=/nonexistent",
                "AGENTSTORE_BUS=session",
            ])
            .arg(format!("TMPDIR={tmpdir}"))
            .arg(format!("DBUS_SESSION_BUS_ADDRESS={}", w.addr))
            .arg(env!("CARGO_BIN_EXE_orchestrator"))
            .arg("--root")
            .arg(&w.env.root)
            .arg("list-jobs")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "TMPDIR={tmpdir}: {}", stderr(&o));
        assert!(text.contains("tmpless-1"), "TMPDIR={tmpdir}: {text}");
    }
}
