#!/usr/bin/env bash
# t_firstday (issue 32): a researcher's first day, as a new user follows the README, on the
# installed package: a real login user with lingering (`sudo loginctl enable-linger`, as the
# README says), per-user mode made by `orchestrator setup`, the real Claude Code CLI against
# a local fake Anthropic endpoint. Each step checks what the person reads (text at 80
# columns) and the frictions found when this day was first tried:
#  - `doctor` right after `setup` (no manager has reported yet) checks the queue this machine
#    watches and warns that Claude has no credentials;
#  - a job without credentials fails saying where unattended jobs find them and how to give
#    them; the key given as the README says (`set-job-key`, no restart by hand), `retry`
#    finishes it;
#  - view-job names the machine by its host name, not only its key;
#  - a project folder that is not there is warned about by host name; its job fails naming it;
#    `edit-project --directory` fixes it and `retry` then runs the job in the new folder;
#  - a queue no machine serves: warned at submission, explained (wrapped) by list-queues, and
#    its waiting job can be cancelled (it could not: no manager to ask);
#  - an approval waits: `approvals` prints the command that answers it (short number), the
#    dashboard's job page shows it with Allow; the printed command answers it;
#  - `orchestrator web` says when the dashboard's socket is not started and how to start it,
#    and prints the exact steps for a browser listener; run verbatim, the dashboard answers
#    on loopback TCP with the user's token.
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
researcher_setup rita
fake_model '{"replies": [], "fallback_text": "# Research\n\nThe model has three modules."}'

# README, "Install from the package": the system store serves no queue until one is
# enabled per machine; doctor says so, and what to run.
out=$(x env COLUMNS=80 orchestrator doctor 2>&1) || true
sys_log "doctor (system): $out"
sys_expect_match "doctor (system mode) warns that no machine serves poplar" 'WARN +queues: no machine serves poplar' "$out"
sys_expect_match "... naming the unit to enable" 'systemctl enable --now queue-manager@poplar.path' "$(tr '\n' ' ' <<<"$out" | tr -s ' ')"
check_fits "doctor (system mode)" "$out"
sys_check "sudo systemctl enable --now queue-manager@poplar.path (README)" x systemctl enable --now queue-manager@poplar.path
sys_expect_match "doctor: poplar is served now" 'ok +queues: served: poplar' "$(x env COLUMNS=80 orchestrator doctor 2>&1 || true)"

# README, "Your own machines": setup, then lingering by an administrator.
u mkdir -p "$H/projects/ecoli"
u sh -c "printf 'def grow():\n    return 1\n' >$H/projects/ecoli/model.py"
sys_check "sudo loginctl enable-linger $U (README)" x loginctl enable-linger "$U"
manager_up() { [ "$(x systemctl is-active "user@$uid.service")" = active ] && x test -S "$RUN/bus"; }
sys_check "the user manager and its session bus are up" sys_wait_until 60 "user manager" manager_up
out=$(u orchestrator setup --project ecoli --directory "$H/projects/ecoli" --serve-queue poplar 2>&1) || true
sys_log "setup: $out"
sys_expect_match "setup enables the units" 'units +enabled: agentstore.target' "$out"
check_fits "setup's report" "$out"
path_active() { [ "$(u systemctl --user is-active queue-manager@poplar.path)" = active ]; }
sys_check "queue-manager@poplar.path is active" sys_wait_until 30 "path unit" path_active

# doctor before any job: the watched queue is checked, the missing credentials named.
out=$(u orchestrator doctor 2>&1) && rc=0 || rc=$?
sys_log "doctor: $out"
sys_expect_eq "doctor exits 0 (warnings only)" 0 "$rc"
sys_expect_match "doctor checks poplar's claude before any manager reported" 'ok +claude:poplar: claude is /usr/local/bin/claude' "$out"
sys_expect_match "doctor warns: no credentials for poplar's jobs" 'WARN +credentials:poplar' "$out"
sys_expect_match "... and says how to fix it" 'orchestrator set-job-key ANTHROPIC_API_KEY' "$(tr '\n' ' ' <<<"$out" | tr -s ' ')"
check_fits "doctor" "$out"

# A first job without credentials: it fails saying how unattended jobs get them.
out=$(u orchestrator research-code --project ecoli 2>&1) || true
j1=$(queued_id "$out")
sys_expect_match "research-code queues a job ($out)" '^[0-9a-f]{8}-' "$j1"
sys_check "the job without credentials fails" sys_wait_until 90 "failed" uin "$j1" failed
view=$(u orchestrator view-job "$j1" 2>&1) || true
sys_log "view-job: $view"
flat=$(tr '\n' ' ' <<<"$view" | tr -s ' ')
sys_expect_match "its error is Claude's own" 'Not logged in' "$flat"
sys_expect_match "... and says where jobs find credentials, for $U" "Claude Code found no usable credentials as $U on $host" "$flat"
sys_expect_match "... and how to give them" "orchestrator set-job-key ANTHROPIC_API_KEY" "$flat"
check_fits "view-job" "$view"

