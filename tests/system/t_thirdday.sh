#!/usr/bin/env bash
# t_thirdday (issue 32): a third researcher's day, not those of t_firstday/t_secondday, on the
# installed package in per-user mode with the real Claude Code CLI against a local fake
# Anthropic endpoint and a project in a real git repository. rosa reads the README the
# package installs, sets up, gets a long result, renames her project's folder (the next job
# is warned about as it is queued, fails naming the fix, is mended by edit-project + retry),
# sets her queue's approvals from the CLI and reads them back, has one request denied by a
# rule and one by herself while `logs --follow` watches, breaks config.yaml and mends it,
# and cancels a job that hangs. A second user, ben, sets up on the same machine: each sees
# only their own jobs, on the CLI and on their dashboard. Man pages (man -l, warnings as
# errors) and every binary's --help at 80 columns. Frictions found on this day and checked:
#  - the README was not in /usr/share/doc/agentstore;
#  - setup's default e-mail was login@<machine key>, not login@<host name> as --help says;
#  - `--follow` ended with "Job X: finished" and no word of where the result is;
#  - a job for a project whose folder was renamed was queued without a word, and failed
#    "Working directory does not exist" without the fix;
#  - view-queue cut the approval rules to `[{"tool"… (110 chars; …)`;
#  - `deny` printed the request's 70-character id (a 146-character line).
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
researcher_setup rosa

# Real git: the host's (minbase has none; it needs only libc, zlib and pcre2, all there).
g=$(command -v git) || sys_die "git is not installed on the host"
cp "$(readlink -f "$g")" "$root/usr/local/bin/git"
x git --version >/dev/null 2>&1 || sys_die "the host's git does not run in the container ($(x git --version 2>&1 || true))"

fits() { perl -CS -ne 'chomp; $bad = 1 if length($_) > '"$3"'; END { exit($bad ? 1 : 0) }' <<<"$2"; }
at() { # COLUMNS orchestrator-args… (stdout and stderr)
    local c=$1
    shift
    u env COLUMNS="$c" orchestrator "$@" 2>&1 || true
}
both_widths() { # WHAT ARGS… — fits 80 and 160 columns, the same words at both, nothing cut
    local what=$1 o80 o160
    shift
    o80=$(at 80 "$@")
    o160=$(at 160 "$@")
    sys_check "$what fits 80 columns" fits "$what" "$o80" 80
    sys_check "$what fits 160 columns" fits "$what" "$o160" 160
    # The same text, whitespace aside (a word longer than 80 columns is split at 80 only).
    sys_expect_eq "$what: the same text at 80 and 160 columns" "$(tr -d ' \n' <<<"$o80")" "$(tr -d ' \n' <<<"$o160")"
    sys_check "$what: nothing cut" uncut "$o80"
}
uncut() { ! grep -q '…' <<<"$1"; }
# shellcheck disable=SC2329 # called through sys_check
tables() { # WHAT ARGS… — a table: fits 80 and 160, nothing cut at 160
    local what=$1 o80 o160
    shift
    o80=$(at 80 "$@")
    o160=$(at 160 "$@")
    sys_check "$what fits 80 columns" fits "$what" "$o80" 80
    sys_check "$what fits 160 columns" fits "$what" "$o160" 160
    sys_check "$what: nothing cut at 160" uncut "$o160"
}

# The README, as installed: what a person reads first on a machine with the package.
readme=/usr/share/doc/agentstore/README.md
sys_check "the README is installed ($readme)" x test -s $readme
sys_expect_match "... with the per-user set-up" 'orchestrator setup --project' "$(x cat $readme 2>/dev/null || true)"

# Set-up as the README says: lingering by an administrator, setup, the key.
u mkdir -p "$H/code/soil-model"
u sh -c "printf 'def decay(c, k, t):\n    return c * (1 - k) ** t\n' >$H/code/soil-model/decay.py"
us "cd ~/code/soil-model && git init -q -b main && git config --global user.email rosa@lab && git config --global user.name Rosa && git add . && git commit -qm first" 2>/dev/null
head0=$(us "cd ~/code/soil-model && git rev-parse HEAD" 2>/dev/null) || true
sys_expect_match "a real git repository with one commit" '^[0-9a-f]{40}$' "$head0"
sys_check "sudo loginctl enable-linger $U" x loginctl enable-linger "$U"
manager_up() { [ "$(x systemctl is-active "user@$uid.service")" = active ] && x test -S "$RUN/bus"; }
sys_check "the user manager and its session bus are up" sys_wait_until 60 "user manager" manager_up
out=$(u orchestrator setup --project soil --directory "$H/code/soil-model" 2>&1) || true
sys_log "setup: $out"
sys_expect_match "setup adds the project" "project +soil added \\($H/code/soil-model\\)" "$out"
check_fits "setup" "$out"
sys_expect_eq "setup's default e-mail is login@hostname, as --help says" "$U@$host" \
    "$(jfield "$S/users/$U.json" email)"
