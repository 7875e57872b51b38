#!/usr/bin/env bash
# t_watchdog: systemd's watchdog (WatchdogSec=, issue 34) restarts a daemon whose main loop is
# wedged, and the work goes on.
#   - the packaged units ask for it (WatchdogUSec=2min on both daemons);
#   - idle daemons keep it fed: with WatchdogSec=6s (a drop-in, for speed) neither is aborted
#     over several intervals with nothing to do (the loop wakes itself in time);
#   - the wedge: a process holds an exclusive flock on this machine's events file (what a hung
#     writer or a stuck network-filesystem lock does). The orchestrator answers a message and
#     blocks recording it; the queue manager blocks recording a job's start. Their other
#     threads (D-Bus, the lock's heartbeat) go on, so only a watchdog fed from the loop sees
#     it: systemd aborts both (Result=watchdog) and restarts them;
#   - the lock let go: the restarted daemons finish the work: the message has its one answer
#     and its one `message_answered` event (the crash came between the answer and its record:
#     the record is completed on restart), the job runs to the end, new messages and jobs go
#     through.
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
orch=agentstore-orchestrator.service
qm=queue-manager@poplar.service

# What the package ships (systemctl show reports WatchdogUSec=infinity for a unit not started
# yet on systemd 252, so the unit file itself is read).
wd() { x systemctl cat "$1" 2>/dev/null | sed -n 's/^WatchdogSec=//p' | tail -1; }
sys_expect_eq "the packaged orchestrator unit has WatchdogSec=2min" 2min "$(wd $orch)"
sys_expect_eq "the packaged queue-manager unit has WatchdogSec=2min" 2min "$(wd $qm)"

# Never idle out during the test (an idle exit is not what is tested); a short watchdog.
x sed -i 's/idle_exit_seconds: .*/idle_exit_seconds: 0/' "$AS/config.yaml"
for u in $orch $qm; do
    x mkdir -p "/etc/systemd/system/$u.d"
    printf '[Service]\nWatchdogSec=6s\n' | x sh -c "cat >/etc/systemd/system/$u.d/watchdog.conf"
done
x systemctl daemon-reload
sys_check "orchestrator starts" x systemctl start $orch
sys_check "queue manager starts" x systemctl start $qm
sys_expect_eq "the drop-in's interval is in force" 6s "$(x systemctl show -p WatchdogUSec --value $orch)"
message wd-001 list-projects | put "$AS/messaging/inbox/wd-001.json"
sys_check "a first message is answered" sys_wait_until 60 "wd-001 answered" x test -f "$AS/messaging/outbox/wd-001.json"

restarts() { x systemctl show -p NRestarts --value "$1"; }
pid_of() { x systemctl show -p MainPID --value "$1"; }
o_pid=$(pid_of $orch)
q_pid=$(pid_of $qm)
# Idle for four intervals: a loop that only pinged on work would be aborted meanwhile. (This
# waits for time to pass on purpose: what is checked is that nothing happens.)
sleep 24
sys_expect_eq "idle orchestrator not aborted (same pid, 0 restarts)" "$o_pid 0" "$(pid_of $orch) $(restarts $orch)"
sys_expect_eq "idle queue manager not aborted (same pid, 0 restarts)" "$q_pid 0" "$(pid_of $qm) $(restarts $qm)"

# --- the wedge ------------------------------------------------------------------------------
ev=$(x sh -c "ls $AS/logs/events-*@*.jsonl | head -1")
[ -n "$ev" ] || sys_die "no per-machine events file under $AS/logs"
sys_log "holding an exclusive flock on $ev"
x systemd-run --unit wedge --property=Type=exec flock -x "$ev" sleep infinity >/dev/null
sys_check "the wedge holds the lock" sys_wait_until 20 "flock held" x sh -c "! flock -xn '$ev' true"
message wd-002 research-code TestProject '{"task": "watchdog", "jobtype": "noop", "supporting_data": {"sleep_seconds": 0}}' |
    put "$AS/messaging/inbox/wd-002.json"
queue_job wd-job-1 "$(job_json TestProject noop noop 'wedged start' 120 '{"sleep_seconds": 1}')"
aborted() { [ "$(restarts "$1")" -ge 1 ] || [ "$(x systemctl show -p Result --value "$1")" = watchdog ]; }
sys_check "systemd aborts the wedged orchestrator (watchdog)" sys_wait_until 90 "orchestrator watchdog" aborted $orch
sys_check "systemd aborts the wedged queue manager (watchdog)" sys_wait_until 90 "queue manager watchdog" aborted $qm
j=$(x journalctl --no-pager -o cat -u $orch -u $qm 2>&1 | grep -ci 'watchdog timeout' || true)
sys_expect_match "the journal says why: watchdog timeout" '^[1-9]' "$j"
x test -f "$AS/messaging/outbox/wd-002.json" && sys_log "wd-002 was answered before the wedge: its record is what the restart completes"

# --- the lock let go: the work goes on ---------------------------------------------------------
x systemctl stop wedge
sys_check "orchestrator active again" sys_wait_until 60 "$orch active" active $orch
sys_check "queue manager active again" sys_wait_until 60 "$qm active" active $qm
sys_check "wd-002 answered and moved out of the inbox" sys_wait_until 60 "wd-002 processed" \
    x sh -c "test -f $AS/messaging/outbox/wd-002.json && ! test -e $AS/messaging/inbox/wd-002.json"
answered() { x sh -c "cat $AS/logs/events-*.jsonl | grep '\"message_answered\"' | grep -c '\"correlation_id\":\"$1\"'" || true; }
sys_check "wd-002 has its message_answered event" sys_wait_until 30 "wd-002 event" x sh -c "[ \$(cat $AS/logs/events-*.jsonl | grep '\"message_answered\"' | grep -c '\"correlation_id\":\"wd-002\"') -ge 1 ]"
sys_expect_eq "... exactly one" 1 "$(answered wd-002)"
sys_check "the job queued during the wedge finishes" sys_wait_until 120 "wd-job-1 finished" in_state wd-job-1 finished
message wd-003 list-projects | put "$AS/messaging/inbox/wd-003.json"
sys_check "a new message is answered" sys_wait_until 60 "wd-003 answered" x test -f "$AS/messaging/outbox/wd-003.json"
queue_job wd-job-2 "$(job_json TestProject noop noop 'after' 120 '{"sleep_seconds": 0}')"
sys_check "a new job finishes" sys_wait_until 120 "wd-job-2 finished" in_state wd-job-2 finished
sys_expect_eq "every message answered once: 3 answers in the outbox" 3 \
    "$(x sh -c "ls $AS/messaging/outbox/ $AS/messaging/processed_outbox/ 2>/dev/null | grep -c '^wd-00[1-3].json$'")"
for u in $orch $qm; do x rm -rf "/etc/systemd/system/$u.d"; done
x systemctl daemon-reload
sys_test_end
