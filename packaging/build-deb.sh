#!/usr/bin/env bash
# packaging/build-deb.sh [--rpm] [--no-build] — build the release binaries, their man pages
# and shell completions, then the .deb with cargo-deb (and the .rpm with cargo-generate-rpm
# with --rpm, from the same files). Prints the path of each package built on stdout, the .deb
# first (everything else goes to stderr).
#
# --no-build packages what target/ already holds (the seven release binaries in
# target/release, target/man and target/completions from an earlier run): nothing is
# compiled, and a missing file is an error naming it. For repackaging a build made elsewhere.
#
# Man pages and completions come from the clap definitions through the example
# `examples/gen_docs.rs`, run as `cargo run --release --example gen_docs -- OUT_DIR`, which
# must write OUT_DIR/man/<binary>.1 for each of the six binaries and
# OUT_DIR/completions/{bash/<bin>, zsh/_<bin>, fish/<bin>.fish} (see packaging/README.md).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
rpm=0
build=1
for arg in "$@"; do
    case "$arg" in
    --rpm) rpm=1 ;;
    --no-build) build=0 ;;
    *) echo "usage: $0 [--rpm] [--no-build]" >&2; exit 2 ;;
    esac
done
bins=(orchestrator orchestratord queue-manager agent-worker agentshell agentstore-web agentstore-notify)

# Fail before the long build when a file the package lists is missing (cargo-deb stops on
# any asset pattern that matches nothing).
missing=()
for pattern in 'systemd/*.service' 'systemd/*.socket' 'systemd/user/*' 'dbus/*.conf' 'dbus/*.service' 'dbus/*.xml' \
    'schemas/*.json' packaging/config.yaml examples/gen_docs.rs; do
    compgen -G "$pattern" >/dev/null || missing+=("$pattern")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "error: nothing matches: ${missing[*]} (see packaging/README.md; examples/gen_docs.rs" \
        "generates target/man/*.1 and target/completions/{bash,zsh,fish}/ from the clap definitions)" >&2
    exit 1
fi

if [ "$build" = 1 ]; then
    cargo build --release --locked --bins >&2
    # cargo-deb's metadata names target/man and target/completions relative to the repository.
    rm -rf target/man target/completions
    cargo run --release --locked --example gen_docs -- "$repo/target" >&2
else
    missing=()
    for b in "${bins[@]}"; do
        [ -x "target/release/$b" ] || missing+=("target/release/$b")
    done
    for pattern in 'target/man/*.1' 'target/completions/bash/*' 'target/completions/zsh/_*' 'target/completions/fish/*.fish'; do
        compgen -G "$pattern" >/dev/null || missing+=("$pattern")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "error: --no-build, but target/ lacks: ${missing[*]} (run without --no-build)" >&2
        exit 1
    fi
fi

if ! command -v cargo-deb >/dev/null 2>&1; then
    cargo install --locked cargo-deb >&2
fi
cargo deb --no-build --locked -o "$repo/target/debian/" | tail -n1

if [ "$rpm" = 1 ]; then
    if ! command -v cargo-generate-rpm >/dev/null 2>&1; then
        cargo install --locked cargo-generate-rpm >&2
    fi
    out=$repo/target/generate-rpm
    rm -rf "$out" target/man-rpm target/rpm-bin
    mkdir -p "$out" target/man-rpm target/rpm-bin
    # The binaries stripped as cargo-deb strips them for the .deb (and rpmbuild's
    # brp-strip for an RPM): the same bytes in both packages.
    for b in "${bins[@]}"; do
        strip --strip-unneeded --remove-section=.comment --remove-section=.note \
            -o "target/rpm-bin/$b" "target/release/$b"
    done
    # Man pages go gzipped into an RPM (what rpmbuild's brp-compress does), as cargo-deb
    # gzips them into the .deb.
    for page in target/man/*.1; do
        gzip -9nc "$page" >"target/man-rpm/$(basename "$page").gz"
    done
    cargo generate-rpm -o "$out/" >&2
    for f in "$out"/*.rpm; do echo "$f"; done
fi
