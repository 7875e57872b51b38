//! Issue 35: the model a Codex job is priced as is the model the REAL Codex CLI asks for.
//! Codex's JSONL names no model, so the worker resolves it from Codex's configuration layers
//! (`worker::codex_model`); here the pinned CLI runs, offline against the fake Responses API,
//! on each layer and each case where it refuses to start, and the worker's answer must be
//! the model of Codex's first request (or an error where Codex would not start).
//!
//! The machine's files (`/etc/codex/config.toml`, `/etc/codex/managed_config.toml`) are
//! the test's own: each run happens in a private mount namespace whose `/etc` is an overlay
//! with the test's folder bound at `/etc/codex` (root needed, as under `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::codex_env::require_codex;
use crate::fake_model::{FakeModel, Script};
use crate::harness;
use agentstore::worker::codex_model::{self, MachineFiles};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    codex: PathBuf,
    server: FakeModel,
    home: PathBuf,
    etc: PathBuf,
    provider: String,
}

impl Scratch {
    fn new(codex: PathBuf) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let server = FakeModel::start(Script::default());
        let home = crate::codex_env::codex_home(&root, &server.base_url(), None);
        let provider = std::fs::read_to_string(home.join("config.toml")).unwrap();
        let etc = root.join("etc-codex");
        std::fs::create_dir_all(&etc).unwrap();
        Scratch {
            _dir: dir,
            root,
            codex,
            server,
            home,
            etc,
            provider,
        }
    }

    fn write(&self, path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The account's config.toml: the fake provider, then `text`.
    fn user(&self, text: &str) {
        // `model_provider = …` first, the text's keys and tables, then the provider's table.
        let (key, table) = self.provider.split_once('\n').unwrap();
        self.write(
            &self.home.join("config.toml"),
            &format!("{key}\n{text}\n{table}"),
        );
    }

    /// The account's config.toml naming `m-user`, then `extra`.
    fn user_model(&self, extra: &str) {
        self.user(&format!("model = \"m-user\"\n{extra}"));
    }

    fn git(&self, dir: &Path, args: &[&str]) {
        let o = Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {o:?}");
    }

    /// What the real CLI asked for (Err: it made no model request, with its stderr), and
    /// what the worker says, for `codex exec --json ARGS -` in `cwd`.
    fn both(&self, args: &[&str], cwd: &Path) -> (Result<String, String>, Result<String, String>) {
        let asked = self.server.requests().len();
        let script = r#"set -e
mkdir -p "$1/etc-upper" "$1/etc-work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/etc-upper,workdir=$1/etc-work" /etc
mkdir -p /etc/codex
mount --bind "$1/etc-codex" /etc/codex
cd "$2"
shift 2
exec "$@""#;
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(&self.root)
            .arg(cwd)
            .args(["timeout", "60"])
            .arg(&self.codex)
            .args(["exec", "--json", "--skip-git-repo-check"])
            .args(args)
            .arg("-")
            .env("CODEX_HOME", &self.home)
            .env("OPENAI_API_KEY", "sk-fake")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b"Say hello.")?;
                c.wait_with_output()
            })
            .unwrap();
        let requests = self.server.requests();
        let real = requests[asked..]
            .iter()
            .find(|r| r.endpoint() == "POST /v1/responses")
            .map(|r| r.body["model"].as_str().unwrap().to_string())
            .ok_or_else(|| {
                format!(
                    "no model request ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let machine = MachineFiles {
            config: self.etc.join("config.toml"),
            managed: self.etc.join("managed_config.toml"),
        };
        let env = vec![("CODEX_HOME".to_string(), self.home.display().to_string())];
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let ours = codex_model::run_model_with(
            &args,
            &env,
            Path::new("/nonexistent"),
            cwd,
            None,
            &machine,
        );
        (real, ours)
    }

    /// The worker's model is the one the real CLI used.
    #[track_caller]
    fn agree(&self, what: &str, args: &[&str], cwd: &Path, expected: &str) {
        let (real, ours) = self.both(args, cwd);
        assert_eq!(real.as_deref(), Ok(expected), "{what}: the real CLI");
        assert_eq!(ours.as_deref(), Ok(expected), "{what}: the worker");
    }

    /// The real CLI refuses to start, and the worker gives no model (the cost is unknown).
    #[track_caller]
    fn both_refuse(&self, what: &str, args: &[&str], cwd: &Path) {
        let (real, ours) = self.both(args, cwd);
        assert!(real.is_err(), "{what}: the real CLI ran with {real:?}");
        assert!(ours.is_err(), "{what}: the worker said {ours:?}");
    }
}

