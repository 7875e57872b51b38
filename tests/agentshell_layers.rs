//! The four layers import in one direction only: L3 (tools) imports no other layer, L2 (core)
//! only L3, L1 (transport) only L2 and L3, L0 (bootstrap) none of them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

#[test]
fn nothing_below_imports_upward() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent");
    let rules: &[(&str, &[&str])] = &[
        ("tools", &["core", "transport", "bootstrap", "wiring"]),
        ("core", &["transport", "bootstrap", "wiring"]),
        ("transport", &["bootstrap", "wiring"]),
        ("bootstrap", &["core", "transport", "tools", "wiring"]),
    ];
    let mut violations = Vec::new();
    for (layer, forbidden) in rules {
        let mut files = Vec::new();
        sources(&base.join(layer), &mut files);
        assert!(!files.is_empty(), "no sources under {layer}");
        for (path, text) in files {
            for f in *forbidden {
                let needle = format!("agent::{f}");
                if text.contains(&needle) {
                    violations.push(format!("{path} uses {needle}"));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_binary_is_wiring_only() {
    // argv → app::main; every decision lives in the library (src/agent/app.rs) where tests and
    // the worker can reach it.
    let bin = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/agentshell.rs"),
    )
    .unwrap();
    let fns = bin.matches("fn ").count();
    assert_eq!(fns, 1, "only main() in src/bin/agentshell.rs");
    assert!(
        bin.lines().count() <= 30,
        "src/bin/agentshell.rs grew logic again"
    );
}
