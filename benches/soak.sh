#!/usr/bin/env bash
# Soak (issue 9): DURATION seconds of ~10 concurrent jobs while both daemons are killed with
# SIGKILL at random moments and restarted; then drain and count what was lost, doubled or
# stuck. Not a CI test: it runs for half an hour by default.
#
#   benches/soak.sh [DURATION_SECONDS]     (default 1800; release binaries from
#                                          $AGENTSTORE_BIN_DIR, default target/release;
#                                          DRAIN=SECONDS to wait for the store to settle,
#                                          default 180)
#
# Every message is a research-code command for a no-op job sleeping 1–3 s, written into the
# inbox at a rate that keeps about ten jobs running (worker_count 10, direct launcher, no bus).
# A respawn loop restarts each daemon when it dies; a killer picks one of the two every 2–10 s.
# After the writer stops, the script waits (up to 180 s) for the store to settle and reports:
#   lost      messages with neither an answer in outbox/ nor a job anywhere
#   doubled   correlation ids with more than one job (distinct job files), or more than one
#             answer
#   stuck     jobs still in queued_jobs/ or running_jobs/ after the drain
#   failed    jobs in failed_jobs/, by reason. Only the daemons are killed and every job is
#             an innocent no-op, so each failed job was failed wrongly (a kill mistaken for a
#             poison document, a worker judged dead that was not); the exit status counts them
#   load      the 1-minute load average sampled every 30 s (min/mean/max)
set -euo pipefail
DURATION=${1:-1800}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${AGENTSTORE_BIN_DIR:-$repo/target/release}
for b in orchestrator orchestratord queue-manager agent-worker; do
    [ -x "$bin/$b" ] || { echo "missing $bin/$b: cargo build --release --bins" >&2; exit 1; }
done

work=$(mktemp -d /tmp/agentstore-soak.XXXXXX)
root=$work/AgentStore
pids=()
cleanup() {
    touch "$work/stop"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    pkill -9 -f "$root" 2>/dev/null || true
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then echo "store kept: $root"; else rm -rf "$work"; fi
}
trap cleanup EXIT

"$bin/orchestrator" init --root "$root" >/dev/null
"$bin/orchestrator" --root "$root" add-queue soak --worker-count 10 --launcher direct >/dev/null
printf '{"id":"soak","name":"Soak","email":"s@x","permissions":"admin","unix_user":"%s"}\n' "$(id -un)" >"$root/users/soak.json"
mkdir -p "$root/projects/P" "$work/proj"
printf '{"id":"P","directory":"%s","create_time":"2025-10-25T10:00:00Z","update_time":"2025-10-25T10:00:00Z","owner":"soak","default_queue":"soak"}\n' "$work/proj" >"$root/projects/P/project.json"
jobs=$root/Queues/soak/Jobs

# Respawn loops: each daemon comes back 0.2 s after it dies, until $work/stop exists.
respawn() { # NAME CMD...
    local name=$1
    shift
    while [ ! -e "$work/stop" ]; do
        RUST_LOG=warn "$@" >>"$work/$name.out" 2>&1 &
        echo $! >"$work/$name.pid"
        wait $! || true
        sleep 0.2
    done
}
respawn orchestratord "$bin/orchestratord" --root "$root" --bus none --idle-exit 0 &
pids+=($!)
respawn queue-manager "$bin/queue-manager" --queue soak --root "$root" --bus none \
    --launcher direct --worker "$bin/agent-worker" &
pids+=($!)

killer() {
    while [ ! -e "$work/stop_killing" ]; do
        sleep "$((RANDOM % 9 + 2))"
        local which=orchestratord
        [ $((RANDOM % 2)) -eq 0 ] && which=queue-manager
        local p
        p=$(cat "$work/$which.pid" 2>/dev/null || true)
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null && echo "$which" >>"$work/kills"
    done
}
killer &
pids+=($!)

# Load sampler: the 1-minute load average every 30 s (the report gives min/mean/max).
(while [ ! -e "$work/stop" ]; do cut -d' ' -f1 /proc/loadavg >>"$work/load"; sleep 30; done) &
pids+=($!)

