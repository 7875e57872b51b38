//! Shared test support for the agentshell tests: the one fake model server
//! (`tests/support/fake_model.rs`, both dialects, with the raw SSE builders `oa_*`/`an_*`)
//! behind the `FakeServer` these tests know: a strict script (one reply per model request,
//! then 500 "script exhausted").
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub use crate::wait::{LOADED, wait_until};

pub(crate) use crate::fake_model;
#[allow(unused_imports)] // each test file uses its own part
pub use fake_model::{
    Dialect, FakeModel, Reply, Script, an_event, an_start, an_stop, an_text, oa_chunk, oa_command,
    oa_done, oa_text, oa_tool_calls, oa_usage, split3,
};

/// A recorded request (path, headers, body as JSON).
pub type Recorded = fake_model::RecordedRequest;

/// The fake model server with a strict script ([`Script::strict`]), at `url`.
pub struct FakeServer {
    pub url: String,
    server: FakeModel,
}

impl FakeServer {
    pub fn start(script: Vec<Reply>) -> Self {
        let server = FakeModel::start(Script::strict(script));
        Self {
            url: server.base_url(),
            server,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.server.requests()
    }

    /// Waits until `n` requests have arrived.
    pub fn wait_for_requests(&self, n: usize) {
        wait_until(LOADED, "fake server requests", || {
            self.requests().len() >= n
        });
    }
}

/// Pids whose command line is exactly `argv`.
pub fn pids_running(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}
