//! Issue 27 (round 2, item 5): every D-Bus signal reaches every listener on the bus, so it
//! carries ids only. Before: `MessageProcessed` named the command another user sent and its
//! outcome, `JobCreated` the job's (private) project. A listener as another Unix user
//! (`nobody`, through `gdbus monitor`, which subscribes with plain match rules as any local
//! program can) now sees the ids and nothing of the work; the properties it may read hold
//! nothing of it either.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::TestEnv;
use common::bus::{KillOnDrop, PrivateBus, spawn_orchestratord, wait_for_name};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);
const SECRET_PROJECT: &str = "SecretProjQ7x";

fn nobody() -> (u32, u32) {
    let u = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("user nobody");
    (u.uid.as_raw(), u.gid.as_raw())
}

/// `gdbus monitor` of bus name `name` on the bus at `address` as `nobody` (plain match
/// rules, as any local program can): its output lines, on a channel.
pub(crate) fn monitor_as_nobody(address: &str, name: &str) -> (KillOnDrop, mpsc::Receiver<String>) {
    let (uid, gid) = nobody();
    let mut child = Command::new("gdbus")
        .args(["monitor", "--address", address, "--dest", name])
        .env("HOME", "/")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .uid(uid)
        .gid(gid)
        .spawn()
        .expect("gdbus (libglib2.0-bin) runs the listener as another user");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (KillOnDrop(child), rx)
}

/// Lines from `rx` until one satisfies `done` (within [`LONG`]); all of them.
pub(crate) fn lines_until(
    rx: &mpsc::Receiver<String>,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + LONG;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let stop = done(&l);
                seen.push(l);
                if stop {
                    return seen;
                }
            }
            Err(_) => panic!("no {what} within {LONG:?}; the listener saw: {seen:#?}"),
        }
    }
}

#[test]
fn signals_carry_ids_only_to_another_user_on_the_bus() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: the listener runs as another Unix user (nobody)"
    );
    let env = TestEnv::with_test_project();
    let doc = std::fs::read_to_string(env.root.join("projects/TestProject/project.json"))
        .unwrap()
        .replace("TestProject", SECRET_PROJECT);
    env.write(&format!("projects/{SECRET_PROJECT}/project.json"), &doc);
    let bus = PrivateBus::start();
    let _daemon = KillOnDrop(spawn_orchestratord(&bus, &env.root, &["--idle-exit", "0"]));
    wait_for_name(&bus, agentstore::bus::ORCHESTRATOR_NAME);

    let (_listener, rx) = monitor_as_nobody(&bus.address, agentstore::bus::ORCHESTRATOR_NAME);
    // Subscribed once gdbus has found the name's owner.
    lines_until(&rx, "the listener's subscription", |l| {
        l.contains("is owned by")
    });

    let o = env
        .cli()
        .env("AGENTSTORE_BUS", "session")
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(["research-code", "--project", SECRET_PROJECT])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let id = out
        .trim()
        .strip_prefix("Job queued: ")
        .expect(&out)
        .to_string();

    // Both signals of the message reach the stranger (so it is listening), with ids only.
    let seen = lines_until(&rx, "JobCreated", |l| l.contains(".JobCreated"));
    let processed: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains(".MessageProcessed"))
        .collect();
    assert_eq!(processed.len(), 1, "{seen:#?}");
    let created = seen.last().unwrap();
    assert!(created.contains(&id), "{created}");
    for l in &seen {
        for leak in [SECRET_PROJECT, "research-code", "code-researcher", "done"] {
            assert!(
                !l.contains(leak),
                "a listener as nobody read {leak:?} of another user's work: {l}"
            );
        }
    }
    // The job is there, with its project, for whoever may read it.
    let job = env
        .root
        .join(format!("Queues/poplar/Jobs/queued_jobs/{id}.json"));
    let job: serde_json::Value = serde_json::from_slice(&std::fs::read(job).unwrap()).unwrap();
    assert_eq!(job["config"]["project"], SECRET_PROJECT);

    // The properties any local user may read: counts and the daemon's own state.
    let (uid, gid) = nobody();
    let o = Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args(["introspect", "--no-pager"])
        .arg(agentstore::bus::ORCHESTRATOR_NAME)
        .arg(agentstore::bus::ORCHESTRATOR_PATH)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    let props = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && props.contains(".Role"), "{props}");
    assert!(
        !props.contains(SECRET_PROJECT) && !props.contains(&id),
        "{props}"
    );
}
