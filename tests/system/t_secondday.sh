#!/usr/bin/env bash
# t_secondday (issue 32): another researcher's day, not the one of t_firstday, on the
# installed package in per-user mode with the real Claude Code CLI against a local fake
# Anthropic endpoint. omar serves a queue of his own name (birch, not the default poplar),
# gives the key before his first job, follows a job to its end, adds a second project (it
# must land on his queue: it landed on a `poplar` nobody served), has a job fail on a model
# error and retries it, answers an approval from the dashboard (deny), cancels a job that
# hangs, reads everything as text at 80 and 160 columns, completes job ids in bash, finds
# the man pages `man orchestrator` names, and breaks two things for `doctor` to find.
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
root=$(sys_root "$m")
# shellcheck source=researcher.sh
. "$SYS_LIB_DIR/researcher.sh"
researcher_setup omar
Q2=birch
fake_model '{"replies": [], "fallback_text": "# Research\n\nGrowth is modelled in growth.py; the tests are in tests/test_growth.py."}'
# Every line of $2 fits $3 columns (characters, whatever the locale).
fits() { perl -CS -ne 'chomp; $bad = 1 if length($_) > '"$3"'; END { exit($bad ? 1 : 0) }' <<<"$2"; }
both_widths() { # WHAT then the orchestrator arguments: the text at 80 and 160 columns fits
    local what=$1 out80 out160
    shift
    out80=$(u env COLUMNS=80 orchestrator "$@" 2>&1) || true
    out160=$(u env COLUMNS=160 orchestrator "$@" 2>&1) || true
    sys_check "$what fits 80 columns" fits "$what" "$out80" 80
    sys_check "$what fits 160 columns" fits "$what" "$out160" 160
    sys_expect_eq "$what says the same at 80 and 160 columns (words)" "$(flat "$out80")" "$(flat "$out160")"
}
uncut() { ! grep -q '…' <<<"$1"; }
both_widths_table() { # like both_widths, for a table (160 may show more columns)
    local what=$1 out80 out160
    shift
    out80=$(u env COLUMNS=80 orchestrator "$@" 2>&1) || true
    out160=$(u env COLUMNS=160 orchestrator "$@" 2>&1) || true
    sys_check "$what fits 80 columns" fits "$what" "$out80" 80
    sys_check "$what fits 160 columns" fits "$what" "$out160" 160
    sys_check "... nothing cut at 160" uncut "$out160"
}

# Set-up: lingering by an administrator, setup with his own queue name, the key first.
u mkdir -p "$H/work/yeast"
u sh -c "printf 'def growth(t):\n    return 2 ** t\n' >$H/work/yeast/growth.py"
sys_check "sudo loginctl enable-linger $U" x loginctl enable-linger "$U"
manager_up() { [ "$(x systemctl is-active "user@$uid.service")" = active ] && x test -S "$RUN/bus"; }
sys_check "the user manager and its session bus are up" sys_wait_until 60 "user manager" manager_up
out=$(u orchestrator setup --project yeast --directory "$H/work/yeast" --serve-queue $Q2 2>&1) || true
sys_log "setup: $out"
sys_expect_match "setup adds queue $Q2 as the store's default" "queue +$Q2 added \\(the store's default queue\\)" "$out"
check_fits "setup" "$out"
us "systemctl --user set-environment ANTHROPIC_BASE_URL=http://127.0.0.1:18555 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1"
out=$(printf 'sk-fake-omar\n' | u orchestrator set-job-key ANTHROPIC_API_KEY 2>&1) && rc=0 || rc=$?
sys_expect_eq "set-job-key before any job exits 0 ($out)" 0 "$rc"
out=$(u orchestrator doctor 2>&1) && rc=0 || rc=$?
sys_log "doctor: $out"
sys_expect_eq "doctor exits 0" 0 "$rc"
sys_expect_match "doctor finds the key for $Q2's jobs" "ok +credentials:$Q2: jobs find ANTHROPIC_API_KEY" "$out"
check_fits "doctor" "$out"

# A job followed to its end; its result read at both widths.
out=$(u orchestrator research-code --project yeast --follow 120 2>&1) || true
sys_log "research-code --follow: $out"
j1=$(queued_id "$out")
sys_expect_match "research-code --follow queues a job" '^[0-9a-f]{8}-' "$j1"
sys_check "... and returns with it finished" uin "$j1" finished $Q2
check_fits "research-code --follow" "$out"
view=$(u orchestrator view-job "$j1" 2>&1) || true
sys_expect_match "view-job shows the result in full" 'the tests are in tests/test_growth.py' "$(flat "$view")"
both_widths "view-job (finished)" view-job "$j1"

