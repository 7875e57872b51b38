#!/usr/bin/env bash
# Throughput and memory of the queue manager, side by side with pueue (issue 4, "Measure"):
#   1. N no-op jobs (sleep_seconds 0) through queue-manager + agent-worker, worker_count 10,
#      all queued before the manager starts; wall time until all N are in finished_jobs/.
#   2. The same N tasks (`true`) through pueue at `parallel 10`: added while paused, then
#      `pueue start` + `pueue wait`.
#   3. queue-manager RSS idle, and with 10 running jobs (no-op, sleep 30); pueued RSS idle.
# Usage: benches/queue_throughput.sh [N]   (default 1000; release binaries from
# $AGENTSTORE_BIN_DIR, default target/release: `cargo build --release --bins` first;
# pueue: `cargo install --locked pueue`).
set -euo pipefail
N=${1:-1000}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${AGENTSTORE_BIN_DIR:-$repo/target/release}
for b in queue-manager agent-worker orchestrator; do
    [ -x "$bin/$b" ] || { echo "missing $bin/$b: cargo build --release --bins" >&2; exit 1; }
done
command -v pueue >/dev/null && command -v pueued >/dev/null ||
    { echo "pueue missing: cargo install --locked pueue" >&2; exit 1; }

work=$(mktemp -d /tmp/agentstore-bench.XXXXXX)
mgr=""
pueued_pid=""
cleanup() {
    [ -n "$mgr" ] && kill "$mgr" 2>/dev/null || true
    if [ -n "$pueued_pid" ]; then
        kill "$pueued_pid" 2>/dev/null || true
        wait "$pueued_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
now_ms() { date +%s%3N; }
# Every wait has a deadline: the bench ends, with what it waited for, instead of hanging.
wait_for() { # SECONDS WHAT COMMAND...
    local limit=$1 what=$2 t0
    shift 2
    t0=$(date +%s)
    until "$@"; do
        if (($(date +%s) - t0 > limit)); then
            echo "queue_throughput: gave up after ${limit} s waiting for $what" >&2
            [ -s "$work/manager.err" ] && tail -20 "$work/manager.err" >&2
            exit 1
        fi
        sleep 0.05
    done
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

root=$work/AgentStore
"$bin/orchestrator" init --root "$root" >/dev/null
"$bin/orchestrator" --root "$root" add-queue tp --worker-count 10 --launcher direct >/dev/null
qdir=$root/Queues/tp/Jobs
# As root the manager runs jobs as the project owner's account: make that ourselves.
printf '{"id":"bench","name":"B","email":"b@x","permissions":"admin","unix_user":"%s"}\n' "$(id -un)" >"$root/users/bench.json"
mkdir -p "$root/projects/P"
printf '{"id":"P","directory":"/tmp","create_time":"2025-10-25T10:00:00Z","update_time":"2025-10-25T10:00:00Z","owner":"bench","default_queue":"tp"}\n' >"$root/projects/P/project.json"

write_jobs() { # COUNT PREFIX SLEEP
    local i
    for ((i = 0; i < $1; i++)); do
        printf '{"config":{"project":"P","working_directory":"/tmp","queue_time":"2025-10-25T10:00:00Z","jobtype":"noop","claude_command":"noop","claude_extra_args":[],"task_description":"bench","supporting_data":{"sleep_seconds":%s},"timeout_seconds":600},"runtime":{"status":"queued","start_time":null,"finish_time":null,"process_id":null,"llm_process_id":null,"error":null,"output":null}}\n' "$3" \
            >"$qdir/queued_jobs/.$2-$i.tmp"
        mv "$qdir/queued_jobs/.$2-$i.tmp" "$qdir/queued_jobs/$2-$i.json"
    done
}
count() { find "$qdir/$1" -maxdepth 1 -name '*.json' | wc -l; }
start_manager() {
    RUST_LOG=warn "$bin/queue-manager" --queue tp --root "$root" --bus none --launcher direct \
        --worker "$bin/agent-worker" >/dev/null 2>"$work/manager.err" &
    mgr=$!
}
stop_manager() { kill "$mgr"; wait "$mgr" 2>/dev/null || true; mgr=""; }

# --- 0. RSS of a freshly started manager on an empty queue -----------------------------------
start_manager
# The manager's first pass writes this machine's runtime (Queues/tp/runtime@<host>.json, its
# last_update set); queue.json is the user's and keeps last_update null.
first_pass() { grep -qs '"last_update": *"' "$root"/Queues/tp/runtime@*.json; }
wait_for 60 "the manager's first pass (runtime@<host>.json)" first_pass
fresh_rss=$(rss_kb "$mgr")
stop_manager

# --- 1. queue-manager ---------------------------------------------------------------------
write_jobs "$N" tp 0
t0=$(now_ms)
start_manager
all_finished() {
    [ "$(count failed_jobs)" -eq 0 ] || { echo "a job failed:" >&2; cat "$qdir"/failed_jobs/*.json | head -20 >&2; exit 1; }
    [ "$(count finished_jobs)" -ge "$N" ]
}
wait_for $((60 + N / 10)) "$N finished jobs" all_finished
t1=$(now_ms)
ours_ms=$((t1 - t0))
idle_rss=$(rss_kb "$mgr")

# --- 3. RSS with 10 running jobs ------------------------------------------------------------
write_jobs 10 hold 30
ten_running() { [ "$(count running_jobs)" -ge 10 ]; }
wait_for 60 "10 running jobs" ten_running
busy_rss=$(rss_kb "$mgr")
stop_manager
for f in "$qdir"/running_jobs/*.json; do
    pid=$(grep -o '"process_id": *[0-9]*' "$f" | grep -o '[0-9]*$')
    kill -- "-$pid" 2>/dev/null || true
done

# --- 2. pueue -------------------------------------------------------------------------------
mkdir -p "$work/pueue"
cat >"$work/pueue.yml" <<EOT
shared:
  pueue_directory: $work/pueue
  runtime_directory: $work/pueue
  use_unix_socket: true
  unix_socket_path: $work/pueue/pueue.socket
daemon:
  default_parallel_tasks: 10
EOT
export PUEUE_CONFIG_PATH=$work/pueue.yml
pueued >"$work/pueued.log" 2>&1 &
pueued_pid=$!
pueue_up() { pueue status >/dev/null 2>&1; }
wait_for 30 "pueued to answer" pueue_up
pueue_idle_rss=$(rss_kb "$pueued_pid")
pueue parallel 10 >/dev/null
pueue pause >/dev/null
for ((i = 0; i < N; i++)); do pueue add -- true >/dev/null; done
t0=$(now_ms)
pueue start >/dev/null
timeout $((60 + N / 10)) pueue wait >/dev/null
t1=$(now_ms)
pueue_ms=$((t1 - t0))
done_ok=$(pueue status --json | grep -o '"result":"Success"' | wc -l || true)

awk -v n="$N" -v o="$ours_ms" -v p="$pueue_ms" -v ok="$done_ok" \
    -v fr="$fresh_rss" -v ir="$idle_rss" -v br="$busy_rss" -v pr="$pueue_idle_rss" 'BEGIN {
    printf "throughput, %d no-op jobs, 10 in parallel:\n", n
    printf "  queue-manager + agent-worker: %6.2f s  %7.1f jobs/s\n", o / 1000, n / (o / 1000)
    printf "  pueue 4 (parallel 10, true):  %6.2f s  %7.1f jobs/s  (%d succeeded)\n", p / 1000, n / (p / 1000), ok
    printf "memory (VmRSS):\n"
    printf "  queue-manager idle, fresh:     %6.1f MiB\n", fr / 1024
    printf "  queue-manager idle, after N:   %6.1f MiB\n", ir / 1024
    printf "  queue-manager, 10 jobs running: %5.1f MiB\n", br / 1024
    printf "  pueued idle:                   %6.1f MiB\n", pr / 1024
}'
