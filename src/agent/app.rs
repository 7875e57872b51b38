//! The `agentshell` application above the four layers: the subcommands (run, init,
//! setup-keys, trust, exec), the scrubbing of keys out of the process environment, the choice
//! of the session to reopen. The binary in `src/bin/agentshell.rs` only parses argv and calls
//! [`main`].

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::agent::cli::{Cli, Command};
use anyhow::{Context, bail};

use crate::agent::bootstrap::{self, AgentHome, keys, logger, project};
use crate::agent::core::provider::model_spec::known_key_vars;
use crate::agent::tools::display::visible;
use crate::agent::tools::subsystems::secrets::SecretBroker;
use crate::agent::tools::{Ask, Unattended};
use crate::agent::transport::headless::{self, ExecResult, ExecUsage};
use crate::agent::transport::job::JobAsk;
use crate::agent::transport::line_editor::read_hidden;
use crate::agent::transport::render::TerminalRenderer;
use crate::agent::transport::sessions::{SessionFile, SessionStore};
use crate::agent::transport::telegram::{self, Telegram, TelegramOptions};
use crate::agent::transport::terminal::{SessionEnd, Terminal, TerminalOptions, session_list};
use crate::agent::transport::web::{self, Web};
use crate::agent::wiring::{self, ENV_HOME, ENV_LOG, LoggedEvents};

/// Carries the credentials across the re-exec of [`scrub_environment`].
const ENV_KEYS_FD: &str = "AGENTSHELL_KEYS_FD";

/// The credentials moved out of the process environment at start (see [`scrub_environment`]).
static HANDED_OVER: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();

fn env_map() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        std::env::vars().filter(|(k, _)| k != ENV_KEYS_FD).collect();
    if let Some(keys) = HANDED_OVER.get() {
        env.extend(keys.clone());
    }
    env
}

/// Keys in this process's environment are visible to every process of the user
/// (`ps axeww`, `/proc/PID/environ`) for as long as it runs, and the kernel keeps the initial
/// environment block whatever `unsetenv` does. So when credential-like variables are present,
/// re-execute the binary without them, handing them over through a pipe, and read them back.
fn scrub_environment() -> BTreeMap<String, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    if let Ok(fd) = std::env::var(ENV_KEYS_FD) {
        let read = fd
            .parse::<i32>()
            .ok()
            .filter(|fd| *fd > 2)
            .and_then(|fd| std::fs::read(format!("/proc/self/fd/{fd}")).ok())
            .and_then(|bytes| serde_json::from_slice::<BTreeMap<String, String>>(&bytes).ok());
        return read.unwrap_or_default();
    }
    let keys: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, v)| wiring::is_credential_name(k) && !v.is_empty())
        .collect();
    if keys.is_empty() {
        return keys;
    }
    let Ok(payload) = serde_json::to_vec(&keys) else {
        return BTreeMap::new();
    };
    // A pipe holds 64 KiB without a reader; more than that stays in the environment.
    if payload.len() > 60_000 {
        eprintln!("agentshell: too many credential variables to move out of the environment");
        return BTreeMap::new();
    }
    let Ok((read, write)) = nix::unistd::pipe() else {
        return BTreeMap::new();
    };
    let mut writer = std::fs::File::from(write);
    if std::io::Write::write_all(&mut writer, &payload).is_err() {
        return BTreeMap::new();
    }
    drop(writer);
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new("/proc/self/exe");
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    cmd.args(args);
    for name in keys.keys() {
        cmd.env_remove(name);
    }
    cmd.env(ENV_KEYS_FD, read.as_raw_fd().to_string());
    let error = cmd.exec();
    // Still here: the exec failed; carry on with the keys where they are.
    eprintln!("agentshell: could not re-execute without the keys in the environment: {error}");
    BTreeMap::new()
}

fn agent_home(env: &BTreeMap<String, String>) -> anyhow::Result<AgentHome> {
    Ok(AgentHome::resolve(
        env.get(ENV_HOME)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        env.get("HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            // Services may run without HOME: fall back to the passwd entry.
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|u| u.dir)
            }),
    )?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// What ends a headless run early: a future that resolves with the signal's name.
