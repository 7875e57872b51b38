#!/usr/bin/env bash
# t_systemkey (issue 32): a key for the system-wide queue managers in one command, as for
# per-user ones (t_usermode): `printf %s "$KEY" | sudo orchestrator set-job-key --system
# ANTHROPIC_API_KEY` encrypts it with systemd-creds into /etc/credstore.encrypted/ (root only),
# names it in a drop-in of queue-manager@.service, reloads systemd and restarts the manager
# that runs now, whose running job goes on. Nobody restarts anything by hand: the next real
# Claude Code job (as jobuser, in its scope) sends the key to the fake Anthropic endpoint.
# The key is then looked for where it must not be: unit files, `systemctl show`, the
# manager's environment, the store, every journal field, /etc in clear, the command's output.
# `doctor` warns before and finds it after; `--remove` takes it away the same way, and the
# next job fails saying how to give it. Who may: root only, and a root without --system is
# told to add it.
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
key="sk-ant-system-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
install_claude_env '{"replies": [], "fallback_text": "# Research\n\nDone with the system key."}'
root=$(sys_root "$m")
# The endpoint without any key (install_claude_env's drop-in has a fake one).
printf '[Service]\nEnvironment=ANTHROPIC_BASE_URL=http://127.0.0.1:18555 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1\n' \
    >"$root/etc/systemd/system/queue-manager@.service.d/claude.conf"
x systemctl daemon-reload
setup_users
setup_project KeyProject /srv/KeyProject poplar
setup_queue poplar 2 /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]'
command_file jobuser code-researcher 'Research the code of this project: $ARGUMENTS'
fits80() { ! awk 'length($0) > 80 { bad = 1 } END { exit !bad }' <<<"$1"; }
flat() { tr '\n' ' ' <<<"$1" | tr -s ' '; }
qm=queue-manager@poplar.service
sys_check "$qm starts (no key yet)" x systemctl start "$qm"
# A job that runs while the key is set: it must go on across the manager's restart.
queue_job long-1 "$(job_json KeyProject noop noop 'runs across the restart' 120 '{"sleep_seconds": 15}' /srv/KeyProject)"
sys_check "a long job runs" sys_wait_until 60 "long-1 running" in_state long-1 running
pid0=$(x systemctl show -p MainPID --value "$qm")

out=$(x env COLUMNS=80 orchestrator doctor 2>&1) || true
sys_log "doctor before: $out"
sys_expect_match "doctor warns: the system-wide managers have no key" 'WARN +credentials:poplar' "$out"
sys_expect_match "... naming the command" 'sudo orchestrator set-job-key --system ANTHROPIC_API_KEY' "$(flat "$out")"

# Who may: root only; root without --system is sent to it.
out=$(x runuser -u alice -- env COLUMNS=80 orchestrator set-job-key --system ANTHROPIC_API_KEY </dev/null 2>&1) && rc=0 || rc=$?
sys_expect_eq "as alice: set-job-key --system exits 1" 1 "$rc"
sys_expect_match "... saying to run it with sudo" '`sudo orchestrator set-job-key --system ANTHROPIC_API_KEY`' "$out"
sys_check "... and fits 80 columns" fits80 "$out"
out=$(printf 'x\n' | x orchestrator set-job-key ANTHROPIC_API_KEY 2>&1) && rc=0 || rc=$?
sys_expect_eq "as root without --system: exits 1" 1 "$rc"
sys_expect_match "... naming --system" 'set-job-key --system ANTHROPIC_API_KEY' "$out"
sys_check "... and writes nothing" x test ! -e /root/.config/agentstore/keys

