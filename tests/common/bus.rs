//! A private bus per test (the shared `tests/support/harness.rs`), and orchestratord run as a
//! child process on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/harness.rs"]
pub mod harness;

pub use harness::*;
use std::path::Path;
use std::process::{Child, Command};

/// orchestratord as a child process on `bus` (so it can be SIGKILLed), logging to stderr.
pub fn spawn_orchestratord(bus: &PrivateBus, root: &Path, extra: &[&str]) -> Child {
    orchestratord_command(bus, root, extra).spawn().unwrap()
}

/// The command [`spawn_orchestratord`] runs (the one launcher, `tests/support/daemons.rs`,
/// with orchestratord's own idle time unless `extra` names one), to adjust before spawning.
pub fn orchestratord_command(bus: &PrivateBus, root: &Path, extra: &[&str]) -> Command {
    crate::daemons::orchestratord(root)
        .on(bus)
        .idle_exit(None)
        .args(extra)
        .command()
}

/// The orchestrator's signals on a private bus, for synchronous tests: subscribe before the
/// messages are dropped, then wait for each one's `MessageProcessed` (sent once the pass that
/// answered it is over: answer written, message moved) instead of polling files.
pub struct Announcements {
    rt: tokio::runtime::Runtime,
    processed: agentstore::bus::orchestrator::MessageProcessedStream,
    _conn: zbus::Connection,
}

impl Announcements {
    /// Subscribes to `MessageProcessed` of the orchestrator on `bus` (its
    /// name must be owned already: see [`wait_for_name`]).
    pub fn subscribe(bus: &PrivateBus) -> Announcements {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (conn, processed) = rt.block_on(async {
            let conn = bus.connect().await;
            let proxy = agentstore::bus::orchestrator::Orchestrator1Proxy::new(&conn)
                .await
                .unwrap();
            let processed = proxy.receive_message_processed().await.unwrap();
            (conn, processed)
        });
        Announcements {
            rt,
            processed,
            _conn: conn,
        }
    }

    /// Waits (up to `limit`) for the `MessageProcessed` of correlation id `cid`, skipping
    /// others (the signal carries the id only: the answer is in the outbox).
    pub fn processed(&mut self, cid: &str, limit: std::time::Duration) {
        use futures_util::StreamExt;
        let stream = &mut self.processed;
        self.rt.block_on(async {
            tokio::time::timeout(limit, async {
                loop {
                    let s = stream.next().await.expect("the signal stream ended");
                    let a = s.args().unwrap();
                    if *a.correlation_id() == cid {
                        return;
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("no MessageProcessed for {cid} within {limit:?}"))
        })
    }
}
