#!/usr/bin/env bash
# t_twomachines: two machines share one store folder (a host folder bound at
# /var/lib/agentstore in both, standing in for Dropbox). The orchestrator runs on machine
# "alpha"; queue `oak` runs on machine "beta". A message written on beta is routed by alpha
# and its job run by beta. A second orchestrator on beta finds alpha's store lock.
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
a=alpha
b=beta
for n in $a $b; do
    sys_boot "$n" --bind "$store:/var/lib/agentstore" || sys_die "machine $n did not boot"
    sys_check "the package installs on $n (shared store)" sys_install_deb "$n" "$SYS_DEB"
done
# Each machine's key in the store (from its machine id; issue 35).
m=$a; a_key=$(x orchestrator this-machine)
m=$b; b_key=$(x orchestrator this-machine)
sys_expect_match "alpha's key is made from its machine id" '^m-[0-9a-f]{16}$' "$a_key"
sys_check "alpha and beta have different keys" test "$a_key" != "$b_key"
# The orchestrator runs on alpha only.
m=$b
x systemctl disable --now agentstore-orchestrator.path agentstore-orchestrator.timer >/dev/null 2>&1
m=$a
setup_users
setup_project TestProject /tmp/testproject oak
setup_queue oak 1
sys_check "alpha: the orchestrator's path unit is active" active agentstore-orchestrator.path
m=$b
x sh -c 'id jobuser >/dev/null 2>&1 || useradd --create-home jobuser'
sys_check "beta: queue-manager@oak starts" x systemctl start queue-manager@oak.service

# A message written on beta.
message two-001 research-code TestProject '{}' chenry | put "$AS/messaging/inbox/two-001.json"
m=$a
sys_check "alpha: the inbox file started the orchestrator" sys_wait_until 30 "orchestrator active on alpha" active agentstore-orchestrator.service
m=$b
sys_check "beta sees the answer in the outbox" sys_wait_until 30 "answer" x test -f "$AS/messaging/outbox/two-001.json"
jid=$(x sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$AS/messaging/outbox/two-001.json" | head -1)
sys_expect_match "the answer names a job in queue oak" '^[A-Za-z0-9]' "$jid"
lock=$(x cat "$AS/.orchestrator.lock" 2>&1 || true)
sys_expect_match "the store lock names alpha as the orchestrator's host" "$a_key" "$lock"
# Beta runs the job (a claude job; beta has no code-researcher command, so it fails there,
# early and clearly: what matters here is which machine ran it).
ran() { x test -f "$(jobf "$jid" finished oak)" || x test -f "$(jobf "$jid" failed oak)"; }
sys_check "beta ran the job" sys_wait_until 60 "job ended" ran
f=$(x sh -c "ls $AS/Queues/oak/Jobs/*_jobs/$jid.json" | head -1)
sys_expect_eq "runtime.host of the job is beta" "$b_key" "$(jfield "$f" host)"
# A no-op job written on alpha runs on beta and finishes.
m=$a
queue_job two-noop "$(job_json TestProject noop noop 'noop' 60 '{"sleep_seconds": 1}')" oak
m=$b
sys_check "beta finishes a no-op job queued on alpha" sys_wait_until 60 "finished" in_state two-noop finished oak
sys_expect_eq "... on beta" "$b_key" "$(jfield "$(jobf two-noop finished oak)" host)"
m=$a
handled() { x grep -q '"handled": *true' "$(jobf two-noop finished oak)"; }
sys_check "alpha's orchestrator handles the job beta finished" sys_wait_until 30 "handled" handled
# Singleton across machines: an orchestrator on beta finds alpha's lock.
m=$b
out=$(as_svc orchestratord --bus system --root "$AS" 2>&1) && rc=0 || rc=$?
sys_expect_eq "a second orchestrator on beta exits 2" 2 "$rc"
sys_expect_match "... already running on alpha" "[Aa]lready running.*$a_key|$a_key.*[Aa]lready running" "$out"
sys_log "beta orchestratord: $out"
sys_stop $b
sys_stop $a
sys_test_end
