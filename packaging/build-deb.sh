#!/usr/bin/env bash
# packaging/build-deb.sh [--rpm] — build the release binaries, their man pages and shell
# completions, then the .deb with cargo-deb (and the .rpm with cargo-generate-rpm with --rpm).
# Prints the path of each package built on stdout (everything else goes to stderr).
#
# Man pages and completions come from the clap definitions through the example
# `examples/gen_docs.rs`, run as `cargo run --release --example gen_docs -- OUT_DIR`, which
# must write OUT_DIR/man/<binary>.1 for each of the six binaries and
# OUT_DIR/completions/{bash/<bin>, zsh/_<bin>, fish/<bin>.fish} (see packaging/README.md).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
rpm=0
case "${1:-}" in
--rpm) rpm=1 ;;
"") ;;
*) echo "usage: $0 [--rpm]" >&2; exit 2 ;;
esac

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

cargo build --release --locked --bins >&2

# cargo-deb's metadata names target/man and target/completions relative to the repository.
rm -rf target/man target/completions
cargo run --release --locked --example gen_docs -- "$repo/target" >&2

if ! command -v cargo-deb >/dev/null 2>&1; then
    cargo install --locked cargo-deb >&2
fi
cargo deb --no-build --locked -o "$repo/target/debian/" | tail -n1

if [ "$rpm" = 1 ]; then
    if ! command -v cargo-generate-rpm >/dev/null 2>&1; then
        cargo install --locked cargo-generate-rpm >&2
    fi
    out=$repo/target/generate-rpm
    rm -rf "$out"
    mkdir -p "$out"
    cargo generate-rpm -o "$out/" >&2
    for f in "$out"/*.rpm; do echo "$f"; done
fi
