//! The kernel confinement of an unattended job (issue 28, DESIGN §9), for queues with
//! `config.sandbox.enabled`: the agent (Claude Code, agentshell, venvman) and everything it
//! starts may write only the job's working directory (minus the files that steer git and the
//! agents), the agent's own state and a per-job scratch directory (`TMPDIR`); may read the
//! system, the project and the agent's installation but no credential store of the home
//! directory; may connect over TCP only to its model endpoint's port (and the queue's
//! `connect_ports`); runs with `no_new_privs`. The rules are agentshell's
//! ([`crate::agent::tools::sandbox`]), built here from the job.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agent::tools::sandbox::{
    self, Compiled, Level, SandboxPolicy, Support,
    audit::AuditWatch,
    reaper,
    session::{self, AGENT_SETTINGS, protected_paths},
    supervise::SocketRules,
};

/// systemd-resolved's name lookup socket (what nss-resolve connects to).
const RESOLVED_SOCKET: &str = "/run/systemd/resolve/io.systemd.Resolve";
use crate::model::JobType;
use crate::model::QueueConfig;

use super::runas::RunAs;

/// Environment variables naming a model endpoint (or proxy) whose port a job may reach.
const ENDPOINT_VARS: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "AGENTSHELL_BASE_URL",
    "OPENAI_BASE_URL",
    "OLLAMA_HOST",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
];

/// What in `~/.claude` steers the user's own Claude Code sessions (hooks, permission rules,
/// instructions, commands, subagents, skills, plugins, output styles; `.config.json`, which
/// Claude Code reads instead of `~/.claude.json` where it exists): read-only for a Claude job.
const CLAUDE_STEERING: &[&str] = &[
    "settings.json",
    "settings.local.json",
    "CLAUDE.md",
    "commands",
    "agents",
    "skills",
    "plugins",
    "hooks",
    "output-styles",
    "rules",
    ".config.json",
    // An older Claude Code install's own program (`claude migrate-installer`).
    "local",
];

/// What in `$CODEX_HOME` steers the user's own Codex sessions: read-only for a Codex job.
const CODEX_STEERING: &[&str] = &["config.toml", "AGENTS.md", "AGENTS.override.md", "prompts"];

/// A job's confinement: the compiled rules, its scratch directory, and the line recorded in
/// `runtime.sandbox`.
#[derive(Debug, Clone)]
pub struct JobSandbox {
    /// The rules, opened once.
    pub compiled: Arc<Compiled>,
    /// The per-job scratch directory (`TMPDIR`), removed by [`JobSandbox::remove_scratch`].
    pub scratch: PathBuf,
    /// What it allows, for the job's record.
    pub summary: String,
    /// Steering files absent when the job began (see [`session::absent_steering`]), moved
    /// aside when it made them.
    pub absent: Vec<PathBuf>,
    /// Nested repositories and agent settings under its working directory as they were when
    /// it began (see [`sandbox::leftovers`]).
    pub leftovers: Arc<sandbox::leftovers::Snapshot>,
}

impl JobSandbox {
    /// Remove the scratch directory (the job is over).
    pub fn remove_scratch(&self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }

    /// The job is over: remove its scratch directory, move aside the steering files it made;
    /// what the sandbox refused or moved, for `runtime.sandbox_refused`.
    pub fn finish(&self) -> Vec<String> {
        self.remove_scratch();
        let mut lines = self.compiled.refusals();
        lines.extend(session::sweep(&self.absent));
        lines.extend(self.leftovers.sweep());
        lines
    }
}

/// Before the confined agent starts: read what Landlock refuses it from the kernel's audit
/// where that can be done, and say in the job's `record` whether file refusals are listed;
/// make the worker the subreaper of what the agent leaves running.
pub fn before_run(record: &mut Option<String>) -> Option<AuditWatch> {
    let audit = AuditWatch::start();
    if let Some(line) = record {
        line.push_str(&match &audit {
            Ok(_) => "; each file or port Landlock refused listed in runtime.sandbox_refused \
                      (from the kernel's audit)"
                .to_string(),
            Err(why) => format!(
                "; the files Landlock refused are not listed in runtime.sandbox_refused: {why}"
            ),
        });
    }
    let _ = reaper::become_subreaper();
    audit.ok()
}