us "systemctl --user set-environment ANTHROPIC_BASE_URL=http://127.0.0.1:18555 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1"
out=$(printf 'sk-fake-rosa' | u orchestrator set-job-key ANTHROPIC_API_KEY 2>&1) && rc=0 || rc=$?
sys_expect_eq "set-job-key exits 0 ($out)" 0 "$rc"
out=$(u orchestrator doctor 2>&1) && rc=0 || rc=$?
sys_log "doctor: $out"
sys_expect_eq "doctor exits 0" 0 "$rc"

# A job with a long result, followed to its end; the result read whole at both widths.
long=$(perl -e 'print "# Soil model\n\n"; for $i (1..7) { print "## Section $i\n\nThe decay function in decay.py, part $i, and a word longer than any terminal: ", "x" x 150, "\n\n" } print "The end of the research."')
fake_model "$(perl -MJSON::PP -e 'print encode_json({replies => [], fallback_text => $ARGV[0]})' "$long")"
out=$(u orchestrator research-code --project soil --follow 120 2>&1) || true
sys_log "research-code --follow: $out"
j1=$(queued_id "$out")
sys_expect_match "research-code --follow queues a job" '^[0-9a-f]{8}-' "$j1"
sys_check "... that finished" uin "$j1" finished
sys_expect_match "... and says where its result is" "its result: orchestrator view-job $j1" "$out"
check_fits "research-code --follow" "$out"
view=$(u orchestrator view-job "$j1" 2>&1) || true
sys_expect_match "view-job shows the long result to its last line" 'Section 7 .*The end of the research\.' "$(flat "$view")"
both_widths "view-job (long result)" view-job "$j1"
sys_expect_eq "the job left the repository's history alone" "$head0" "$(us "cd ~/code/soil-model && git rev-parse HEAD" 2>/dev/null || true)"
sys_expect_match "... and its research document is a new file in the work tree" '\?\? CODE_RESEARCH.md' \
    "$(us "cd ~/code/soil-model && git status --short" 2>/dev/null || true)"

# The project's folder renamed: warned as the job is queued; the job fails naming the fix.
u mv "$H/code/soil-model" "$H/code/soil"
o80=$(at 80 research-code --project soil --task "Explain decay")
sys_log "research-code (folder moved): $o80"
j2=$(queued_id "$o80")
sys_expect_match "a job for the moved project is queued" '^[0-9a-f]{8}-' "$j2"
sys_expect_match "... with a warning naming the folder and the fix" \
    "warning: $H/code/soil-model does not exist on this machine .*orchestrator edit-project soil --directory DIR" "$(flat "$o80")"
sys_check "the job fails" sys_wait_until 60 "failed" uin "$j2" failed
sys_expect_match "... saying where and what to do" \
    "Working directory does not exist: $H/code/soil-model \\(on $host\\); if the project moved: .orchestrator edit-project soil --directory NEW_DIR., then .orchestrator retry. the job" \
    "$(jfield "$(ujob "$j2" failed)" error)"
both_widths "view-job (the folder moved)" view-job "$j2"
sys_check "edit-project soil --directory ~/code/soil" u orchestrator edit-project soil --directory "$H/code/soil"
out=$(u orchestrator retry "$j2" 2>&1) || true
j2b=$(queued_id "$out")
sys_expect_match "retry queues it again" '^[0-9a-f]{8}-' "$j2b"
sys_check "the retry finishes in the new folder" sys_wait_until 120 "finished" uin "$j2b" finished
sys_expect_eq "... recorded as $H/code/soil" "$H/code/soil" "$(jfield "$(ujob "$j2b" finished)" working_directory)"