# A second project: added without --default-queue, it goes to birch, and nothing warns.
u mkdir -p "$H/work/pathways"
out=$(u orchestrator add-project pathways --directory "$H/work/pathways" 2>&1) || true
sys_expect_match "add-project pathways" 'Created projects/pathways/project.json' "$out"
sys_expect_eq "... on the queue this machine serves" "$Q2" "$(jfield "$S/projects/pathways/project.json" default_queue)"
unwarned() { ! grep -q warning <<<"$1"; }
# The model refuses the request: the job fails, and says why, whole, at 80 columns.
fake_model '{"replies": [{"error": {"status": 400, "error_type": "invalid_request_error", "message": "prompt is too long: 212345 tokens > 200000 maximum"}}], "fallback_text": "# Research\n\nPathways are listed in pathways.tsv."}'
out=$(u orchestrator research-code --project pathways 2>&1) || true
j2=$(queued_id "$out")
sys_expect_match "research-code for pathways queues a job" '^[0-9a-f]{8}-' "$j2"
sys_check "... with no warning (its queue is served)" unwarned "$out"
sys_check "the job fails on the model's error" sys_wait_until 120 "failed" uin "$j2" failed $Q2
view=$(u orchestrator view-job "$j2" 2>&1) || true
sys_log "view-job (failed): $view"
sys_expect_match "... said once (Result points to the error)" 'Result \(the error above\)' "$(flat "$view")"
sys_expect_match "view-job shows the model's error whole" 'Claude exited with code 1: Prompt is too long .* the request is ~212345 tokens \(limit 200000\)' "$(flat "$view")"
both_widths "view-job (failed)" view-job "$j2"
out=$(u orchestrator retry "$j2" 2>&1) || true
j2b=$(queued_id "$out")
sys_expect_match "retry queues it again ($out)" '^[0-9a-f]{8}-' "$j2b"
sys_check "the retried job finishes" sys_wait_until 120 "finished" uin "$j2b" finished $Q2
sys_expect_match "... with the result" 'Pathways are listed in pathways.tsv' "$(flat "$(u orchestrator view-job "$j2b" 2>&1)")"

# An approval answered from the dashboard: Deny, with a reason.
sys_check "the dashboard's socket (orchestrator web says how)" us "systemctl --user enable --now agentstore-web.socket"
sys_check "set-queue $Q2 --approval-rule '*=ask'" u orchestrator set-queue $Q2 --approval-rule '*=ask' --approval-deadline 600
fake_model '{"replies": [{"tool_use": {"name": "Bash", "input": {"command": "rm -rf /home/omar/old-results"}}}, {"text": "Left the old results alone."}], "fallback_text": "Fallback."}'
out=$(u orchestrator research-code --project yeast --task "Clean up old results" 2>&1) || true
j3=$(queued_id "$out")
sys_expect_match "a job that will ask is queued" '^[0-9a-f]{8}-' "$j3"
asks() { u uget "$RUN/agentstore/http.sock" "/jobs/$j3" 2>/dev/null | grep -q 'rm -rf /home/omar/old-results'; }
sys_check "the dashboard's job page shows the request" sys_wait_until 90 "request on the job page" asks
page=$(u uget "$RUN/agentstore/http.sock" "/jobs/$j3" 2>&1) || true
action=$(grep -o 'action="/approvals/[^"]*/answer"' <<<"$page" | head -1 | sed 's/^action="//; s/"$//')
sys_expect_match "... with a form to answer it" "^/approvals/$Q2/[^/]+/answer\$" "$action"
resp=$(u upost "$RUN/agentstore/http.sock" "$action" "decision=deny&message=not+my+data" 2>&1) || true
sys_log "dashboard answer: $(head -1 <<<"$resp")"
sys_expect_match "Deny on the dashboard is accepted" '^HTTP/1\.[01] (200|303)' "$resp"
sys_check "the job goes on and finishes" sys_wait_until 90 "finished" uin "$j3" finished $Q2
view=$(u orchestrator view-job "$j3" 2>&1) || true
sys_log "view-job (denied): $view"
sys_expect_match "view-job records the denial by $U (request a1, as approvals names it)" " a1 denied by $U at .*rm -rf /home/omar/old-results" "$(flat "$view")"
sys_expect_match "... and the reason" 'not my data' "$(flat "$view")"
both_widths "view-job (an approval denied)" view-job "$j3"
sys_check "set-queue $Q2 --no-approvals (no more asking)" u orchestrator set-queue $Q2 --no-approvals

