#!/usr/bin/env bash
# benches/sync.sh [N] [DEB] — latency through a store synced by REAL Syncthing (issue 13).
# Runs the system test t_sync (one container, two Syncthing instances on loopback; orchestrator
# on alpha, queue `beech` on beta) with SYNC_N=N (default 100) messages and prints its figures:
# message written on beta → answer visible in beta's outbox, p50/p99 (two Syncthing hops plus
# the orchestrator), and Syncthing's own one-way delay (a plain file written on beta → visible
# on alpha), shown separately. Needs root and systemd-nspawn, like tests/system/run.sh.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-100}
deb=${2:-$repo/target/debian/agentstore_0.2.0-1_amd64.deb}
[ -f "$deb" ] || { echo "no package at $deb: nice -n 5 bash packaging/build-deb.sh" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
SYNC_N=$n bash "$repo/tests/system/run.sh" --deb "$deb" t_sync 2>&1 | tee "$log" >&2 || true
grep -h 'SYNC FIGURES' "$log" || { echo "no figures: t_sync failed (see above)" >&2; exit 1; }
