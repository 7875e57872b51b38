#!/usr/bin/env bash
# t_scope: transient scopes do what the queue manager relies on (DESIGN §5):
#  - RuntimeMaxSec kills the whole scope, a setsid grandchild included;
#  - MemoryMax/CPUQuota/TasksMax are set on the scope and visible with `systemctl show`
#    (the memory and pids controllers are read-only in this container, so the limits are
#    checked as unit properties, not by hitting them);
#  - the daemon's own path: a process that waits on a FIFO is placed into a scope made by
#    org.freedesktop.systemd1.Manager.StartTransientUnit(PIDs=[pid]) over D-Bus, then
#    forks; everything it started dies at RuntimeMaxUSec.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
m=$SYS_MACHINE

# Processes (inside the container) whose command line is ARGS (the program given by name or
# by its /usr/bin path, as systemd-run passes it) and whose unit is UNIT: "pid sid" lines.
procs_in_unit() { # UNIT ARGS
    local ps
    ps=$(sys_exec "$m" ps -e -o pid=,sid=,unit=,args=)
    awk -v u="$1" -v a="$2" '
        { pid = $1; sid = $2; unit = $3; $1 = $2 = $3 = ""; sub(/^ +/, "") }
        unit == u && ($0 == a || $0 == "/usr/bin/" a) { print pid, sid }' <<<"$ps"
}
count_procs() { # UNIT ARGS
    procs_in_unit "$1" "$2" | wc -l
}
has_n_procs() { [ "$(count_procs "$1" "$2")" -eq "$3" ]; }
any_proc() { sys_exec "$m" pgrep -f "^(/usr/bin/)?$1\$" >/dev/null; }
no_proc() { ! any_proc "$1"; }
unit_inactive() { # UNIT — stopped (failed or gone)
    local s
    s=$(sys_exec "$m" systemctl show -p ActiveState --value "$1")
    [ "$s" = failed ] || [ "$s" = inactive ]
}
prop() { sys_exec "$m" systemctl show -p "$2" --value "$1"; }

# --- 1. systemd-run --scope with RuntimeMaxSec ----------------------------------------------
unit=astest-runtime-$RANDOM.scope
sys_exec "$m" systemd-run --quiet --unit="${unit%.scope}" --scope -p RuntimeMaxSec=3 \
    sh -c 'setsid sleep 1000 & sleep 1000' >/dev/null 2>&1 &
client=$!
if sys_wait_until 15 "two sleeps in $unit" has_n_procs "$unit" "sleep 1000" 2; then
    sys_pass "systemd-run --scope: child and setsid grandchild are in $unit"
    sids=$(procs_in_unit "$unit" "sleep 1000" | awk '{ print $2 }' | sort -u | wc -l)
    sys_expect_eq "the grandchild left the session (setsid), so only the cgroup holds it" 2 "$sids"
else
    sys_fail "systemd-run --scope: expected 2 'sleep 1000' in $unit, got $(count_procs "$unit" "sleep 1000")"
fi
sys_expect_eq "RuntimeMaxUSec is 3s" 3s "$(prop "$unit" RuntimeMaxUSec)"
sys_check "the scope stops at RuntimeMaxSec" sys_wait_until 20 "$unit to stop" unit_inactive "$unit"
sys_expect_eq "the scope ended with Result=timeout" timeout "$(prop "$unit" Result)"
sys_check "no process of the scope survives, grandchild included" sys_wait_until 5 "no sleep 1000" no_proc "sleep 1000"
wait "$client" || true
sys_exec "$m" systemctl reset-failed "$unit" 2>/dev/null || true

# --- 2. resource limits visible on a scope ---------------------------------------------------
unit=astest-limits-$RANDOM.scope
sys_exec "$m" systemd-run --quiet --unit="${unit%.scope}" --scope -p MemoryMax=256M -p CPUQuota=50% \
    -p TasksMax=20 -p RuntimeMaxSec=60 sleep 1001 >/dev/null 2>&1 &
