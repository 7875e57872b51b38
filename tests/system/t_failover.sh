#!/usr/bin/env bash
# t_failover: the orchestrator's machine goes silent and a standby on another machine takes over
# (issue 13), the store synced by REAL Syncthing (tests/system/syncthing.sh: alpha =
# /var/lib/agentstore, beta = /srv/beta, one container). orchestratord on alpha (systemd,
# AGENTSTORE_HOSTNAME=alpha), a standby orchestratord on beta (`--standby`, config.yaml
# `orchestrator.standby: [beta]`, lock heartbeat 1 s, stale after 4 s), queue `beech` served on
# beta. Checks:
#   - while alpha holds the lock, beta's standby answers nothing: messages written on beta are
#     answered by alpha;
#   - alpha cut off (its orchestratord SIGSTOPped, its Syncthing killed) → beta's standby takes
#     the lock over (epoch + 1) and answers messages written on beta, which run on beta;
#   - alpha back (Syncthing first, then SIGCONT) → alpha's orchestratord sees the newer lock
#     and stands down (exit status 2, not restarted); beta stays the holder and answers what is
#     written on either machine afterwards;
#   - every message answered exactly once, one job each; no conflict copy of anything.
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_use_wide_rootfs
sys_test_begin
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
m=$SYS_MACHINE
# shellcheck source=store.sh
. "$SYS_LIB_DIR/store.sh"
A=$AS
B=/srv/beta
Q=beech

# --- the store on alpha and its copy on beta, synced by two Syncthing instances ---------------
# shellcheck source=syncthing.sh
. "$SYS_LIB_DIR/syncthing.sh"
st_two_copies 60 's/^orchestrator:$/orchestrator:\n  standby: [beta]\n  lock_heartbeat_seconds: 1\n  lock_stale_after_seconds: 4\n  takeover_settle_seconds: 1/'
x grep -q '^  standby: \[beta\]' "$B/config.yaml" || sys_die "config.yaml: no orchestrator.standby ($(x cat "$A/config.yaml" | tr '\n' ' '))"

# lock_field COPY NAME — a field of the store lock in COPY ($A or $B)
lock_field() { jfield "$1/.orchestrator.lock" "$2" 2>/dev/null; }
sys_check "alpha: orchestratord starts" x systemctl start agentstore-orchestrator.service
held_by() { [ "$(lock_field "$1" host)" = "$2" ]; } # COPY HOST
sys_check "alpha holds the store lock (beta's copy says so)" sys_wait_until 60 "lock alpha on beta" held_by "$B" alpha
epoch0=$(lock_field "$B" epoch)
x systemd-run --unit ob-beta --uid=agentstore --gid=agentstore -p Environment=HOME=/var/tmp \
    -p Environment=AGENTSTORE_HOSTNAME=beta -p Environment=RUST_LOG=info \
    /usr/bin/orchestratord --standby --bus none --idle-exit 0 --root "$B" >/dev/null 2>&1 ||
    sys_die "cannot start beta's standby orchestratord"
x systemd-run --unit qm-beta -p Environment=AGENTSTORE_HOSTNAME=beta -p Environment=RUST_LOG=info \
    /usr/bin/queue-manager --queue beech --bus none --launcher direct --idle-exit 0 --root "$B" >/dev/null 2>&1 ||
    sys_die "cannot start beta's queue manager"
standby_b() { x grep -q '"role": *"standby"' "$B/machines/beta/orchestratord.json" 2>/dev/null; }
sys_check "beta's orchestratord waits as a standby" sys_wait_until 30 "beta standby" standby_b

msg_json() { # ID
    cat <<EOT
{"correlation_id": "$1", "source": "user", "project": "TestProject", "queue_time": "$(now)",
 "processed_time": null, "command": "research-code",
 "content": {"task": "failover $1", "jobtype": "noop", "supporting_data": {"sleep_seconds": 0}},
 "status": "queued", "error": null, "user": null}
EOT
}
put_b() { as_svc sh -c 'd=$(dirname "$1"); cat >"$d/.put.$$" && mv "$d/.put.$$" "$1"' sh "$1"; }
answered() { # COPY ID
    x grep -q '"job_id"' "$1/messaging/outbox/$2.json" 2>/dev/null
}
answered_all() { # COPY ID...
    local c=$1 i
    shift
    for i in "$@"; do answered "$c" "$i" || return 1; done
}
processed_on() { # COPY ID — the host that answered ID, from its events
    x sh -c "grep -h '\"message_answered\"' $1/logs/events-*.jsonl 2>/dev/null | grep -F '\"$2\"' | grep -o '\"host\": *\"[a-z]*\"' | head -1" | sed 's/.*"\([a-z]*\)"$/\1/'
}

# --- alpha active: messages written on beta are answered by alpha -------------------------------
for i in 1 2 3; do msg_json "a-$i" | put_b "$B/messaging/inbox/a-$i.json"; done
sys_check "alpha answers messages written on beta (seen in beta's outbox)" sys_wait_until 90 "a answers" answered_all "$B" a-1 a-2 a-3
sys_check "... while beta's standby still waits" standby_b

