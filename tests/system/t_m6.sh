#!/usr/bin/env bash
# t_m6: PRD §12 M6 (end to end) with the REAL Claude Code CLI against a fake Anthropic
# endpoint: CLI → D-Bus → orchestratord → job → queue-manager@poplar → agent-worker → claude
# → result; the orchestrator's completion handler updates the project and writes the research
# document; concurrent jobs; a failing project; 20 jobs timed; PRD provenance.
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
install_claude_env '{"replies": [], "fallback_text": "# Code research\n\nEverything documented."}'
setup_users
# The research document lives in the project (PRD §4.3's example); the job writes it there as
# the project owner's Unix user (issue 11), in a folder it creates.
setup_project ModelSEEDpy /srv/ModelSEEDpy poplar /srv/ModelSEEDpy/docs/CODE_RESEARCH.md
setup_project TestProject /srv/TestProject poplar
setup_project Broken /srv/does-not-exist poplar
x rm -rf /srv/does-not-exist
setup_queue poplar 3 /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]'
command_file jobuser code-researcher 'Research the code of this project: $ARGUMENTS'
command_file jobuser prd-creator 'Write a PRD: $ARGUMENTS'
x systemctl start queue-manager@poplar.path
u() { x runuser -u jobuser -- "$@"; }
pf=$AS/projects/ModelSEEDpy/project.json
t0=$(jfield "$pf" update_time)
# Times have whole seconds (PRD): the project, written just now, must be a second old before
# the job's handling can show as a change (the whole workflow can take less than a second).
sleep 1.1

# Test 1: the full workflow as the researcher.
sys_check "M6.1 orchestrator login chenry" u orchestrator login chenry
sys_check "M6.1 orchestrator set-project ModelSEEDpy" u orchestrator set-project ModelSEEDpy
out=$(u orchestrator research-code --follow 600 2>&1) || true
id=$(grep -o '[Jj]ob[ _]\(queued: \|id"\?: *"\?\)[A-Za-z0-9._-]*' <<<"$out" | head -1 | sed 's/.*[: "]//')
sys_expect_match "M6.1 research-code queued a job" '^[A-Za-z0-9][A-Za-z0-9._-]+$' "$id"
sys_check "M6.1 the job finishes" sys_wait_until 240 "finished" in_state "$id" finished
# The orchestrator handles the finished job (inotify on finished_jobs while it runs).
handled() { x grep -q '"handled": *true' "$(jobf "$id" finished)"; }
sys_check "M6 the orchestrator handled the finished job" sys_wait_until 60 "handled" handled
# Test 2: project updated.
t1=$(jfield "$pf" update_time)
if [ "$t1" != "$t0" ]; then sys_pass "M6.2 project update_time changed ($t0 → $t1)"; else sys_fail "M6.2 update_time unchanged ($t0)"; fi
# Test 3: the research document.
doc=$(x cat /srv/ModelSEEDpy/docs/CODE_RESEARCH.md 2>&1) || true
sys_expect_match "M6.3 the code research document holds Claude's answer" 'Everything documented' "$doc"
sys_expect_eq "M6.3 ... written by the job as its Unix user" "jobuser jobuser" \
    "$(x stat -c '%U' /srv/ModelSEEDpy/docs/CODE_RESEARCH.md /srv/ModelSEEDpy/docs 2>&1 | tr '\n' ' ' | sed 's/ $//')"
out=$(u orchestrator view-job "$id" 2>&1) || true
sys_expect_match "view-job shows the finished job" 'finished' "$out"

# Test 4-5: five concurrent research-code commands.
ids=$(x runuser -u jobuser -- bash -c 'for i in 1 2 3 4 5; do orchestrator research-code --project TestProject & done; wait' 2>&1 |
    sed -n 's/^Job queued: \([A-Za-z0-9._-]*\).*/\1/p')
sys_expect_eq "M6.4 five jobs queued" 5 "$(wc -w <<<"$ids")"
all_finished() { local i; for i in $ids; do in_state "$i" finished || return 1; done; }
sys_check "M6.5 all five finished" sys_wait_until 300 "five finished" all_finished
# Test 6: a project whose directory does not exist: the job fails, clearly.
out=$(u orchestrator research-code --project Broken 2>&1) || true
bid=$(sed -n 's/^Job queued: \([A-Za-z0-9._-]*\).*/\1/p' <<<"$out" | head -1)
sys_check "M6.6 the Broken project's job fails" sys_wait_until 60 "failed" in_state "${bid:-none}" failed
sys_expect_match "M6.6 ... naming the directory" 'does-not-exist' "$(jfield "$(jobf "${bid:-none}" failed)" error)"
# Test 7: 20 jobs timed (worker_count 3).
s=$(sys_now_ms)
ids20=""
for i in $(seq 20); do
    message "perf-$i" research-code TestProject '{}' chenry | put "$AS/messaging/inbox/perf-$i.json"
done
answered() { local i; for i in $(seq 20); do x test -f "$AS/messaging/outbox/perf-$i.json" || return 1; done; }
sys_check "M6.7 20 messages answered" sys_wait_until 60 "20 answers" answered
for i in $(seq 20); do
    ids20+=" $(x sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$AS/messaging/outbox/perf-$i.json" | head -1)"
done
ids=$ids20
sys_check "M6.7 20 jobs finished" sys_wait_until 900 "20 finished" all_finished
sys_log "M6.7: 20 real-claude jobs (worker_count 3) took $(sys_fmt_ms $(($(sys_now_ms) - s)))"
sys_pass "M6.7 20 jobs in $(sys_fmt_ms $(($(sys_now_ms) - s)))"
sys_expect_eq "the queue manager is still active (stable under load)" active "$(x systemctl is-active queue-manager@poplar.service 2>&1)"
sys_expect_match "orchestratord did not fail" '^(active|inactive)$' "$(x systemctl is-active agentstore-orchestrator.service 2>&1 || true)"
# Provenance: create-prd makes a PRD whose jobs list the job id.
out=$(u orchestrator create-prd --project ModelSEEDpy --task 'A PRD for tests' 2>&1) || true
pid=$(sed -n 's/^Job queued: \([A-Za-z0-9._-]*\).*/\1/p' <<<"$out" | head -1)
prd_lists() { x sh -c "grep -rl '\"${pid:-none}\"' $AS/projects/ModelSEEDpy --include='*.json' | grep -v project.json | grep -q ."; }
sys_check "create-prd: the job finishes" sys_wait_until 240 "finished" in_state "${pid:-none}" finished
sys_check "provenance: the new PRD's jobs list ${pid:-none}" sys_wait_until 60 "the PRD" prd_lists
sys_test_end