# Writer: one message every 0.2 s (jobs of 1–3 s at 10 workers keep ~10 busy).
n=0
end=$(($(date +%s) + DURATION))
while [ "$(date +%s)" -lt "$end" ]; do
    cid=$(printf 'soak-%06d' "$n")
    printf '{"correlation_id":"%s","source":"user","user":"soak","project":"P","queue_time":"%s","processed_time":null,"command":"research-code","content":{"jobtype":"noop","supporting_data":{"sleep_seconds":%d}},"status":"queued","error":null}\n' \
        "$cid" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((RANDOM % 3 + 1))" >"$root/messaging/inbox/.$cid.tmp"
    mv "$root/messaging/inbox/.$cid.tmp" "$root/messaging/inbox/$cid.json"
    n=$((n + 1))
    sleep 0.2
done
touch "$work/stop_killing"
echo "wrote $n messages in ${DURATION}s; draining"

count() { find "$1" -maxdepth 1 -name '*.json' ! -name '.*' | wc -l; }
settled() {
    [ "$(count "$root/messaging/inbox")" -eq 0 ] &&
        [ "$(count "$jobs/queued_jobs")" -eq 0 ] &&
        [ "$(count "$jobs/running_jobs")" -eq 0 ]
}
deadline=$(($(date +%s) + ${DRAIN:-180}))
until settled || [ "$(date +%s)" -ge "$deadline" ]; do sleep 1; done

# Tally by correlation id.
tally=$work/tally
: >"$tally"
for d in queued_jobs running_jobs finished_jobs failed_jobs; do
    for f in "$jobs/$d"/*.json; do
        [ -e "$f" ] || continue
        # The job id (file name) too: a job moving between folders while this runs (a drain
        # that has not settled) is seen twice under one id, which is not a double.
        jq -r --arg d "$d" --arg f "$(basename "$f" .json)" '"job \(.config.correlation_id) \($d) \($f)"' "$f" >>"$tally" 2>/dev/null || echo "job ? $d ?" >>"$tally"
    done
done
for f in "$root/messaging/outbox"/*.json; do
    [ -e "$f" ] || continue
    jq -r '"answer \(.correlation_id) \(.status)"' "$f" >>"$tally" 2>/dev/null || echo "answer ? bad" >>"$tally"
done
lost=0
doubled=0
for ((i = 0; i < n; i++)); do
    cid=$(printf 'soak-%06d' "$i")
    j=$(grep "^job $cid " "$tally" | cut -d' ' -f4 | sort -u | wc -l || true)
    a=$(grep -c "^answer $cid " "$tally" || true)
    [ "$j" -eq 0 ] && [ "$a" -eq 0 ] && lost=$((lost + 1))
    { [ "$j" -gt 1 ] || [ "$a" -gt 1 ]; } && doubled=$((doubled + 1))
done
stuck=$(($(count "$jobs/queued_jobs") + $(count "$jobs/running_jobs")))
kills_o=$(grep -c orchestratord "$work/kills" 2>/dev/null || true)
kills_q=$(grep -c queue-manager "$work/kills" 2>/dev/null || true)
load=$(awk 'NR==1{min=$1;max=$1} {s+=$1; if($1<min)min=$1; if($1>max)max=$1} END{if(NR) printf "min %.1f mean %.1f max %.1f", min, s/NR, max}' "$work/load" 2>/dev/null || true)
echo
echo "soak: ${DURATION}s, $n messages, SIGKILLs: orchestratord $kills_o, queue-manager $kills_q; load $load"
# Every soak job is an innocent no-op: any failed job was failed wrongly (by a kill).
printf '  %-10s %s\n' lost "$lost" doubled "$doubled" stuck "$stuck" \
    finished "$(count "$jobs/finished_jobs")" failed "$(count "$jobs/failed_jobs") (all wrongly: every job is an innocent no-op)"
if [ "$(count "$jobs/failed_jobs")" -gt 0 ]; then
    echo "  failure reasons:"
    jq -r '.runtime.error // "?"' "$jobs/failed_jobs"/*.json | sort | uniq -c | sed 's/^/    /'
fi
[ "$lost" -eq 0 ] && [ "$doubled" -eq 0 ] && [ "$stuck" -eq 0 ] && [ "$(count "$jobs/failed_jobs")" -eq 0 ]
