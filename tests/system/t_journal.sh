#!/usr/bin/env bash
# t_journal: structured journal fields: `journalctl JOB_ID=<id>` shows that job's lines (from
# the queue manager and its worker) and nothing of another job; `journalctl CORRELATION_ID=`
# shows a message's handling by orchestratord; QUEUE= and PROJECT= are set.
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
x systemctl start queue-manager@poplar.service
j() { x journalctl --no-pager -o cat "$@" 2>&1 || true; }

queue_job jA "$(job_json TestProject noop noop 'job A' 60 '{"sleep_seconds": 1}')"
queue_job jB "$(job_json TestProject noop noop 'job B' 60 '{"sleep_seconds": 1}')"
sys_check "job jA finishes" sys_wait_until 30 "jA finished" in_state jA finished
sys_check "job jB finishes" sys_wait_until 30 "jB finished" in_state jB finished
has_finished() { j JOB_ID=jA | grep -q 'finished'; }
sys_check "journalctl JOB_ID=jA shows the job finishing" sys_wait_until 10 "journal lines" has_finished
out=$(j JOB_ID=jA)
sys_log "journalctl JOB_ID=jA:"$'\n'"${out//$'\n'/$'\n'    }"
sys_expect_match "journalctl JOB_ID=jA shows it starting" 'start' "$out"
sys_expect_eq "journalctl JOB_ID=jA has no line of jB" 0 "$(grep -c 'jB' <<<"$out" || true)"
ids=$(x journalctl --no-pager -o verbose JOB_ID=jA 2>/dev/null | sed -n 's/^ *SYSLOG_IDENTIFIER=//p' | sort -u | tr '\n' ' ')
sys_expect_match "JOB_ID=jA lines come from the manager and the worker ($ids)" 'queue-manager.*|agent-worker' "$ids"
sys_expect_match "QUEUE=poplar is set on them" 'QUEUE=poplar' "$(x journalctl --no-pager -o verbose JOB_ID=jA 2>&1)"
sys_expect_match "PROJECT=TestProject is set on them" 'PROJECT=TestProject' "$(x journalctl --no-pager -o verbose JOB_ID=jA 2>&1)"
out=$(x orchestrator logs jA 2>&1) || true
sys_expect_match "orchestrator logs jA reads the journal" 'finished' "$out"

# job-log (the dashboard's live log): the job's lines, and none that another account wrote
# under its JOB_ID (JOB_ID= is the sender's word; _UID is journald's).
x runuser -u mallory -- logger --journald <<'EOT'
JOB_ID=jA
MESSAGE=forged-by-mallory
EOT
has_forged() { j JOB_ID=jA | grep -q forged-by-mallory; }
sys_check "mallory's line under JOB_ID=jA is in the journal" sys_wait_until 10 "forged line" has_forged
message jl-1 job-log null '{"job": "jA"}' chenry | put "$AS/messaging/inbox/jl-1.json"
sys_check "job-log is answered" sys_wait_until 30 "answer" x test -f "$AS/messaging/outbox/jl-1.json"
out=$(x cat "$AS/messaging/outbox/jl-1.json")
sys_log "job-log jA: $out"
sys_expect_match "job-log jA holds the job's lines" 'finished' "$out"
sys_expect_match "job-log jA says the job has ended" '"ended": *true' "$out"
sys_expect_eq "job-log jA leaves out mallory's forged line" 0 "$(grep -c 'forged-by-mallory' <<<"$out" || true)"
message jl-2 job-log null '{"job": "jA"}' alice | put "$AS/messaging/inbox/jl-2.json"
sys_check "alice's job-log is answered" sys_wait_until 30 "answer" x test -f "$AS/messaging/outbox/jl-2.json"
sys_expect_match "alice may not read chenry's job's log" '"status": *"error"' "$(x cat "$AS/messaging/outbox/jl-2.json")"

# A message's lines carry CORRELATION_ID=.
message corr-42 list-projects | put "$AS/messaging/inbox/corr-42.json"
sys_check "the message is answered" sys_wait_until 30 "answer" x test -f "$AS/messaging/outbox/corr-42.json"
has_corr() { [ -n "$(j CORRELATION_ID=corr-42)" ]; }
sys_check "journalctl CORRELATION_ID=corr-42 shows its handling" sys_wait_until 10 "journal" has_corr
sys_log "journalctl CORRELATION_ID=corr-42: $(j CORRELATION_ID=corr-42 | tr '\n' '|')"
sys_expect_match "... from orchestratord" 'orchestratord' "$(x journalctl --no-pager -o verbose CORRELATION_ID=corr-42 2>&1 | grep SYSLOG_IDENTIFIER)"
# An agent command: the job created for a message carries both fields.
message corr-43 research-code TestProject '{}' chenry | put "$AS/messaging/inbox/corr-43.json"
sys_check "the research-code message is answered" sys_wait_until 30 "answer" x test -f "$AS/messaging/outbox/corr-43.json"
jid=$(x sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$AS/messaging/outbox/corr-43.json" | head -1)
out=$(x journalctl --no-pager -o verbose CORRELATION_ID=corr-43 2>&1)
sys_expect_match "the job-created line has CORRELATION_ID=corr-43 and JOB_ID=$jid" "JOB_ID=$jid" "$out"
sys_test_end