#[test]
fn the_worker_prices_the_model_the_real_codex_cli_uses() {
    if !nix::unistd::geteuid().is_root() {
        harness::skip(
            "codex_model",
            "the machine's /etc/codex is replaced in a mount namespace: needs root",
        );
        return;
    }
    let s = Scratch::new(require_codex());
    let proj = s.root.join("proj");
    let sub = proj.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    s.git(&proj, &["init", "-q"]);
    s.git(&proj, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let trust = |dirs: &[(&Path, &str)]| -> String {
        dirs.iter()
            .map(|(d, level)| {
                format!(
                    "[projects.\"{}\"]\ntrust_level = \"{level}\"\n",
                    d.display()
                )
            })
            .collect()
    };

    s.user("");
    s.agree(
        "nothing names a model",
        &[],
        &proj,
        codex_model::DEFAULT_MODEL,
    );
    s.write(&s.etc.join("config.toml"), "model = \"m-system\"\n");
    s.agree("the machine's config", &[], &proj, "m-system");
    s.user("model = \"m-user\"");
    s.agree("the account's over the machine's", &[], &proj, "m-user");
    s.write(&s.home.join("fast.config.toml"), "model = \"m-profile\"\n");
    s.agree(
        "--profile's file",
        &["--profile", "fast"],
        &proj,
        "m-profile",
    );
    s.agree(
        "a profile with no file",
        &["-p", "none-such"],
        &proj,
        "m-user",
    );

    // The project's .codex/config.toml: only where the project is trusted.
    s.write(&proj.join(".codex/config.toml"), "model = \"m-project\"\n");
    s.agree("an untrusted project", &[], &proj, "m-user");
    s.user_model(&trust(&[(&proj, "trusted")]));
    s.agree("a trusted project", &[], &proj, "m-project");
    s.agree(
        "its subfolder, over a profile",
        &["-p", "fast"],
        &sub,
        "m-project",
    );
    s.write(&sub.join(".codex/config.toml"), "model = \"m-sub\"\n");
    s.agree("the closest folder wins", &[], &sub, "m-sub");
    s.agree("-C", &["-C", "sub"], &proj, "m-sub");
    s.user_model(&trust(&[(&proj, "trusted"), (&sub, "untrusted")]));
    s.agree(
        "an untrusted folder in a trusted project",
        &[],
        &sub,
        "m-project",
    );
    s.user_model(&trust(&[(&sub, "trusted")]));
    s.agree("a trusted subfolder, its root not", &[], &sub, "m-sub");
    s.user_model(&format!(
        "project_root_markers = []\n{}",
        trust(&[(&proj, "trusted")])
    ));
    s.agree("trusted through the repository's root", &[], &sub, "m-sub");
    std::fs::remove_file(sub.join(".codex/config.toml")).unwrap();
    s.agree("no root markers: the folder alone", &[], &sub, "m-user");
    s.write(&sub.join(".codex/config.toml"), "model = \"m-sub\"\n");

    // -c over the project, the managed config over -c, --model over everything.
    s.user_model(&trust(&[(&proj, "trusted")]));
    s.agree("-c", &["-c", "model=\"m-cli\""], &sub, "m-cli");
    s.agree("-c, not TOML", &["-c", "model=m-bare"], &sub, "m-bare");
    s.write(
        &s.etc.join("managed_config.toml"),
        "model = \"m-managed\"\n",
    );
    s.agree(
        "the managed config",
        &["-c", "model=\"m-cli\""],
        &sub,
        "m-managed",
    );
    s.agree("--model", &["--model", "m-flag"], &sub, "m-flag");
    std::fs::remove_file(s.etc.join("managed_config.toml")).unwrap();

    // A linked worktree is trusted through its main checkout.
    let wt = s.root.join("wt");
    s.git(
        &proj,
        &["worktree", "add", "-q", "--detach", wt.to_str().unwrap()],
    );
    s.write(&wt.join(".codex/config.toml"), "model = \"m-worktree\"\n");
    s.agree("a worktree of a trusted checkout", &[], &wt, "m-worktree");

    // CODEX_HOME as a folder's `.codex` is that folder's user config, not a project layer
    // (which would put the account's model over the profile's).
    let hp = s.root.join("hp");
    std::fs::create_dir_all(&hp).unwrap();
    std::fs::rename(&s.home, hp.join(".codex")).unwrap();
    let mut s = s;
    s.home = hp.join(".codex");
    s.user_model(&trust(&[(&hp, "trusted")]));
    s.agree(
        "CODEX_HOME in the project",
        &["-p", "fast"],
        &hp,
        "m-profile",
    );
    let home = s.home.clone();
    s.home = s.root.join("codex-home");
    std::fs::rename(&home, &s.home).unwrap();
    // What Codex refuses to start with.
    s.user("model = \"m-user\"\n[profiles.fast]\nmodel = \"m-old\"");
    s.agree(
        "a legacy [profiles] table nobody selects",
        &[],
        &proj,
        "m-user",
    );
    s.both_refuse(
        "--profile with a legacy [profiles] table",
        &["-p", "fast"],
        &proj,
    );
    s.user("profile = \"fast\"");
    s.both_refuse("a top-level profile", &[], &proj);
    s.user("");
    s.both_refuse("-c profile", &["-c", "profile=\"fast\""], &proj);
    s.user("model = 5");
    s.both_refuse("a model that is not text", &[], &proj);
}
