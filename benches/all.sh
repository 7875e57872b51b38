#!/usr/bin/env bash
# benches/all.sh — every benchmark of benches/, unattended, then the whole table (issue 33).
#   bash benches/all.sh [--smoke | --quick | --full] [--bin DIR] [--only a,b] [--skip a,b]
#                       [--out DIR]
#     --smoke            tiny sizes (1,000 jobs): every script tried to its end in minutes;
#                        the figures mean little; pueue is not built (used when present),
#                        no container is booted (systemd_throughput is full/quick only)
#     --quick (default)  small sizes: every bench still runs to its end (~20-30 min)
#     --full             the sizes the issues quote (100,000 jobs, 1,000,000 in growth, the
#                        cargo benches, slowloris, three systemd rounds; hours, ~6 GB disk)
#     --bin DIR          the binaries to measure (e.g. target/debug: no release build; the
#                        table then says so); default target/release
#     NO_BUILD=1         use target/release as it is (else `cargo build --release --bins`)
# Peers are measured by each bench in the same run: pueue (built into target/peer/ by this
# script when absent: `cargo install --locked pueue`), `systemd-run --scope` and the raw
# StartTransientUnit floor (busctl) in a booted container, busctl Peer.Ping, curl, find/cat.
# Each bench's output is kept in DIR/<bench>.log (default a new /var/tmp/agentstore-bench.*),
# every line with the 1-minute load average at the moment it was printed; a bench that fails
# is reported as failed and the others still run. Not run here: soak.sh, soak-system.sh
# (hours of faults), slurm.sh (needs a Slurm cluster), sync.sh (runs the t_sync system test).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mode=quick only="" skip="" out="" bindir=""
while [ $# -gt 0 ]; do
    case $1 in
        --smoke) mode=smoke ;;
        --quick) mode=quick ;;
        --bin) bindir=$2; shift ;;
        --full) mode=full ;;
        --only) only=$2; shift ;;
        --skip) skip=$2; shift ;;
        --out) out=$2; shift ;;
        -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "all.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$out" ] || out=$(mktemp -d /var/tmp/agentstore-bench.XXXXXX)
mkdir -p "$out"
load() { cut -d' ' -f1 /proc/loadavg; }
# Every line a bench prints, with the load when it was printed (unless it says it already).
stamp() {
    while IFS= read -r l; do
        case $l in
            *load*) printf '%s\n' "$l" ;;
            *) printf '%s  [load %s]\n' "$l" "$(load)" ;;
        esac
    done
}

if [ -n "$bindir" ]; then
    bindir=$(realpath "$bindir")
elif [ -z "${NO_BUILD:-}" ]; then
    echo "building the release binaries (load $(load))"
    nice cargo build --release --bins -q || { echo "all.sh: the release build failed" >&2; exit 1; }
fi
bindir=${bindir:-$repo/target/release}
export NO_BUILD=1 BIN=$bindir AGENTSTORE_BIN_DIR=$bindir ORCHESTRATOR=$bindir/orchestrator
pueue_note=""
if [ "$mode" = smoke ]; then
    command -v pueued >/dev/null || [ -x target/peer/bin/pueued ] ||
        pueue_note="pueue is not installed (--smoke does not build it): its rows say so"
elif ! [ -x target/peer/bin/pueued ] && ! command -v pueued >/dev/null; then
    echo "building the peer pueue into target/peer (load $(load))"
    nice cargo install --locked pueue --root "$repo/target/peer" -q >"$out/pueue-install.log" 2>&1 ||
        pueue_note="pueue could not be built (see $out/pueue-install.log): its rows say so"
fi
[ -x target/peer/bin/pueued ] && export PATH=$repo/target/peer/bin:$PATH