# --- alpha cut off: its orchestratord stopped, its Syncthing killed -----------------------------
apid=$(x systemctl show -p MainPID --value agentstore-orchestrator.service)
x kill -STOP "$apid"
cut_at=$(sys_now_ms)
# Its last lock heartbeat reaches beta before the link goes (a heartbeat written on alpha and
# never seen by beta, then beta's take-over, would be two machines' edits of one file: a
# Syncthing conflict copy of the lock when alpha comes back).
lock_settled() { x cmp -s "$A/.orchestrator.lock" "$B/.orchestrator.lock"; }
sys_check "alpha's last lock heartbeat reached beta" sys_wait_until 20 "lock settled" lock_settled
sys_kill9 "$m" st-alpha.service
sys_check "beta's standby takes the lock over (epoch $epoch0 + 1)" sys_wait_until 60 "lock beta on beta" held_by "$B" beta
sys_log "beta took over $(sys_fmt_ms $(($(sys_now_ms) - cut_at))) after alpha went silent (lock stale after 4 s, settle 1 s)"
sys_expect_eq "... at the next epoch" "$((epoch0 + 1))" "$(lock_field "$B" epoch)"
active_b() { x grep -q '"role": *"active"' "$B/machines/beta/orchestratord.json" 2>/dev/null; }
sys_check "beta's orchestratord reports itself active" sys_wait_until 20 "beta active" active_b
for i in 1 2 3; do msg_json "b-$i" | put_b "$B/messaging/inbox/b-$i.json"; done
sys_check "with alpha gone, beta answers messages written on beta" sys_wait_until 60 "b answers" answered_all "$B" b-1 b-2 b-3
b_jobs_done() {
    local n
    n=$(x sh -c "grep -l '\"correlation_id\": *\"b-' $B/Queues/beech/Jobs/finished_jobs/*.json 2>/dev/null | wc -l")
    [ "$n" -eq 3 ]
}
sys_check "... and their jobs run on beta" sys_wait_until 60 "b jobs" b_jobs_done

# --- alpha comes back: Syncthing first (its copy learns beta's lock), then its orchestratord ---
sys_check "alpha's Syncthing comes back" st_start alpha
sys_check "alpha's copy shows beta's lock" sys_wait_until 60 "lock beta on alpha" held_by "$A" beta
x kill -CONT "$apid"
stood_down() { ! active agentstore-orchestrator.service; }
sys_check "alpha's orchestratord sees the newer lock and stands down" sys_wait_until 30 "alpha stood down" stood_down
sys_log "alpha's orchestratord: $(x systemctl show -p Result -p ExecMainCode -p ExecMainStatus agentstore-orchestrator.service | tr '\n' ' '); journal: $(x journalctl -u agentstore-orchestrator.service -n 4 --no-pager -o cat | tr '\n' '|')"
said_so() { x journalctl -u agentstore-orchestrator.service --no-pager -o cat | grep -q 'standing down'; }
sys_check "... saying so in its journal (standing down: beta took the lock over)" sys_wait_until 10 "journal" said_so
sleep 6 # RestartSec=5s: a restart would have happened by now
sys_check "... and systemd did not start it again" stood_down
sys_expect_eq "beta still holds the lock (beta's copy)" beta "$(lock_field "$B" host)"
sys_expect_eq "beta still holds the lock (alpha's copy)" beta "$(lock_field "$A" host)"
for i in 1 2; do
    msg_json "c-$i" | put_b "$B/messaging/inbox/c-$i.json"
    msg_json "d-$i" | put "$A/messaging/inbox/d-$i.json"
done
sys_check "afterwards beta answers messages written on either machine" sys_wait_until 90 "c/d answers" answered_all "$B" c-1 c-2 d-1 d-2
d_on_alpha() { answered_all "$A" d-1 d-2; }
sys_check "... and alpha's copy gets the answers" sys_wait_until 60 "d answers on alpha" d_on_alpha

# --- exactly once ------------------------------------------------------------------------------
ids="a-1 a-2 a-3 b-1 b-2 b-3 c-1 c-2 d-1 d-2"
# one_each WHAT CMD — CMD (a shell command with ID in it) counts 1 for every message id
one_each() {
    local i n bad=""
    for i in $ids; do
        n=$(x sh -c "${2//ID/$i}")
        [ "$n" -eq 1 ] || bad="$bad $i:$n"
    done
    [ -z "$bad" ] || { sys_log "$1 per message:$bad"; return 1; }
}
sys_check "one job per message (none answered twice)" sys_wait_until 30 "one job each" \
    one_each jobs "grep -l '\"correlation_id\": *\"ID\"' $B/Queues/beech/Jobs/*/*.json 2>/dev/null | wc -l"
sys_check "one processed entry per message" sys_wait_until 30 "one processed each" \
    one_each "processed entries" "ls $B/messaging/processed_inbox 2>/dev/null | grep -c '^ID\\.json$' || true"
for i in a-1 b-1 c-1 d-1; do sys_log "$i answered by: $(processed_on "$B" "$i")"; done
no_conflicts() {
    local all
    all=$(x sh -c "find $A $B -name '*.sync-conflict-*' ! -name '.syncthing.*' 2>/dev/null" || true)
    [ -z "$all" ] || { sys_log "conflict copies: $(echo "$all" | tr '\n' ' ')"; return 1; }
}
sys_check "no conflict copy of any file (lock, heartbeats, answers, logs)" no_conflicts

x systemctl stop st-alpha.service st-beta.service ob-beta.service qm-beta.service >/dev/null 2>&1 || true
sys_test_end