# The command, as the README gives it.
setkey=$(printf '%s\n' "$key" | x env COLUMNS=80 orchestrator set-job-key --system ANTHROPIC_API_KEY 2>&1) && rc=0 || rc=$?
sys_log "set-job-key --system: $setkey"
sys_expect_eq "printf KEY | sudo orchestrator set-job-key --system ANTHROPIC_API_KEY exits 0" 0 "$rc"
sys_expect_match "... encrypted by systemd-creds" 'encrypted by systemd-creds' "$(flat "$setkey")"
sys_expect_match "... and says it restarted the running manager" "restarted +$qm" "$setkey"
sys_check "... in 80 columns" fits80 "$setkey"
kf=/etc/credstore.encrypted/job-env.ANTHROPIC_API_KEY
sys_expect_eq "the credential file is root's alone" "600 root" "$(x stat -c '%a %U' "$kf" 2>&1)"
drop=/etc/systemd/system/queue-manager@.service.d/agentstore-keys.conf
sys_check "the drop-in names it" x grep -qxF "LoadCredentialEncrypted=job-env.ANTHROPIC_API_KEY:$kf" "$drop"
sys_expect_match "systemd reads the drop-in (systemctl show DropInPaths)" 'agentstore-keys\.conf' \
    "$(x systemctl show -p DropInPaths "$qm")"
new_manager() {
    local p
    p=$(x systemctl show -p MainPID --value "$qm")
    [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$pid0" ] && active "$qm"
}
sys_check "a new manager runs (restarted by the command, nobody by hand)" sys_wait_until 30 "new manager" new_manager
queue_job key-1 "$(job_json KeyProject claude code-researcher 'use the key' 170 '{}' /srv/KeyProject)"
ended() { in_state "$1" finished || in_state "$1" failed; }
sys_check "the next claude job ends" sys_wait_until 200 "key-1 ended" ended key-1
sys_check "... finished" in_state key-1 finished
sent() { x grep -qF "\"x-api-key\",\"$key\"" /var/tmp/anthropic.jsonl; }
sys_check "its agent sent the key to the endpoint (x-api-key)" sent
sys_check "the long job, running across the restart, finishes" sys_wait_until 60 "long-1 finished" in_state long-1 finished
out=$(x env COLUMNS=80 orchestrator doctor 2>&1) || true
sys_expect_match "doctor now finds the key" 'ok +credentials:poplar: jobs get ANTHROPIC_API_KEY' "$out"

absent() { # WHAT then a command whose output must not hold the key
    local what=$1 out
    shift
    out=$("$@" 2>&1) || true
    if grep -qF "$key" <<<"$out"; then
        sys_fail "the key appears in $what"
    else
        sys_pass "the key is not in $what ($(wc -c <<<"$out") bytes looked at)"
    fi
}
absent "unit files and drop-ins" x grep -rF -- "$key" /etc/systemd /usr/lib/systemd /lib/systemd
absent "systemctl show $qm" x systemctl show "$qm"
absent "the manager's process environment" x sh -c "tr '\\0' '\\n' </proc/\$(systemctl show -p MainPID --value $qm)/environ"
absent "the store (/var/lib/agentstore)" x grep -rF -- "$key" /var/lib/agentstore
absent "the journal (every field of every entry)" x journalctl -o export --no-pager
absent "/etc in clear (the credential is encrypted)" x grep -rF -- "$key" /etc
absent "the output of set-job-key" printf '%s' "$setkey"

# --remove, the same way: the next job has no key and says how to give one.
pid1=$(x systemctl show -p MainPID --value "$qm")
out=$(x env COLUMNS=80 orchestrator set-job-key --system ANTHROPIC_API_KEY --remove 2>&1) && rc=0 || rc=$?
sys_log "--remove: $out"
sys_expect_eq "set-job-key --system --remove exits 0" 0 "$rc"
sys_check "... removes the credential" x test ! -e "$kf"
sys_check "... and the drop-in (no key left)" x test ! -e "$drop"
pid0=$pid1
sys_check "... and restarts the manager" sys_wait_until 30 "new manager" new_manager
queue_job key-2 "$(job_json KeyProject claude code-researcher 'no key now' 170 '{}' /srv/KeyProject)"
sys_check "the next claude job fails" sys_wait_until 200 "key-2 failed" in_state key-2 failed
sys_log "key-2: $(x cat "$(jobf key-2 failed)" | tr '\n' ' ' | cut -c1-1200)"
sys_check "... saying how to give the system-wide key" \
    x grep -qF 'sudo orchestrator set-job-key --system ANTHROPIC_API_KEY' "$(jobf key-2 failed)"
sys_test_end
