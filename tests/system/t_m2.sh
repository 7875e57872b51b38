#!/usr/bin/env bash
# t_m2: PRD §12 M2 (job creation): agent commands from the CLI (over the system bus, the
# daemon started by D-Bus activation) and from an inbox message create job files in the
# project's queue; --queue overrides; an unknown queue is an error.
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
# Tests 1-2: the project and the poplar queue.
setup_project TestProject /tmp/testproject poplar /tmp/testproject/docs.md
setup_queue poplar 2
sys_check "M2.1 the project validates" adm validate "$AS/projects/TestProject/project.json"
sys_check "M2.2 the queue validates" adm validate "$AS/Queues/poplar/queue.json"
x orchestrator login chenry >/dev/null
# Test 3: research-code prints "Job queued: <id>".
out=$(x orchestrator research-code --project TestProject 2>&1) || true
sys_expect_match "M2.3 research-code prints 'Job queued: <id>'" '^Job queued: [A-Za-z0-9._-]+' "$out"
id=$(sed -n 's/^Job queued: \([A-Za-z0-9._-]*\).*/\1/p' <<<"$out" | head -1)
f=$(jobf "$id" queued poplar)
# Test 4: the job file is in the project's default queue.
sys_check "M2.4 the job file is in Queues/poplar/Jobs/queued_jobs" x test -f "$f"
sys_expect_eq "M2.4 its project" TestProject "$(jfield "$f" project)"
sys_expect_eq "M2.4 its Claude command" code-researcher "$(jfield "$f" claude_command)"
# Test 5: it validates.
sys_check "M2.5 the job validates against the job schema" adm validate --kind job "$f"
# Test 6: --queue overrides; an unknown queue is an error.
out=$(x orchestrator research-code --project TestProject --queue oak 2>&1) && rc=0 || rc=$?
sys_expect_match "M2.6 --queue oak: 'Queue not found: oak' (exit $rc)" 'Queue not found: oak' "$out"
setup_queue oak 1
out=$(x orchestrator research-code --project TestProject --queue oak 2>&1) || true
id2=$(sed -n 's/^Job queued: \([A-Za-z0-9._-]*\).*/\1/p' <<<"$out" | head -1)
sys_check "M2.6 with queue oak present, --queue oak puts the job there" x test -f "$(jobf "${id2:-none}" queued oak)"
# Test 7: the outbox answer names job_id, queue, job_path (a message through the inbox).
message m2-007 research-code TestProject '{}' chenry | put "$AS/messaging/inbox/m2-007.json"
sys_check "M2.7 outbox/m2-007.json appears" sys_wait_until 30 "the answer" x test -f "$AS/messaging/outbox/m2-007.json"
ans=$(x cat "$AS/messaging/outbox/m2-007.json" 2>&1) || true
sys_expect_match "M2.7 the answer has job_id" '"job_id": *"[^"]+"' "$ans"
sys_expect_match "M2.7 the answer has queue poplar" '"queue": *"poplar"' "$ans"
sys_expect_match "M2.7 the answer has job_path" '"job_path": *"[^"]*Queues/poplar/Jobs/queued_jobs/' "$ans"
ans_id=$(sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' <<<"$ans" | head -1)
sys_check "M2.7 the answered job exists" x test -f "$(jobf "${ans_id:-none}" queued poplar)"
sys_test_end
