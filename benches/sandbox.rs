//! The kernel sandbox's cost (issue 28), confined and unconfined side by side in one run:
//! `cargo bench --bench sandbox`.
//!
//! 1. per command: agentshell's `run_command` spawn of `sh -c true` with the allow-listed
//!    environment, without and with the session's confinement (ruleset built per command,
//!    mount namespace with the read-only binds, no_new_privs, Landlock), interleaved;
//! 2. per job start: the worker's confinement of a Claude job (rules compiled from the job,
//!    scratch directory made, then one confined spawn of `/bin/true` with its socket
//!    supervisor started and stopped) against a plain spawn.
//!
//! Figures printed, not asserted (target: ≤ 2 ms wall per command over an unconfined spawn).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentstore::agent::tools::sandbox::Support;
use agentstore::agent::tools::sandbox::session::{CommandSandbox, command_env};
use agentstore::model::{JobType, QueueConfig, SandboxSetting};
use agentstore::worker::confine;

const ROUNDS: usize = 200;

fn stats(label: &str, samples: &mut [Duration]) -> f64 {
    samples.sort();
    let n = samples.len();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<52} n={n:<4} min {:>7.3} ms  median {:>7.3} ms  p90 {:>7.3} ms",
        ms(samples[0]),
        ms(samples[n / 2]),
        ms(samples[(n * 9 / 10).min(n - 1)])
    );
    ms(samples[n / 2])
}

fn run(mut cmd: Command) -> Duration {
    let t = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    t.elapsed()
}

fn per_command() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(root.join(".agentshell")).unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/config"), "").unwrap();
    let home = std::env::var("HOME").map(PathBuf::from).ok();
    let support = Support::detect(None);
    println!("sandbox: {}", support.describe());
    let sandbox = CommandSandbox::new(&root, home.as_deref(), dir.path(), support).unwrap();
    // The same rules without the mount namespace (where the read-only subpaths come from).
    let landlock_only = CommandSandbox::new(
        &root,
        home.as_deref(),
        dir.path(),
        Support {
            mount_namespace: false,
            ..support
        },
    )
    .unwrap();
    let env = command_env(std::env::vars(), sandbox.scratch(), &BTreeMap::new());
    let base = || {
        let mut c = Command::new("sh");
        c.args(["-c", "true"])
            .current_dir(&root)
            .env_clear()
            .envs(&env)
            .process_group(0);
        c
    };
    use std::os::unix::process::CommandExt;
    let (mut plain, mut confined, mut prepare) = (Vec::new(), Vec::new(), Vec::new());
    let mut no_ns = Vec::new();
    let mut read_only = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let p = sandbox.prepare_read_only(false).unwrap();
        let mut c = base();
        p.install_std(&mut c);
        read_only.push(t.elapsed() + run(c));
        plain.push(run(base()));
        let t = Instant::now();
        let p = landlock_only.prepare(false).unwrap();
        let mut c = base();
        p.install_std(&mut c);
        no_ns.push(t.elapsed() + run(c));
        let t = Instant::now();
        let p = sandbox.prepare(false).unwrap();
        let mut c = base();
        p.install_std(&mut c);
        let built = t.elapsed();
        prepare.push(built);
        confined.push(built + run(c));
    }
    let a = stats("per command: sh -c true, unconfined", &mut plain);
    let b = stats(
        "per command: sh -c true, confined (incl. ruleset)",
        &mut confined,
    );
    stats(
        "  of which preparing (ruleset built once, binds)",
        &mut prepare,
    );
    let c = stats(
        "per command: confined, Landlock only (no mount ns)",
        &mut no_ns,
    );
    println!(
        "per command: Landlock + no_new_privs + caps cost {:.3} ms, the mount namespace {:.3} ms",
        c - a,
        b - c
    );
    println!(
        "per command: confinement costs {:.3} ms (median difference)",
        b - a
    );
    let r = stats("per command: confined, read-only command", &mut read_only);
    println!(
        "per command: a read-only command's confinement costs {:.3} ms (median difference)",
        r - a
    );
}

/// The sweep after a command that may write (and at a job's end): a walk of the project for
/// what would steer git or an agent later, on a project of some 5,000 entries.
fn per_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let mut entries = 0;
    for d in 0..400 {
        let sub = root.join(format!("src/m{}/d{d}", d % 20));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..12 {
            std::fs::write(sub.join(format!("f{f}.rs")), "fn main() {}\n").unwrap();
            entries += 1;
        }
        entries += 1;
    }
    let sandbox = CommandSandbox::new(&root, None, dir.path(), Support::detect(None)).unwrap();
    let mut sweeps = Vec::new();
    for _ in 0..ROUNDS / 4 {
        let t = Instant::now();
        assert!(sandbox.sweep().is_empty());
        sweeps.push(t.elapsed());
    }
    stats(
        &format!("per command that may write: sweep of {entries} entries"),
        &mut sweeps,
    );
}

fn per_job() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join(".git/hooks")).unwrap();
    let home = std::env::var("HOME").map(PathBuf::from).unwrap_or_default();
    let mut queue = QueueConfig::defaults("bench");
    queue.sandbox = Some(SandboxSetting {
        enabled: true,
        connect_ports: vec![],
    });
    let env = vec![
        ("HOME".to_string(), home.display().to_string()),
        (
            "ANTHROPIC_BASE_URL".to_string(),
            "http://127.0.0.1:9".to_string(),
        ),
    ];
    let (mut plain, mut confined) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS / 4 {
        let mut c = Command::new("/bin/true");
        c.current_dir(&work);
        plain.push(run(c));
        let t = Instant::now();
        let job = confine::for_job(confine::JobContext {
            queue: &queue,
            jobtype: &JobType::Claude,
            cwd: &work,
            home: &home,
            env: &env,
            programs: &[PathBuf::from("/bin/true")],
            switch_to: None,
            approvals: Some("agentstore-approvals-bench"),
        })
        .unwrap()
        .unwrap();
        let mut p = job.compiled.prepare(false).unwrap();
        let channel = p.take_channel();
        let mut c = Command::new("/bin/true");
        c.current_dir(&work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        p.install_std(&mut c);
        // As the worker does: the socket supervisor started once the child is spawned.
        let mut child = c.spawn().unwrap();
        let supervisor = channel.map(|ch| ch.supervise().unwrap());
        assert!(child.wait().unwrap().success());
        if let Some(s) = supervisor {
            s.stop();
        }
        let d = t.elapsed();
        job.remove_scratch();
        confined.push(d);
    }
    let a = stats("per job start: /bin/true, unconfined", &mut plain);
    let b = stats(
        "per job start: /bin/true, confined (rules from the job)",
        &mut confined,
    );
    println!(
        "per job start: confinement costs {:.3} ms (median difference)",
        b - a
    );
}

fn main() {
    // `cargo nextest run --all-targets` lists the bench's tests: there are none.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    per_command();
    per_sweep();
    per_job();
}
