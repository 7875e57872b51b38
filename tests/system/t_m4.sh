#!/usr/bin/env bash
# t_m4: PRD §12 M4 (worker harness, no-op): agent-worker validates the job, runs the no-op,
# captures its output and moves the job to finished_jobs with status and timestamps.
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
# The queue is started the packaged way: its .path unit starts the manager when a job lands.
sys_check "systemctl start queue-manager@poplar.path" x systemctl start queue-manager@poplar.path

queue_job noop-1 "$(job_json TestProject noop noop 'Test job' 60 '{"sleep_seconds": 5}')"
sys_check "the path unit started queue-manager@poplar.service" sys_wait_until 30 "manager active" active queue-manager@poplar.service
sys_check "M4.3 the job runs" sys_wait_until 30 "running" in_state noop-1 running
sys_check "M4.3 the job moves to finished_jobs" sys_wait_until 60 "finished" in_state noop-1 finished
f=$(jobf noop-1 finished)
sys_expect_eq "M4.4 status finished" finished "$(jfield "$f" status)"
sys_expect_eq "M4.4 output captured" "No-op job completed successfully" "$(jfield "$f" output)"
st=$(jfield "$f" start_time)
ft=$(jfield "$f" finish_time)
sys_expect_match "M4.4 start_time set" '^[0-9]{4}-' "$st"
sys_expect_match "M4.4 finish_time set" '^[0-9]{4}-' "$ft"
s=$(x date -d "$st" +%s); e=$(x date -d "$ft" +%s)
sys_expect_match "M4.3 it ran about 5 s ($((e - s)) s)" '^([5-9]|1[0-9])$' "$((e - s))"
sys_expect_eq "exit_code 0" 0 "$(jfield "$f" exit_code)"
sys_check "the finished job validates" adm validate --kind job "$f"

# The harness validates the job: a job that breaks the schema fails, naming the field.
queue_job bad-1 "$(job_json TestProject noop noop 'bad' 60 '{}' | sed 's/"jobtype": "noop"/"jobtype": "bogus"/')"
sys_check "M4.1 an invalid job ends in failed_jobs" sys_wait_until 30 "failed" in_state bad-1 failed
err=$(jfield "$(jobf bad-1 failed)" error)
sys_expect_match "M4.1 ... with an error naming jobtype ($err)" 'jobtype' "$err"
sys_test_end