# name | smoke command | quick command | full command (run from the repository; "-": not
# in that mode). $BIN is the binaries' folder.
benches=(
    "growth|bash benches/growth.sh 1000|bash benches/growth.sh 10000 100000|bash benches/growth.sh 10000 100000 1000000"
    "deep_pages|REQS=3 CLIENTS=4 PER_CLIENT=2 bash benches/deep_pages.sh 1000|REQS=10 CLIENTS=20 PER_CLIENT=2 bash benches/deep_pages.sh 20000|REQS=20 CLIENTS=50 PER_CLIENT=4 bash benches/deep_pages.sh 100000"
    "backlog|bash benches/backlog.sh 1000|bash benches/backlog.sh 20000|bash benches/backlog.sh 100000"
    "scale|bash benches/scale.sh 1000|bash benches/scale.sh 10000|bash benches/scale.sh 10000 100000"
    "queue_throughput|bash benches/queue_throughput.sh 30|bash benches/queue_throughput.sh 300|bash benches/queue_throughput.sh 1000"
    "web|REQS=50 bash benches/web.sh 1000|REQS=50 bash benches/web.sh 20000|bash benches/web.sh 100000"
    "agentshell_exec_cpu|bash benches/agentshell_exec_cpu.sh \$BIN/agentshell 5|bash benches/agentshell_exec_cpu.sh \$BIN/agentshell 50|bash benches/agentshell_exec_cpu.sh \$BIN/agentshell 200"
    "archive|N=1000 bash benches/archive.sh|N=20000 bash benches/archive.sh|bash benches/archive.sh"
    "list_jobs|bash benches/list_jobs.sh 200 2000|bash benches/list_jobs.sh 2000 20000|bash benches/list_jobs.sh 10000 100000"
    "systemd_throughput|-|ROUNDS=1 bash benches/systemd_throughput.sh 100 10|ROUNDS=3 bash benches/systemd_throughput.sh 300 30"
    "web_slowloris|-|-|bash benches/web_slowloris.sh"
    "cargo_benches|-|-|for b in orchestrator_latency queue_latency sandbox agentshell tasks_fanout; do echo \"== cargo bench \$b\"; nice cargo bench -q --bench \$b || exit 1; done"
)

picked() {
    local n=$1
    if [ -n "$only" ] && [[ ",$only," != *",$n,"* ]]; then return 1; fi
    if [ -n "$skip" ] && [[ ",$skip," == *",$n,"* ]]; then return 1; fi
    return 0
}

case $mode in smoke) limit=900 ;; quick) limit=3600 ;; full) limit=14400 ;; esac
summary=$out/summary.txt
: >"$summary"
echo "all.sh --$mode, binaries $bindir, logs in $out (start load $(load))"
for b in "${benches[@]}"; do
    IFS='|' read -r name smoke quick full <<<"$b"
    picked "$name" || continue
    case $mode in
        smoke) cmd=$smoke ;;
        quick) cmd=$quick ;;
        full) cmd=$full ;;
    esac
    if [ "$cmd" = - ]; then
        echo "-- $name: not run with --$mode" | tee -a "$summary"
        continue
    fi
    if [ "$name" = queue_throughput ] && ! command -v pueued >/dev/null; then
        echo "-- $name: skipped (its peer pueue is not installed)" | tee -a "$summary"
        continue
    fi
    log=$out/$name.log
    l0=$(load)
    t0=$(date +%s)
    echo
    echo "-- $name: $cmd (load $l0)"
    # A deadline per bench (its process group is ended): the table always comes out.
    timeout --kill-after=30 "$limit" bash -c "$cmd" </dev/null 2>&1 | stamp | tee "$log"
    rc=${PIPESTATUS[0]}
    t=$(($(date +%s) - t0))
    if [ "$rc" = 0 ]; then
        state=ok
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        state="FAILED (still running after ${limit}s: ended)"
    elif grep -q '^SKIP' "$log"; then
        state="skipped ($(grep -m1 '^SKIP' "$log" | cut -c1-100))"
    else
        state="FAILED (exit $rc)"
    fi
    {
        echo
        echo "-- $name: $state in ${t}s, load $l0 → $(load): $cmd"
        # The bench's own table: from its last "== " heading on, or its last lines.
        if grep -q '^== ' "$log"; then
            awk '/^== /{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$log"
        else
            tail -n 40 "$log"
        fi
    } >>"$summary"
done
echo
echo "======== all benches (--$mode, binaries $bindir), each row with the load when it was printed ========"
[ -z "$pueue_note" ] || echo "$pueue_note"
cat "$summary"
