#!/usr/bin/env bash
# t_m5: PRD §12 M5 (Claude Code integration) with the REAL Claude Code CLI inside the
# container, run by agent-worker as the project owner's Unix user (jobuser) in the job's
# transient scope, against a fake Anthropic endpoint (fake_anthropic, on the container's
# loopback; DESIGN §7).
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
# The fake's replies, in order: research job = a Bash tool call, then the document; the
# timeout job's request hangs. Anything else gets the fallback text.
install_claude_env '{"replies": [
  {"tool_use": {"name": "Bash", "input": {"command": "echo tool-ran > tool-ran.txt"}}},
  {"text": "# ModelSEEDpy code research\n\nThe code is documented."},
  "hang"],
 "fallback_text": "# Research\n\nFallback answer."}'
setup_users
setup_project ModelSEEDpy /srv/ModelSEEDpy poplar "$AS/projects/ModelSEEDpy/CODE_RESEARCH.md"
setup_queue poplar 2 /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]'
command_file jobuser code-researcher 'Research the code of this project: $ARGUMENTS'
x systemctl start queue-manager@poplar.service

# Test 1: claude is installed (for the user the jobs run as).
sys_check "M5.1 which claude (as jobuser)" x runuser -u jobuser -- sh -c 'command -v claude'
ver=$(x runuser -u jobuser -- claude --version 2>&1) || true
sys_expect_match "claude --version in the container" 'Claude Code' "$ver"
# Test 2: the code-researcher command exists.
sys_check "M5.2 ~/.claude/commands/code-researcher.md" x test -f /home/jobuser/.claude/commands/code-researcher.md
# Test 3-5: a real research job (as the researcher, over D-Bus).
x runuser -u jobuser -- orchestrator login chenry >/dev/null
out=$(x runuser -u jobuser -- orchestrator research-code --project ModelSEEDpy --follow 300 2>&1) || true
sys_log "research-code: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"
id=$(grep -o '[Jj]ob[ _]\(queued: \|id"\?: *"\?\)[A-Za-z0-9._-]*' <<<"$out" | head -1 | sed 's/.*[: "]//')
sys_expect_match "M5.3 research-code queued a job" '^[A-Za-z0-9][A-Za-z0-9._-]+$' "$id"
sys_check "M5.5 the job finishes" sys_wait_until 240 "finished" in_state "$id" finished
f=$(jobf "$id" finished)
out=$(x cat "$f" 2>&1) || true
# Test 6: the output.
sys_expect_match "M5.6 runtime.output has Claude's answer" 'ModelSEEDpy code research' "$out"
sys_expect_match "exit_code 0" '"exit_code": *0' "$out"
sys_expect_match "num_turns recorded" '"num_turns": *[1-9]' "$out"
sys_expect_match "session_id recorded" '"session_id": *"[0-9a-f-]+"' "$out"
sys_check "Claude's Bash tool ran in the project dir as jobuser" x sh -c '[ "$(stat -c %U /srv/ModelSEEDpy/tool-ran.txt)" = jobuser ]'
sys_check "the fake endpoint saw the /code-researcher prompt" x grep -q 'Research the code of this project' /var/tmp/anthropic.jsonl
# Test 7: the size bound.
size=$(x stat -c %s "$f")
sys_expect_match "M5.7 the job file is under 10 MB ($size bytes)" '^[0-9]{1,7}$' "$size"
# Large outputs: 12 MiB on claude's stdout is cut at 10 MiB, and the job says so. A real
# claude run cannot be made to print that much from a fake API cheaply, so this one job uses
# tests/fixtures/fake-claude (BIG=12) on a second queue, through the same worker.
cp "$REPO/tests/fixtures/fake-claude" "$(sys_root "$m")/usr/local/bin/fake-claude"
setup_queue big 1 /usr/local/bin/fake-claude
x systemctl start queue-manager@big.service
queue_job big-1 "$(job_json ModelSEEDpy claude code-researcher 'BIG=12' 120 '{}' /srv/ModelSEEDpy)" big
ended() { in_state big-1 finished big || in_state big-1 failed big; }
sys_check "M5.7 the 12 MiB job ends" sys_wait_until 120 "big-1 ended" ended
bf=$(x sh -c "ls $AS/Queues/big/Jobs/*_jobs/big-1.json" | head -1)
sys_expect_match "M5.7 runtime.error notes the truncation" 'Output truncated to 10485760 bytes' "$(jfield "$bf" error)"
bsize=$(x stat -c %s "$bf")
sys_expect_match "M5.7 the job file stays near 10 MiB ($bsize bytes)" '^(10|11)[0-9]{6}$' "$bsize"
# Test 8: an unknown Claude command fails early.
queue_job bad-cmd "$(job_json ModelSEEDpy claude no-such-command 'x' 60 '{}' /srv/ModelSEEDpy)"
sys_check "M5.8 the job fails" sys_wait_until 60 "failed" in_state bad-cmd failed
sys_expect_match "M5.8 error: Unknown Claude command" 'Unknown Claude command: no-such-command' "$(jfield "$(jobf bad-cmd failed)" error)"
# Test 9: a timeout (the endpoint hangs): killed after 10 s with every process of its tree.
queue_job slow "$(job_json ModelSEEDpy claude code-researcher 'long task' 10 '{}' /srv/ModelSEEDpy)"
sys_check "M5.9 the job runs" sys_wait_until 60 "running" in_state slow running
claude_running() { x pgrep -u jobuser -f /usr/local/bin/claude >/dev/null; }
sys_check "M5.9 claude runs (as jobuser)" sys_wait_until 30 "claude process" claude_running
sys_check "M5.9 the job fails at its timeout" sys_wait_until 60 "failed" in_state slow failed
sys_expect_match "M5.9 error names the timeout" 'Job timeout after [0-9]+s \(limit: 10s\)' "$(jfield "$(jobf slow failed)" error)"
no_claude() { ! claude_running; }
sys_check "M5.9 no claude process is left" sys_wait_until 15 "claude gone" no_claude
sys_check "M5.9 the scope is gone" sys_wait_until 15 "scope gone" inactive agentstore-job-slow.scope
sys_test_end
