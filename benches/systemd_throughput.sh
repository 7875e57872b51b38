#!/usr/bin/env bash
# Benchmark (issue 18): the queue manager's systemd launcher under a REAL systemd, against
# systemd-run in the same container (tests/system/lib.sh boots it; needs root).
#   1. N no-op jobs (default 300) at worker_count 10, all queued before the manager starts:
#      wall time until all are in finished_jobs/, against `xargs -P10 systemd-run --scope true`
#      for the same N (each in its own transient scope); $ROUNDS (default 3) rounds of each,
#      alternating, medians compared;
#   2. latency, one at a time (default 30 samples): job file renamed into queued_jobs/ →
#      the file in running_jobs/ (the worker is in its scope), against `systemd-run --scope`
#      start → its command running. p50 and p90 of each, and the ratios.
# Usage: [ROUNDS=3] bash benches/systemd_throughput.sh [N] [SAMPLES]
# Binaries from $AGENTSTORE_BIN_DIR (default target/release; `cargo build --release --bins`).
# The numbers are printed with the load average (a shared machine skews them).
set -euo pipefail
N=${1:-300}
S=${2:-30}
R=${ROUNDS:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${AGENTSTORE_BIN_DIR:-$repo/target/release}
# shellcheck source=../tests/system/lib.sh
. "$repo/tests/system/lib.sh"
for b in queue-manager agent-worker orchestrator; do
    [ -x "$bin/$b" ] || sys_die "missing $bin/$b: cargo build --release --bins"
done
sys_preflight
m=bench-sdtp
sys_boot "$m" >/dev/null
for b in queue-manager agent-worker orchestrator; do
    sys_copy_in "$m" "$bin/$b" "/usr/bin/$b"
done
for u in service path timer; do
    sys_copy_in "$m" "$repo/systemd/queue-manager@.$u" "/etc/systemd/system/queue-manager@.$u"
done
sys_copy_in "$m" "$repo/dbus/org.agentstore.Queue.conf" /usr/share/dbus-1/system.d/org.agentstore.Queue.conf
store=/var/lib/agentstore
q=tp
sys_exec "$m" mkdir -p /etc/agentstore
printf 'agent_store_root: "%s"\nqueues_default: "%s"\n' "$store" "$q" |
    sys_exec "$m" sh -c 'cat >/etc/agentstore/config.yaml'
sys_exec "$m" systemctl daemon-reload
sys_exec "$m" systemctl reload dbus 2>/dev/null || true
sys_sh "$m" "id jobuser >/dev/null 2>&1 || useradd --create-home jobuser"
sys_sh "$m" "orchestrator init --root $store >/dev/null"
sys_sh "$m" "orchestrator --root $store add-queue $q --worker-count 10 --launcher systemd >/dev/null"
sys_sh "$m" "orchestrator --root $store add-user bench --name B --email b@x --permissions admin --unix-user jobuser >/dev/null"
sys_sh "$m" "mkdir -p $store/projects/P && printf '%s' '{\"id\":\"P\",\"directory\":\"/tmp\",\"create_time\":\"2025-10-25T10:00:00Z\",\"update_time\":\"2025-10-25T10:00:00Z\",\"owner\":\"bench\",\"default_queue\":\"$q\"}' >$store/projects/P/project.json"

# Everything timed runs inside the container, in one shell, so nsenter's cost is not counted.
cat >"$SYS_STATE_DIR/bench.sh" <<'EOS'
set -euo pipefail
store=/var/lib/agentstore; q=tp; N=$1; S=$2; R=$3
jd=$store/Queues/$q/Jobs
now_ns() { date +%s%N; }
job() { printf '{"config":{"project":"P","working_directory":"/tmp","queue_time":"2025-10-25T10:00:00Z","jobtype":"noop","claude_command":"noop","claude_extra_args":[],"task_description":"bench","supporting_data":{"sleep_seconds":%s},"timeout_seconds":600},"runtime":{"status":"queued","start_time":null,"finish_time":null,"process_id":null,"llm_process_id":null,"error":null,"output":null}}\n' "$1"; }
# The wait below runs beside our jobs only (the peer's xargs needs none): it forks nothing,
# so the CPU it takes from the 2 cores stays small (a find | wc and a sleep every 50 ms took
# ~8% of the machine while ours ran).
shopt -s nullglob
count() { local f=("$jd/$1"/*.json); n=${#f[@]}; }
nap_fd() { rm -f /tmp/nap.fifo; mkfifo /tmp/nap.fifo; exec 9<>/tmp/nap.fifo; }
nap() { read -r -t 0.05 -u 9 _ || true; }
nap_fd
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int((NR-1)*p/100)+1; printf "%.1f", a[i]/1e6}'; }

# 1. throughput: R rounds, each the peer then ours, on a settled machine (1 s apart); the
# medians are compared. Our manager is stopped while the peer runs (it would otherwise
# receive every scope signal of the peer's units and take CPU from it) and started for its
# own run (its start-up counts in our time).
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
: >/tmp/tp_ours; : >/tmp/tp_peer
for ((r = 0; r < R; r++)); do
    systemctl stop "queue-manager@$q.service" 2>/dev/null || true
    rm -f "$jd"/finished_jobs/*.json
    for ((i = 0; i < N; i++)); do
        job 0 >"$jd/queued_jobs/.t$i.tmp"; mv "$jd/queued_jobs/.t$i.tmp" "$jd/queued_jobs/t$r-$i.json"
    done
    sleep 1
    t0=$(now_ns)
    seq "$N" | xargs -P10 -I{} systemd-run --scope -q --unit "peer-$r-{}" true
    t1=$(now_ns)
    echo $(( (t1 - t0) / 1000000 )) >>/tmp/tp_peer
    sleep 1
    t0=$(now_ns)
    systemctl start "queue-manager@$q.service"
    while count finished_jobs; [ "$n" -lt "$N" ]; do
        count failed_jobs
        [ "$n" -eq 0 ] || { echo "a job failed:"; cat "$jd"/failed_jobs/*.json | head -c 2000; exit 1; }
        nap
    done
    t1=$(now_ns)
    echo $(( (t1 - t0) / 1000000 )) >>/tmp/tp_ours
done
echo "throughput_rounds_ms ours $(tr '\n' ' ' </tmp/tp_ours)peer $(tr '\n' ' ' </tmp/tp_peer)"
echo "throughput_ms $(med </tmp/tp_ours) $(med </tmp/tp_peer)"

# 2. latency, one job at a time (the manager is up and idle)
: >/tmp/lat_ours; : >/tmp/lat_peer
for ((i = 0; i < S; i++)); do
    job 1 >"$jd/queued_jobs/.l$i.tmp"
    t0=$(now_ns)
    mv "$jd/queued_jobs/.l$i.tmp" "$jd/queued_jobs/l$i.json"
    until [ -e "$jd/running_jobs/l$i.json" ] || [ -e "$jd/finished_jobs/l$i.json" ]; do :; done
    t1=$(now_ns)
    echo $((t1 - t0)) >>/tmp/lat_ours
    until [ -e "$jd/finished_jobs/l$i.json" ]; do sleep 0.05; done
    t0=$(now_ns)
    t1=$(systemd-run --scope -q --unit "peerlat-$i" date +%s%N)
    echo $((t1 - t0)) >>/tmp/lat_peer
done
echo "latency_p50_ms $(pct 50 </tmp/lat_ours) $(pct 50 </tmp/lat_peer)"
echo "latency_p90_ms $(pct 90 </tmp/lat_ours) $(pct 90 </tmp/lat_peer)"
EOS
sys_copy_in "$m" "$SYS_STATE_DIR/bench.sh" /root/bench.sh
load0=$(cut -d' ' -f1 /proc/loadavg)
out=$(sys_exec "$m" bash /root/bench.sh "$N" "$S" "$R")
load1=$(cut -d' ' -f1 /proc/loadavg)
echo "$out"
read -r _ ours peer < <(grep '^throughput_ms' <<<"$out")
read -r _ l50 p50 < <(grep '^latency_p50_ms' <<<"$out")
read -r _ l90 p90 < <(grep '^latency_p90_ms' <<<"$out")
echo
echo "== systemd in a container ($N no-op jobs, worker_count 10, median of $R rounds; $S latency samples; load $load0 → $load1)"
printf '%-58s %10s %10s %8s\n' measure agentstore peer ratio
printf '%-58s %10s %10s %8s\n' "$N jobs wall time (ms) [peer: xargs -P10 systemd-run --scope]" "$ours" "$peer" \
    "$(awk -v a="$ours" -v b="$peer" 'BEGIN { printf "%.2f×", b / a }')"
printf '%-58s %10s %10s %8s\n' "job file → running p50 (ms) [peer: systemd-run --scope]" "$l50" "$p50" \
    "$(awk -v a="$l50" -v b="$p50" 'BEGIN { printf "%.2f×", a / b }')"
printf '%-58s %10s %10s %8s\n' "job file → running p90 (ms)" "$l90" "$p90" \
    "$(awk -v a="$l90" -v b="$p90" 'BEGIN { printf "%.2f×", a / b }')"
echo "(throughput ratio = peer time / our time, goal ≥ 0.9×; latency ratio = ours / peer, goal ≤ 1.15×)"
