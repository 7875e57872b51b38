#!/usr/bin/env bash
# t_m1: PRD §12 M1 (orchestrator message processing) with orchestratord under systemd:
# `orchestrator daemon start|stop|status` drive agentstore-orchestrator.service.
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
setup_project ModelSEEDpy /srv/ModelSEEDpy
svc=agentstore-orchestrator.service
lock=$AS/.orchestrator.lock

# Test 1: start; the lock file exists.
sys_check "M1.1 orchestrator daemon start" x orchestrator daemon start
sys_expect_eq "the unit is active" active "$(x systemctl is-active $svc 2>&1)"
sys_check "M1.1 the lock file exists" x test -s "$lock"
sys_log "lock: $(x cat "$lock" 2>&1 | tr '\n' ' ')"
out=$(x orchestrator daemon status 2>&1) && rc=0 || rc=$?
sys_expect_eq "orchestrator daemon status exits 0 while running" 0 "$rc"
sys_expect_match "daemon status says it runs" 'active|running' "$out"
# Test 2: a second orchestrator fails with "already running".
out=$(as_svc orchestratord --bus system --root "$AS" 2>&1) && rc=0 || rc=$?
sys_expect_eq "M1.2 a second orchestratord exits 2" 2 "$rc"
sys_expect_match "M1.2 ... saying it is already running" '[Aa]lready running' "$out"
out=$(x orchestrator daemon start 2>&1) && rc=0 || rc=$?
sys_log "orchestrator daemon start again: rc=$rc $out"
sys_expect_eq "the first one is still active" active "$(x systemctl is-active $svc 2>&1)"
# Test 3-5: a message file in the inbox is answered.
message test-001 list-projects ModelSEEDpy | put "$AS/messaging/inbox/test-001.json"
sys_check "M1.4 outbox/test-001.json appears" sys_wait_until 20 "the answer" x test -f "$AS/messaging/outbox/test-001.json"
ans=$(x cat "$AS/messaging/outbox/test-001.json" 2>&1) || true
sys_expect_match "M1.4 the answer lists the projects" 'ModelSEEDpy' "$ans"
sys_expect_match "M1.4 the answer is done" '"status": *"done"' "$ans"
sys_check "M1.5 processed_inbox/test-001.json exists" x test -f "$AS/messaging/processed_inbox/test-001.json"
sys_check "M1.5 ... and the inbox no longer has it" x test ! -e "$AS/messaging/inbox/test-001.json"
# Test 6: unknown command.
message test-002 invalid-command | put "$AS/messaging/inbox/test-002.json"
sys_check "M1.6 outbox/test-002.json appears" sys_wait_until 20 "the answer" x test -f "$AS/messaging/outbox/test-002.json"
ans=$(x cat "$AS/messaging/outbox/test-002.json" 2>&1) || true
sys_expect_match "M1.6 the answer is an error" '"status": *"error"' "$ans"
sys_expect_match "M1.6 naming the command" 'invalid-command' "$ans"
# Test 7: stop; the lock file is gone.
sys_check "M1.7 orchestrator daemon stop" x orchestrator daemon stop
sys_expect_match "the unit is inactive" '^(inactive|failed)$' "$(x systemctl is-active $svc 2>&1 || true)"
sys_check "M1.7 the lock file was removed" x test ! -e "$lock"
out=$(x orchestrator daemon status 2>&1) && rc=0 || rc=$?
sys_expect_eq "orchestrator daemon status exits 3 when stopped" 3 "$rc"
sys_test_end
