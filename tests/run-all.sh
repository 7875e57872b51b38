#!/usr/bin/env bash
# Every test: formatting, lints, unit + integration tests, then the real-systemd suite
# (which prints "SKIP: <reason>" and passes when it cannot run: not root, no nspawn — unless
# CI is set, as .ci/run sets it: then a skip fails).
set -euo pipefail
cd "$(dirname "$0")/.."
# One build, not an edit loop: incremental state would only take disk (gigabytes of it on a
# machine whose free space we do not control). Keep a caller's own choice.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

echo "==> cargo fmt --check"
cargo fmt --check
echo "==> cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings
echo "==> cargo nextest run (unit + integration)"
cargo nextest run --all-targets --no-fail-fast
if [ -x tests/system/run.sh ] || [ -f tests/system/run.sh ]; then
    echo "==> tests/system (real systemd in systemd-nspawn)"
    bash tests/system/run.sh
fi
if command -v lintian >/dev/null 2>&1 && compgen -G 'target/debian/*.deb' >/dev/null; then
    echo "==> lintian (errors fail)"
    lintian --fail-on error target/debian/*.deb
fi
