#!/usr/bin/env bash
# Install the real Codex CLI (npm @openai/codex) if it is missing, and print its version.
# Idempotent; .ci/run calls it before the tests (tests/codex_real.rs fails without `codex`).
#
# The npm package is a small Node launcher; the native binary comes in a platform package
# (@openai/codex-linux-x64, an optional dependency from the same registry). Nothing is
# downloaded outside npm.
#
# CODEX_VERSION pins the version (default below). Set it explicitly to force a (re)install
# of another version.
set -euo pipefail

default_version=0.169.0
want="${CODEX_VERSION:-$default_version}"

installed_version() {
    command -v codex >/dev/null 2>&1 || return 1
    codex --version 2>/dev/null | awk 'NR==1 {print $2}'
}

have="$(installed_version || true)"
if [ -n "$have" ] && { [ -z "${CODEX_VERSION:-}" ] || [ "$have" = "$want" ]; }; then
    echo "codex $have already installed at $(command -v codex)"
    exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
    echo "npm not found: installing nodejs and npm from Debian" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

echo "installing @openai/codex@$want with npm" >&2
npm install -g --no-audit --no-fund "@openai/codex@$want" >&2

have="$(installed_version || true)"
if [ -z "$have" ]; then
    echo "codex is still not runnable after npm install" >&2
    exit 1
fi
echo "codex $have installed at $(command -v codex)"
