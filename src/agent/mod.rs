//! Agent Shell (`agentshell`): the built-in terminal agent, in four layers, one direction.
//!
//! ```text
//! bootstrap/  L0  project root, skeleton, config merge, file logger      (runs once)
//! transport/  L1  terminal (line editor, rendering, Ctrl+C) and headless; owns ask()
//! core/       L2  messages, system prompt, model calls (providers), the cycle, accounting
//! tools/      L3  registry, run_command, ask_user, memory_*, delegate; subsystems/: policy, secrets,
//!                 context (fit, bound), memory
//! ```
//!
//! Nothing below imports upward: L3 imports no other layer, L2 imports only L3, L1 imports L2
//! and L3, L0 imports none. `ask()` is created by L1 and passed down as an `Arc<dyn Ask>`;
//! logging goes through `tracing`, installed by L0. [`wiring`] assembles the layers.
//!
//! # Headless contract (used by the job worker for `jobtype: "agent"`)
//!
//! Run `agentshell exec --json -` with the prompt on stdin and `cwd` = the job's working
//! directory. It prints exactly one JSON object on stdout and exits 0 on success, 1 on error:
//!
//! ```json
//! {"type":"result","subtype":"success","is_error":false,"result":"…final text…",
//!  "num_turns":2,"duration_ms":1234,"duration_api_ms":1100,
//!  "usage":{"input_tokens":1200,"output_tokens":80},"total_cost_usd":0.0004,
//!  "session_id":"<uuid v4>","model":"deepseek/deepseek-chat","permission_denials":[]}
//! ```
//!
//! `subtype` is `success`, `error_max_turns` (iteration budget ran out; nobody can confirm
//! continuing) or `error_during_execution` (provider/network error: `result` holds the error
//! message, never model text; bootstrap and configuration failures such as a missing API key
//! are reported the same way, with `num_turns` 0). `num_turns` counts model calls, the
//! sub-agents' included; their tokens, cost and refused calls are in `usage`,
//! `total_cost_usd` and `permission_denials` too.
//!
//! SIGTERM, SIGINT or SIGHUP end the run cleanly: running commands (each in its own process
//! group) are killed, and the result is printed with `"result": "interrupted by SIGTERM"`.
//! SIGKILL cannot be handled: a worker that kills with it should run the agent in a cgroup
//! (the transient scope) so the commands go with it.
//!
//! The project root is the nearest ancestor of `cwd` holding `.agentshell/` (else `cwd`
//! itself; `--project DIR` overrides; the home directory is refused); the walk stops at the
//! first folder not owned by the user (or root) or writable by everyone, so a `/tmp/.agentshell`
//! left by anyone is never taken. Missing parts of
//! `<root>/.agentshell/` are created (config.json, CLAUDE.md, MEMORY.md, memory/, logs/), and the
//! log goes to `<root>/.agentshell/logs/agent.log`.
//!
//! Environment:
//!
//! | variable | meaning |
//! |---|---|
//! | `AGENTSHELL_MODEL` | model string, LiteLLM style (`deepseek/deepseek-chat`, `anthropic/claude-sonnet-4-5`, `openai/gpt-4o`, `ollama/llama3.1`); overrides config `model` |
//! | `AGENTSHELL_BASE_URL` | endpoint override; OpenAI-style: the URL before `/chat/completions` (e.g. `http://127.0.0.1:8080/v1`); Anthropic: the URL before `/v1/messages` |
//! | `AGENTSHELL_API_KEY` | API key for whatever provider; wins over the provider's variable |
//! | `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `DEEPSEEK_API_KEY`, `XAI_API_KEY`, `GEMINI_API_KEY`, `OPENROUTER_API_KEY`, `GROQ_API_KEY`, `MISTRAL_API_KEY`, `AZURE_API_KEY`, `AWS_BEARER_TOKEN_BEDROCK`, `VERTEXAI_ACCESS_TOKEN`, … | the provider's key (else read from `~/.agentshell/.env`; never from the project's `.env`) |
//! | `AZURE_API_BASE`, `AWS_REGION`, `VERTEXAI_PROJECT` + `VERTEXAI_LOCATION` | where `azure/`, `bedrock/` and `vertex_ai/` models live (or set `base_url`) |
//! | `AGENTSHELL_HOME` | replaces `~/.agentshell` (global `config.json` and `.env`) |
//! | `AGENTSHELL_LOG` | log filter directive, default `info` |
//! | `AGENTSHELL_SANDBOX_ABI` | caps the Landlock ABI the command sandbox uses (lower only; `0` shows the behaviour where the kernel cannot confine) |
//!
//! Every key of `~/.agentshell/.env` and of the project's `.env`, and every environment
//! variable whose name contains KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH, is a
//! secret: it is removed from commands' environments, offered to the model only as a
//! `{{secret:NAME}}` placeholder (a command using one needs confirmation unless its program is
//! in `secret_programs`), and redacted from every output (encoded forms best effort). At start
//! the binary re-executes itself without such variables (handing them over through a pipe), so
//! they are not visible in its `/proc/PID/environ`.
//!
//! A project's `.agentshell/config.json` is untrusted until `agentshell trust` is run in it
//! (stored in `~/.agentshell/trusted.json` with a hash of the file; any change untrusts it):
//! until then `base_url`, `provider`/`default_provider`, key-, token-, URL-like keys, a `model`
//! of another provider, `auto_allow`, `allow_tools` and `secret_programs` are ignored, and
//! stderr says which.
//!
//! Configuration (`~/.agentshell/config.json` under `<root>/.agentshell/config.json`), all keys
//! optional: `model`, `default_provider`, `base_url`, `max_iterations` (50),
//! `context_budget_tokens` (100000), `max_tokens` (8192), `request_timeout_secs` (120, the
//! longest wait for headers or the next stream chunk), `request_deadline_secs` (900, one whole
//! request, retries and streaming included), `max_response_bytes` (64 MiB), `max_retries` (3, on 429/5xx/connect
//! errors), `retry_base_ms` (500, doubling), `prices` (`{"model": {"input_per_mtok": x,
//! "output_per_mtok": y}}`, over the built-in list prices of `core/prices.json`; a model in
//! neither has an unknown cost: `null` in exec's JSON, "unknown" on screen), `system_prompt`, `command_timeout_secs` (30),
//! `max_command_timeout_secs` (600), `max_output_bytes` (16384), `auto_allow` (argv prefixes
//! allowed without asking, e.g. `["cargo test", "cargo build"]`), `allow_tools` (e.g.
//! `["memory_write"]`), `deny_patterns` (extra regexes), `subagents` (true: the model may
//! `delegate` a task to a fresh sub-agent; its calls go through the same policy),
//! `max_subagents` (8 per session), `max_parallel_subagents` (2), `secret_programs` (programs
//! that may receive `{{secret:NAME}}` without asking).
//!
//! The terminal: multi-line input (Alt+Enter or a trailing `\` before Enter) and bracketed
//! paste (one message, newlines kept); input history and conversations kept across sessions
//! in `~/.agentshell/history` and `~/.agentshell/sessions/<id>.json` (mode 0600, atomic,
//! bounded), reopened with `agentshell --continue`, `--resume [ID]` or `/resume`; Ctrl+C
//! during an answer keeps what was streamed, marked interrupted; confirmations accept
//! `always` (this program and options, this session, in memory only; never for steering
//! files, secrets or code-running environment variables); `/model [NAME]`, `/cost`,
//! `/compact`, `/help`; answers rendered as markdown and word-wrapped on a terminal (plain
//! off a terminal, no colours with `NO_COLOR`).
//!
//! Every command `run_command` starts is confined by the kernel before exec
//! ([`tools::sandbox`]; the policy is the gate, the sandbox the wall): it may write only in the
//! project and a per-session scratch directory (its `TMPDIR`), never `.git/hooks`,
//! `.git/config` or `.agentshell/` (read-only bind mounts in a private mount namespace; `.git`
//! itself cannot be renamed away); it may read the system, the project and toolchains, not the
//! home directory (`~/.agentshell`, `~/.ssh`, `~/.aws`, `~/.gnupg`, `~/.config/gh` …) nor
//! key files of `/etc`; it has no TCP unless the call sets `"network": true` (always asked
//! about), cannot signal, ptrace or read `/proc` of agentshell, nor reach abstract Unix
//! sockets outside; it runs with `no_new_privs` and no capabilities, and gets an allow-listed
//! environment (`PATH`, `HOME`, `LANG`, `LC_*`, `TERM`, `TZ`, toolchain homes, `TMPDIR`…;
//! `DATABASE_URL` and the like only when the call asks for them). What the kernel enforces
//! (`enforced`, `partial`, `none`, with the Landlock ABI) is in exec's JSON (`sandbox`), in
//! the terminal's banner and `/status`; below `enforced` every command that is not read-only
//! is asked about, `auto_allow` notwithstanding.
//!
//! Unattended, a call the policy would ASK about is denied, and the denial is listed in
//! `permission_denials` with its reason; the run never waits for a human. A queued job is
//! the exception: the worker passes `--approvals NAME --approval-deadline SECS`, and such a
//! call goes to the job's approval channel ([`transport::job`]): the queue's rules, or a
//! person over D-Bus until the deadline. Allowed, it runs; denied, the reason given is in
//! the tool result and in `permission_denials`.

pub mod app;
pub mod bootstrap;
pub mod cli;
pub mod core;
pub mod credentials;
pub mod private_file;
pub mod tools;
pub mod transport;
pub mod wiring;
