//! Running the REAL Codex CLI (npm `@openai/codex`, installed by `.ci/install-codex.sh`,
//! which `.ci/run` calls) offline, against the fake model's Responses API
//! (`POST /v1/responses`, SSE).
//!
//! What works (Codex CLI 0.169):
//!
//! ```text
//! CODEX_HOME=DIR OPENAI_API_KEY=fake codex exec --json --skip-git-repo-check - < prompt
//! ```
//!
//! with `DIR/config.toml` naming a model provider whose `base_url` is the fake server
//! (`wire_api = "responses"`): Codex ignores `OPENAI_BASE_URL`, and without a provider of
//! its own it goes to the real endpoint (WebSocket first, then HTTPS). Its shell tool is
//! `exec_command` (`{"cmd": "…"}`); every request carries the tools, so every request
//! consumes a scripted reply. It warns (harmlessly) when `CODEX_HOME` is under `/tmp`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Printed when `codex` is missing: the real-CLI tests fail, they do not skip.
pub const INSTALL_HINT: &str = "the real Codex CLI (`codex`) is not on PATH. \
     `.ci/run` installs it with `.ci/install-codex.sh` (npm install -g @openai/codex); \
     run `bash .ci/install-codex.sh` and retry. Set AGENTSTORE_TEST_CODEX=/path/to/codex to use another binary.";

/// `codex` from `AGENTSTORE_TEST_CODEX` or PATH, or a test failure saying how to install it.
pub fn require_codex() -> PathBuf {
    if let Some(p) = std::env::var_os("AGENTSTORE_TEST_CODEX") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("codex"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

/// A `CODEX_HOME` in `dir` whose config sends model requests to `base_url` (the fake
/// server's root, e.g. `http://127.0.0.1:PORT`), readable by `owner` (uid, gid) when given.
pub fn codex_home(dir: &Path, base_url: &str, owner: Option<(u32, u32)>) -> PathBuf {
    let home = dir.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\n\
             base_url = \"{base_url}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n"
        ),
    )
    .unwrap();
    if let Some((uid, gid)) = owner {
        crate::claude_env::chown_recursive(&home, uid, gid);
    }
    home
}