pub type Termination = fn() -> crate::agent::tools::BoxFuture<'static, String>;

/// Run `agentshell` for the parsed command line; `termination` resolves when a termination
/// signal arrives (headless runs stop on it).
pub fn main(cli: Cli, termination: Termination) -> ExitCode {
    let _ = HANDED_OVER.set(scrub_environment());
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("agentshell: cannot read the current directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let explicit = cli.project.as_deref();
    let outcome = match cli.command.unwrap_or(Command::Run) {
        Command::Run => run(&cwd, explicit, cli.resume.as_deref(), cli.continue_last),
        Command::Init => init(&cwd, explicit),
        Command::SetupKeys => setup_keys(),
        Command::Trust => trust(&cwd, explicit),
        Command::Exec {
            json,
            approvals,
            approval_deadline,
            prompt,
        } => {
            let ask: Arc<dyn Ask> = match approvals {
                Some(socket) => Arc::new(JobAsk::new(socket, approval_deadline)),
                None => Arc::new(Unattended),
            };
            return exec(&cwd, explicit, json, &prompt, ask, termination);
        }
        Command::Web { socket } => web(&cwd, explicit, socket, termination),
        Command::Telegram {
            api_url,
            poll_timeout,
        } => telegram(&cwd, explicit, api_url, poll_timeout, termination),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentshell: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What both the interactive shell and `exec` start from: the environment (keys scrubbed),
/// the user's agentshell home, the project (with its log), and a warning for a config that is
/// not trusted yet.
fn open(
    cwd: &Path,
    explicit: Option<&Path>,
    headless: bool,
) -> anyhow::Result<(BTreeMap<String, String>, AgentHome, bootstrap::Project)> {
    let env = env_map();
    let home = agent_home(&env)?;
    let project = bootstrap::open_project(cwd, explicit, &home)?;
    logger::init(&project.root, env.get(ENV_LOG).map(String::as_str))?;
    if let Some(w) = project.untrusted_warning() {
        eprintln!("agentshell: {}", visible(&w));
    }
    let sandbox = wiring::sandbox_support(&env);
    // Headless runs report it in their JSON (`sandbox`); on stderr only when nothing is
    // enforced (a job's agentshell, inside the job's own sandbox, is `partial` by design).
    let worth_saying = if headless {
        sandbox.level == crate::agent::tools::sandbox::Level::None
    } else {
        sandbox.level != crate::agent::tools::sandbox::Level::Enforced
    };
    if worth_saying {
        eprintln!(
            "agentshell: command sandbox {}; every command that is not read-only is asked about",
            sandbox.describe()
        );
    }
    Ok((env, home, project))
}

fn run(
    cwd: &Path,
    explicit: Option<&Path>,
    resume: Option<&str>,
    continue_last: bool,
) -> anyhow::Result<()> {
    let (env, home, project) = open(cwd, explicit, false)?;
    let store = SessionStore::new(home.dir.join("sessions"), project.root.clone());
    let reopen = match (resume, continue_last) {
        (_, true) => {
            let latest = store.latest();
            if latest.is_none() {
                eprintln!("agentshell: no saved session for this project; starting a new one");
            }
            latest
        }
        (Some(""), false) => pick_session(&store)?,
        (Some(key), false) => Some(store.find(key)?),
        (None, false) => None,
    };
    let terminal = Terminal::with_options(TerminalOptions {
        sessions: Some(store),
        history_file: Some(home.dir.join("history")),
        resume: reopen,
        switch_model: Some(Box::new(wiring::model_switcher(&project, &env))),
        status: vec![
            format!("project  {}", project.root.display()),
            format!("sandbox  {}", wiring::sandbox_support(&env).describe()),
        ],
    });
    runtime()?.block_on(async {
        let screen = Arc::new(TerminalRenderer::stdout());
        let mut agent =
            wiring::build_agent_with_subagents(&project, &env, terminal.ask_channel(), screen)?;
        let banner = format!(
            "\x1b[1magentshell {}\x1b[0m · {} · {} · sandbox {}",
            env!("CARGO_PKG_VERSION"),
            agent.model(),
            project.root.display(),
            wiring::sandbox_support(&env).describe()
        );
        if let SessionEnd::Signal(_, number) = terminal.run(&mut agent, &banner).await? {
            // A reader thread may still block on the terminal: leave without waiting for it.
            std::process::exit(128 + number);
        }
        Ok(())
    })
}

/// `agentshell web`: one session served to a browser until a termination signal.
fn web(
    cwd: &Path,
    explicit: Option<&Path>,
    socket: Option<PathBuf>,
    termination: Termination,
) -> anyhow::Result<()> {
    use std::io::Write;
    let (env, _home, project) = open(cwd, explicit, false)?;
    runtime()?.block_on(async {
        let web = Web::new();
        let listener = web::Listener::bind(socket).await?;
        let mut agent =
            wiring::build_agent_with_subagents(&project, &env, web.ask_channel(), web.events())?;
        let banner = format!(
            "agentshell {} · {} · {}",
            env!("CARGO_PKG_VERSION"),
            agent.model(),
            project.root.display()
        );
        println!("agentshell web: open {}", listener.url(web.token()));
        std::io::stdout().flush()?;
        let why = web
            .run(&mut agent, &banner, listener, termination())
            .await?;
        eprintln!("agentshell web: {why}");
        Ok(())
    })
}

/// The secret holding the Telegram bot's token.
pub const TELEGRAM_TOKEN_SECRET: &str = "TELEGRAM_BOT_TOKEN";

/// Config `telegram.allowed_chats`: a non-empty list of chat ids.
fn allowed_chats(config: &serde_json::Value) -> anyhow::Result<std::collections::BTreeSet<i64>> {
    let field = "telegram.allowed_chats (in ~/.agentshell/config.json or a trusted project's \
                 .agentshell/config.json)";
    let Some(list) = config.pointer("/telegram/allowed_chats") else {
        bail!("{field} is not set: the bot would answer nobody");
    };
    let Some(list) = list.as_array() else {
        bail!("{field}: expected a list of chat ids (integers), got {list}");
    };
    let mut chats = std::collections::BTreeSet::new();
    for v in list {
        let Some(id) = v.as_i64() else {
            bail!("{field}: {v} is not a chat id (an integer)");
        };
        chats.insert(id);
    }
    if chats.is_empty() {
        bail!("{field} is empty: the bot would answer nobody");
    }
    Ok(chats)
}

/// Config `telegram.allowed_users`: the Telegram user ids whose requests and answers count.
/// Without it, the people of the private chats in `allowed_chats` (a private chat's id is its
/// user's id); nobody in a group chat is heard unless listed.
fn allowed_users(
    config: &serde_json::Value,
    chats: &std::collections::BTreeSet<i64>,
) -> anyhow::Result<std::collections::BTreeSet<i64>> {
    let field = "telegram.allowed_users (in ~/.agentshell/config.json or a trusted project's \
                 .agentshell/config.json)";
    let Some(list) = config.pointer("/telegram/allowed_users") else {
        return Ok(chats.iter().copied().filter(|c| *c > 0).collect());
    };
    let Some(list) = list.as_array() else {
        bail!("{field}: expected a list of user ids (integers), got {list}");
    };
    let mut users = std::collections::BTreeSet::new();
    for v in list {
        let Some(id) = v.as_i64().filter(|id| *id > 0) else {
            bail!("{field}: {v} is not a user id (a positive integer)");
        };
        users.insert(id);
    }
    Ok(users)
}

/// Config `telegram.<key>`: a whole number within `range`, else `default`.
fn telegram_number(
    config: &serde_json::Value,
    key: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> anyhow::Result<u64> {
    let Some(v) = config.get("telegram").and_then(|t| t.get(key)) else {
        return Ok(default);
    };
    match v.as_u64() {
        Some(n) if range.contains(&n) => Ok(n),
        _ => bail!(
            "telegram.{key} (in ~/.agentshell/config.json or the project's .agentshell/config.json): \
             {v} is not a whole number from {} to {}",
            range.start(),
            range.end()
        ),
    }
}

/// `agentshell telegram`: one session per chat driven from allow-listed chats until a termination
/// signal.
fn telegram(
    cwd: &Path,
    explicit: Option<&Path>,
    api_url: String,
    poll_timeout: u64,
    termination: Termination,
) -> anyhow::Result<()> {
    let (env, _home, project) = open(cwd, explicit, false)?;
    let config = wiring::effective_config(&project, &env);
    let allowed_chats = allowed_chats(&config)?;
    let allowed_users = allowed_users(&config, &allowed_chats)?;
    let max_sessions = telegram_number(
        &config,
        "max_sessions",
        telegram::DEFAULT_MAX_SESSIONS as u64,
        1..=1000,
    )?;
    let idle_seconds = telegram_number(
        &config,
        "idle_seconds",
        telegram::DEFAULT_IDLE_SECONDS,
        1..=30 * 86_400,
    )?;
    let (broker, _) = SecretBroker::new(
        wiring::user_secrets(&project, &env),
        project.project_env.clone(),
    );
    // A systemd credential of the service (LoadCredential=TELEGRAM_BOT_TOKEN:…) wins over
    // the user's secret store.
    use super::credentials::{CREDENTIALS_DIRECTORY, credential};
    let credential = credential(
        env.get(CREDENTIALS_DIRECTORY).map(String::as_str),
        TELEGRAM_TOKEN_SECRET,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let Some(token) =
        credential.or_else(|| broker.value(TELEGRAM_TOKEN_SECRET).map(str::to_string))
    else {
        bail!(
            "no secret {TELEGRAM_TOKEN_SECRET}: store the bot's token with `agentshell setup-keys`, or give the service the credential {TELEGRAM_TOKEN_SECRET} (LoadCredential=)"
        );
    };
    let bot = Telegram::new(TelegramOptions {
        api_url,
        token,
        allowed_chats,
        allowed_users,
        poll_timeout,
        max_sessions: usize::try_from(max_sessions).unwrap_or(telegram::DEFAULT_MAX_SESSIONS),
        idle: std::time::Duration::from_secs(idle_seconds),
    })
    .map_err(|e| anyhow::anyhow!("{TELEGRAM_TOKEN_SECRET}: {e}"))?;
    runtime()?.block_on(async {
        // Built once up front so a configuration error stops the start, not the first chat.
        let probe = wiring::build_agent_with_subagents(
            &project,
            &env,
            Arc::new(Unattended),
            Arc::new(LoggedEvents),
        )?;
        eprintln!(
            "agentshell telegram: {} · {} · serving the allowed chats (a session each, at most \
             {max_sessions}, dropped after {idle_seconds} s idle)",
            probe.model(),
            project.root.display()
        );
        drop(probe);
        let mut make_agent = |ask, events| {
            wiring::build_agent_with_subagents(&project, &env, ask, events)
                .map_err(|e| e.to_string())
        };
        let why = bot.run(&mut make_agent, termination()).await;
        eprintln!("agentshell telegram: {why}");
        Ok(())
    })
}

/// `--resume` without an id: list the project's sessions and ask which one.
fn pick_session(store: &SessionStore) -> anyhow::Result<Option<SessionFile>> {
    println!("{}", session_list(store));
    if store.list().0.is_empty() {
        return Ok(None);
    }
    if !std::io::stdin().is_terminal() {
        bail!("--resume without an id needs a terminal to choose; give the id or number");
    }
    let Some(answer) = read_visible("Resume which (number or id; Enter for a new session)? ")?
    else {
        return Ok(None);
    };
    let answer = answer.trim();
    if answer.is_empty() {
        return Ok(None);
    }
    Ok(Some(store.find(answer)?))
}

fn trust(cwd: &Path, explicit: Option<&Path>) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let env = env_map();
    let home = agent_home(&env)?;
    let root = project::decide_root(cwd, explicit, &home)?;
    let meta = std::fs::metadata(&root).with_context(|| format!("reading {}", root.display()))?;
    if meta.mode() & 0o002 != 0 || meta.uid() != nix::unistd::getuid().as_raw() {
        bail!(
            "{} is writable by everyone or owned by another user; it cannot be trusted",
            root.display()
        );
    }
    let path = root.join(bootstrap::AGENT_DIR).join("config.json");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let hash = bootstrap::trust::trust(&home, &root, &bytes)?;
    println!(
        "trusted {} (config.json hash {hash}); a change to {} makes it untrusted again",
        root.display(),
        path.display()
    );
    Ok(())
}

fn init(cwd: &Path, explicit: Option<&Path>) -> anyhow::Result<()> {
    let env = env_map();
    let home = agent_home(&env)?;
    let target = explicit.unwrap_or(cwd);
    let root = project::decide_root(cwd, Some(target), &home)?;
    let report = project::create_skeleton(&root)?;
    if report.created.is_empty() {
        println!("{} is already an agentshell project", root.display());
    } else {
        println!("initialised {}", root.display());
        for p in report.created {
            println!("  created {}", p.display());
        }
    }
    Ok(())
}

fn setup_keys() -> anyhow::Result<()> {
    let env = env_map();
    let home = agent_home(&env)?;
    let path = home.env_path();
    let mut updates = BTreeMap::new();
    if std::io::stdin().is_terminal() {
        eprintln!("Known key variables: {}", known_key_vars().join(", "));
        loop {
            let Some(name) = read_visible("Key name (blank to finish): ")? else {
                break;
            };
            let name = name.trim().to_string();
            if name.is_empty() {
                break;
            }
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                eprintln!("not a variable name: {name}");
                continue;
            }
            let Some(value) = read_hidden(&format!("{name} (hidden): "))? else {
                break;
            };
            if !value.trim().is_empty() {
                updates.insert(name, value.trim().to_string());
            }
        }
    } else {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        updates = keys::parse_env(&text);
    }
    if updates.is_empty() {
        bail!("no keys given; nothing written");
    }
    let stored = keys::write_env(&path, &updates)?;
    println!(
        "wrote {} (mode 0600): {}",
        path.display(),
        stored.join(", ")
    );
    Ok(())
}

fn read_visible(prompt: &str) -> anyhow::Result<Option<String>> {
    use std::io::{BufRead, Write};
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    Ok(match std::io::stdin().lock().read_line(&mut line)? {
        0 => None,
        _ => Some(line),
    })
}

fn exec(
    cwd: &Path,
    explicit: Option<&Path>,
    json: bool,
    prompt: &str,
    ask: Arc<dyn Ask>,
    termination: Termination,
) -> ExitCode {
    let started = std::time::Instant::now();
    let result = match exec_inner(cwd, explicit, prompt, ask, termination) {
        Ok(r) => r,
        Err(e) => ExecResult {
            kind: "result",
            subtype: "error_during_execution",
            is_error: true,
            result: format!("{e:#}"),
            num_turns: 0,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            duration_api_ms: 0,
            usage: ExecUsage {
                input_tokens: 0,
                output_tokens: 0,
            },
            total_cost_usd: Some(0.0),
            session_id: uuid::Uuid::new_v4().to_string(),
            model: std::env::var(wiring::ENV_MODEL).unwrap_or_default(),
            permission_denials: Vec::new(),
            sandbox: None,
        },
    };
    let result = ExecResult {
        sandbox: Some(wiring::sandbox_support(&env_map())),
        ..result
    };
    if json {
        match serde_json::to_string(&result) {
            Ok(text) => println!("{text}"),
            Err(e) => eprintln!("agentshell: {e}"),
        }
    } else if result.is_error {
        eprintln!("agentshell: {}", visible(&result.result));
    } else {
        println!("{}", visible(&result.result));
    }
    if result.is_error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn exec_inner(
    cwd: &Path,
    explicit: Option<&Path>,
    prompt: &str,
    ask: Arc<dyn Ask>,
    termination: Termination,
) -> anyhow::Result<ExecResult> {
    let prompt = if prompt == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the prompt from stdin")?;
        text
    } else {
        prompt.to_string()
    };
    if prompt.trim().is_empty() {
        bail!("empty prompt");
    }
    let (env, _home, project) = open(cwd, explicit, true)?;
    runtime()?.block_on(async {
        let mut agent =
            wiring::build_agent_with_subagents(&project, &env, ask, Arc::new(LoggedEvents))?;
        Ok(headless::exec(&mut agent, &prompt, termination()).await)
    })
}
