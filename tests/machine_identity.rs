//! Machine identity (issue 35): machines are keyed in the store by their machine id, not by
//! their host name. Two real `queue-manager` processes with the SAME host name and different
//! machine ids (`AGENTSTORE_MACHINE_ID`, standing in for two clones' `/etc/machine-id`) serve
//! one store as two machines; and a store from before machine ids (a heartbeat folder named
//! by the host name, written this boot) is adopted by the machine that wrote it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use crate::harness::KillOnDrop;
use crate::wait::wait_until;
use queue_env::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ID_A: &str = "0123456789abcdef0123456789abcdef";
const ID_B: &str = "fedcba9876543210fedcba9876543210";

fn fast_machines(root: &Path) {
    let cfg = root.join("config.yaml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(
        "machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 2\n  lost_job_grace_seconds: 6\n",
    );
    std::fs::write(&cfg, text).unwrap();
}

/// `queue-manager` for `env`'s queue on the machine with id `id` and this computer's host name.
fn manager(env: &QueueEnv, id: &str) -> KillOnDrop {
    crate::daemons::queue_manager(&env.root, &env.queue)
        .env_remove("AGENTSTORE_HOSTNAME")
        .env("AGENTSTORE_MACHINE_ID", id)
        .spawn()
}

fn cli(env: &QueueEnv, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .arg("--root")
        .arg(&env.root)
        .args(["--bus", "none"])
        .env("HOME", env.dir.path())
        .env_remove("AGENTSTORE_HOSTNAME")
        .env("AGENTSTORE_MACHINE_ID", "00000000000000000000000000000001")
        .output()
        .unwrap()
}

fn machines(env: &QueueEnv) -> Vec<Value> {
    let o = cli(env, &["list-machines", "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["problems"], json!([]), "{v:#}");
    v["machines"].as_array().unwrap().clone()
}

fn kernel_hostname() -> String {
    nix::unistd::gethostname().unwrap().into_string().unwrap()
}

#[test]
fn two_machines_with_one_host_name_are_two_machines() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    let a = manager(&env, ID_A);
    env.queue_job("j1", &noop(120.0));
    wait_until(Duration::from_secs(30), "j1 running on a", || {
        env.job_file("running", "j1").exists()
            && env.job("running", "j1")["runtime"]["process_id"].is_number()
    });
    let worker = env.job("running", "j1")["runtime"]["process_id"]
        .as_i64()
        .unwrap() as i32;
    let a_key = env.job("running", "j1")["runtime"]["host"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        a_key.starts_with("m-"),
        "runtime.host is a machine key: {a_key}"
    );
    assert_ne!(a_key, kernel_hostname());
    let _b = manager(&env, ID_B);
    wait_until(Duration::from_secs(30), "both machines reporting", || {
        machines(&env).len() == 2
    });
    let list = machines(&env);
    let host = kernel_hostname();
    for m in &list {
        assert_eq!(m["hostname"], json!(host), "{m:#}");
        assert_eq!(m["daemons"], json!(["queue-manager@q1"]), "{m:#}");
    }
    let keys: Vec<&str> = list.iter().map(|m| m["host"].as_str().unwrap()).collect();
    assert_ne!(keys[0], keys[1]);
    assert!(keys.contains(&a_key.as_str()), "{keys:?}");
    // The text listing shows both, each with the shared host name and its whole key (the
    // one view-machine takes), also on a narrow terminal where every other column is cut.
    let text = String::from_utf8(cli(&env, &["list-machines"]).stdout).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains(&host)).count(),
        2,
        "{text}"
    );
    let narrow = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["list-machines", "--bus", "none", "--root"])
        .arg(&env.root)
        .env("HOME", env.dir.path())
        .env("COLUMNS", "60")
        .output()
        .unwrap();
    let narrow = String::from_utf8(narrow.stdout).unwrap();
    for k in &keys {
        assert_eq!(
            narrow
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(k))
                .count(),
            1,
            "{k} whole in:\n{narrow}"
        );
    }

    // Machine a goes silent: b (same host name, another machine) fails a's job for it.
    a.signal(nix::sys::signal::Signal::SIGSTOP);
    // The claim moves the file into failed_jobs/ first and writes the error into it next:
    // wait for both.
    wait_until(Duration::from_secs(40), "j1 failed by b", || {
        env.job_file("failed", "j1").exists()
            && std::fs::read_to_string(env.job_file("failed", "j1"))
                .is_ok_and(|t| t.contains("stopped reporting at"))
    });
    let error = env.job("failed", "j1")["runtime"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.starts_with(&format!("Machine {a_key} stopped reporting at ")),
        "{error}"
    );
    // Back, a finds its job failed elsewhere and stops its worker.
    a.signal(nix::sys::signal::Signal::SIGCONT);
    wait_until(Duration::from_secs(30), "a's worker stopped", || {
        std::fs::read_to_string(format!("/proc/{worker}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    });
}

#[test]
fn a_heartbeat_folder_from_before_machine_ids_is_adopted() {
    let env = QueueEnv::new(1);
    fast_machines(&env.root);
    let host = kernel_hostname();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string();
    // What a version before machine ids wrote: machines/<host name>/, no `hostname` field.
    let legacy = env.root.join("machines").join(&host);
    std::fs::create_dir_all(&legacy).unwrap();
    let now = agentstore::model::Timestamp::now().to_string();
    let old = json!({
        "host": host, "daemon": "queue-manager", "queue": "q1", "pid": 1,
        "boot_id": boot, "version": "0.0.9", "started": now, "last_seen": now,
        "interval_seconds": 1, "stopped": true
    });
    std::fs::write(legacy.join("queue-manager.q1.json"), old.to_string()).unwrap();
    let _a = manager(&env, ID_A);
    wait_until(Duration::from_secs(30), "the old heartbeat adopted", || {
        let l = machines(&env);
        l.len() == 1 && l[0]["host"] != json!(host)
    });
    // Looked up by its old name, the machine is the adopted one (jobs naming it stay its).
    let o = cli(&env, &["view-machine", &host, "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["host"].as_str().unwrap().starts_with("m-"), "{v:#}");
    assert_eq!(v["heartbeats"][0]["formerly"], json!([host]), "{v:#}");

    // Another boot's folder under the same name is not adopted (a clone may have written it).
    let env2 = QueueEnv::new(1);
    fast_machines(&env2.root);
    let legacy2 = env2.root.join("machines").join(&host);
    std::fs::create_dir_all(&legacy2).unwrap();
    let mut other = old.clone();
    other["boot_id"] = json!("00000000-0000-0000-0000-000000000000");
    std::fs::write(legacy2.join("queue-manager.q1.json"), other.to_string()).unwrap();
    let _b = manager(&env2, ID_B);
    wait_until(
        Duration::from_secs(30),
        "b reporting beside the old folder",
        || machines(&env2).len() == 2,
    );
    assert!(legacy2.join("queue-manager.q1.json").exists());
    let l = machines(&env2);
    let b = l.iter().find(|m| m["host"] != json!(host)).unwrap();
    let o = cli(
        &env2,
        &[
            "view-machine",
            b["host"].as_str().unwrap(),
            "--format",
            "json",
        ],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["heartbeats"][0].get("formerly").is_none(), "{v:#}");
}