# A job that hangs (the model never answers) is cancelled while it runs.
fake_model '{"replies": ["hang"], "fallback_text": "Fallback."}'
out=$(u orchestrator research-code --project yeast --task "This will hang" 2>&1) || true
j4=$(queued_id "$out")
sys_check "the hanging job runs" sys_wait_until 90 "running" uin "$j4" running $Q2
out=$(u orchestrator cancel-job "$j4" 2>&1) && rc=0 || rc=$?
sys_log "cancel-job: $out"
sys_expect_eq "cancel-job of the running job exits 0" 0 "$rc"
sys_check "the job ends failed" sys_wait_until 60 "failed" uin "$j4" failed $Q2
sys_expect_eq "... cancelled by $U" "Job cancelled by $U" "$(jfield "$(ujob "$j4" failed $Q2)" error)"
unit_gone() { ! u systemctl --user is-active --quiet "agentstore-job-$j4.scope"; }
sys_check "... and its scope is gone" sys_wait_until 30 "scope gone" unit_gone
both_widths "view-job (cancelled)" view-job "$j4"

# The day's lists, at both widths.
both_widths_table "list-jobs" list-jobs
sys_expect_match "list-jobs shows whole ids" "$j2b +finished" "$(u orchestrator list-jobs 2>&1)"
both_widths_table "list-messages" list-messages
both_widths_table "list-queues" list-queues
both_widths_table "list-projects" list-projects
both_widths "approvals (none waiting)" approvals

# bash completion (the package's script) offers his job ids and projects.
comp() { # WORDS… — what bash completion offers for the last word
    # shellcheck disable=SC2034 # COMP_* are read by the completion function
    us "source /usr/share/bash-completion/completions/orchestrator
        COMP_WORDS=($*); COMP_CWORD=\$(( \${#COMP_WORDS[@]} - 1 )); COMP_LINE='$*'; COMP_POINT=\${#COMP_LINE}; COMP_TYPE=9
        _clap_complete_orchestrator orchestrator \"\${COMP_WORDS[-1]}\" \"\${COMP_WORDS[-2]}\"
        printf '%s\n' \"\${COMPREPLY[@]}\""
}
sys_expect_match "completing view-job offers the job ids" "$j2b" "$(comp orchestrator view-job "${j2b:0:6}")"
sys_expect_match "completing --project offers both projects" 'pathways.*yeast|yeast.*pathways' "$(flat "$(comp orchestrator research-code --project "''")")"

# The man pages `man orchestrator` names are installed.
man1=$root/usr/share/man/man1
refs=$(zcat "$man1/orchestrator.1.gz" | grep -o 'orchestrator\\-[a-z\\-]*([0-9])' | sed 's/\\//g' | sort -u)
sys_expect_match "orchestrator(1) names per-command pages" 'orchestrator-view-job\(1\)' "$(flat "$refs")"
missing=""
for r in $refs; do
    p=${r%(*}
    [ -f "$man1/$p.1.gz" ] || missing="$missing $p"
done
sys_expect_eq "every page orchestrator(1) names is installed" "" "$missing"

# Broken on purpose: claude gone, the queue's path unit off. doctor finds both, exits 1.
x mv /usr/local/bin/claude /usr/local/bin/claude.away
u systemctl --user disable --now queue-manager@$Q2.path >/dev/null 2>&1
out=$(u orchestrator doctor 2>&1) && rc=0 || rc=$?
sys_log "doctor (broken): $out"
sys_expect_eq "doctor exits 1 with claude gone" 1 "$rc"
sys_expect_match "... naming claude and the fix" "FAIL +claude:$Q2: claude not found" "$out"
sys_expect_match "... and the queue's path unit that is off" "queue-manager@$Q2.path" "$(grep -E '^(WARN|FAIL) +units' <<<"$out" || true)"
check_fits "doctor (broken)" "$out"
x mv /usr/local/bin/claude.away /usr/local/bin/claude
u systemctl --user enable --now queue-manager@$Q2.path >/dev/null 2>&1
out=$(u orchestrator doctor 2>&1) && rc=0 || rc=$?
sys_expect_eq "doctor exits 0 once both are mended ($(grep -E '^(WARN|FAIL)' <<<"$out" | tr '\n' ' '))" 0 "$rc"
sys_test_end