impl JobSandbox {
    /// The agent (`pid`) is over: so is everything it started (killed before anything it
    /// left is swept); then [`JobSandbox::finish`] and the Landlock refusals, for
    /// `runtime.sandbox_refused`.
    pub fn after_run(&self, watch: Option<AuditWatch>, pid: Option<u32>) -> Vec<String> {
        let orphans = reaper::kill_orphans();
        let mut lines = self.finish();
        if orphans > 0 {
            lines.push(format!(
                "{orphans} process(es) the agent left running were killed when it ended"
            ));
        }
        lines.extend(watch.map(|w| w.finish(pid)).unwrap_or_default());
        lines
    }
}

/// The TCP port of an endpoint URL (`http://127.0.0.1:8080/v1` → 8080; no port: the
/// scheme's).
fn url_port(url: &str) -> Option<u16> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let port = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, p)| p),
        None => host_port.rsplit_once(':').map(|(_, p)| p),
    };
    match port {
        Some(p) => p.parse().ok(),
        None => Some(if scheme == "https" { 443 } else { 80 }),
    }
}

/// The host of an endpoint URL (`http://[::1]:8080/v1` → `::1`).
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(h, _)| h),
        None => Some(host_port.rsplit_once(':').map_or(host_port, |(h, _)| h)),
    }
    .filter(|h| !h.is_empty())
}

/// What a job's confinement is built from.
#[derive(Debug, Clone, Copy)]
pub struct JobContext<'a> {
    /// The queue (its `config.sandbox`).
    pub queue: &'a QueueConfig,
    /// The job's type (which agent's state it may write).
    pub jobtype: &'a JobType,
    /// The job's working directory.
    pub cwd: &'a Path,
    /// The job account's home directory.
    pub home: &'a Path,
    /// The agent's environment (its endpoint variables).
    pub env: &'a [(String, String)],
    /// The executables it starts (the agent, the approvals server), whose installations it
    /// must read.
    pub programs: &'a [PathBuf],
    /// The account it runs as, when the worker switches to it (owns the scratch directory).
    pub switch_to: Option<&'a RunAs>,
    /// The worker's approval socket (abstract name) it talks to, if any.
    pub approvals: Option<&'a str>,
}

