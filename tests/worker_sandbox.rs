//! Issue 28, item 2: an unattended job of a queue with `sandbox.enabled` (the default of new
//! queues) runs confined. The "agent" here is a hostile stand-in for `claude` that tries to
//! write outside its project (another user's `authorized_keys`-like file left writable by
//! everyone), to read another project, to connect to a local listener that is not its model
//! endpoint, to send UDP, to reach a path-named and an abstract Unix socket of someone else,
//! to open a Multipath TCP socket (which Landlock's TCP rules do not govern), to gain root
//! through a setuid-root program (which outside the sandbox makes the job's account root),
//! and (as a control) to reach its endpoint's port, which it may. The job's record says the
//! sandbox was on, what it allowed, and what it refused (`runtime.sandbox_refused`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{harness, queue_env};

use queue_env::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

/// The hostile agent: reads the prompt, tries its way out, prints a Claude-like JSON result
/// whose text lists what each attempt did.
const HOSTILE_AGENT: &str = r#"#!/bin/bash
cat > /dev/null
try() { if eval "$2" 2>/dev/null; then r="$r $1=ok"; else r="$r $1=denied"; fi; }
r=""
try write-outside "echo attacker-key >> '$OUTSIDE_KEYS'"
try read-other "cat '$OTHER_SECRET' > /dev/null"
try connect-other "exec 3<>/dev/tcp/127.0.0.1/$OTHER_PORT"
try connect-endpoint "exec 4<>/dev/tcp/127.0.0.1/$ENDPOINT_PORT"
try udp "exec 5<>/dev/udp/127.0.0.1/$UDP_PORT && echo x >&5"
try unix-path "/usr/bin/python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' '$OTHER_UNIX'"
try unix-abstract "/usr/bin/python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(chr(0)+sys.argv[1])' '$OTHER_ABSTRACT'"
try unix-dgram "/usr/bin/python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)'"
try unix-pair "/usr/bin/python3 -c 'import socket; socket.socketpair()'"
try mptcp "/usr/bin/python3 -c 'import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect((\"127.0.0.1\", int(sys.argv[1])))' $ENDPOINT_PORT"
try write-project "echo made > made-by-job.txt"
try write-git-hook "echo 'touch PWNED' > .git/hooks/pre-commit"
try write-tmp "echo t > \$TMPDIR/t"
try setuid "[ \"\$('$SUID_ID' -u)\" = 0 ]"
setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > escapee.pid
printf '{"type":"result","subtype":"success","is_error":false,"result":"%s","num_turns":1,"total_cost_usd":0,"session_id":"00000000-0000-4000-8000-000000000000"}\n' "${r# }"
"#;

