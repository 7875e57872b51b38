#!/usr/bin/env bash
# benches/slurm.sh — a Slurm queue against raw sbatch on a machine with a working Slurm
# (slurmctld + slurmd + munge answering; e.g. the single-node setup of tests/system/t_slurm.sh).
# Run as root with the binaries built: BIN=target/release bash benches/slurm.sh [N]
#   1. submit → running p50: our queue (job file written → Slurm StartTime) vs `sbatch --wrap true`
#   2. N no-op jobs (default 200): wall time through our queue vs N raw `sbatch --wrap true`
#   3. the manager's Slurm command calls per minute with 100 jobs pending (node drained)
# Prints one line per figure. Leaves nothing behind but its temp dir (removed at exit).
set -euo pipefail
BIN=${BIN:-target/release}
BIN=$(cd "$BIN" && pwd)
N=${1:-200}
T=$(mktemp -d)
trap 'kill "$MGR" 2>/dev/null || true; scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true; scancel --name=bench-raw >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
MGR=
NODE=$(sinfo -h -N -o %N | head -1)
R=$T/store
O() { "$BIN/orchestrator" --root "$R" "$@"; }
O init >/dev/null
O add-user bench --name B --email b@x --permissions admin --unix-user nobody >/dev/null
mkdir -p "$T/work" && chmod 777 "$T" "$T/work"
O add-project P --directory "$T/work" --owner bench >/dev/null
O add-queue q --worker-count 2 --launcher slurm >/dev/null
python3 - "$R/Queues/q/queue.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1])); d['config']['slurm'] = {'poll_seconds': 5}
json.dump(d, open(sys.argv[1], 'w'))
P
# Every Slurm command the manager runs goes through a counting shim.
mkdir -p "$T/shim"
for c in sbatch squeue scancel scontrol; do
    printf '#!/bin/sh\necho %s >>%s/calls\nexec %s "$@"\n' "$c" "$T" "$(command -v $c)" >"$T/shim/$c"
    chmod +x "$T/shim/$c"
done
PATH=$T/shim:$PATH "$BIN/queue-manager" --queue q --root "$R" --bus none --idle-exit 0 --worker "$BIN/agent-worker" >"$T/mgr.log" 2>&1 &
MGR=$!
now() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }
job() { # ID
    printf '{"config": {"project": "P", "working_directory": "/tmp", "queue_time": "%s", "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [], "task_description": "b", "supporting_data": {}, "timeout_seconds": 60}, "runtime": {"status": "queued", "start_time": null, "finish_time": null, "process_id": null, "llm_process_id": null, "error": null, "output": null}}' "$(now)" >"$R/Queues/q/Jobs/queued_jobs/.$1.tmp"
    mv "$R/Queues/q/Jobs/queued_jobs/.$1.tmp" "$R/Queues/q/Jobs/queued_jobs/$1.json"
}
done_count() { find "$R/Queues/q/Jobs/finished_jobs" "$R/Queues/q/Jobs/failed_jobs" -name "$1*.json" | wc -l; }
wait_done() { while [ "$(done_count "$1")" -lt "$2" ]; do sleep 0.2; done; }
p50() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
start_of() { scontrol show job -o "$1" | grep -o 'StartTime=[^ ]*' | cut -d= -f2; }
ms() { date -d "$1" +%s%3N; }

# 1. submit → running, one at a time (10 each)
for i in $(seq 1 10); do
    t0=$(date +%s%3N); id=$(sbatch --parsable --job-name=bench-raw --output=/dev/null --wrap true)
    while ! start_of "$id" | grep -qv Unknown; do sleep 0.1; done
    echo $(( $(ms "$(start_of "$id")") - t0 ))
done | p50 >"$T/raw50"
for i in $(seq 1 10); do
    t0=$(date +%s%3N); job "lat$i"; wait_done "lat$i" 1
    sid=$(grep -o '"slurm_job_id": *"[0-9]*"' "$R/Queues/q/Jobs/finished_jobs/lat$i.json" | grep -o '[0-9]*')
    echo $(( $(ms "$(start_of "$sid")") - t0 ))
done | p50 >"$T/q50"
echo "submit->running p50: raw sbatch $(cat "$T/raw50") ms, through the queue $(cat "$T/q50") ms (Slurm StartTime has 1 s resolution)"

# 2. throughput
t0=$(date +%s%3N)
for i in $(seq 1 "$N"); do sbatch --parsable --job-name=bench-raw --output=/dev/null --wrap true >/dev/null; done
while [ "$(squeue -h -n bench-raw -t PD,R,CG | wc -l)" -gt 0 ]; do sleep 0.5; done
raw=$(( $(date +%s%3N) - t0 ))
t0=$(date +%s%3N)
for i in $(seq 1 "$N"); do job "tp$i"; done
wait_done tp "$N"
ours=$(( $(date +%s%3N) - t0 ))
echo "$N no-op jobs: raw sbatch --wrap true $raw ms, through the queue $ours ms ($(grep -c . "$R/Queues/q/Jobs/failed_jobs" -r 2>/dev/null || echo 0) failed)"

# 3. calls per minute with 100 pending
scontrol update nodename="$NODE" state=drain reason=bench
for i in $(seq 1 100); do job "pd$i"; done
while [ "$(squeue -h -t PD -o %j | grep -c '^agentstore-pd')" -lt 100 ]; do sleep 0.5; done
before=$(wc -l <"$T/calls"); sleep 60; after=$(wc -l <"$T/calls")
echo "Slurm command calls in 60 s with 100 jobs pending: $((after - before)) ($(tail -n +"$((before + 1))" "$T/calls" | sort | uniq -c | tr '\n' ' '))"
scontrol update nodename="$NODE" state=resume
