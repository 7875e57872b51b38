//! Issue 28, sandbox4: nothing a confined command leaves behind in its writable project makes
//! the user's later, unconfined git (or coding agent) run a program. The kernel cannot refuse
//! a new `sub/.git` by name, so each one the command made that names a program is moved aside
//! after the command, and the command is told. Real git throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::agentshell_sandbox::{fixture, landlock_here, run, run_under, sh};

/// A commit id for a gitlink (git never looks it up for `status`).
const SHA: &str = "0123456789012345678901234567890123456789";

/// The command's git is pinned to the project's repository: the model unpins it.
const GIT: &str = "env -u GIT_DIR -u GIT_WORK_TREE -u GIT_CEILING_DIRECTORIES git";

/// The start of a shell command appending to a git config (its path follows) a
/// `core.fsmonitor` that touches `marker` when git runs it.
fn fsmonitor_appender(marker: &Path) -> String {
    format!(
        "printf \"[core]\\n\\tfsmonitor = \\\"touch {}; false\\\"\\n\" >>",
        marker.display()
    )
}

fn user_git(dir: &Path, home: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} in {}: {out:?}",
        dir.display()
    );
}

/// `git commit --allow-empty` as the user, unconfined (it runs the repository's hooks).
fn user_commit(dir: &Path, home: &Path) {
    let who = ["-c", "user.name=u", "-c", "user.email=u@x"];
    let commit = ["commit", "-q", "--allow-empty", "-m", "x"];
    user_git(dir, home, &[&who[..], &commit[..]].concat());
}

/// Each `(call, path)`: the path is gone, kept aside as `PATH.refused-by-sandbox`, and the
/// call that planted it was told.
fn moved_aside(root: &Path, tools: &[serde_json::Value], planted: &[(usize, &str)]) {
    for &(i, p) in planted {
        assert!(!root.join(p).exists(), "{p} left in place: {}", tools[i]);
        assert!(
            root.join(format!("{p}.refused-by-sandbox")).exists(),
            "{p} kept aside"
        );
        assert!(
            tools[i]["stderr"].as_str().unwrap().contains(p),
            "call {i} is told about {p}: {}",
            tools[i]
        );
    }
}

#[test]
fn nested_repositories_a_command_plants_run_nothing_of_the_users_git() {
    if !landlock_here("nested_repositories_a_command_plants_run_nothing_of_the_users_git") {
        return;
    }
    let f = fixture();
    user_git(&f.root, &f.home, &["init", "-q"]);
    let marker = |n: u8| f.dir.path().join(format!("RAN-{n}"));
    let fsmonitor = |n: u8| fsmonitor_appender(&marker(n));
    let git = GIT;
    let calls = [
        // A nested repository whose fsmonitor runs, and a gitlink naming it in the index.
        sh(&format!(
            "{git} init -q sub && {} sub/.git/config && {git} update-index --add --cacheinfo 160000,{SHA},sub && echo planted",
            fsmonitor(1)
        )),
        // A submodule's git directory under .git/modules, reached through `m/.git`.
        sh(&format!(
            "mkdir -p .git/modules && {git} init -q --separate-git-dir \"$PWD/.git/modules/m\" m && {} .git/modules/m/config && {git} update-index --add --cacheinfo 160000,{SHA},m && echo planted",
            fsmonitor(2)
        )),
        // A hook of a nested repository, an alias, and another agent's settings in a
        // subdirectory.
        sh(&format!(
            "{git} init -q h && printf \"#!/bin/sh\\ntouch {}\\n\" > h/.git/hooks/pre-commit && chmod +x h/.git/hooks/pre-commit && printf \"[alias]\\n\\tst = !touch {}\\n\" >> h/.git/config && mkdir -p deep/.claude && echo {{}} > deep/.claude/settings.json && echo planted",
            marker(3).display(),
            marker(4).display()
        )),
        // A `.git` file leading into the scratch directory, to a repository with a fsmonitor.
        sh(&format!(
            "{git} init -q \"$TMPDIR/evil\" && {} \"$TMPDIR/evil/.git/config\" && mkdir p && echo \"gitdir: $TMPDIR/evil/.git\" > p/.git && echo planted",
            fsmonitor(5)
        )),
    ];
    let (result, tools, _, _) = run(&f, &calls, &[]);
    assert_eq!(result["permission_denials"], json!([]), "{result}");
    for (i, t) in tools.iter().enumerate() {
        assert_eq!(t["stdout"], "planted\n", "call {i}: {t}");
    }
    moved_aside(
        &f.root,
        &tools,
        &[
            (0, "sub/.git/config"),
            (1, ".git/modules/m/config"),
            (2, "h/.git/hooks/pre-commit"),
            (2, "h/.git/config"),
            (2, "deep/.claude/settings.json"),
            (3, "p/.git"),
        ],
    );
    // The user's own git, unconfined, in the project and in each planted repository.
    user_git(&f.root, &f.home, &["status", "--short"]);
    for d in ["sub", "m", "h"] {
        user_git(&f.root.join(d), &f.home, &["status", "--short"]);
    }
    let h = f.root.join("h");
    user_commit(&h, &f.home);
    // The alias is gone with the config it was in.
    let st = Command::new("git")
        .arg("st")
        .current_dir(&h)
        .env("HOME", &f.home)
        .output()
        .unwrap();
    assert!(!st.status.success(), "{st:?}");
    // (5: the scratch directory the `.git` file led to is gone with the session.)
    for n in 1..=4 {
        assert!(!marker(n).exists(), "planted program {n} ran");
    }
}

