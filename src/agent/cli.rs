//! The `agentshell` command line (clap definitions; the binary in `src/bin/` wires it).

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// agentshell: a coding agent in your terminal, for one project folder. You type a request; the
/// model answers and may ask to run shell commands, which a policy gate allows, refuses or
/// asks you about before they run (secrets reach commands only as {{secret:NAME}}
/// placeholders, and every output is redacted). Also headless (`exec`), in a browser (`web`)
/// and over Telegram.
#[derive(Debug, Parser)]
#[command(name = "agentshell", version)]
pub struct Cli {
    /// Start the project search here instead of the current directory.
    #[arg(long, global = true, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Reopen a saved session of this project: by id or number, or (without a value) pick
    /// one from the list.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "", conflicts_with = "continue_last")]
    pub resume: Option<String>,
    /// Reopen the newest saved session of this project.
    #[arg(long = "continue", short = 'c')]
    pub continue_last: bool,
    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the interactive agent (the default).
    Run,
    /// Create the .agentshell/ skeleton in the current directory (or --project).
    Init,
    /// Store API keys in ~/.agentshell/.env (mode 0600). Off a terminal, reads NAME=VALUE lines.
    SetupKeys,
    /// Trust this project's .agentshell/config.json as it is now (stored in ~/.agentshell/trusted.json
    /// with a hash of the file: any later change makes the folder untrusted again). An untrusted
    /// project config cannot set base_url, provider, keys, model provider, auto_allow,
    /// allow_tools or secret_programs.
    Trust,
    /// Run one prompt headless and print the result.
    Exec {
        /// Print one JSON object like `claude -p --output-format json`.
        #[arg(long)]
        json: bool,
        /// Send the tool calls the policy would ask about to this approval channel (the
        /// abstract Unix socket of the job worker, named without its leading NUL) instead of
        /// denying them; set by `agent-worker` for a queued job.
        #[arg(long, value_name = "NAME")]
        approvals: Option<String>,
        /// Seconds the approval channel takes at most to answer (it denies at its deadline;
        /// agentshell gives up 10 s later on its own).
        #[arg(long, value_name = "SECONDS", default_value_t = 300, requires = "approvals",
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        approval_deadline: u64,
        /// The prompt, or `-` to read it from stdin.
        prompt: String,
    },
    /// Serve one session to a browser: on 127.0.0.1 (a random port) or a Unix socket, with a
    /// one-time token in the URL printed on stdout. Several tabs see the same session.
    ///
    /// Opening the printed URL trades the token for a cookie (HttpOnly, SameSite=Strict) and
    /// redirects to a token-free address; any request without the cookie or an
    /// `X-Agentshell-Token` header is refused with 403. The page (no build step, nothing
    /// loaded from elsewhere) streams the answer, shows each tool call before it runs and its
    /// result bounded, asks for confirmation with Allow / Deny / Always allow buttons, and has
    /// a Stop button (the Ctrl+C of the terminal). Interface for scripts: `GET /events`
    /// (Server-Sent Events), `POST /prompt {"text"}`, `POST /answer {"id","answer"}`,
    /// `POST /stop`. Ends on SIGTERM, SIGINT or SIGHUP.
    Web {
        /// Listen on this Unix socket (mode 0600) instead of 127.0.0.1.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
    /// Serve allow-listed Telegram chats through a bot, a session (agent and history) each: the
    /// token is the secret
    /// TELEGRAM_BOT_TOKEN (store it with setup-keys), the chats are config
    /// `telegram.allowed_chats` (user config, or a trusted project's); only the people in
    /// `telegram.allowed_users` (default: the users of the private chats listed) are heard.
    ///
    /// Long-polls the Bot API; messages from other chats are ignored and logged. Each model
    /// call's text is sent as it ends (split at Telegram's 4096-character limit; an answer of
    /// more than 4 messages, or a tool output over 3000 characters, goes as a document), each
    /// tool call is shown before it runs, a question too long for one message is first sent
    /// whole as a document, confirmations come as inline-keyboard buttons (a
    /// question without fixed answers is answered by the chat's next message), and
    /// `/stop` cancels the running request. Rate limits (429) are waited out as Telegram says.
    /// The token never appears in config, output or logs. Each chat has its own session
    /// (`/stop` stops only that chat's request); at most `telegram.max_sessions` (default 8)
    /// live at once, a new chat taking the place of the longest idle one, and a session idle
    /// for `telegram.idle_seconds` (default 3600) is dropped with its history. Example user
    /// config (~/.agentshell/config.json): {"telegram": {"allowed_chats": [123456789]}}.
    Telegram {
        /// The Bot API's base URL.
        #[arg(long, value_name = "URL", default_value = "https://api.telegram.org")]
        api_url: String,
        /// Long-poll timeout of getUpdates, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=600))]
        poll_timeout: u64,
    },
}