/// The confinement of one job, or `None` when its queue does not sandbox.
pub fn for_job(job: JobContext<'_>) -> Result<Option<JobSandbox>, String> {
    let JobContext {
        queue,
        jobtype,
        cwd,
        home,
        env,
        programs,
        switch_to,
        approvals,
    } = job;
    let Some(setting) = queue.sandbox.as_ref().filter(|s| s.enabled) else {
        return Ok(None);
    };
    let support = Support::detect(None);
    let scratch =
        std::env::temp_dir().join(format!("agentstore-job-{}", uuid::Uuid::new_v4().simple()));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| {
                format!(
                    "Cannot create the job's scratch directory {}: {e}",
                    scratch.display()
                )
            })?;
    }
    if let Some(run_as) = switch_to {
        nix::unistd::chown(
            &scratch,
            Some(nix::unistd::Uid::from_raw(run_as.uid)),
            Some(nix::unistd::Gid::from_raw(run_as.gid)),
        )
        .map_err(|e| format!("Cannot hand the scratch directory to {}: {e}", run_as.name))?;
    }
    let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let mut read = sandbox::system_read_paths();
    read.push(cwd.clone());
    for p in programs {
        // The program's own installation (a version directory behind a symlink, say).
        if let Ok(real) = p.canonicalize()
            && let Some(dir) = real.parent()
        {
            read.push(dir.to_path_buf());
        }
        if let Some(dir) = p.parent() {
            read.push(dir.to_path_buf());
        }
    }
    for p in [
        ".local/bin",
        ".local/share/claude",
        ".gitconfig",
        ".config/git",
        ".rustup",
        ".cargo/bin",
        ".nvm",
        ".volta",
    ] {
        read.push(home.join(p));
    }
    let mut write = vec![cwd.clone(), scratch.clone()];
    // Files in the agent's writable state that the user's own later sessions of that agent
    // run or obey, outside any sandbox: kept read-only where they exist.
    let mut agent_steering: Vec<PathBuf> = Vec::new();
    match jobtype {
        JobType::Claude => {
            write.push(home.join(".claude"));
            // Its global config (MCP servers, per-project allowed tools) is what the user's
            // next interactive session starts and obeys: readable, not writable (Claude Code
            // runs on without saving it; issue 28, sandbox4).
            read.push(home.join(".claude.json"));
            // settings hold hooks (shell commands) and permission rules.
            for p in CLAUDE_STEERING {
                agent_steering.push(home.join(".claude").join(p));
            }
        }
        JobType::Agent => {
            // Its keys and configuration (its commands are confined further, without them).
            let agent_home = env
                .iter()
                .find(|(k, v)| k == "AGENTSHELL_HOME" && !v.is_empty())
                .map_or_else(|| home.join(".agentshell"), |(_, v)| PathBuf::from(v));
            read.push(agent_home);
        }
        JobType::Codex => {
            // Its sessions, logs and config ($CODEX_HOME, default ~/.codex).
            let codex_home = env
                .iter()
                .find(|(k, v)| k == "CODEX_HOME" && !v.is_empty())
                .map_or_else(|| home.join(".codex"), |(_, v)| PathBuf::from(v));
            // config.toml names programs (`notify`, MCP servers).
            for p in CODEX_STEERING {
                agent_steering.push(codex_home.join(p));
            }
            write.push(codex_home);
        }
        JobType::Venvman | JobType::Noop => {}
    }
    let mut ports: Vec<u16> = env
        .iter()
        .filter(|(k, v)| ENDPOINT_VARS.contains(&k.as_str()) && !v.is_empty())
        .filter_map(|(_, v)| url_port(v))
        .collect();
    if !env
        .iter()
        .any(|(k, v)| (k == "ANTHROPIC_BASE_URL" || k == "AGENTSHELL_BASE_URL") && !v.is_empty())
    {
        // The providers' public endpoints.
        ports.push(443);
    }
    // A host name to resolve: UDP is refused (it would carry anything anywhere), so names are
    // looked up through systemd-resolved's Unix socket (nss-resolve) or over TCP port 53
    // (`RES_OPTIONS=use-vc`, set in the job's environment).
    let needs_dns = ports.contains(&443)
        || env
            .iter()
            .filter(|(k, v)| ENDPOINT_VARS.contains(&k.as_str()) && !v.is_empty())
            .any(|(_, v)| url_host(v).is_some_and(|h| h.parse::<std::net::IpAddr>().is_err()));
    if needs_dns {
        ports.push(53);
    }
    ports.extend(&setting.connect_ports);
    ports.sort_unstable();
    ports.dedup();
    let supervised = sandbox::supervise::available();
    let mut read_only = protected_paths(&cwd);
    // agentshell writes its own log and notes in .agentshell/; its config and the project's
    // Claude settings (which can define hooks) stay read-only.
    read_only.retain(|p| !p.ends_with(".agentshell"));
    for p in std::iter::once(&".agentshell/config.json").chain(AGENT_SETTINGS) {
        read_only.push(cwd.join(p));
    }
    // What the bind mounts cannot keep read-only: the ones not there yet.
    let mut absent = session::absent_steering(&cwd);
    absent.extend(
        agent_steering
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_err())
            .cloned(),
    );
    read_only.extend(agent_steering);
    let policy = SandboxPolicy {
        read,
        write,
        write_with_network: Vec::new(),
        read_only,
        pinned: vec![cwd.join(".git")],
        // The job is given its project as it is (its tests may need the .env); agentshell jobs
        // hide it from their commands themselves.
        hidden: Vec::new(),
        devices: sandbox::standard_devices(),
        connect_ports: Some(ports.clone()),
        scope_signals: true,
        // The approvals channel is an abstract socket of the worker, outside the sandbox: the
        // socket supervisor connects it for the job (a scope would refuse the job's own
        // connect), where there is one for this architecture.
        scope_abstract_sockets: approvals.is_none() || supervised,
        tcp_only: false,
        supervise_sockets: supervised.then(|| SocketRules {
            tcp_ports: ports.clone(),
            abstract_names: approvals.map(str::to_string).into_iter().collect(),
            paths: if needs_dns {
                vec![PathBuf::from(RESOLVED_SOCKET)]
            } else {
                Vec::new()
            },
        }),
        log_denials: true,
    };
    let compiled = policy.compile(support);
    let summary = summary(support, &cwd, &scratch, &policy, &ports, supervised);
    Ok(Some(JobSandbox {
        compiled: Arc::new(compiled),
        scratch,
        summary,
        absent,
        leftovers: Arc::new(sandbox::leftovers::Snapshot::take(&cwd, &policy.write)),
    }))
}

