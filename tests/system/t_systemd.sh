#!/usr/bin/env bash
# t_systemd: the orchestrator as systemd runs it: start/stop/status tell the truth (STATUS=),
# path activation by an inbox file, the timer's sweep, the idle exit and D-Bus activation.
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
svc=agentstore-orchestrator.service

# start/stop/status.
sys_check "systemctl start $svc" x systemctl start $svc
sys_expect_eq "is-active: active" active "$(x systemctl is-active $svc 2>&1)"
st=$(x systemctl status --no-pager $svc 2>&1) || true
sys_expect_match "systemctl status shows the daemon's Status: line" 'Status: "[^"]+"' "$st"
sys_log "$(grep 'Status:' <<<"$st")"
sys_expect_match "systemctl status shows the main process" 'Main PID: [0-9]+ \(orchestratord\)' "$st"
sys_expect_eq "it runs as agentstore" agentstore "$(x ps -o user= -p "$(x systemctl show -p MainPID --value $svc)" | tr -d ' ')"
owner=$(x busctl --system status org.agentstore.Orchestrator1 2>&1 | sed -n 's/^PID=//p') || true
sys_expect_eq "the bus name's owner is the unit's main pid" "$(x systemctl show -p MainPID --value $svc)" "$owner"
sys_check "systemctl stop $svc" x systemctl stop $svc
rc=0; x systemctl is-active --quiet $svc || rc=$?
sys_expect_eq "is-active after stop: 3 (inactive)" 3 "$rc"
rc=0; x systemctl status --no-pager $svc >/dev/null 2>&1 || rc=$?
sys_expect_eq "systemctl status exits 3 when stopped" 3 "$rc"
sys_check "the stop was clean (not failed)" x sh -c "[ \"\$(systemctl show -p Result --value $svc)\" = success ]"

# Path activation: orchestrator stopped, a message dropped into the inbox starts it.
sys_expect_eq "the .path unit is active (enabled by postinst)" active "$(x systemctl is-active agentstore-orchestrator.path 2>&1)"
message path-001 list-projects | put "$AS/messaging/inbox/path-001.json"
sys_check "path activation: the service starts" sys_wait_until 20 "$svc active" active $svc
sys_check "path activation: the message is answered" sys_wait_until 20 "answer" x test -f "$AS/messaging/outbox/path-001.json"
sys_expect_match "... with the project list" 'TestProject' "$(x cat "$AS/messaging/outbox/path-001.json" 2>&1)"
x systemctl stop $svc

# The timer's sweep: a finished job written while the daemon is down is handled when the timer
# fires. OnActiveSec=2s in a drop-in stands in for the 5 min interval.
setup_queue poplar 1
queue_job sweep-1 "$(job_json TestProject noop noop 'x' 60 '{}')"
x sed -i 's/"status": "queued"/"status": "finished"/' "$(jobf sweep-1 queued)"
x mv "$(jobf sweep-1 queued)" "$(jobf sweep-1 finished)"
x mkdir -p /etc/systemd/system/agentstore-orchestrator.timer.d
# (Both the timer's own activation and the service's last stop count from now.)
# AccuracySec: the default (1 min) lets systemd fire anywhere up to a minute late.
printf '[Timer]\nOnActiveSec=2s\nOnUnitInactiveSec=\nOnUnitInactiveSec=2s\nAccuracySec=100ms\n' |
    x sh -c 'cat >/etc/systemd/system/agentstore-orchestrator.timer.d/test.conf'
x systemctl daemon-reload
sys_check "the timer restarts with OnActiveSec=2s" x systemctl restart agentstore-orchestrator.timer
sys_log "$(x systemctl list-timers --no-pager agentstore-orchestrator.timer 2>&1 | sed -n 2p)"
handled() { x grep -q '"handled": *true' "$(jobf sweep-1 finished)"; }
if sys_wait_until 30 "handled" handled; then
    sys_pass "the timer started the orchestrator, whose sweep handled the finished job"
else
    sys_fail "the finished job was not handled after the timer fired"
    x journalctl --no-pager -n 40 -u agentstore-orchestrator.timer -u $svc | sed 's/^/    | /'
    x ls -la "$AS/Queues/poplar/Jobs/finished_jobs" | sed 's/^/    | /'
    x systemctl list-timers --all --no-pager | sed 's/^/    | /'
fi
trig=$(x journalctl --no-pager -u agentstore-orchestrator.timer -u $svc -o cat 2>&1 | grep -c 'Started' || true)
sys_expect_match "the journal shows the timer-triggered start" '^[1-9]' "$trig"
# Back to the packaged timer (a 2 s OnUnitInactiveSec would restart the daemon after its idle exit).
x rm -rf /etc/systemd/system/agentstore-orchestrator.timer.d
x systemctl daemon-reload
x systemctl restart agentstore-orchestrator.timer
x systemctl stop $svc

# Idle exit, and D-Bus activation on demand.
x sed -i 's/idle_exit_seconds: .*/idle_exit_seconds: 2/' "$AS/config.yaml"
x grep -q 'idle_exit_seconds: 2' "$AS/config.yaml" || printf 'orchestrator:\n  idle_exit_seconds: 2\n' | x sh -c "cat >>$AS/config.yaml"
out=$(x busctl --system call org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1 org.agentstore.Orchestrator1 Sweep 2>&1) || true
sys_expect_match "busctl call Sweep activates the daemon (D-Bus activation)" '^u [0-9]+' "$out"
sys_check "... which is now active" active $svc
sys_check "the daemon exits when idle (idle_exit_seconds: 2)" sys_wait_until 30 "$svc inactive" inactive $svc
sys_expect_eq "the idle exit is a success, not a failure" success "$(x systemctl show -p Result --value $svc)"
sys_check "the idle exit removed the lock" x test ! -e "$AS/.orchestrator.lock"
started() { x systemctl show -p ExecMainStartTimestampMonotonic --value $svc; }
before=$(started)
out=$(x busctl --system get-property org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1 org.agentstore.Orchestrator1 StoreRoot 2>&1) || true
sys_expect_eq "it comes back on demand (get-property StoreRoot)" "s \"$AS\"" "$out"
after=$(started)
if [ "$after" -gt "$before" ]; then sys_pass "... a new start of $svc ($before < $after)"; else sys_fail "no new start of $svc ($before, $after)"; fi
sys_test_end
