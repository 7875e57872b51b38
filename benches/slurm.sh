#!/usr/bin/env bash
# benches/slurm.sh — a Slurm queue against raw sbatch on a machine with a working Slurm
# (slurmctld + slurmd + munge answering; e.g. the single-node setup of tests/system/t_slurm.sh).
# Run as root with the binaries built: BIN=target/release bash benches/slurm.sh [N] [POLL]
#   1. submit → running, one job at a time (10 each): raw `sbatch` vs our queue
#   2. N no-op jobs (default 200) at once: throughput and p50/p99 submit → running
#   3. the manager's Slurm command calls per minute with 100 jobs pending (node drained)
# The no-op jobs sleep 0 s (a no-op job without sleep_seconds sleeps 5 s: stop 22's 0.43x
# came from that). Both sides are measured the same way: "submitted" is this script's clock just before
# `sbatch` (raw) or just before the job file appears in queued_jobs/ (ours); "running" is the
# clock read by the batch step's FIRST line on the compute node (raw: the --wrap; ours: a
# wrapper the manager runs as its --worker, which reads the clock and then runs agent-worker);
# "done" is the clock read by the batch step's LAST line. Same host, same clock, ms.
# (Slurm's StartTime has 1 s resolution and our runtime.start_time is the submission, so
# neither is used.) POLL: the queue's slurm.poll_seconds (default 5).
# Prints one line per figure. Leaves nothing behind but its temp dir (removed at exit).
set -euo pipefail
BIN=${BIN:-target/release}
BIN=$(cd "$BIN" && pwd)
N=${1:-200}
POLL=${2:-5}
T=$(mktemp -d)
MGR=
NODE=$(sinfo -h -N -o %N | head -1)
trap 'kill "$MGR" 2>/dev/null || true; scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true; scancel --name=bench-raw >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
R=$T/store
O() { "$BIN/orchestrator" --root "$R" "$@"; }
O init >/dev/null
O add-user bench --name B --email b@x --permissions admin --unix-user nobody >/dev/null
mkdir -p "$T/work" "$T/sub" "$T/start" "$T/end" && chmod 777 "$T" "$T/work" "$T/start" "$T/end"
O add-project P --directory "$T/work" --owner bench >/dev/null
O add-queue q --worker-count 2 --launcher slurm >/dev/null
python3 - "$R/Queues/q/queue.json" "$POLL" <<'P'
import json, sys
d = json.load(open(sys.argv[1])); d['config']['slurm'] = {'poll_seconds': int(sys.argv[2])}
json.dump(d, open(sys.argv[1], 'w'))
P
# Every Slurm command the manager runs goes through a counting shim.
mkdir -p "$T/shim"
for c in sbatch squeue scancel scontrol; do
    printf '#!/bin/sh\necho %s >>%s/calls\nexec %s "$@"\n' "$c" "$T" "$(command -v $c)" >"$T/shim/$c"
    chmod +x "$T/shim/$c"