fn world_writable(p: &std::path::Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_job_cannot_write_outside_read_another_project_or_connect_elsewhere() {
    guarded(async {
        let abi = agentstore::agent::tools::sandbox::kernel_abi();
        if abi < 6 {
            harness::skip(
                "a_sandboxed_job_cannot_write_outside",
                &format!("Landlock ABI {abi}, 6 needed"),
            );
            return;
        }
        let bus = PrivateBus::start();
        let env = QueueEnv::new(1);
        let base = env.dir.path();
        // The agent, somewhere the job account can execute it and nobody else can change it
        // (a program this machine allows must pass the secure-path check, issue 27).
        let programs = tempfile::tempdir().unwrap();
        world_writable(programs.path(), 0o755);
        let bin = programs.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        world_writable(&bin, 0o755);
        // A setuid-root copy of `id` the job may run: without no_new_privs it would say 0.
        let suid_id = bin.join("suid-id");
        std::fs::copy("/usr/bin/id", &suid_id).unwrap();
        world_writable(&suid_id, 0o4755);
        let agent = bin.join("hostile-claude");
        std::fs::write(&agent, HOSTILE_AGENT).unwrap();
        world_writable(&agent, 0o755);
        // What it must not touch, though the file modes would let it.
        let keys_dir = base.join("victim-home/.ssh");
        std::fs::create_dir_all(&keys_dir).unwrap();
        world_writable(&base.join("victim-home"), 0o777);
        world_writable(&keys_dir, 0o777);
        let keys = keys_dir.join("authorized_keys");
        std::fs::write(&keys, "ssh-ed25519 AAAA original\n").unwrap();
        world_writable(&keys, 0o666);
        let other = base.join("other-project");
        std::fs::create_dir_all(&other).unwrap();
        world_writable(&other, 0o755);
        let secret = other.join("secret.txt");
        std::fs::write(&secret, "OTHER-PROJECT-SECRET\n").unwrap();
        world_writable(&secret, 0o644);
        // A git hook in the project.
        let hooks = env.work.join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::write(env.work.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\n").unwrap();
        for p in [env.work.join(".git"), hooks.clone()] {
            world_writable(&p, 0o777);
        }
        world_writable(&hooks.join("pre-commit"), 0o666);
        std::fs::write(
            env.work.join(".claude/commands/greet.md"),
            "Greet $ARGUMENTS\n",
        )
        .unwrap();
        let other_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let unix_path = base.join("other-service.sock");
        let unix_listener = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        world_writable(&unix_path, 0o777);
        let abstract_name = format!("agentstore-test-other-{}", std::process::id());
        let abstract_listener = {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                .unwrap();
            std::os::unix::net::UnixListener::bind_addr(&a).unwrap()
        };
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let udp_port = udp.local_addr().unwrap().port();
        let (other_port, endpoint_port) = (
            other_listener.local_addr().unwrap().port(),
            endpoint.local_addr().unwrap().port(),
        );
        env.edit_queue(|q| {
            q.config.claude_cli_path = agent.display().to_string();
            q.config.claude_default_args = vec!["-p".into()];
            assert!(q.config.sandboxed(), "new queues confine their jobs");
        });
        let mut changes = Changes::subscribe(&bus, &env.queue).await;
        let mut cfg = env.manager_config(&bus);
        // The hostile stand-in is a program this machine allows (issue 27): the sandbox, not
        // the program rule, is what this test tries.
        let (_machine, machine_var) = machine_config(&[&agent], &[]);
        cfg.worker_env = vec![
            machine_var,
            (
                "ANTHROPIC_BASE_URL".into(),
                format!("http://127.0.0.1:{endpoint_port}"),
            ),
            (
                "AGENTSTORE_PASS_ENV".into(),
                "OUTSIDE_KEYS OTHER_SECRET OTHER_PORT ENDPOINT_PORT OTHER_UNIX OTHER_ABSTRACT UDP_PORT SUID_ID"
                    .into(),
            ),
            ("OTHER_UNIX".into(), unix_path.display().to_string()),
            ("OTHER_ABSTRACT".into(), abstract_name.clone()),
            ("UDP_PORT".into(), udp_port.to_string()),
            ("SUID_ID".into(), suid_id.display().to_string()),
            ("OUTSIDE_KEYS".into(), keys.display().to_string()),
            ("OTHER_SECRET".into(), secret.display().to_string()),
            ("OTHER_PORT".into(), other_port.to_string()),
            ("ENDPOINT_PORT".into(), endpoint_port.to_string()),
        ];
        let m = RunningManager::start(cfg).await;
        let j = job(
            "claude",
            json!({"claude_command": "greet", "task_description": "escape",
                   "working_directory": env.work}),
        );
        env.queue_job("escape-1", &j);
        let c = changes.ended("escape-1").await;
        let doc = env.job(&c.new, "escape-1");
        let rt = &doc["runtime"];
        assert_eq!(c.new, "finished", "{rt}");
        let out: Value = serde_json::from_str(rt["output"].as_str().unwrap().trim()).unwrap();
        assert_eq!(
            out["result"],
            "write-outside=denied read-other=denied connect-other=denied \
             connect-endpoint=ok udp=denied unix-path=denied unix-abstract=denied \
             unix-dgram=denied unix-pair=ok mptcp=denied write-project=ok write-git-hook=denied write-tmp=ok setuid=denied",
            "{rt}"
        );
        assert_eq!(
            std::fs::read_to_string(&keys).unwrap(),
            "ssh-ed25519 AAAA original\n"
        );
        assert_eq!(
            std::fs::read_to_string(hooks.join("pre-commit")).unwrap(),
            "#!/bin/sh\n"
        );
        other_listener.set_nonblocking(true).unwrap();
        assert!(
            other_listener.accept().is_err(),
            "no connection reached the other port"
        );
        let record = rt["sandbox"].as_str().unwrap();
        assert!(
            record.starts_with("sandbox enforced (Landlock ABI"),
            "{record}"
        );
        assert!(
            record.contains(&format!("TCP connect to port {endpoint_port}")),
            "{record}"
        );
        assert!(record.contains(env.work.to_str().unwrap()), "{record}");
        // Nothing reached the other services, and the record says what was refused.
        for l in [&unix_listener, &abstract_listener] {
            l.set_nonblocking(true).unwrap();
            assert!(l.accept().is_err(), "a Unix connection got through");
        }
        udp.set_nonblocking(true).unwrap();
        assert!(udp.recv(&mut [0u8; 16]).is_err(), "a datagram got through");
        let refused: Vec<String> = rt["sandbox_refused"]
            .as_array()
            .unwrap_or_else(|| panic!("no sandbox_refused: {rt}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let has = |s: &str| refused.iter().any(|l| l.contains(s));
        assert!(
            has(&format!("connect to 127.0.0.1:{other_port} refused")),
            "{refused:?}"
        );
        assert!(has("a UDP socket refused"), "{refused:?}");
        assert!(
            has(&format!("connect to Unix socket {} refused", unix_path.display())),
            "{refused:?}"
        );
        assert!(
            has(&format!("connect to abstract Unix socket @{abstract_name} refused")),
            "{refused:?}"
        );
        assert!(has("socketpair: a AF_UNIX datagram socket refused"), "{refused:?}");
        // Multipath TCP is not governed by Landlock's TCP rules: not even to the endpoint.
        assert!(
            has("socket: a AF_INET stream socket of protocol 262 refused"),
            "{refused:?}"
        );
        assert!(
            !has(&format!(":{endpoint_port}")),
            "the allowed connect is not a refusal: {refused:?}"
        );
        // What it left running outside its group ended with it, and the record says so.
        let escapee = std::fs::read_to_string(env.work.join("escapee.pid")).unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{}", escapee.trim())).exists(),
            "the job's escapee {escapee} still runs"
        );
        assert!(
            has("1 process(es) the agent left running were killed when it ended"),
            "{refused:?}"
        );
        // The files Landlock refused: listed where the kernel's audit is on and readable
        // (the write to the other home's authorized_keys), and the record says which it is.
        let audit_readable = agentstore::agent::tools::sandbox::audit::AuditWatch::start().is_ok();
        if audit_readable {
            assert!(
                record.contains("each file or port Landlock refused listed"),
                "{record}"
            );
            assert!(
                has(&format!("fs.write_file path=\"{}\"", keys.display())),
                "{refused:?}"
            );
        } else {
            assert!(
                record.contains("the files Landlock refused are not listed in runtime.sandbox_refused: "),
                "the record says honestly what it lists: {record}"
            );
        }
        m.stop().await;
    })
    .await
}
