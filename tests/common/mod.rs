//! Shared helpers for integration tests: a temp store with a temp HOME, and the built CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temp AgentStore root and a temp HOME, removed on drop.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
}

impl TestEnv {
    /// An empty environment (no store yet).
    pub fn empty() -> TestEnv {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("AgentStore");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        TestEnv { dir, root, home }
    }

    /// This machine's own configuration for the daemons the test starts (per-user mode:
    /// `~/.config/agentstore/config.yaml` of this HOME) lists `claude` as a program a queue's
    /// `claude_cli_path` may name (issue 27: a queue may only choose among allowed programs).
    pub fn allow_claude(&self, claude: &Path) {
        let dir = self.home.join(".config/agentstore");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.yaml");
        let mut text = std::fs::read_to_string(&file).unwrap_or_default();
        let entry = format!("    - {:?}\n", claude.display().to_string());
        if !text.contains("programs:\n  claude:\n") {
            text.push_str("programs:\n  claude:\n");
        }
        text = text.replacen(
            "programs:\n  claude:\n",
            &format!("programs:\n  claude:\n{entry}"),
            1,
        );
        std::fs::write(&file, text).unwrap();
    }

    /// A store made by `orchestrator init`, with user chenry (admin).
    pub fn initialised() -> TestEnv {
        let env = TestEnv::empty();
        env.ok(&["init"]);
        env.ok(&[
            "add-user",
            "chenry",
            "--name",
            "Christopher Henry",
            "--email",
            "chenry@anl.gov",
            "--permissions",
            "admin",
        ]);
        env
    }

    /// The `orchestrator` command with this store and HOME.
    pub fn cli(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        c.env("AGENT_STORE_ROOT", &self.root)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("CACHE_DIRECTORY")
            .env("NO_COLOR", "1");
        c
    }

    /// Runs the CLI with `args`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cli().args(args).output().unwrap()
    }

    /// Runs the CLI and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "orchestrator {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// Runs the CLI and asserts exit code 1; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(
            o.status.code(),
            Some(1),
            "orchestrator {args:?} should fail with 1:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stderr).unwrap()
    }

    /// Writes a file under the store root.
    /// `initialised()` plus the PRD's M2 TestProject (owner chenry, default queue poplar:
    /// the corpus document `tests/corpus/valid/project/m2_TestProject.json`).
    pub fn with_test_project() -> TestEnv {
        let env = TestEnv::initialised();
        let doc = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus/valid/project/m2_TestProject.json");
        env.write(
            "projects/TestProject/project.json",
            &std::fs::read_to_string(doc).unwrap(),
        );
        std::fs::create_dir_all(env.root.join("projects/TestProject/queued_prds")).unwrap();
        env
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Lines of errors.out (every machine's `errors@<host>.out` and the PRD-named file) parsed
    /// as JSON.
    pub fn error_log(&self) -> Vec<serde_json::Value> {
        let text = errors_out(&self.root);
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// This process's login name: jobs run as the project owner's `unix_user` when the queue
/// manager runs as root, so a test's owner is mapped to whoever runs the test.
pub fn login() -> String {
    let o = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A researcher's store for tests that run the CLI and the daemons as child processes: made
/// by `orchestrator init`, admin chenry (`unix_user` = [`login`]), project P (folder
/// `project/` of the temp dir) whose default queue is poplar, and a runtime dir with no bus
/// socket in it. [`Researcher::scope`] gives a command this HOME and runtime dir, the
/// session bus asked for, and a system bus that does not exist, so nothing on the host can
/// change the outcome.
pub struct Researcher {
    pub env: TestEnv,
    pub run_dir: PathBuf,
    pub project_dir: PathBuf,
}

impl Researcher {
    pub fn new() -> Researcher {
        let env = TestEnv::empty();
        let run_dir = env.dir.path().join("run");
        let project_dir = env.dir.path().join("project");
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::create_dir_all(&project_dir).unwrap();
        for args in Researcher::commands(&project_dir) {
            env.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        }
        env.allow_claude(&fake_claude());
        Researcher {
            env,
            run_dir,
            project_dir,
        }
    }

    /// The CLI commands that make a researcher's store: `init`, admin chenry (`unix_user` =
    /// [`login`]), project P in `project_dir` whose default queue is poplar.
    pub fn commands(project_dir: &Path) -> [Vec<String>; 3] {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        [
            v(&["init"]),
            v(&[
                "add-user",
                "chenry",
                "--name",
                "C",
                "--email",
                "c@x.org",
                "--permissions",
                "admin",
                "--unix-user",
                &login(),
            ]),
            v(&[
                "add-project",
                "P",
                "--directory",
                project_dir.to_str().unwrap(),
                "--owner",
                "chenry",
                "--default-queue",
                "poplar",
            ]),
        ]
    }

    /// Sets the environment of `c` that decides what it sees: HOME, XDG_RUNTIME_DIR, the
    /// session bus at `session_bus` (none when `None`), no system bus, nothing inherited
    /// that picks a bus or a mode.
    pub fn scope(&self, c: &mut Command, session_bus: Option<&str>) {
        c.env("HOME", &self.env.home)
            .env("XDG_RUNTIME_DIR", &self.run_dir)
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", self.run_dir.join("no-system-bus").display()),
            )
            .env_remove("AGENTSTORE_BUS")
            .env_remove("AGENTSTORE_MODE")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("INVOCATION_ID")
            .env_remove("JOURNAL_STREAM")
            .env("RUST_LOG", "warn");
        match session_bus {
            Some(address) => c.env("DBUS_SESSION_BUS_ADDRESS", address),
            None => c.env_remove("DBUS_SESSION_BUS_ADDRESS"),
        };
    }
}

/// The text of every file of the shared log `dir/<stem>.<ext>` (one per machine,
/// `<stem>@<host>.<ext>`, and the PRD-named one), file after file. Rotated files are left out.
pub fn shared_log(dir: &Path, stem: &str, ext: &str) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n == &format!("{stem}.{ext}")
                        || (n.starts_with(&format!("{stem}@")) && n.ends_with(&format!(".{ext}")))
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|n| std::fs::read_to_string(dir.join(n)).unwrap_or_default())
        .collect()
}

/// Every machine's `JSONValidation/errors.out` lines (see [`shared_log`]).
pub fn errors_out(root: &Path) -> String {
    shared_log(&root.join("JSONValidation"), "errors", "out")
}

/// The fake `claude` (tests/fixtures/fake-claude): the one stand-in for Claude Code's CLI.
pub fn fake_claude() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-claude")
}

/// The repository's test corpus folder.
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// A valid job document (PRD M3 test-job-001).
pub fn noop_job(queue_time: &str) -> String {
    format!(
        r#"{{
  "config": {{
    "project": "TestProject", "working_directory": "/tmp", "queue_time": "{queue_time}",
    "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [],
    "task_description": "Test job", "supporting_data": {{}}, "timeout_seconds": 60
  }},
  "runtime": {{
    "status": "queued", "start_time": null, "finish_time": null, "process_id": null,
    "llm_process_id": null, "error": null, "output": null
  }}
}}"#
    )
}

pub mod bus;
