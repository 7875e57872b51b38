//! Property: an argv built from the read-only programs and their real option sets (the safe
//! ones, the side-effect ones and abbreviations of both) is never ALLOWED when running it
//! changes anything. Each ALLOWED case is really run (`sh -c`, like `run_command`) in a
//! throwaway root, and the root's tree, a canary outside the root and the marker that an
//! injected program would create are compared. Fixed seed, bounded count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentstore::agent::tools::subsystems::policy::{Policy, PolicyConfig, Verdict};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// (program, options and operands it may get). Clock-setting forms of `date` are left out:
/// if the policy were wrong, running them would change this machine's clock.
const PROGRAMS: &[(&str, &[&str])] = &[
    (
        "sort",
        &[
            "-n",
            "-r",
            "-u",
            "-k2",
            "-t,",
            "-o",
            "out.txt",
            "-oout.txt",
            "--output=out.txt",
            "--outp=out.txt",
            "--o=out.txt",
            "--compress-program=./evil.sh",
            "--compress=./evil.sh",
            "-S1",
            "--batch-size=2",
            "-T",
            ".",
            "--temporary-directory=.",
            "-m",
            "a.txt",
            "b.txt",
            "--files0-from=list",
            "-",
        ],
    ),
    (
        "uniq",
        &[
            "-c", "-d", "-u", "-i", "a.txt", "b.txt", "out.txt", "-", "--group", "-D",
        ],
    ),
    (
        "file",
        &[
            "-b",
            "-i",
            "-L",
            "-C",
            "--compile",
            "--comp",
            "-m",
            "magic",
            "a.txt",
            "-f",
            "list",
            "-flist",
            "--mime-type",
        ],
    ),
    (
        "tree",
        &[
            "-L",
            "2",
            "-a",
            "-o",
            "out.txt",
            "-oout.txt",
            "--output",
            "-R",
            "-H",
            "x",
            "--fromfile",
            "list",
        ],
    ),
    (
        "cat",
        &["-n", "-A", "a.txt", "b.txt", "--number", "--show-all", "-"],
    ),
    (
        "head",
        &["-n", "3", "-c5", "-5", "a.txt", "--lines=2", "--bytes=4"],
    ),
    ("tail", &["-n", "3", "-c5", "-5", "a.txt", "--lines=2"]),
    (
        "grep",
        &[
            "-r",
            "-n",
            "-i",
            "a",
            "a.txt",
            ".",
            "-e",
            "b",
            "-f",
            "list",
            "-R",
            "--include=*.txt",
        ],
    ),
    (
        "cut",
        &["-c1-2", "-f1", "-d,", "a.txt", "--output-delimiter=x"],
    ),
    ("od", &["-c", "-An", "-tx1", "a.txt", "-w4"]),
    ("wc", &["-l", "-c", "a.txt", "--files0-from=list"]),
    (
        "find",
        &[
            ".",
            "-name",
            "a.txt",
            "-type",
            "f",
            "-maxdepth",
            "1",
            "-delete",
            "-exec",
            "./evil.sh",
            ";",
            "-fprint",
            "out.txt",
            "-print",
            "-fls",
            "out.txt",
            "-newer",
            "a.txt",
        ],
    ),
    (
        "date",
        &[
            "+%Y",
            "-u",
            "-d",
            "2020-01-01",
            "-r",
            "a.txt",
            "--date=now",
            "-I",
        ],
    ),
    (
        "ls",
        &["-la", "-R", ".", "a.txt", "--color=never", "-w", "80"],
    ),
    (
        "jq",
        &[
            ".",
            "-r",
            "a.json",
            "-n",
            "--arg",
            "x",
            "y",
            "--rawfile",
            "x",
            "a.txt",
        ],
    ),
    (
        "git",
        &[
            "log",
            "status",
            "diff",
            "-c",
            "core.pager=./evil.sh",
            "--output=out.txt",
            "--outp=out.txt",
            "--ext-diff",
            "-p",
            "--oneline",
            "grep",
            "-O./evil.sh",
            "--open=./evil.sh",
            "a",
            "--",
            "a.txt",
            "-C",
            ".",
            "branch",
            "new-branch",
            "tag",
            "v1",
            "config",
            "x.y",
            "z",
        ],
    ),
];

fn make_root(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("a.txt"), "b,2\na,1\nb,2\n").unwrap();
    std::fs::write(dir.join("b.txt"), "c\n").unwrap();
    std::fs::write(dir.join("a.json"), "{\"x\":1}\n").unwrap();
    std::fs::write(dir.join("list"), "a.txt\n").unwrap();
    std::fs::write(
        dir.join("evil.sh"),
        "#!/bin/sh\ntouch \"$(dirname \"$0\")/pwned\"\ncat\n",
    )
    .unwrap();
    std::fs::set_permissions(dir.join("evil.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // a plain git repository, so that git commands really run
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
    };
    git(&["init", "-q"]);
}

fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let key = p.strip_prefix(dir).unwrap().display().to_string();
            if key == ".git/index" || key.starts_with(".git/objects") {
                // git status may refresh its own index stat cache: not a side effect of the
                // command's choosing
                continue;
            }
            if m.is_dir() {
                stack.push(p);
                out.insert(key, Vec::new());
            } else {
                out.insert(key, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[test]
fn random_read_only_argv_is_never_allowed_when_it_writes_or_executes() {
    let have_git = Command::new("git").arg("--version").output().is_ok();
    assert!(have_git, "git is needed for this test");
    let config = Config {
        cases: 150,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[42; 32]));
    let strategy = (0..PROGRAMS.len()).prop_flat_map(|p| {
        let opts = PROGRAMS[p].1;
        (
            Just(p),
            proptest::collection::vec(proptest::sample::select(opts), 0..5),
        )
    });
    let allowed_count = std::cell::Cell::new(0usize);
    runner
        .run(&strategy, |(p, args)| {
            let t = tempfile::tempdir().unwrap();
            let root = t.path().join("root");
            make_root(&root);
            std::fs::write(t.path().join("canary"), "canary\n").unwrap();
            let policy = Policy::new(&PolicyConfig::default(), &root).unwrap();
            let line = std::iter::once(PROGRAMS[p].0.to_string())
                .chain(args.iter().map(|a| quote(a)))
                .collect::<Vec<_>>()
                .join(" ");
            let decision = policy.classify_command(&line);
            if decision.verdict != Verdict::Allow {
                return Ok(());
            }
            allowed_count.set(allowed_count.get() + 1);
            let before = snapshot(&root);
            let mut child = Command::new("sh")
                .args(["-c", &line])
                .current_dir(&root)
                .env("HOME", t.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while child.try_wait().unwrap().is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.wait();
            let after = snapshot(&root);
            let changed: Vec<&String> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect();
            prop_assert!(
                changed.is_empty(),
                "ALLOWED `{}` ({}) changed {:?}",
                line,
                decision.reason,
                changed
            );
            prop_assert!(!root.join("pwned").exists(), "`{}` ran a program", line);
            prop_assert_eq!(
                std::fs::read_to_string(t.path().join("canary")).unwrap(),
                "canary\n"
            );
            Ok(())
        })
        .unwrap();
    // the property must have been exercised, not vacuously true
    assert!(
        allowed_count.get() >= 20,
        "only {} cases were ALLOWED",
        allowed_count.get()
    );
}