client=$!
if sys_wait_until 15 "sleep in $unit" has_n_procs "$unit" "sleep 1001" 1; then
    sys_expect_eq "MemoryMax shown on the scope" 268435456 "$(prop "$unit" MemoryMax)"
    sys_expect_eq "CPUQuota shown on the scope" 500ms "$(prop "$unit" CPUQuotaPerSecUSec)"
    sys_expect_eq "TasksMax shown on the scope" 20 "$(prop "$unit" TasksMax)"
else
    sys_fail "the limits scope $unit never ran"
fi
sys_exec "$m" systemctl stop "$unit" || true
wait "$client" || true
sys_check "systemctl stop ends the scope's process" sys_wait_until 10 "no sleep 1001" no_proc "sleep 1001"

# --- 3. StartTransientUnit over D-Bus with PIDs=[pid], the queue manager's path ---------------
unit=astest-dbus-$RANDOM.scope
sys_exec "$m" sh -c 'rm -f /run/astest.fifo /run/astest.pid && mkfifo /run/astest.fifo'
# The "worker": records its pid, waits until it has been placed, then forks a setsid child.
# RuntimeMaxUSec is 30 s, not less: under load each nsenter step takes a second or more, and
# the scope must still be running when the worker is told to go and its processes are counted.
# It runs as a service of the container's systemd, as the queue manager's worker does (a process
# nsenter'ed from the host sits in a host cgroup outside the container's tree, which the
# container's systemd cannot move into a scope). systemd expands `$$` to `$` in a command
# line, hence `$$$$` for the shell's `$$`.
sys_exec "$m" systemd-run --quiet --unit "astest-worker-$RANDOM" --service-type=exec \
    sh -c 'echo $$$$ >/run/astest.pid; read go </run/astest.fifo; setsid sleep 1002 & exec sleep 1002' \
    >/dev/null 2>&1
pid_file_written() { sys_exec "$m" test -s /run/astest.pid; }
sys_wait_until 10 "the worker's pid file" pid_file_written || true
wpid=$(sys_exec "$m" cat /run/astest.pid 2>/dev/null || true)
if [ -n "$wpid" ] && sys_exec "$m" busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
    org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' "$unit" fail 6 \
    PIDs au 1 "$wpid" \
    Description s "agentstore harness job" \
    RuntimeMaxUSec t 30000000 \
    MemoryMax t 268435456 \
    CPUQuotaPerSecUSec t 500000 \
    TasksMax t 20 \
    0 >/dev/null; then
    sys_pass "StartTransientUnit($unit, PIDs=[$wpid]) over D-Bus"
else
    sys_fail "StartTransientUnit over D-Bus failed (worker pid '$wpid')"
fi
# StartTransientUnit returns once the start job is queued; the PID moves when the job runs
# (the queue manager waits for JobRemoved). Release the worker only once it is in the scope.
worker_placed() { [ "$(sys_exec "$m" ps -o unit= -p "$wpid" | tr -d ' ')" = "$unit" ]; }
sys_check "the worker is in $unit before it is released" sys_wait_until 20 "pid $wpid in $unit" worker_placed
sys_exec "$m" sh -c 'echo go >/run/astest.fifo'
if sys_wait_until 25 "worker and grandchild in $unit" has_n_procs "$unit" "sleep 1002" 2; then
    sys_pass "the placed worker and its setsid child run in $unit"
else
    sys_fail "expected 2 'sleep 1002' in $unit, got $(count_procs "$unit" "sleep 1002"); processes:" \
        "$(sys_exec "$m" ps -e -o pid=,unit=,args= | grep -e 1002 -e astest || true)"
fi
sys_expect_eq "D-Bus scope: MemoryMax" 268435456 "$(prop "$unit" MemoryMax)"
sys_expect_eq "D-Bus scope: CPUQuotaPerSecUSec" 500ms "$(prop "$unit" CPUQuotaPerSecUSec)"
sys_expect_eq "D-Bus scope: TasksMax" 20 "$(prop "$unit" TasksMax)"
sys_check "D-Bus scope stops at RuntimeMaxUSec" sys_wait_until 60 "$unit to stop" unit_inactive "$unit"
sys_expect_eq "D-Bus scope ended with Result=timeout" timeout "$(prop "$unit" Result)"
sys_check "nothing of the D-Bus scope survives" sys_wait_until 5 "no sleep 1002" no_proc "sleep 1002"

sys_test_end