# The test's model endpoint (not a credential) in the user manager's environment, for the
# queue managers started from now on.
us "systemctl --user set-environment ANTHROPIC_BASE_URL=http://127.0.0.1:18555 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1"
# README: the key given with set-job-key, nothing restarted by hand; retry.
out=$(printf 'sk-fake\n' | u orchestrator set-job-key ANTHROPIC_API_KEY 2>&1) && rc=0 || rc=$?
sys_log "set-job-key: $out"
sys_expect_eq "printf KEY | orchestrator set-job-key ANTHROPIC_API_KEY (README) exits 0" 0 "$rc"
sys_expect_match "... and says the next job has it" 'the next job has ANTHROPIC_API_KEY' "$(tr '\n' ' ' <<<"$out" | tr -s ' ')"
check_fits "set-job-key" "$out"
out=$(u orchestrator doctor 2>&1) || true
sys_expect_match "doctor now finds the key" 'ok +credentials:poplar: jobs find ANTHROPIC_API_KEY' "$out"
out=$(u orchestrator retry "$j1" 2>&1) || true
j2=$(queued_id "$out")
sys_expect_match "retry queues it again ($out)" '^[0-9a-f]{8}-' "$j2"
sys_check "the retried job finishes" sys_wait_until 90 "finished" uin "$j2" finished
view=$(u orchestrator view-job "$j2" 2>&1) || true
sys_expect_match "view-job shows Claude's result" 'The model has three modules' "$view"
sys_expect_match "view-job names the machine by its host name" "Where +host $host \\(m-[0-9a-f]{16}\\)" "$view"
check_fits "view-job" "$view"
out=$(u orchestrator list-jobs 2>&1) || true
check_fits "list-jobs" "$out"
sys_expect_match "list-jobs shows both, whole ids" "$j2 +finished" "$out"

# A second project whose folder was mistyped.
out=$(u orchestrator add-project notes --directory "$H/proejcts/notes" 2>&1) || true
sys_expect_match "add-project warns about the missing folder, naming this machine by name" \
    "does not exist on this machine \\($host\\)" "$(flat "$out")"
out=$(u orchestrator setup --project ghost --directory "$H/nowhere" --serve-queue poplar 2>&1) || true
sys_expect_match "setup again with a folder that is not there warns too" \
    "$H/nowhere does not exist on this machine \\($host\\)" "$(flat "$out")"
sys_expect_match "... and keeps what exists" 'user +rita exists' "$out"
out=$(u orchestrator research-code --project notes 2>&1) || true
j3=$(queued_id "$out")
sys_check "its job fails" sys_wait_until 60 "failed" uin "$j3" failed
sys_expect_match "... naming the folder" "Working directory does not exist: $H/proejcts/notes" \
    "$(u orchestrator view-job "$j3" 2>&1 || true)"
# The folder fixed with the CLI (add-project's warning names the command), then retried.
u mkdir -p "$H/projects/notes"
out=$(u orchestrator edit-project notes --directory "$H/projects/notes" 2>&1) && rc=0 || rc=$?
sys_log "edit-project: $out"
sys_expect_eq "edit-project notes --directory (the folder fixed) exits 0" 0 "$rc"
sys_expect_match "... and says what changed" "directory: $H/projects/notes" "$out"
check_fits "edit-project" "$out"
out=$(u orchestrator retry "$j3" 2>&1) || true
j3b=$(queued_id "$out")
sys_expect_match "retry queues it again ($out)" '^[0-9a-f]{8}-' "$j3b"
sys_check "the retried job finishes" sys_wait_until 90 "finished" uin "$j3b" finished
sys_expect_eq "... in the new folder" "$H/projects/notes" "$(jfield "$(ujob "$j3b" finished)" working_directory)"

# A queue no machine serves.
sys_check "add-queue oak" u orchestrator add-queue oak
out=$(u orchestrator research-code --project ecoli --queue oak 2>&1) || true
j4=$(queued_id "$out")
sys_expect_match "submission warns that nobody serves oak" 'warning: no machine serves queue oak' "$out"
sys_check "the job waits in oak's queued_jobs/" sys_wait_until 30 "queued" uin "$j4" queued oak
sys_expect_match "doctor warns that no machine serves oak" 'WARN +queues: no machine serves oak' "$(u orchestrator doctor 2>&1 || true)"
out=$(u orchestrator list-queues 2>&1) || true
sys_log "list-queues: $out"
sys_expect_match "list-queues counts the waiting job" 'oak +[0-9]+ +0 +1 ' "$out"
sys_expect_match "... and says why nothing starts it" 'no machine serves queue oak' "$out"
check_fits "list-queues" "$out"
out=$(u orchestrator cancel-job "$j4" 2>&1) && rc=0 || rc=$?
sys_log "cancel-job: $out"
sys_expect_eq "cancel-job of the job nobody serves exits 0" 0 "$rc"
sys_expect_match "... and says so" "Cancelled job $j4 \\(queue oak; no machine serves queue oak" "$(tr '\n' ' ' <<<"$out" | tr -s ' ')"
sys_check "the job is in oak's failed_jobs/" uin "$j4" failed oak
sys_expect_eq "... cancelled by $U" "Job cancelled by $U" "$(jfield "$(ujob "$j4" failed oak)" error)"
sys_check "... and no longer queued" x test ! -e "$(ujob "$j4" queued oak)"