# Approvals set from the CLI and read back whole.
sys_check "set-queue poplar --approval-rule … --approval-default ask" u orchestrator set-queue poplar \
    --approval-rule 'Bash:git push*=deny' --approval-rule 'Bash:git status*=allow' \
    --approval-default ask --approval-deadline 600
vq=$(u orchestrator view-queue poplar 2>&1) || true
sys_log "view-queue: $vq"
sys_expect_match "view-queue shows each rule whole" '1\. Bash git push\* → deny .*2\. Bash git status\* → allow' "$(flat "$vq")"
sys_expect_match "... what happens otherwise and when nobody answers" 'otherwise ask a person; a request nobody answers in 600 s is denied' "$(flat "$vq")"
both_widths "view-queue" view-queue poplar
fake_model '{"replies": [{"tool_use": {"name": "Bash", "input": {"command": "git push origin main"}}}, {"tool_use": {"name": "Bash", "input": {"command": "rm -rf /home/rosa/soil-cache"}}}, {"text": "Left the cache and the remote alone."}], "fallback_text": "Fallback."}'
out=$(u orchestrator research-code --project soil --task "Tidy the repository" 2>&1) || true
j3=$(queued_id "$out")
sys_expect_match "a job that will ask is queued" '^[0-9a-f]{8}-' "$j3"
u orchestrator logs "$j3" --follow 120 >"$root/var/tmp/logs-j3.txt" 2>&1 &
logs_pid=$!
asks() { grep -q 'Bash: rm -rf /home/rosa/soil-cache' <<<"$(flat "$(u orchestrator approvals 2>/dev/null)")"; }
sys_check "approvals lists the request the rules left to a person" sys_wait_until 90 "request" asks
out=$(u orchestrator approvals 2>&1) || true
sys_expect_match "... with the command that denies it" "orchestrator deny $j3 a2" "$out"
check_fits "approvals" "$out"
o80=$(at 80 deny "$j3" a2 --reason "keep the cache")
sys_expect_eq "deny names the request as approvals does, on one line of 80" "Denied request a2 of job $j3" "$o80"
sys_check "the job finishes" sys_wait_until 90 "finished" uin "$j3" finished
logs_done() { ! kill -0 "$logs_pid" 2>/dev/null; }
sys_check "logs --follow returns once the job has ended" sys_wait_until 30 "logs --follow" logs_done
wait "$logs_pid" 2>/dev/null || true
logs=$(cat "$root/var/tmp/logs-j3.txt")
sys_expect_match "logs --follow showed the rule's denial and rosa's" 'denied by queue rule.*denied by rosa' "$(flat "$logs")"
view=$(u orchestrator view-job "$j3" 2>&1) || true
sys_expect_match "view-job records a1 denied by the rule" 'a1 denied by queue rule .*git push origin main' "$(flat "$view")"
sys_expect_match "... and a2 denied by rosa, with her reason" 'a2 denied by rosa .*rm -rf /home/rosa/soil-cache — keep the cache' "$(flat "$view")"
both_widths "view-job (two denials)" view-job "$j3"
sys_check "set-queue poplar --no-approvals" u orchestrator set-queue poplar --no-approvals

# config.yaml broken by hand: every command names the file, the key and the line; mended.
cfg=$S/config.yaml
x cp "$cfg" /var/tmp/config.yaml.good
x sed -i 's/^  idle_exit_seconds: .*/  idle_exit_seconds: 5 minutes/' "$cfg"
out=$(u orchestrator list-jobs 2>&1) && rc=0 || rc=$?
sys_expect_eq "list-jobs with a broken config.yaml exits 1" 1 "$rc"
sys_expect_match "... naming the file, the key and the line" "$cfg: .*orchestrator.idle_exit_seconds: .* at line [0-9]+" "$(flat "$out")"
out=$(u orchestrator doctor 2>&1) && rc=0 || rc=$?
sys_expect_eq "doctor exits 1" 1 "$rc"
sys_expect_match "... FAIL store naming the key" 'FAIL +store: .*idle_exit_seconds' "$(flat "$out")"
check_fits "doctor (config.yaml broken)" "$out"
x cp /var/tmp/config.yaml.good "$cfg"
sys_expect_eq "doctor exits 0 once config.yaml is mended" 0 "$(u orchestrator doctor >/dev/null 2>&1 && echo 0 || echo 1)"

