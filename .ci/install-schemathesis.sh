#!/usr/bin/env bash
# Install schemathesis (PyPI) in its own virtualenv if it is missing, and print its version.
# Idempotent; .ci/run calls it before the tests (tests/web_conformance.rs runs it over
# docs/openapi.json against agentstore-web, and fails under CI without it).
#
# SCHEMATHESIS_VERSION pins the version (default below); SCHEMATHESIS_VENV is where the
# virtualenv goes (default /opt/agentstore-ci/schemathesis). The command is linked into
# /usr/local/bin when that is writable, else printed for SCHEMATHESIS=… .
set -euo pipefail

want="${SCHEMATHESIS_VERSION:-4.32.5}"
venv="${SCHEMATHESIS_VENV:-/opt/agentstore-ci/schemathesis}"

if command -v schemathesis >/dev/null 2>&1 &&
    [ "$(schemathesis --version 2>/dev/null | awk '{print $NF}')" = "$want" ]; then
    echo "schemathesis $want already installed at $(command -v schemathesis)"
    exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    echo "python3-venv not found: installing it from Debian" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$want"
if [ -w /usr/local/bin ]; then
    ln -sf "$venv/bin/schemathesis" /usr/local/bin/schemathesis
    echo "schemathesis $("$venv/bin/schemathesis" --version | awk '{print $NF}') at /usr/local/bin/schemathesis"
else
    echo "schemathesis installed: export SCHEMATHESIS=$venv/bin/schemathesis"
fi