/// Issue 28 (sandbox4's open case): a directory made unlistable but searchable (mode 0311)
/// hid what is inside it from the sweep, while git still reaches it by name — `d/sub/.git`
/// through a gitlink, a hook in a `hooks/` nobody may list. As root the sweep reads every
/// directory anyway, so agentshell runs without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH,
/// as any other user would.
#[test]
fn a_directory_made_unlistable_hides_nothing_from_the_sweep() {
    if !landlock_here("a_directory_made_unlistable_hides_nothing_from_the_sweep") {
        return;
    }
    let f = fixture();
    user_git(&f.root, &f.home, &["init", "-q"]);
    let marker = |n: u8| f.dir.path().join(format!("RAN-{n}"));
    let git = GIT;
    let calls = [
        sh(&format!(
            "mkdir d && {git} init -q d/sub && {} d/sub/.git/config && {git} update-index --add --cacheinfo 160000,{SHA},d/sub && chmod 311 d && echo planted",
            fsmonitor_appender(&marker(1))
        )),
        sh(&format!(
            "{git} init -q h && printf \"#!/bin/sh\\ntouch {}\\n\" > h/.git/hooks/pre-commit && chmod +x h/.git/hooks/pre-commit && chmod 311 h/.git/hooks && echo planted",
            marker(2).display()
        )),
    ];
    let without_dac = [
        "setpriv",
        "--bounding-set=-dac_override,-dac_read_search",
        "--",
    ];
    let wrapper: &[&str] = if nix::unistd::geteuid().is_root() {
        &without_dac
    } else {
        &[]
    };
    let (result, tools, _, _) = run_under(&f, &calls, &[], wrapper);
    assert_eq!(result["permission_denials"], json!([]), "{result}");
    for (i, t) in tools.iter().enumerate() {
        assert_eq!(t["stdout"], "planted\n", "call {i}: {t}");
    }
    moved_aside(
        &f.root,
        &tools,
        &[(0, "d/sub/.git/config"), (1, "h/.git/hooks/pre-commit")],
    );
    // The directories keep the mode the command gave them.
    use std::os::unix::fs::PermissionsExt;
    for d in ["d", "h/.git/hooks"] {
        let mode = std::fs::metadata(f.root.join(d))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o311, "{d}");
    }
    user_git(&f.root, &f.home, &["status", "--short"]);
    user_commit(&f.root.join("h"), &f.home);
    for n in 1..=2 {
        assert!(!marker(n).exists(), "planted program {n} ran");
    }
}

/// Issue 28, sandbox4: a process a command starts outside its process group (`setsid`)
/// outlived the command and the session, and planted a nested repository after the last
/// sweep (the user's next `git status` ran its fsmonitor). agentshell is the subreaper of
/// such orphans and ends them with the command, and says so.
#[test]
fn nothing_a_command_starts_outside_its_group_outlives_it() {
    if !landlock_here("nothing_a_command_starts_outside_its_group_outlives_it") {
        return;
    }
    let f = fixture();
    let calls = [
        sh(
            "(setsid sh -c \"echo \\$\\$ > escapee.pid; exec sleep 600\" </dev/null >/dev/null 2>&1 &); while [ ! -s escapee.pid ]; do sleep 0.01; done; echo started",
        ),
        // A chain of 100 processes, each the parent of the next (one round of killing
        // per link), the last one sleeping.
        sh(
            "printf 'd=$1; if [ $d -ge 100 ]; then echo $$ > chain.pid; exec sleep 600; fi; sh $0 $((d+1)) & wait\\n' > $TMPDIR/c.sh; (setsid sh $TMPDIR/c.sh 1 </dev/null >/dev/null 2>&1 &); while [ ! -s chain.pid ]; do sleep 0.01; done; echo started",
        ),
        sh(
            "for p in escapee chain; do test -e /proc/$(cat $p.pid) && echo alive || echo gone; done",
        ),
    ];
    let (result, tools, _, _) = run(&f, &calls, &[]);
    assert_eq!(result["permission_denials"], json!([]), "{result}");
    assert_eq!(tools[0]["stdout"], "started\n", "{}", tools[0]);
    assert!(
        tools[0]["stderr"]
            .as_str()
            .unwrap()
            .contains("1 process(es) the command left running outside its group were killed"),
        "{}",
        tools[0]
    );
    assert_eq!(tools[1]["stdout"], "started\n", "{}", tools[1]);
    assert!(
        tools[1]["stderr"]
            .as_str()
            .unwrap()
            .contains("process(es) the command left running outside its group were killed"),
        "{}",
        tools[1]
    );
    assert_eq!(tools[2]["stdout"], "gone\ngone\n", "{}", tools[2]);
    for p in ["escapee.pid", "chain.pid"] {
        let pid = std::fs::read_to_string(f.root.join(p)).unwrap();
        assert!(
            !Path::new(&format!("/proc/{}", pid.trim())).exists(),
            "{p} {pid} still runs"
        );
    }
}
