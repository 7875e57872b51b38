#!/usr/bin/env bash
# t_m3: PRD §12 M3 (queue manager loop) with queue-manager@poplar.service and `noop` jobs in
# transient scopes: runtime reset on start, queued → running, a killed worker is detected,
# worker_count is enforced, a timeout kills the job.
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
m=$SYS_MACHINE
# shellcheck source=store.sh
. "$SYS_LIB_DIR/store.sh"
setup_users
setup_project TestProject /tmp/testproject
setup_queue poplar 2
# A stale runtime, as a crashed manager (or an older version) would leave it: the start
# resets it. queue.json is the user's config; the manager writes its runtime to this
# machine's Queues/<q>/runtime@<host>.json, and view-queue shows both.
cf=$AS/Queues/poplar/queue.json
qf=$AS/Queues/poplar/runtime@$(x orchestrator this-machine).json
x sed -i 's/"active_jobs": 0/"active_jobs": 7/' "$cf"
x sh -c "printf '{\"process_id\": 1, \"active_jobs\": 7, \"last_update\": null, \"queued_jobs\": 3}\n' >'$qf'"
x chown agentstore: "$qf" 2>/dev/null || true
config_before=$(x sha256sum "$cf")
svc=queue-manager@poplar.service

# Test 1: start; the runtime is reset and updated.
sys_check "M3.1 systemctl start $svc" x systemctl start $svc
pid=$(x systemctl show -p MainPID --value $svc)
qpid() { [ "$(jfield "$qf" process_id)" = "$pid" ]; }
sys_check "M3.1 runtime.process_id = the manager's pid ($pid)" sys_wait_until 20 "process_id" qpid
sys_expect_eq "M3.1 runtime.active_jobs reset" 0 "$(jfield "$qf" active_jobs)"
lu1=$(jfield "$qf" last_update)
sys_expect_match "M3.1 runtime.last_update set" '^[0-9]{4}-' "$lu1"

# Test 2-4: a job moves to running, with process_id, start_time, status.
queue_job test-job-001 "$(job_json TestProject noop noop 'Test job' 60 '{"sleep_seconds": 300}')"
sys_check "M3.3 test-job-001 moves to running_jobs" sys_wait_until 30 "running" in_state test-job-001 running
f=$(jobf test-job-001 running)
sys_expect_eq "M3.4 status running" running "$(jfield "$f" status)"
sys_expect_match "M3.4 start_time set" '^[0-9]{4}-' "$(jfield "$f" start_time)"
wpid=$(jfield "$f" process_id)
sys_expect_match "M3.4 process_id set" '^[0-9]+$' "$wpid"
sys_check "M3 the job runs in its scope" active agentstore-job-test-job-001.scope
# Test 5-6: kill the worker; the job fails with "Worker harness process died".
x kill -9 "$wpid" || true
sys_check "M3.6 the crashed job moves to failed_jobs" sys_wait_until 90 "failed" in_state test-job-001 failed
sys_expect_match "M3.6 error: Worker harness process died" 'Worker harness process died' "$(jfield "$(jobf test-job-001 failed)" error)"

# Test 7: five jobs, worker_count 2: never more than two run.
for i in 1 2 3 4 5; do
    queue_job "wc-$i" "$(job_json TestProject noop noop "job $i" 60 '{"sleep_seconds": 3}')"
done
maxrun=0
count_running() { x sh -c "ls $AS/Queues/poplar/Jobs/running_jobs/ | grep -c '^wc-' || true"; }
count_finished() { x sh -c "ls $AS/Queues/poplar/Jobs/finished_jobs/ | grep -c '^wc-' || true"; }
deadline=$((SECONDS + 90))
while [ "$(count_finished)" -lt 5 ] && [ $SECONDS -lt $deadline ]; do
    n=$(count_running)
    [ "$n" -gt "$maxrun" ] && maxrun=$n
    sleep 0.2 # sampling the running folder, not waiting for an event
done
sys_expect_eq "M3.7 all five finished" 5 "$(count_finished)"
sys_expect_eq "M3.7 at most worker_count=2 ran at once (observed max)" 2 "$maxrun"

# Test 8: a 5 s timeout kills the job.
queue_job to-1 "$(job_json TestProject noop noop 'long' 5 '{"sleep_seconds": 300}')"
sys_check "M3.8 the job runs" sys_wait_until 30 "running" in_state to-1 running
sys_check "M3.8 it fails at its timeout" sys_wait_until 40 "failed" in_state to-1 failed
sys_expect_match "M3.8 error names the timeout" 'Job timeout after [0-9]+s \(limit: 5s\)' "$(jfield "$(jobf to-1 failed)" error)"
sys_check "M3.8 its scope is gone" sys_wait_until 10 "scope gone" inactive agentstore-job-to-1.scope
# The runtime is updated when it changes (each loop that changed something).
lu2=$(jfield "$qf" last_update)
sys_expect_match "M3 runtime last_update moved on ($lu1 → $lu2)" '^[0-9]{4}-' "$lu2"
if [ "$lu1" != "$lu2" ]; then sys_pass "last_update changed"; else sys_fail "last_update did not change"; fi
sys_expect_eq "M3 queue.json (the user's config) was never rewritten" "$config_before" "$(x sha256sum "$cf")"
vq=$(x orchestrator --root "$AS" view-queue poplar --format json 2>&1 || true)
sys_expect_match "M3 view-queue shows the runtime (process_id $pid)" "\"process_id\": $pid" "$vq"
sys_test_end