fn summary(
    support: Support,
    cwd: &Path,
    scratch: &Path,
    policy: &SandboxPolicy,
    ports: &[u16],
    supervised: bool,
) -> String {
    let writes: Vec<String> = policy
        .write
        .iter()
        .filter(|p| p.as_path() == cwd || p.as_path() == scratch || p.exists())
        .map(|p| p.display().to_string())
        .collect();
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let mut line = format!(
        "sandbox {}: writes {}; read-only {}; TCP connect to port {}; no_new_privs; environment allow-list",
        support.describe(),
        writes.join(", "),
        [
            ".git/hooks",
            ".git/config",
            ".agentshell/config.json",
            "agents' settings (the project's and the agent's own, ~/.claude.json)"
        ]
        .join(", "),
        if ports.is_empty() {
            "none".to_string()
        } else {
            ports.join(", ")
        },
    );
    if supervised {
        line.push_str(
            "; sockets: TCP and Unix stream only, Unix connects only to the approval channel \
             (and systemd-resolved), UDP and others refused, each refusal listed in \
             runtime.sandbox_refused",
        );
    } else {
        line.push_str("; sockets: not watched on this architecture (UDP and Unix not refused)");
    }
    line.push_str("; files outside are refused by Landlock (EACCES)");
    if support.level != Level::Enforced {
        line.push_str(" (not all of it enforced by this kernel)");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_ports() {
        assert_eq!(url_port("http://127.0.0.1:8080/v1"), Some(8080));
        assert_eq!(url_port("https://api.anthropic.com"), Some(443));
        assert_eq!(url_port("http://example.com/x"), Some(80));
        assert_eq!(url_port("http://u:p@h:99"), Some(99));
        assert_eq!(url_host("http://127.0.0.1:8080/v1"), Some("127.0.0.1"));
        assert_eq!(
            url_host("https://api.anthropic.com"),
            Some("api.anthropic.com")
        );
        assert_eq!(url_host("http://[::1]:80"), Some("::1"));
        assert_eq!(url_host("http://u:p@h:99/x"), Some("h"));
    }

    /// Run `script` with `sh -c` under the job's confinement; its exit status.
    fn confined_sh(job: &JobSandbox, cwd: &Path, script: &str) -> bool {
        let mut p = job.compiled.prepare(false).unwrap();
        // The supervisor's end: kept open while the child hands it the listener.
        let channel = p.take_channel();
        let mut c = std::process::Command::new("sh");
        c.args(["-c", script])
            .current_dir(cwd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        p.install_std(&mut c);
        let ok = c.status().unwrap().success();
        drop(channel);
        ok
    }

    /// True where Landlock and a mount namespace are there to try; elsewhere the test has
    /// nothing to try, which CI never accepts.
    fn sandbox_here() -> bool {
        let here = crate::agent::tools::sandbox::kernel_abi() >= 1
            && crate::agent::tools::sandbox::Support::detect(None).mount_namespace;
        assert!(
            here || std::env::var_os("CI").is_none(),
            "CI needs the sandbox"
        );
        here
    }

    /// Issue 28, sandbox3: a job may write its agent's state directory, but not the files in
    /// it that the user's own later, unconfined sessions of that agent run or obey: Claude
    /// Code's user settings (hooks run shell commands), its CLAUDE.md, commands, agents and
    /// skills; Codex's config.toml (`notify`, MCP servers run programs) and AGENTS.md.
    #[test]
    fn a_job_cannot_rewrite_what_the_users_own_agent_sessions_run() {
        if !sandbox_here() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (work, home) = (t.path().join("work"), t.path().join("home"));
        for d in [
            work.join(".git/hooks"),
            home.join(".claude/commands"),
            home.join(".claude/projects"),
            home.join(".codex/sessions"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        let steering = [
            ".claude/settings.json",
            ".claude/CLAUDE.md",
            ".claude/commands/greet.md",
            ".claude.json",
            ".codex/config.toml",
            ".codex/AGENTS.md",
        ];
        for f in steering {
            std::fs::write(home.join(f), "original\n").unwrap();
        }
        let mut queue = QueueConfig::defaults("q");
        queue.sandbox = Some(crate::model::SandboxSetting {
            enabled: true,
            connect_ports: vec![],
        });
        let env = vec![(
            "ANTHROPIC_BASE_URL".to_string(),
            "http://127.0.0.1:9".to_string(),
        )];
        for (jobtype, state) in [
            (JobType::Claude, ".claude/projects/p.jsonl"),
            (JobType::Codex, ".codex/sessions/s.jsonl"),
        ] {
            let job = for_job(JobContext {
                queue: &queue,
                jobtype: &jobtype,
                cwd: &work,
                home: &home,
                env: &env,
                programs: &[PathBuf::from("/bin/sh")],
                switch_to: None,
                approvals: None,
            })
            .unwrap()
            .unwrap();
            for f in steering {
                let p = home.join(f);
                assert!(
                    !confined_sh(&job, &work, &format!("echo hook >> '{}'", p.display())),
                    "{jobtype:?} wrote {f}"
                );
                assert_eq!(std::fs::read_to_string(&p).unwrap(), "original\n", "{f}");
            }
            assert!(
                confined_sh(
                    &job,
                    &work,
                    &format!("echo s >> '{}'", home.join(state).display())
                ),
                "{jobtype:?}: its own state stays writable"
            );
            job.remove_scratch();
        }
    }

    /// Issue 28, sandbox3: steering files that were not there when the job began cannot be
    /// bound read-only; made by the job (a `.git/commondir` pointing at a repository whose
    /// config runs a program, Claude Code's user settings with hooks), they are moved aside
    /// when it ends and the record says so.
    #[test]
    fn steering_files_a_job_made_are_removed_and_recorded() {
        if !sandbox_here() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (work, home) = (t.path().join("work"), t.path().join("home"));
        for d in [work.join(".git/hooks"), home.join(".claude/projects")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let mut queue = QueueConfig::defaults("q");
        queue.sandbox = Some(crate::model::SandboxSetting {
            enabled: true,
            connect_ports: vec![],
        });
        let env = vec![(
            "ANTHROPIC_BASE_URL".to_string(),
            "http://127.0.0.1:9".to_string(),
        )];
        let job = for_job(JobContext {
            queue: &queue,
            jobtype: &JobType::Claude,
            cwd: &work,
            home: &home,
            env: &env,
            programs: &[PathBuf::from("/bin/sh")],
            switch_to: None,
            approvals: None,
        })
        .unwrap()
        .unwrap();
        let made = [
            work.join(".git/commondir"),
            work.join(".claude/settings.json"),
            home.join(".claude/settings.json"),
            // Claude Code reads it instead of ~/.claude.json (MCP servers) where it exists.
            home.join(".claude/.config.json"),
        ];
        let script: Vec<String> = made
            .iter()
            .map(|p| {
                format!(
                    "mkdir -p '{}' && echo x > '{}'",
                    p.parent().unwrap().display(),
                    p.display()
                )
            })
            .collect();
        assert!(confined_sh(&job, &work, &script.join(" && ")));
        assert!(
            made.iter().all(|p| p.exists()),
            "the kernel cannot refuse these"
        );
        let record = job.finish();
        for p in &made {
            assert!(!p.exists(), "{} left in place", p.display());
            let mut aside = p.as_os_str().to_owned();
            aside.push(".refused-by-sandbox");
            assert!(PathBuf::from(aside).exists(), "kept aside");
            let p = p.display().to_string();
            assert!(
                record
                    .iter()
                    .any(|l| l.starts_with(&p) && l.contains("moved aside")),
                "{record:?}"
            );
        }
        assert!(
            home.join(".claude/projects").exists(),
            "its own state stays"
        );
    }

    /// Issue 28, sandbox4: a job that plants a nested repository whose config runs a
    /// program, and a gitlink naming it in the project's index (the user's next plain
    /// `git status` in the project runs its fsmonitor), or a repository in the agent's own
    /// writable state behind a link: moved aside when the job ends, and recorded.
    #[test]
    fn a_nested_repository_a_job_plants_runs_nothing_of_the_users_git() {
        if !sandbox_here() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (work, home) = (t.path().join("work"), t.path().join("home"));
        std::fs::create_dir_all(home.join(".claude/projects")).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let git = |dir: &Path, args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("HOME", &home)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
        };
        git(&work, &["init", "-q"]);
        let mut queue = QueueConfig::defaults("q");
        queue.sandbox = Some(crate::model::SandboxSetting {
            enabled: true,
            connect_ports: vec![],
        });
        let job = for_job(JobContext {
            queue: &queue,
            jobtype: &JobType::Claude,
            cwd: &work,
            home: &home,
            env: &[],
            programs: &[PathBuf::from("/bin/sh")],
            switch_to: None,
            approvals: None,
        })
        .unwrap()
        .unwrap();
        let (ran, ran_linked) = (t.path().join("RAN"), t.path().join("RAN-LINKED"));
        let evil = home.join(".claude/projects/evil");
        let script = format!(
            "export HOME='{home}'; git init -q sub && printf '[core]\\n\\tfsmonitor = \"touch {ran}; false\"\\n' >> sub/.git/config && \
             git update-index --add --cacheinfo 160000,0123456789012345678901234567890123456789,sub && \
             git init -q '{evil}' && printf '[core]\\n\\tfsmonitor = \"touch {ran_linked}; false\"\\n' >> '{evil}/.git/config' && \
             ln -s '{evil}' linked",
            home = home.display(),
            ran = ran.display(),
            ran_linked = ran_linked.display(),
            evil = evil.display(),
        );
        assert!(confined_sh(&job, &work, &script));
        let record = job.finish();
        for p in [work.join("sub/.git/config"), evil.join(".git/config")] {
            let p = p.display().to_string();
            assert!(
                record
                    .iter()
                    .any(|l| l.starts_with(&p) && l.contains("moved aside")),
                "{p}: {record:?}"
            );
        }
        git(&work, &["status", "--short"]);
        git(&work.join("sub"), &["status", "--short"]);
        git(&work.join("linked"), &["status", "--short"]);
        assert!(!ran.exists(), "the nested repository's fsmonitor ran");
        assert!(
            !ran_linked.exists(),
            "the linked repository's fsmonitor ran"
        );
    }
}
