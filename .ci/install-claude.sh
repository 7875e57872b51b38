#!/usr/bin/env bash
# Install the real Claude Code CLI (npm @anthropic-ai/claude-code) if it is missing, and
# print its version. Idempotent; .ci/run calls it before the tests (tests/claude_real.rs
# fails without `claude`).
#
# The npm package ships the native binary in a platform package
# (@anthropic-ai/claude-code-linux-x64, an optional dependency); its postinstall script
# hard-links that binary over bin/claude.exe. Nothing is downloaded outside npm.
#
# CLAUDE_CODE_VERSION pins the version (default below; 2.1.197 is the newest 2.1.x whose
# `engines` accepts this machine's Node 20, so it is what a plain install picks here too).
# Set it explicitly to force a (re)install of another version.
set -euo pipefail

default_version=2.1.197
want="${CLAUDE_CODE_VERSION:-$default_version}"

installed_version() {
    command -v claude >/dev/null 2>&1 || return 1
    claude --version 2>/dev/null | awk 'NR==1 {print $1}'
}

have="$(installed_version || true)"
if [ -n "$have" ] && { [ -z "${CLAUDE_CODE_VERSION:-}" ] || [ "$have" = "$want" ]; }; then
    echo "claude $have already installed at $(command -v claude)"
    exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
    echo "npm not found: installing nodejs and npm from Debian" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

echo "installing @anthropic-ai/claude-code@$want with npm" >&2
npm install -g --no-audit --no-fund --allow-scripts=@anthropic-ai/claude-code \
    "@anthropic-ai/claude-code@$want" >&2

# If npm skipped the postinstall script, bin/claude.exe is still the stub: place the binary.
if ! claude --version >/dev/null 2>&1; then
    pkg="$(npm root -g)/@anthropic-ai/claude-code"
    echo "running $pkg/install.cjs (postinstall did not run)" >&2
    (cd "$pkg" && node install.cjs)
fi

have="$(installed_version || true)"
if [ -z "$have" ]; then
    echo "claude is still not runnable after npm install" >&2
    exit 1
fi
echo "claude $have installed at $(command -v claude)"