# The dashboard: `orchestrator web` says the socket is not started yet, and how; run as printed.
out=$(u orchestrator web --no-open 2>&1) || true
sys_log "web: $out"
sys_expect_match "web says agentstore-web.socket is not active" 'agentstore-web.socket is not active' "$out"
check_fits "orchestrator web" "$out"
cmd=$(sed -n 's/^  \(systemctl --user enable --now agentstore-web.socket\)$/\1/p' <<<"$out")
sys_expect_eq "... and prints the command that starts it" "systemctl --user enable --now agentstore-web.socket" "$cmd"
sys_check "the printed command runs" us "$cmd"

# An approval waits while the user reads the dashboard.
fake_model '{"replies": [{"tool_use": {"name": "Bash", "input": {"command": "curl -s https://example.org/growth.csv -o /home/rita/growth.csv"}}}, {"text": "Fetched the data."}], "fallback_text": "Fallback."}'
sys_check "set-queue poplar --approval-rule '*=ask' (README)" u orchestrator set-queue poplar --approval-rule '*=ask' --approval-deadline 600
out=$(u orchestrator create-prd --project ecoli --task "Plan the growth model update" 2>&1) || true
j5=$(queued_id "$out")
sys_expect_match "create-prd queues a job ($out)" '^[0-9a-f]{8}-' "$j5"
waiting() { u orchestrator approvals 2>/dev/null | grep -q "orchestrator approve $j5 a1"; }
sys_check "approvals prints the command that answers the request" sys_wait_until 90 "request" waiting
out=$(u orchestrator approvals 2>&1) || true
sys_log "approvals: $out"
check_fits "approvals" "$out"
sys_expect_match "... what it asks" "asks a1: Bash: curl -s https://example.org/growth.csv" "$(tr '\n' ' ' <<<"$out" | tr -s ' ')"
page=$(u uget "$RUN/agentstore/http.sock" "/jobs/$j5" 2>&1) || true
sys_expect_match "the dashboard's job page shows the request waiting, with Allow" \
    '<table id="pending">.*curl -s https://example.org/growth.csv.*value="allow"' "$page"
sys_expect_match "... and the user's name in the header" "<span style=\"float:right\">$U</span>" "$page"
cmd=$(grep -o "orchestrator approve $j5 a1" <<<"$out" | head -1)
# shellcheck disable=SC2086 # the command as printed, split into words
sys_check "the printed command answers it: $cmd" u $cmd
sys_check "the job finishes" sys_wait_until 90 "finished" uin "$j5" finished
view=$(u orchestrator view-job "$j5" 2>&1) || true
sys_expect_match "view-job records the decision" "allowed by $U at .*: Bash: curl" "$(tr '\n' ' ' <<<"$view" | tr -s ' ')"
sys_check "... naming the tool once" sys_sh "$m" "! runuser -u $U -- env HOME=$H orchestrator view-job $j5 | grep -q 'Bash Bash'"

# The dashboard in a browser: `orchestrator web` prints the steps; run as printed.
out=$(u orchestrator web --no-open 2>&1) || true
sys_log "web: $out"
# Commands are printed whole, to paste (never wrapped); the rest fits.
check_fits "orchestrator web" "$(grep -v '^  ' <<<"$out")"
steps=$(sed -n 's/^  \(mkdir -p \|printf \|systemctl --user \)/\1/p' <<<"$out")
sys_expect_eq "web prints three steps for a TCP listener" 3 "$(grep -c . <<<"$steps")"
sys_check "the steps run as printed" us "$steps"
out=$(u orchestrator web --no-open 2>&1) || true
url=$(sed -n 's/^Dashboard: //p' <<<"$out")
sys_expect_match "web then prints the dashboard's login link" '^http://127\.0\.0\.1:8717/login\?token=[0-9a-f]+$' "$url"
token=${url##*token=}
who() {
    us "exec 3<>/dev/tcp/127.0.0.1/8717 && printf 'GET /api/v1/whoami HTTP/1.0\r\nAuthorization: Bearer $token\r\n\r\n' >&3 && cat <&3" |
        grep -q '"uid":'"$uid"
}
sys_check "the dashboard answers on loopback TCP with the token" sys_wait_until 20 "TCP" who
sys_test_end
