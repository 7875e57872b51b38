//! The real `agentshell` binary in a real terminal (tmux): confirmations answered yes and no,
//! Ctrl+C during a request, Ctrl+C twice, `/exit`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agentshell_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentshell_common::*;

/// A tmux server on a private socket, killed on drop.
struct Tmux {
    socket: String,
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tmux {
    fn start(server: &FakeServer, name: &str) -> Self {
        Self::start_with(server, name, "")
    }

    /// Start `agentshell --project ROOT ARGS` in a fresh project and HOME.
    fn start_with(server: &FakeServer, name: &str, args: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let socket = format!("agentshell-test-{name}-{}", std::process::id());
        let t = Self { socket, dir, root };
        t.launch(server, args);
        t
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// (Re)start the binary in a new tmux server, same project and HOME.
    fn launch(&self, server: &FakeServer, args: &str) {
        self.launch_after(server, args, "");
    }

    /// Like [`Tmux::launch`], with `prelude` run first by the wrapper shell.
    fn launch_after(&self, server: &FakeServer, args: &str, prelude: &str) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
        // The wrapper shell must survive the SIGINT that Ctrl+C sends to the foreground group.
        let script = self.dir.path().join("run.sh");
        std::fs::write(
            &script,
            format!(
                "{prelude}trap : INT\ncd '{root}'\nexport HOME='{home}' AGENTSHELL_MODEL=openai/test-model \
                 AGENTSHELL_BASE_URL='{url}/v1' OPENAI_API_KEY=sk-tmux-test-123456 TERM=xterm\n\
                 '{bin}' --project '{root}' {args}\necho \"EXITED rc=$?\"\n\
                 echo \"TTY $(stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon')\"\nsleep 600\n",
                root = self.root.display(),
                home = self.home().display(),
                url = server.url,
                bin = env!("CARGO_BIN_EXE_agentshell"),
            ),
        )
        .unwrap();
        let command = format!("sh {}", script.display());
        let args = [
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "150",
            "-y",
            "50",
            &command,
        ];
        // A server killed just before may still be going away: try again for a while.
        wait_until(LOADED, "a new tmux server", || {
            Command::new("tmux")
                .arg("-L")
                .arg(&self.socket)
                .args(args)
                .output()
                .unwrap()
                .status
                .success()
        });
        self.wait_for("›");
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
        let seen = crate::wait::holds_within(LOADED, || {
            last = self.screen();
            last.matches(text).count() >= n
        });
        assert!(
            seen,
            "timed out after {LOADED:?} waiting for {n} × {text:?}; screen:\n{last}"
        );
    }

    /// Awaits the line editor reading a line: it puts the tty in raw mode (`-icanon`), which
    /// a turn never does.
    fn wait_for_editor(&self) {
        let tty = self.tmux(&["display", "-p", "-t", "main", "#{pane_tty}"]);
        let tty = tty.trim();
        wait_until(LOADED, "the line editor to take the tty (raw mode)", || {
            Command::new("stty")
                .args(["-F", tty, "-a"])
                .output()
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .any(|w| w == "-icanon")
                })
        });
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
    t.wait_for(
        "? Run sh -c `touch yes.txt`? (`touch` is not known to be read-only) [yes/no/always]",
    );
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
    // Ctrl+C on an empty line warns; the second one exits. It must reach the prompt's read,
    // not the end of the turn: wait for the turn line, then for the editor to take the tty.
    t.wait_for("turn: ");
    t.wait_for_editor();
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
    t.wait_for("/exit, /quit    end the session");
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
        wait_until(LOADED, text, || {
            tmux(&["capture-pane", "-p", "-t", "k"]).contains(text)
        })
    };
    wait("Key name (blank to finish):");
    tmux(&["send-keys", "-t", "k", "-l", "DEEPSEEK_API_KEY"]);
    tmux(&["send-keys", "-t", "k", "Enter"]);
    wait("DEEPSEEK_API_KEY (hidden):");
    tmux(&["send-keys", "-t", "k", "-l", "sk-typed-in-secret"]);
    tmux(&["send-keys", "-t", "k", "Enter"]);
    wait_until(LOADED, "second prompt", || {
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
    wait_until(LOADED, "the agentshell process", || {
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
    wait_until(LOADED, "the sleep command", || {
        !pids_running(&["sleep", &marker]).is_empty()
    });
    sigterm(pid);
    t.wait_for("terminated by SIGTERM");
    t.wait_for("EXITED rc=143");
    t.wait_for("TTY icanon");
    wait_until(LOADED, "the sleep command to be killed", || {
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

/// The user messages of a recorded request.
fn user_messages(r: &Recorded) -> Vec<String> {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_bracketed_paste_and_multi_line_input_are_one_message() {
    let server = FakeServer::start(vec![
        oa_text(&["got the paste"], 1, 1),
        oa_text(&["got the typed lines"], 1, 1),
    ]);
    let t = Tmux::start(&server, "paste");
    // tmux pastes with ESC[200~ … ESC[201~ only when the application switched the mode on
    t.tmux(&["set-buffer", "-b", "p", "line one\nline two\nline three"]);
    t.tmux(&["paste-buffer", "-p", "-b", "p", "-t", "main"]);
    t.wait_for("… line three");
    // Shown as one input, nothing sent (a newline that submitted would also make the first
    // request's message "line one" alone: checked below).
    assert!(
        server.requests().is_empty(),
        "a pasted newline submitted the input:\n{}",
        t.screen()
    );
    t.tmux(&["send-keys", "-t", "main", "Enter"]);
    t.wait_for("got the paste");
    assert_eq!(
        user_messages(&server.requests()[0]),
        vec!["line one\nline two\nline three"]
    );
    // typed: Alt+Enter and a trailing backslash insert newlines, Enter sends
    t.tmux(&["send-keys", "-t", "main", "-l", "first"]);
    t.tmux(&["send-keys", "-t", "main", "M-Enter"]);
    t.tmux(&["send-keys", "-t", "main", "-l", "second\\"]);
    t.tmux(&["send-keys", "-t", "main", "Enter"]);
    t.wait_for("… second");
    t.send("third");
    t.wait_for("got the typed lines");
    assert_eq!(
        user_messages(&server.requests()[1]),
        vec!["line one\nline two\nline three", "first\nsecond\nthird"]
    );
    t.send("/exit");
    t.wait_for("EXITED rc=0");
    // the mode is off again once agentshell has left: the shell's tty echoes a paste as is
    t.tmux(&["paste-buffer", "-p", "-b", "p", "-t", "main"]);
    t.wait_for("line three");
    let screen = t.screen();
    assert!(!screen.contains("^[[200~"), "paste mode left on:\n{screen}");
}

#[test]
fn sessions_and_input_history_survive_a_restart() {
    let server = FakeServer::start(vec![
        oa_text(&["noted: kiwi"], 1, 1),
        oa_text(&["it was kiwi"], 1, 1),
        oa_text(&["third answer"], 1, 1),
    ]);
    let t = Tmux::start(&server, "resume");
    t.send("remember the word kiwi");
    t.wait_for("noted: kiwi");
    t.send("/exit");
    t.wait_for("EXITED rc=0");
    let sessions = t.home().join(".agentshell/sessions");
    let files: Vec<PathBuf> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(&sessions), 0o700);
    let history = t.home().join(".agentshell/history");
    assert_eq!(mode(&history), 0o600);
    let id = files[0].file_stem().unwrap().to_str().unwrap().to_string();

    // --continue reopens it; Up recalls the last input of the earlier session
    t.launch(&server, "--continue");
    t.wait_for(&format!("resumed session {id}"));
    t.tmux(&["send-keys", "-t", "main", "Up"]);
    t.wait_for("› remember the word kiwi");
    t.tmux(&["send-keys", "-t", "main", "C-u"]);
    t.send("what was the word");
    t.wait_for("it was kiwi");
    let sent = server.requests()[1].body["messages"].to_string();
    assert!(
        sent.contains("remember the word kiwi") && sent.contains("noted: kiwi"),
        "{sent}"
    );
    // /resume lists this project's sessions
    t.send("/resume");
    t.wait_for(&format!("1  {id}"));
    t.send("/exit");
    t.wait_for("EXITED rc=0");

    // --resume ID reopens by id (and an unknown id is a clear error)
    t.launch(&server, &format!("--resume {id}"));
    t.wait_for(&format!("resumed session {id} (2 requests"));
    t.send("again");
    t.wait_for("third answer");
    let users = user_messages(&server.requests()[2]);
    assert_eq!(
        users,
        vec!["remember the word kiwi", "what was the word", "again"]
    );
    t.send("/exit");
    t.wait_for("EXITED rc=0");
    let _ = Command::new("tmux")
        .args(["-L", &t.socket, "kill-server"])
        .output();
    let out = Command::new(env!("CARGO_BIN_EXE_agentshell"))
        .args(["--project", t.root().to_str().unwrap(), "--resume", "nope"])
        .env("HOME", t.home())
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "sk-x")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no session nope for this project"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ctrl_c_during_an_answer_keeps_the_partial_answer_marked_interrupted() {
    let server = FakeServer::start(vec![
        Reply::SseThenStall(vec![
            oa_chunk(
                serde_json::json!({"role": "assistant", "content": ""}),
                None,
            ),
            oa_chunk(serde_json::json!({"content": "The first half of"}), None),
        ]),
        oa_text(&["continuing"], 1, 1),
    ]);
    let t = Tmux::start(&server, "partial");
    t.send("explain");
    // (the renderer holds a word until it ends: "of" shows once the answer goes on or stops)
    t.wait_for("The first half");
    t.ctrl_c();
    t.wait_for("request cancelled");
    t.send("go on");
    t.wait_for("continuing");
    let messages = server.requests()[1].body["messages"].clone();
    let assistant: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        assistant,
        vec!["The first half of\n\n[answer interrupted by the user]"]
    );
    t.send("/exit");
    t.wait_for("EXITED rc=0");
    let dir = t.home().join(".agentshell/sessions");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let saved = std::fs::read_to_string(file).unwrap();
    assert!(
        saved.contains("[answer interrupted by the user]"),
        "{saved}"
    );
}

#[test]
fn always_allow_covers_the_same_command_for_this_session_only() {
    let server = FakeServer::start(vec![
        oa_command("c1", "touch a.txt"),
        oa_text(&["made a"], 1, 1),
        oa_command("c2", "touch a.txt"),
        oa_text(&["made a again"], 1, 1),
        // the same program with another operand is asked about (issue 28)
        oa_command("c2b", "touch b.txt"),
        oa_text(&["kept b"], 1, 1),
        oa_command("c3", "rm a.txt"),
        oa_text(&["kept a"], 1, 1),
        oa_command("c4", "touch CLAUDE.md"),
        oa_text(&["no steering"], 1, 1),
        // the next session
        oa_command("c5", "touch a.txt"),
        oa_text(&["asked again"], 1, 1),
    ]);
    let t = Tmux::start(&server, "always");
    t.send("make a");
    t.wait_for("? Run sh -c `touch a.txt`? (`touch` is not known to be read-only) [yes/no/always]");
    t.send("a");
    t.wait_for("made a");
    assert!(t.root().join("a.txt").exists());
    // the same command: no question
    std::fs::remove_file(t.root().join("a.txt")).unwrap();
    t.send("make a again");
    t.wait_for("made a again");
    assert!(t.root().join("a.txt").exists());
    assert_eq!(t.count("? Run sh -c"), 1, "{}", t.screen());
    // same program and options, another operand: asked
    t.send("make b");
    t.wait_for("? Run sh -c `touch b.txt`?");
    t.send("n");
    t.wait_for("kept b");
    assert!(!t.root().join("b.txt").exists());
    // another program is asked about
    t.send("remove a");
    t.wait_for("? Run sh -c `rm a.txt`?");
    t.send("n");
    t.wait_for("kept a");
    assert!(t.root().join("a.txt").exists());
    // a steering file is asked every time, and "always" is not an answer there
    t.send("touch the rules");
    t.wait_for("? Run sh -c `touch CLAUDE.md`?");
    // (-J: the long question wraps)
    let screen = t.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "main"]);
    let question = screen
        .lines()
        .find(|l| l.contains("touch CLAUDE.md`?"))
        .unwrap();
    assert!(question.trim_end().ends_with("[yes/no]"), "{question}");
    t.send("always");
    t.wait_for_count("touch CLAUDE.md`?", 2);
    t.send("n");
    t.wait_for("no steering");
    assert!(!t.root().join("CLAUDE.md").exists());
    t.send("/exit");
    t.wait_for("EXITED rc=0");
    // nothing about it was written to disk; a new session asks again
    let home_files = String::from_utf8(
        Command::new("grep")
            .args(["-rl", "touch"])
            .arg(t.home().join(".agentshell"))
            .arg("--exclude-dir=sessions")
            .arg("--exclude=history")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(home_files, "", "a grant was persisted");
    std::fs::remove_file(t.root().join("a.txt")).unwrap();
    t.launch(&server, "");
    t.send("make a");
    t.wait_for("? Run sh -c `touch a.txt`?");
    t.send("n");
    t.wait_for("asked again");
    assert!(!t.root().join("a.txt").exists());
}

#[test]
fn model_cost_compact_and_help() {
    let server = FakeServer::start(vec![
        oa_text(&["ANSWER ONE"], 1000, 100),
        oa_text(&["ANSWER TWO"], 1000, 100),
        oa_text(&["ANSWER THREE"], 1000, 100),
        oa_text(&["SUMMARY: the user counted to three"], 500, 50),
        oa_text(&["ANSWER FOUR"], 1000, 100),
    ]);
    let t = Tmux::start(&server, "slash");
    t.send("/help");
    for c in [
        "/model [NAME]",
        "/cost",
        "/compact",
        "/resume [N|ID]",
        "Alt+Enter",
    ] {
        t.wait_for(c);
    }
    t.send("/model");
    t.wait_for("model: openai/test-model");
    t.send("count one");
    t.wait_for("ANSWER ONE");
    // an unpriced model: cost unknown, not $0
    t.send("/cost");
    t.wait_for("cost so far (openai/test-model): 1 requests · 1000 in · 100 out · unknown");
    t.send("/model openai/gpt-4o");
    t.wait_for("model: openai/gpt-4o (from the next request on)");
    t.send("count two");
    t.wait_for("ANSWER TWO");
    assert_eq!(server.requests()[1].body["model"], "gpt-4o");
    t.send("count three");
    t.wait_for("ANSWER THREE");
    t.send("/cost");
    // 1 unpriced request + 2 on gpt-4o at list price ($0.0035 each)
    t.wait_for("3 requests · 3000 in · 300 out · unknown ($0.0070 plus 1 calls");
    t.send("/compact");
    t.wait_for("compacted: 6 messages → 6");
    let summary_request = &server.requests()[3];
    assert!(
        summary_request
            .body
            .get("tools")
            .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty()))
    );
    let asked = summary_request.body["messages"].to_string();
    assert!(
        asked.contains("count one") && asked.contains("<conversation>"),
        "{asked}"
    );
    t.send("count four");
    t.wait_for("ANSWER FOUR");
    let users = user_messages(&server.requests()[4]);
    assert!(
        users[0].contains("SUMMARY: the user counted to three"),
        "{users:?}"
    );
    assert_eq!(users[1..], ["count two", "count three", "count four"]);
    t.send("/exit");
    t.wait_for("EXITED rc=0");
}

const MARKDOWN_ANSWER: &str = "# Plan\n\n- item one\n- item two\n\nuse `cargo` for **bold** moves\n\n```rust\nfn main() {}\n```\n";

#[test]
fn answers_are_rendered_as_markdown_and_a_long_answer_is_not_redrawn() {
    let pieces: Vec<String> = (0..5000).map(|i| format!("word{} ", i % 1000)).collect();
    let long: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let answer_bytes: usize = pieces.iter().map(String::len).sum();
    let server = FakeServer::start(vec![
        oa_text(&[MARKDOWN_ANSWER], 1, 1),
        oa_text(&long, 1, 5000),
    ]);
    let t = Tmux::start(&server, "markdown");
    t.send("plan");
    t.wait_for("• item two");
    let screen = t.screen();
    assert!(
        screen.contains("Plan") && !screen.contains("# Plan"),
        "{screen}"
    );
    assert!(screen.contains("use cargo for bold moves"), "{screen}");
    assert!(screen.contains("  fn main() {}"), "{screen}");

    // every byte written to the terminal while a 5,000-token answer streams
    let log = t.dir.path().join("pty.log");
    t.tmux(&[
        "pipe-pane",
        "-o",
        "-t",
        "main",
        &format!("cat > '{}'", log.display()),
    ]);
    t.send("long");
    t.wait_for("turn: 1 requests");
    wait_until(LOADED, "the pty log", || {
        std::fs::read(&log).is_ok_and(|b| String::from_utf8_lossy(&b).contains("turn: 1 requests"))
    });
    let written = std::fs::read(&log).unwrap().len();
    eprintln!(
        "5,000-token answer: {answer_bytes} bytes of text, {written} bytes written to the pty"
    );
    assert!(
        written < answer_bytes + answer_bytes / 5 + 4096,
        "{written} bytes written for {answer_bytes} bytes of answer"
    );
    // wrapped by the renderer at the 150-column width: no screen line is longer
    let screen = t.screen();
    assert!(screen.lines().all(|l| l.chars().count() <= 150));
    assert!(screen.contains("word999 word0 word1"), "{screen}");
    t.send("/exit");
    t.wait_for("EXITED rc=0");
}

#[test]
fn off_a_terminal_answers_are_plain_text() {
    let server = FakeServer::start(vec![oa_text(&[MARKDOWN_ANSWER], 1, 1)]);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentshell"))
        .args(["--project", root.to_str().unwrap()])
        .env("HOME", dir.path())
        .env("AGENTSHELL_MODEL", "openai/test-model")
        .env("AGENTSHELL_BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "sk-plain-test")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"plan\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(MARKDOWN_ANSWER), "{text}");
}

#[test]
fn ctrl_z_gives_the_terminal_back_without_paste_mode() {
    let server = FakeServer::start(vec![]);
    let t = Tmux::start(&server, "suspend");
    // job control, as in an interactive shell: agentshell in a process group of its own,
    // whose stop signals are not discarded
    t.launch_after(&server, "", "set -m\n");
    let pid = agentshell_pid(&t);
    t.tmux(&["send-keys", "-t", "main", "C-z"]);
    wait_until(LOADED, "agentshell stopped", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('T')
        })
    });
    // stopped: the terminal is cooked and paste mode is off, so a paste is echoed as typed
    t.tmux(&["set-buffer", "-b", "z", "zebra"]);
    t.tmux(&["paste-buffer", "-p", "-b", "z", "-t", "main"]);
    t.wait_for("zebra");
    assert!(!t.screen().contains("^[[200~"), "{}", t.screen());
    // the terminal was restored before the stop (the shell's report and its cooked tty)
    t.wait_for("Stopped");
    assert!(server.requests().is_empty(), "nothing was sent");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}
