#!/usr/bin/env bash
# t_hardening (issue 9, least privilege): the packaged queue-manager@.service under a real
# systemd, with the `systemd` launcher:
#  - `systemd-analyze security` exposure of queue-manager@poplar.service is below the
#    threshold measured for this unit (and orchestratord stays at or below 2.0);
#  - every thread of the running manager does its file access as the store's owner
#    (`agentstore`): /proc/PID/task/*/status shows fsuid = agentstore while uid stays 0;
#  - attack: a symbolic link and a hard link in queued_jobs/ to a root-only file, and the
#    queue's log replaced by a link to another root-only file: neither canary is read into the
#    store nor written (same bytes, owner, mode);
#  - a claude job still runs in its scope as the project owner's Unix user (jobuser).
# Exposure measured with `systemd-analyze security --offline=yes` (systemd 252, the host of
# this change): 6.1 before this issue's hardening, 3.9 after; stop 7 measured 6.0 in the
# container for the unit before. THRESHOLD leaves 0.3 for the difference.
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
THRESHOLD=4.2

# --- exposure ------------------------------------------------------------------------------------
score() { x systemd-analyze security --no-pager "$1" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'; }
below() { awk -v v="$1" -v t="$2" 'BEGIN { exit !(v < t) }'; }
setup_users
setup_queue "$Q" 2 /usr/local/bin/fake-claude
qm=$(score "queue-manager@$Q.service")
orch=$(score agentstore-orchestrator.service)
echo "EXPOSURE: queue-manager@$Q.service ${qm:-?} agentstore-orchestrator.service ${orch:-?}"
# What is left of it, each with the reason it stays in the unit's notes.
x systemd-analyze security --no-pager "queue-manager@$Q.service" 2>&1 | grep '✗' || true
sys_check "queue-manager@ exposure ${qm:-?} < $THRESHOLD" below "${qm:-99}" "$THRESHOLD"
sys_check "orchestratord exposure ${orch:-?} <= 2.0" below "${orch:-99}" 2.01

# --- the store and the canaries ------------------------------------------------------------------
sys_copy_in "$m" "$REPO/tests/fixtures/fake-claude" /usr/local/bin/fake-claude
setup_project TestProject /home/jobuser/proj
command_file jobuser greet 'Greet $ARGUMENTS'
x sh -c 'umask 077; printf "{\"secret\": \"CANARY-READ-%s\"}\n" hardening >/root/canary.json; printf "CANARY-LOG\n" >/root/canary.log'
before=$(x sh -c 'stat -c "%u %a %s %i" /root/canary.json /root/canary.log; sha256sum /root/canary.json /root/canary.log')
qdir=$AS/Queues/$Q/Jobs/queued_jobs
x ln -s /root/canary.json "$qdir/evil-link.json"
x ln /root/canary.json "$qdir/evil-hard.json"
qlog=$AS/logs/queue-$Q@$(x orchestrator this-machine).log   # this machine's file of queue-$Q.log
x sh -c "rm -f $AS/logs/queue-$Q.log $qlog && ln -s /root/canary.log $AS/logs/queue-$Q.log && ln -s /root/canary.log $qlog"

# --- the manager ----------------------------------------------------------------------------------
sys_check "queue-manager@$Q.service starts" x systemctl start "queue-manager@$Q.service"
pid=$(x systemctl show -p MainPID --value "queue-manager@$Q.service")
svc_uid=$(x id -u agentstore)
ids=$(x sh -c "cat /proc/$pid/task/*/status" | awk '/^Uid:/ { print $2, $5 }' | sort -u)
sys_expect_eq "every manager thread: uid 0, fsuid agentstore ($svc_uid)" "0 $svc_uid" "$ids"

queue_job h1 "$(job_json TestProject claude greet 'hello' 60 '{}' /home/jobuser/proj)"
sys_check "the claude job finishes" sys_wait_until 60 "h1 in finished_jobs" in_state h1 finished
job_uid=$(x id -u jobuser)
sys_check "the agent ran as the project owner (jobuser, uid $job_uid)" \
    x grep -Eq "uid\\\\?\":$job_uid," "$(jobf h1 finished)"
sys_check "it ran in a transient scope" x grep -q 'agentstore-job-h1.scope' "$(jobf h1 finished)"
sleep 2

# --- nothing read or written through the planted links -------------------------------------------
after=$(x sh -c 'stat -c "%u %a %s %i" /root/canary.json /root/canary.log; sha256sum /root/canary.json /root/canary.log')
sys_expect_eq "the root-only canaries are untouched" "$before" "$after"
leaks=$(x sh -c "grep -rl CANARY- $AS 2>/dev/null | while read -r f; do [ \"\$f\" -ef /root/canary.json ] || echo \"\$f\"; done" || true)
sys_expect_eq "no canary content copied into the store" "" "$leaks"
sys_check "the manager is still serving" active "queue-manager@$Q.service"
sys_test_end