done
# The batch step of ours: clock first, then the real worker, then the clock again.
cat >"$T/worker" <<W
#!/bin/sh
date +%s%3N >"$T/start/\$SLURM_JOB_NAME"
"$BIN/agent-worker" "\$@"
rc=\$?
date +%s%3N >"$T/end/\$SLURM_JOB_NAME"
exit \$rc
W
chmod 755 "$T/worker"
PATH=$T/shim:$PATH "$BIN/queue-manager" --queue q --root "$R" --bus none --idle-exit 0 --worker "$T/worker" >"$T/mgr.log" 2>&1 &
MGR=$!
now() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }
ms() { date +%s%3N; }
job() { # ID: submitted now
    ms >"$T/sub/agentstore-$1"
    printf '{"config": {"project": "P", "working_directory": "/tmp", "queue_time": "%s", "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [], "task_description": "b", "supporting_data": {"sleep_seconds": 0}, "timeout_seconds": 60}, "runtime": {"status": "queued", "start_time": null, "finish_time": null, "process_id": null, "llm_process_id": null, "error": null, "output": null}}' "$(now)" >"$R/Queues/q/Jobs/queued_jobs/.$1.tmp"
    mv "$R/Queues/q/Jobs/queued_jobs/.$1.tmp" "$R/Queues/q/Jobs/queued_jobs/$1.json"
}
raw() { # NAME: submitted now
    ms >"$T/sub/$1"
    sbatch --parsable --job-name=bench-raw --output=/dev/null \
        --wrap "date +%s%3N >$T/start/$1; true; date +%s%3N >$T/end/$1" >/dev/null
}
ended() { find "$T/end" -name "$1*" | wc -l; }
wait_ended() { while [ "$(ended "$1")" -lt "$2" ]; do sleep 0.1; done; }
# batch step run time (first line → last line) of every job named PREFIX*, ms
runs() { for f in "$T/start/$1"*; do n=$(basename "$f"); echo $(($(cat "$T/end/$n") - $(cat "$f"))); done; }
# submit→running of every job named PREFIX*, in ms, one per line
latencies() { for f in "$T/sub/$1"*; do n=$(basename "$f"); echo $(($(cat "$T/start/$n") - $(cat "$f"))); done; }
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; print a[i]}'; }
span() { # PREFIX: first submission → last end, ms
    echo $(($(cat "$T/end/$1"* | sort -n | tail -1) - $(cat "$T/sub/$1"* | sort -n | head -1)))
}
failed() { find "$R/Queues/q/Jobs/failed_jobs" -name "$1*.json" | wc -l; }
echo "host $(hostname), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg); poll_seconds $POLL"

# 1. submit → running, one at a time
for i in $(seq 1 10); do raw "raw-lat$i"; wait_ended "raw-lat$i" 1; done
for i in $(seq 1 10); do job "lat$i"; wait_ended "agentstore-lat$i" 1; done
echo "1 job at a time (10 each), submit->running p50: raw sbatch $(latencies raw-lat | pct 50) ms, through the queue $(latencies agentstore-lat | pct 50) ms"

# 2. N at once
for i in $(seq 1 "$N"); do raw "raw-tp$i"; done
wait_ended raw-tp "$N"
rawspan=$(span raw-tp)
for i in $(seq 1 "$N"); do job "tp$i"; done
wait_ended agentstore-tp "$N"
ourspan=$(span agentstore-tp)
# the worker's finished file follows its last line at once; wait for the manager to settle
while [ "$(find "$R/Queues/q/Jobs/finished_jobs" "$R/Queues/q/Jobs/failed_jobs" -name 'tp*.json' | wc -l)" -lt "$N" ]; do sleep 0.2; done
settled=$(($(ms) - $(cat "$T/sub/agentstore-tp"* | sort -n | head -1)))
echo "$N no-op jobs at once: raw sbatch $rawspan ms, through the queue $ourspan ms (first submit -> last batch step ends); throughput ours/raw $(awk -v a="$rawspan" -v b="$ourspan" 'BEGIN {printf "%.2f", a / b}')x; $(failed tp) failed"
echo "  first submit -> all $N settled by the manager: $settled ms; batch step run p50: raw $(runs raw-tp | pct 50) ms, ours $(runs agentstore-tp | pct 50) ms"
echo "  submit->running p50/p99: raw $(latencies raw-tp | pct 50)/$(latencies raw-tp | pct 99) ms, ours $(latencies agentstore-tp | pct 50)/$(latencies agentstore-tp | pct 99) ms"
echo "  load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# 3. calls per minute with 100 pending
scontrol update nodename="$NODE" state=drain reason=bench
for i in $(seq 1 100); do job "pd$i"; done
while [ "$(squeue -h -t PD -o %j | grep -c '^agentstore-pd')" -lt 100 ]; do sleep 0.5; done
before=$(wc -l <"$T/calls"); sleep 60; after=$(wc -l <"$T/calls")
echo "Slurm command calls in 60 s with 100 jobs pending: $((after - before)) ($(tail -n +"$((before + 1))" "$T/calls" | sort | uniq -c | tr '\n' ' '))"
scontrol update nodename="$NODE" state=resume
