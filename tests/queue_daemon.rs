//! The `queue-manager` binary as systemd runs it: READY=1 on $NOTIFY_SOCKET once the bus
//! name is owned (Type=notify), clean exit on SIGTERM with process_id cleared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::queue_env;

use queue_env::*;
use serde_json::json;
use std::os::unix::net::UnixDatagram;

/// The `queue-manager` binary for `env`'s queue on `bus`, with the direct launcher.
fn manager(env: &QueueEnv, bus: &PrivateBus) -> std::process::Command {
    crate::daemons::queue_manager(&env.root, &env.queue)
        .on(bus)
        .idle_exit(None)
        .command()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_notifies_ready_and_stops_on_sigterm() {
    guarded(async {
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let sock_path = env.dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        let mut child = manager(&env, &bus)
            .env("NOTIFY_SOCKET", &sock_path)
            .spawn()
            .unwrap();
        let msg = tokio::task::spawn_blocking(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = sock.recv(&mut buf).unwrap();
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                if m.contains("READY=1") {
                    return m;
                }
            }
        })
        .await
        .unwrap();
        assert!(
            msg.contains("STATUS=serving queue q1 (launcher direct)"),
            "{msg}"
        );
        // Ready means the name is owned and the runtime reset.
        let conn = bus.connect().await;
        let p = agentstore::bus::queue::queue_proxy(&conn, &env.queue)
            .await
            .unwrap();
        assert_eq!(p.worker_count().await.unwrap(), 1);
        assert_eq!(env.queue_json()["runtime"]["process_id"], json!(child.id()));

        // A second manager of the same queue finds the name taken: "already running", exit
        // 2 (the unit's RestartPreventExitStatus=2), and the first one keeps serving.
        let second = manager(&env, &bus)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&second.stderr);
        assert_eq!(second.status.code(), Some(2), "{err}");
        assert!(err.contains("already running"), "{err}");
        assert_eq!(p.worker_count().await.unwrap(), 1);

        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        assert!(status.success(), "{status}");
        assert_eq!(env.queue_json()["runtime"]["process_id"], json!(null));
    })
    .await
}