# A job that hangs, cancelled.
fake_model '{"replies": ["hang"], "fallback_text": "Fallback."}'
out=$(u orchestrator research-code --project soil --task "This will hang" 2>&1) || true
j4=$(queued_id "$out")
sys_check "the hanging job runs" sys_wait_until 90 "running" uin "$j4" running
sys_check "cancel-job" u orchestrator cancel-job "$j4"
sys_check "the job ends failed" sys_wait_until 60 "failed" uin "$j4" failed
sys_expect_eq "... cancelled by $U" "Job cancelled by $U" "$(jfield "$(ujob "$j4" failed)" error)"

# A second user on the same machine: his own store, queue and jobs.
ben_u() {
    x runuser -u ben -- env HOME=/home/ben USER=ben LOGNAME=ben XDG_RUNTIME_DIR="/run/user/$buid" \
        DBUS_SESSION_BUS_ADDRESS="unix:path=/run/user/$buid/bus" COLUMNS=80 "$@"
}
x useradd --create-home --shell /bin/bash ben
buid=$(x id -u ben)
sys_check "sudo loginctl enable-linger ben" x loginctl enable-linger ben
ben_up() { [ "$(x systemctl is-active "user@$buid.service")" = active ] && x test -S "/run/user/$buid/bus"; }
sys_check "ben's user manager is up" sys_wait_until 60 "ben's manager" ben_up
ben_u mkdir -p /home/ben/src/enzymes
out=$(ben_u orchestrator setup --project enzymes --directory /home/ben/src/enzymes --serve-queue oak 2>&1) || true
sys_expect_match "ben's setup adds queue oak" 'queue +oak added' "$out"
out=$(ben_u orchestrator research-code --project enzymes --jobtype noop --follow 60 2>&1) || true
jb=$(queued_id "$out")
sys_expect_match "ben's noop job finishes" "Job $jb: finished" "$out"
sys_check "ben's list-jobs has his job" grep -q "$jb" <<<"$(ben_u orchestrator list-jobs 2>&1)"
nothing_of_rosa() { ! grep -q "$j1" <<<"$(ben_u orchestrator list-jobs 2>&1)"; }
sys_check "... and none of rosa's" nothing_of_rosa
nothing_of_ben() { ! grep -q "$jb" <<<"$(u orchestrator list-jobs 2>&1)"; }
sys_check "rosa's list-jobs has none of ben's" nothing_of_ben
out=$(ben_u orchestrator --root "$S" list-jobs 2>&1) && rc=0 || rc=$?
sys_expect_eq "ben cannot read rosa's store ($(flat "$out"))" 1 "$rc"
sys_check "rosa's dashboard socket" us "systemctl --user enable --now agentstore-web.socket"
sys_check "ben's dashboard socket" ben_u systemctl --user enable --now agentstore-web.socket
api=$(u uget "$RUN/agentstore/http.sock" /api/v1/jobs 2>&1) || true
sys_expect_match "rosa's dashboard lists her jobs" "$j1" "$api"
sys_check "... and none of ben's" bash -c '! grep -q "$1" <<<"$2"' _ "$jb" "$api"
api=$(ben_u uget "/run/user/$buid/agentstore/http.sock" /api/v1/jobs 2>&1) || true
sys_expect_match "ben's dashboard lists his job" "$jb" "$api"
sys_check "... and none of rosa's" bash -c '! grep -q "$1" <<<"$2"' _ "$j1" "$api"

# The day's lists at both widths.
tables "list-jobs" list-jobs
tables "list-queues" list-queues
tables "list-projects" list-projects

# Man pages (man -l, warnings as errors) and every binary's --help at 80 columns.
command -v man >/dev/null || sys_die "man is not installed on the host"
bad=""
for p in "$root"/usr/share/man/man1/{orchestrator,orchestratord,queue-manager,agent-worker,agentshell,agentstore-web,agentstore-notify}*.1.gz; do
    w=$(MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -l "$p" 2>&1 >/dev/null) || bad="$bad $(basename "$p")(exit)"
    [ -z "$w" ] || bad="$bad $(basename "$p"): $w"
done
sys_expect_eq "every agentstore man page formats without a warning" "" "$bad"
for b in orchestrator orchestratord queue-manager agent-worker agentshell agentstore-web agentstore-notify; do
    out=$(u env COLUMNS=80 "$b" --help 2>&1) && rc=0 || rc=$?
    sys_expect_eq "$b --help exits 0" 0 "$rc"
    check_fits "$b --help" "$out"
done
sys_test_end
