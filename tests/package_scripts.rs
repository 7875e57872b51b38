//! The Debian maintainer scripts' own facts (issue 34): prerm refuses a downgrade by
//! comparing with the version it belongs to (`THIS_VERSION=`), which must be the package's
//! version (Cargo.toml's, Debian revision 1, as cargo-deb builds it) and the changelog's top
//! entry. The refusal itself runs in the real-systemd suite (tests/system/t_upgrade.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

#[test]
fn prerm_and_the_changelog_name_the_package_version() {
    let want = format!("{}-1", env!("CARGO_PKG_VERSION"));
    let prerm = read("packaging/debian/prerm");
    let this = prerm
        .lines()
        .find_map(|l| l.strip_prefix("THIS_VERSION="))
        .expect("prerm sets THIS_VERSION=");
    assert_eq!(this, want, "packaging/debian/prerm THIS_VERSION");
    let changelog = read("packaging/debian/changelog");
    let top = changelog.lines().next().unwrap();
    assert!(
        top.starts_with(&format!("agentstore ({want}) ")),
        "packaging/debian/changelog starts with {top:?}, not version {want}"
    );
}

#[test]
fn prerm_refuses_a_downgrade_both_ways_dpkg_asks() {
    // The script itself, run as dpkg would; it needs the real `dpkg --compare-versions`.
    if std::process::Command::new("dpkg")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "dpkg is missing and CI is set"
        );
        eprintln!("SKIP: no dpkg");
        return;
    }
    let prerm = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/debian/prerm");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("sh")
            .arg(&prerm)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The installed (this) package asked to make way for an older one.
    let (code, err) = run(&["upgrade", "0.0.9-1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("refusing to downgrade"), "{err}");
    // This (incoming) package when the installed newer one's prerm failed.
    let (code, err) = run(&["failed-upgrade", "99.0.0-1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("refusing to downgrade from 99.0.0-1"), "{err}");
    // Upgrades and re-installs go through.
    for args in [
        ["upgrade", "99.0.0-1"],
        ["upgrade", &format!("{}-1", env!("CARGO_PKG_VERSION"))],
        ["failed-upgrade", "0.1.0-1"],
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
}
