#!/usr/bin/env bash
# t_samehost (issue 35): two machines with the SAME hostname ("twin": cloned VMs and
# containers often are) serve one store (a host folder bound at /var/lib/agentstore in
# both) without taking each other's jobs for their own. Each is known by its machine id
# (`orchestrator this-machine`), not its hostname: both run queue `oak`; a job running on
# the first is left alone by the second's manager when it starts and sweeps (a manager
# that went by hostname would find the job "on this host" with a pid it does not have and
# fail it as a dead worker), the job finishes where it ran, each machine keeps its own
# runtime file, and list-machines shows two machines, both called twin.
# The store is one filesystem here (a bind mount), so `machines.shared_filesystem: true`:
# both managers serve the queue at once (the default, for a sync engine, lets only the
# manager that started first start jobs: the second would stand down and the short job
# below would wait for the first machine's one worker). With both serving, the short job is
# the second machine's to run while the first's only worker is busy.
# sys: no-machine
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin_no_machine
sys_preflight
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
# shellcheck source=store.sh
. "$SYS_LIB_DIR/store.sh"
store=$(mktemp -d "$SYS_STATE_DIR/dropbox.XXXXXX")
a=twin-a
b=twin-b
for n in $a $b; do
    sys_prepare "$n" || sys_die "cannot prepare $n"
    echo twin >"$(sys_root "$n")/etc/hostname"
    sys_boot "$n" --bind "$store:/var/lib/agentstore" || sys_die "machine $n did not boot"
    sys_check "the package installs on $n (shared store)" sys_install_deb "$n" "$SYS_DEB"
done
m=$a; a_host=$(x hostname); a_key=$(x orchestrator this-machine)
m=$b; b_host=$(x hostname); b_key=$(x orchestrator this-machine)
sys_expect_eq "the first machine's hostname is twin" twin "$a_host"
sys_expect_eq "the second machine's hostname is twin too" twin "$b_host"
sys_expect_match "the first machine's key comes from its machine id" '^m-[0-9a-f]{16}$' "$a_key"
sys_check "the two machines have different keys" test "$a_key" != "$b_key"
# The orchestrator runs on the first machine only.
m=$b
x systemctl disable --now agentstore-orchestrator.path agentstore-orchestrator.timer >/dev/null 2>&1
x sh -c 'id jobuser >/dev/null 2>&1 || useradd --create-home jobuser'
m=$a
setup_users
setup_project TwinProject /tmp/twinproject oak
setup_queue oak 1
as_svc sh -c "printf 'machines:\n  shared_filesystem: true\n' >>$AS/config.yaml"
sys_check "the store says it is one filesystem" x grep -qx '  shared_filesystem: true' "$AS/config.yaml"
m=$b
x sh -c 'mkdir -p /tmp/twinproject && chown jobuser: /tmp/twinproject'
# A long job starts on the first machine while the second's manager is down.
m=$a
sys_check "first: queue-manager@oak starts" x systemctl start queue-manager@oak.service
queue_job twin-long "$(job_json TwinProject noop noop 'long' 600 '{"sleep_seconds": 180}')" oak
sys_check "first: the long job runs" sys_wait_until 60 "running" in_state twin-long running oak
sys_expect_eq "... on the first machine" "$a_key" "$(jfield "$(jobf twin-long running oak)" host)"
# The second machine's manager starts (it re-adopts or fails this host's running jobs at
# start), and sweeps again on a restart.
m=$b
sys_check "second: queue-manager@oak starts" x systemctl start queue-manager@oak.service
own_runtime() { x test -f "$AS/Queues/oak/runtime@$b_key.json"; }
sys_check "second: its own runtime file, by machine key" sys_wait_until 60 "runtime@$b_key.json" own_runtime
sys_check "second: its manager restarts (a second start-up sweep)" x systemctl restart queue-manager@oak.service
sys_check "second: active again" sys_wait_until 30 "active" active queue-manager@oak.service
sys_check "the first machine's job is still running, not failed by the second" in_state twin-long running oak
# A short job while the first machine's only worker is busy: the second machine runs it
# (the first has no free worker) and says so by its own key.
queue_job twin-short "$(job_json TwinProject noop noop 'short' 60 '{"sleep_seconds": 1}')" oak
sys_check "the short job finishes" sys_wait_until 60 "finished" in_state twin-short finished oak
sys_expect_eq "... on the second machine, by its key" "$b_key" "$(jfield "$(jobf twin-short finished oak)" host)"
sys_check "... while the first machine's long job still runs" in_state twin-long running oak
# The long job ends where it ran, finished (its own worker wrote it), never failed.
ended() { in_state twin-long finished oak || in_state twin-long failed oak; }
sys_check "the long job ends" sys_wait_until 300 "twin-long ended" ended
sys_check "... finished, on the first machine" in_state twin-long finished oak
sys_expect_eq "... runtime.host is the first machine's key" "$a_key" "$(jfield "$(jobf twin-long finished oak)" host)"
err=$(jfield "$(jobf twin-long finished oak)" error)
sys_expect_match "... with no error" '^(null)?$' "$err"
m=$a
sys_check "first: its own runtime file" x test -f "$AS/Queues/oak/runtime@$a_key.json"
machines=$(adm list-machines 2>&1) || true
sys_log "list-machines: $machines"
sys_expect_eq "list-machines shows both keys" 2 "$(grep -cE "$a_key|$b_key" <<<"$machines")"
sys_expect_eq "... both called twin" 2 "$(grep -cw twin <<<"$machines")"
sys_stop $b
sys_stop $a
sys_test_end
