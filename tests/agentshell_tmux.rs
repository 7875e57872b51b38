//! The real `agentshell` binary in a real terminal (tmux): confirmations answered yes and no,
//! Ctrl+C during a request, Ctrl+C twice, `/exit`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod agentshell_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentshell_common::*;

/// A tmux server on a private socket, killed on drop.
struct Tmux {
    socket: String,
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tmux {
    fn start(server: &FakeServer, name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        // The wrapper shell must survive the SIGINT that Ctrl+C sends to the foreground group.
        let script = dir.path().join("run.sh");
        std::fs::write(
            &script,
            format!(
                "trap : INT\ncd '{root}'\nexport HOME='{home}' AGENTSHELL_MODEL=openai/test-model \
                 AGENTSHELL_BASE_URL='{url}/v1' OPENAI_API_KEY=sk-tmux-test-123456 TERM=xterm\n\
                 '{bin}' --project '{root}'\necho \"EXITED rc=$?\"\n\
                 echo \"TTY $(stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon')\"\nsleep 600\n",
                root = root.display(),
                home = home.display(),
                url = server.url,
                bin = env!("CARGO_BIN_EXE_agentshell"),
            ),
        )
        .unwrap();
        let socket = format!("agentshell-test-{name}-{}", std::process::id());
        let t = Self {
            socket,
            _dir: dir,
            root,
        };
        t.tmux(&[
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "150",
            "-y",
            "50",
            &format!("sh {}", script.display()),
        ]);
        t.wait_for("›");
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-S", "-200", "-t", "main"])
    }

    fn send(&self, keys: &str) {
        self.tmux(&["send-keys", "-t", "main", "-l", keys]);
        self.tmux(&["send-keys", "-t", "main", "Enter"]);
    }

    fn ctrl_c(&self) {
        self.tmux(&["send-keys", "-t", "main", "C-c"]);
    }

    fn count(&self, text: &str) -> usize {
        self.screen().matches(text).count()
    }

    fn wait_for(&self, text: &str) {
        self.wait_for_count(text, 1);
    }

    fn wait_for_count(&self, text: &str, n: usize) {
        let mut last = String::new();
        let guard = std::time::Instant::now();
        loop {
            last = if guard.elapsed().as_secs() < 30 {
                self.screen()
            } else {
                panic!("hang guard: {text:?} never appeared; screen:\n{last}")
            };
            if last.matches(text).count() >= n {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

#[test]
fn confirmation_answered_yes_then_no_then_exit() {
    let server = FakeServer::start(vec![
        oa_command("c1", "touch yes.txt"),
        oa_text(&["made the yes file"], 1, 1),
        oa_command("c2", "touch no.txt"),
        oa_text(&["skipped the no file"], 1, 1),
    ]);
    let t = Tmux::start(&server, "confirm");
    t.send("make the yes file");
    t.wait_for("⏺ run_command $ touch yes.txt");
    t.wait_for("? Run sh -c `touch yes.txt`? (`touch` is not known to be read-only) [yes/no]");
    t.send("y");
    t.wait_for("made the yes file");
    assert!(t.root().join("yes.txt").exists());

    t.send("make the no file");
    t.wait_for("? Run sh -c `touch no.txt`?");
    t.send("n");
    t.wait_for("skipped the no file");
    assert!(!t.root().join("no.txt").exists());
    t.wait_for("⎿ run_command denied");
    let declined = server.requests()[3].body["messages"].to_string();
    assert!(declined.contains("declined by the user"), "{declined}");

    t.send("/exit");
    t.wait_for("EXITED rc=0");
    let screen = t.screen();
    assert!(screen.contains("session: 4 requests"), "{screen}");
}

#[test]
fn ctrl_c_cancels_a_stalled_request_and_twice_exits() {
    let server = FakeServer::start(vec![
        Reply::Stall,
        oa_text(&["answered after the cancel"], 1, 1),
    ]);
    let t = Tmux::start(&server, "ctrlc");
    t.send("hello");
    server.wait_for_requests(1);
    t.ctrl_c();
    t.wait_for("request cancelled");
    // the session goes on: the next request is answered
    t.send("again");
    t.wait_for("answered after the cancel");
    let sent = server.requests()[1].body["messages"].clone();
    let users: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, vec!["hello", "again"]);
    // Ctrl+C on an empty line warns; the second one exits
    t.ctrl_c();
    t.wait_for("(press Ctrl+C again to exit)");
    assert_eq!(t.count("EXITED"), 0);
    t.ctrl_c();
    t.wait_for("EXITED rc=0");
}

#[test]
fn ctrl_c_clears_typed_input_and_slash_commands_stay_local() {
    let server = FakeServer::start(vec![]);
    let t = Tmux::start(&server, "local");
    t.tmux(&["send-keys", "-t", "main", "-l", "half typed"]);
    t.wait_for("half typed");
    t.ctrl_c();
    t.wait_for("half typed^C");
    t.send("/help");
    t.wait_for("/exit, /quit   end the session");
    t.send("/nope");
    t.wait_for("unknown command /nope");
    t.send("/quit");
    t.wait_for("EXITED rc=0");
    assert!(server.requests().is_empty(), "nothing reached the model");
}

#[test]
fn ctrl_c_at_a_confirmation_cancels_the_request() {
    let server = FakeServer::start(vec![
        oa_command("c1", "touch never.txt"),
        oa_text(&["second request answered"], 1, 1),
    ]);
    let t = Tmux::start(&server, "askc");
    t.send("make a file");
    t.wait_for("? Run sh -c `touch never.txt`?");
    t.ctrl_c();
    t.wait_for("request cancelled");
    assert!(!t.root().join("never.txt").exists());
    assert_eq!(
        server.requests().len(),
        1,
        "the cancelled turn made no further call"
    );
    t.send("next");
    t.wait_for("second request answered");
    t.send("/exit");
    t.wait_for("EXITED rc=0");
}

#[test]
fn setup_keys_in_a_terminal_hides_the_value_and_writes_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let socket = format!("agentshell-test-keys-{}", std::process::id());
    struct KillServer(String);
    impl Drop for KillServer {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .arg("-L")
                .arg(&self.0)
                .arg("kill-server")
                .output();
        }
    }
    let _server = KillServer(socket.clone());
    let tmux = |args: &[&str]| {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let script = format!(
        "HOME='{}' '{}' setup-keys; echo \"EXITED rc=$?\"; sleep 600",
        home.display(),
        env!("CARGO_BIN_EXE_agentshell")
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        "k",
        "-x",
        "150",
        "-y",
        "20",
        &script,
    ]);
    let wait = |text: &str| {
        wait_until(text, || {
            tmux(&["capture-pane", "-p", "-t", "k"]).contains(text)
        })
    };
    wait("Key name (blank to finish):");
    tmux(&["send-keys", "-t", "k", "-l", "DEEPSEEK_API_KEY"]);
    tmux(&["send-keys", "-t", "k", "Enter"]);
    wait("DEEPSEEK_API_KEY (hidden):");
    tmux(&["send-keys", "-t", "k", "-l", "sk-typed-in-secret"]);
    tmux(&["send-keys", "-t", "k", "Enter"]);
    wait_until("second prompt", || {
        tmux(&["capture-pane", "-p", "-t", "k"])
            .matches("Key name (blank to finish):")
            .count()
            == 2
    });
    tmux(&["send-keys", "-t", "k", "Enter"]);
    wait("EXITED rc=0");
    let screen = tmux(&["capture-pane", "-p", "-t", "k"]);
    assert!(
        !screen.contains("sk-typed-in-secret"),
        "the key was echoed:\n{screen}"
    );
    let env_file = home.join(".agentshell/.env");
    assert_eq!(
        std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        std::fs::read_to_string(&env_file)
            .unwrap()
            .contains("DEEPSEEK_API_KEY=\"sk-typed-in-secret\"")
    );
}

/// The pid of this test's agentshell (`--project <its root>` tells it from other tests').
fn agentshell_pid(t: &Tmux) -> i32 {
    let bin = env!("CARGO_BIN_EXE_agentshell");
    let root = t.root().display().to_string();
    let mut pids = Vec::new();
    wait_until("the agentshell process", || {
        pids = pids_running(&[bin, "--project", &root]);
        !pids.is_empty()
    });
    pids[0]
}

fn sigterm(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn sigterm_during_a_command_kills_it_and_restores_the_terminal() {
    let marker = format!("300.{}1", std::process::id()); // unique per test process
    let server = FakeServer::start(vec![oa_command("c1", &format!("sleep {marker}"))]);
    let t = Tmux::start(&server, "term1");
    let pid = agentshell_pid(&t);
    t.send("wait");
    t.wait_for("? Run sh -c `sleep");
    t.send("y");
    wait_until("the sleep command", || {
        !pids_running(&["sleep", &marker]).is_empty()
    });
    sigterm(pid);
    t.wait_for("terminated by SIGTERM");
    t.wait_for("EXITED rc=143");
    t.wait_for("TTY icanon");
    wait_until("the sleep command to be killed", || {
        pids_running(&["sleep", &marker]).is_empty()
    });
}

#[test]
fn sigterm_at_the_prompt_restores_the_terminal() {
    let server = FakeServer::start(vec![]);
    let t = Tmux::start(&server, "term2");
    let pid = agentshell_pid(&t);
    t.tmux(&["send-keys", "-t", "main", "-l", "typing"]);
    t.wait_for("typing");
    sigterm(pid);
    t.wait_for("EXITED rc=143");
    t.wait_for("TTY icanon");
}

#[test]
fn a_spoofed_confirmation_shows_what_really_runs() {
    // backspaces would make the terminal show `ls -la $HOME` while `touch pwned` runs;
    // escape sequences from the model would retitle the window and clear the screen
    let spoof = format!("touch pwned{}ls -la $HOME", "\u{8}".repeat(11));
    let server = FakeServer::start(vec![
        oa_text(&["before\u{1b}]0;retitled\u{7}\u{1b}[2J after"], 1, 1),
        oa_command("c1", &spoof),
        oa_text(&["ok"], 1, 1),
    ]);
    let t = Tmux::start(&server, "spoof");
    t.send("hello");
    t.wait_for("before^[]0;retitled^G^[[2J after");
    t.send("go");
    t.wait_for("? Run sh -c `touch pwned^H^H^H^H^H^H^H^H^H^H^Hls -la $HOME`?");
    t.send("n");
    t.wait_for("ok");
    assert!(!t.root().join("pwned").exists());
    t.send("/exit");
    t.wait_for("EXITED rc=0");
}
