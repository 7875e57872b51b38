#!/bin/bash
# benches/archive.sh: 100,000 finished jobs (40 days old, handled) + 100 recent: list-jobs (text, json) before/after
# archive, and list-jobs --archived; ORCHESTRATOR=target/release/orchestrator for figures;
# N=1000 bash benches/archive.sh: N old jobs instead of 100,000 (to try it quickly).
set -e
T=$(mktemp -d /tmp/s20bench.XXXX); export HOME=$T/home; mkdir -p $HOME
trap 'rm -rf "$T"' EXIT
B=${ORCHESTRATOR:-$(dirname "$0")/../target/debug/orchestrator}
$B --root $T/S init >/dev/null
python3 - "$T/S/Queues/poplar/Jobs/finished_jobs" "${N:-100000}" <<'PY'
import json,sys,datetime
d,n=sys.argv[1],int(sys.argv[2])
old=(datetime.datetime.utcnow()-datetime.timedelta(days=40)).strftime('%Y-%m-%dT%H:%M:%SZ')
new=datetime.datetime.utcnow().strftime('%Y-%m-%dT%H:%M:%SZ')
for i in range(n+100):
    t = old if i < n else new
    j={"config":{"project":"P","working_directory":"/tmp","queue_time":t,"jobtype":"noop","claude_command":"noop","claude_extra_args":[],"task_description":"t","supporting_data":{},"timeout_seconds":60},"runtime":{"status":"finished","start_time":t,"finish_time":t,"process_id":None,"llm_process_id":None,"error":None,"output":"x"*200,"handled":True}}
    open(f"{d}/job-{i:06d}.json","w").write(json.dumps(j))
PY
tm() { /usr/bin/time -f "%e s %M KB" "$@" >/dev/null; }
# Each listing twice: the first builds the job index (and, for JSON, its documents cache) in
# $HOME/.cache, the second is warm. The load average is printed (a shared machine skews it).
tm2() { echo "  first:"; tm "$@"; echo "  warm:"; tm "$@"; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "list-jobs before:"; tm2 $B --root $T/S list-jobs
echo "list-jobs --format json before:"; tm2 $B --root $T/S list-jobs --format json
echo "archive:"; /usr/bin/time -f "%e s %M KB" $B --root $T/S archive --older-than 30d | tail -1
echo "list-jobs after:"; tm2 $B --root $T/S list-jobs
echo "list-jobs --format json after:"; tm2 $B --root $T/S list-jobs --format json
echo "archive again:"; /usr/bin/time -f "%e s %M KB" $B --root $T/S archive --older-than 30d | tail -1
echo "list-jobs --archived:"; tm2 $B --root $T/S list-jobs --archived
echo "list-jobs --archived --format json:"; tm2 $B --root $T/S list-jobs --archived --format json
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf $T
