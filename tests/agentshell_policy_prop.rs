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
            if crate::wait::exit_within(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
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

/// A program stub that records its argv (NUL-separated) in `$LOGDIR`, one file per process.
const STUB: &str = "#!/bin/sh\nprintf '%s\\0' \"${0##*/}\" \"$@\" > \"$LOGDIR/$$\"\n";

/// The programs the generated lines may run (all stubs).
const STUBS: &[&str] = &["a", "b", "c", "x", "EOF", "f", "e"];

/// Words the generator puts after a program: plain, quoted, escaped, and ones that hold
/// operators, quotes, newlines or a here-document marker inside quotes.
const WORDS: &[&str] = &[
    "a",
    "b",
    "c",
    "x",
    "-n",
    "--",
    "2",
    "'2'",
    "\"2\"",
    "'a b'",
    "\"a;b\"",
    "'c'",
    "a\\ b",
    "\\a",
    "'x\ny'",
    "\"p|q\"",
    "'<<EOF'",
    "\"'\"",
    "'\"'",
    "x=1",
    "a#b",
    "'$x'",
    "'*'",
    "\"\\\\\"",
    "'\\'",
    "\"a\\\nb\"",
    "e\\\nf",
    "'>&'",
    "\"&&\"",
    "'EOF'",
    "EOF",
    "'\n'",
];

/// Redirections, the plain ones and the ones a word splitter easily gets wrong.
const REDIRECTS: &[&str] = &[
    "2>&1",
    ">&2",
    "10>&1",
    "12>/dev/null",
    "2>/dev/null",
    "</dev/null",
    ">/dev/null",
    ">& 2",
    "2>&-",
    ">&x",
    ">& x",
    "<<EOF",
    "<<'EOF'",
    "<<-EOF",
    "<<<x",
    "<>x",
    ">|x",
    ">x",
    ">>x",
    "'2'>/dev/null",
    "2'>'x",
    "&>x",
    "<&0",
    "<(a)",
    ">(a)",
];

/// What separates simple commands, and other raw pieces mixed in.
const SEPARATORS: &[&str] = &[
    " ; ", " | ", " && ", "\n", " || ", ";", "|", "\nEOF\n", "\n\n", " & ", " |& ", " ;; ",
];
const NOISE: &[&str] = &[
    "(", ")", "{", "}", "`", "$(", "#", "\r", "\t", "'", "\"", "\\", "\\\n", "!", "EOF\n",
];

/// A generated command line: segments of a stub program and words, redirections, separators,
/// and now and then a raw piece anywhere.
fn line_strategy() -> impl Strategy<Value = String> {
    let segment = (
        proptest::sample::select(&["a", "b", "c"][..]),
        proptest::collection::vec(
            prop_oneof![
                6 => proptest::sample::select(WORDS),
                2 => proptest::sample::select(REDIRECTS),
                1 => proptest::sample::select(NOISE),
            ],
            0..4,
        ),
    )
        .prop_map(|(p, words)| {
            let mut s = p.to_string();
            for w in words {
                s.push(' ');
                s.push_str(w);
            }
            s
        });
    (
        proptest::collection::vec(segment, 1..4),
        proptest::collection::vec(proptest::sample::select(SEPARATORS), 3),
        proptest::option::of(proptest::sample::select(NOISE)),
        any::<proptest::sample::Index>(),
    )
        .prop_map(|(segments, seps, noise, at)| {
            let mut line = String::new();
            for (i, s) in segments.iter().enumerate() {
                if i > 0 {
                    line.push_str(seps[i - 1]);
                }
                line.push_str(s);
            }
            if let Some(n) = noise {
                let cuts: Vec<usize> = line.char_indices().map(|(i, _)| i).collect();
                let pos = cuts.get(at.index(cuts.len().max(1))).copied().unwrap_or(0);
                line.insert_str(pos, n);
            }
            line
        })
}

/// Run `line` with `shell -c` in `dir`, only the stubs on PATH; the argvs run and stderr.
fn run_traced(shell: &str, line: &str, dir: &Path, stubs: &Path) -> (Vec<Vec<String>>, String) {
    let log = dir.join("log");
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&log).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let mut child = Command::new(shell)
        .args(["-c", line])
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", stubs)
        .env("LOGDIR", &log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::wait::child_exit(
        &mut child,
        Duration::from_secs(10),
        &format!("`{line}` to end in {shell}"),
    );
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut runs: Vec<Vec<String>> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            bytes
                .split(|b| *b == 0)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect::<Vec<_>>()
        })
        .map(|mut v| {
            v.pop(); // after the last NUL
            v
        })
        .collect();
    runs.sort();
    let created: Vec<String> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    std::fs::remove_dir_all(&log).unwrap();
    std::fs::remove_dir_all(&cwd).unwrap();
    if !created.is_empty() {
        stderr.push_str(&format!("\n[created files: {created:?}]"));
    }
    (runs, stderr)
}

/// Property: whenever the policy's word splitter reads a line without reservation, a real
/// `sh` (dash here) and `bash` run exactly the simple commands it read, with exactly its argv,
/// and create no file; every line it cannot read that way is ASK. Here-documents, `>&FILE`,
/// quoted descriptor digits, control characters, operators and quotes inside words are
/// generated on purpose. Fixed seed, bounded count.
#[test]
fn the_word_splitter_reads_lines_the_way_sh_and_bash_run_them() {
    use agentstore::agent::tools::shell_words;
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let stubs = t.path().join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    for name in STUBS {
        let p = stubs.join(name);
        std::fs::write(&p, STUB).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let policy = Policy::new(&PolicyConfig::default(), &root).unwrap();
    let config = Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[28; 32]));
    let compared = std::cell::Cell::new(0usize);
    let refused = std::cell::Cell::new(0usize);
    runner
        .run(&line_strategy(), |line| {
            let parsed = match shell_words::parse(&line) {
                Ok(p) if p.issues.is_empty() => p,
                _ => {
                    // not read without reservation: never ALLOWED
                    prop_assert_ne!(policy.classify_command(&line).verdict, Verdict::Allow);
                    refused.set(refused.get() + 1);
                    return Ok(());
                }
            };
            let mut predicted = parsed.segments.clone();
            predicted.sort();
            // Exact comparison when every command the splitter read is a stub (a program
            // that is not found runs nothing either way), no `||` skips one, and every input
            // exists.
            let exact = !line.contains("||")
                && parsed.inputs.iter().all(|i| i == "/dev/null")
                && parsed
                    .segments
                    .iter()
                    .all(|s| STUBS.contains(&s[0].as_str()));
            for shell in ["/bin/sh", "/bin/bash"] {
                let (runs, stderr) = run_traced(shell, &line, t.path(), &stubs);
                if exact {
                    prop_assert_eq!(
                        &runs,
                        &predicted,
                        "{} ran other commands than the splitter read in {:?} (stderr {})",
                        shell,
                        line,
                        stderr
                    );
                    prop_assert!(stderr.is_empty(), "{} on {:?}: {}", shell, line, stderr);
                } else {
                    for r in &runs {
                        prop_assert!(
                            predicted.contains(r),
                            "{} ran {:?}, which the splitter did not read in {:?}",
                            shell,
                            r,
                            line
                        );
                    }
                    prop_assert!(!stderr.contains("created files"), "{}: {}", line, stderr);
                }
            }
            compared.set(compared.get() + 1);
            Ok(())
        })
        .unwrap();
    // both sides of the property were exercised
    assert!(
        compared.get() >= 80,
        "only {} lines compared",
        compared.get()
    );
    assert!(refused.get() >= 80, "only {} lines refused", refused.get());
}
