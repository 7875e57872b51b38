#!/usr/bin/env bash
# t_sync: the store synced by REAL Syncthing (issue 13). One container, two Syncthing
# instances (two homes, two GUI/API ports, listening on 127.0.0.1 with two ports; no global or
# local discovery, relays, NAT; fsWatcher on, rescan 2 s) keep two copies of the store in
# sync: alpha = /var/lib/agentstore (orchestratord under systemd, AGENTSTORE_HOSTNAME=alpha)
# and beta = /srv/beta (queue `beech` served by a queue-manager with AGENTSTORE_HOSTNAME=beta
# and --root /srv/beta, a transient unit). Checks:
#   - a message written into beta's inbox is answered in beta's outbox and its job runs on beta
#     (SYNC_N messages, default 20; latency p50/p99 printed, and Syncthing's own one-way delay
#     — a plain file written on beta → visible on alpha — shown separately);
#   - Syncthing paused on beta for 60 s (SYNC_PAUSE) → messages stall; resumed → all answered,
#     none lost or doubled;
#   - the same inbox message written on both sides while paused → Syncthing's conflict copy is
#     set aside (conflicts/messaging-inbox/) and reported, the message answered once;
#   - beta powered off mid-job (its queue-manager, worker and Syncthing killed) → the job is
#     failed with "Machine beta stopped reporting at …" after the grace; `orchestrator retry`
#     runs it on alpha (queue-manager@beech on alpha: the queue moved to the machine still
#     alive); beta's Syncthing back → its copy shows the failed document alpha wrote; beta's
#     last change to the running file never left it before the cut, so Syncthing brings the
#     running copy back over alpha's delete: it is removed (event stale_copy_removed);
#   - the whole run makes NO conflict copy of anything (documents, logs, events, errors,
#     queue runtime: the files several machines write are per machine).
# benches/sync.sh runs this test with SYNC_N=100 for the figures.
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
N=${SYNC_N:-20}
A=$AS
B=/srv/beta
Q=beech
root=$(sys_root "$m")

# --- the store on alpha and its copy on beta, synced by two Syncthing instances ---------------
# shellcheck source=syncthing.sh
. "$SYS_LIB_DIR/syncthing.sh"
st_two_copies 8

# --- the daemons: orchestratord on alpha (systemd), queue-manager for beech on beta ------------
sys_check "alpha: orchestratord starts" x systemctl start agentstore-orchestrator.service
x systemd-run --unit qm-beta -p Environment=AGENTSTORE_HOSTNAME=beta -p Environment=RUST_LOG=info \
    /usr/bin/queue-manager --queue beech --bus none --launcher direct --idle-exit 0 --root "$B" >/dev/null 2>&1 ||
    sys_die "cannot start beta's queue manager"
sys_check "beta: its queue manager runs" sys_wait_until 20 "qm-beta active" active qm-beta.service
beat() { x sh -c "ls $A/machines/beta/*.json" >/dev/null 2>&1; }
sys_check "beta's heartbeat reaches alpha" sys_wait_until 60 "beta heartbeat on alpha" beat

# --- M6 across machines: messages written on beta, answered on beta, run on beta --------------
msg_json() { # ID SLEEP
    cat <<EOT
{"correlation_id": "$1", "source": "user", "project": "TestProject", "queue_time": "$(now)",
 "processed_time": null, "command": "research-code",
 "content": {"task": "sync $1", "jobtype": "noop", "supporting_data": {"sleep_seconds": $2}},
 "status": "queued", "error": null, "user": null}
EOT
}
put_b() { as_svc sh -c 'd=$(dirname "$1"); cat >"$d/.put.$$" && mv "$d/.put.$$" "$1"' sh "$1"; }
for i in $(seq 1 "$N"); do msg_json "s-$i" 1 >"$root/var/tmp/s-$i.json"; done
# The measuring loop runs inside the container (one nsenter per message would add its own
# cost): messages one after another, each timed from its rename into beta's inbox to its
# answer in beta's outbox; then plain files written on beta, timed until alpha sees them.
cat >"$root/usr/local/bin/sync-measure" <<'EOF'
#!/bin/bash
# sync-measure N — prints "msg MS" per message and "st MS" per plain file.
set -u
n=$1 A=/var/lib/agentstore B=/srv/beta
ms() { date +%s%3N; }
for i in $(seq 1 "$n"); do
    t0=$(ms)
    cp "/var/tmp/s-$i.json" "$B/messaging/inbox/.s-$i.tmp" && mv "$B/messaging/inbox/.s-$i.tmp" "$B/messaging/inbox/s-$i.json"
    end=$((t0 + 120000))
    until [ -e "$B/messaging/outbox/s-$i.json" ]; do
        [ "$(ms)" -lt "$end" ] || { echo "msg TIMEOUT s-$i"; exit 1; }
        sleep 0.02
    done
    echo "msg $(($(ms) - t0))"
done
mkdir -p "$B/syncprobe"
for i in $(seq 1 "$n"); do
    t0=$(ms)
    echo "$i" >"$B/syncprobe/.p$i.tmp" && mv "$B/syncprobe/.p$i.tmp" "$B/syncprobe/p$i.txt"
    end=$((t0 + 60000))
    until [ -e "$A/syncprobe/p$i.txt" ]; do
        [ "$(ms)" -lt "$end" ] || { echo "st TIMEOUT p$i"; exit 1; }
        sleep 0.02
    done
    echo "st $(($(ms) - t0))"
done
EOF
chmod 0755 "$root/usr/local/bin/sync-measure"
x sh -c "chmod 0644 /var/tmp/s-*.json && chown agentstore: /var/tmp/s-*.json"
t0=$(sys_now_ms)
measured=$(as_svc /usr/local/bin/sync-measure "$N" 2>&1) && rc=0 || rc=$?
sys_log "measured $N messages + $N plain files in $(sys_fmt_ms $(($(sys_now_ms) - t0)))"
sys_expect_eq "every message written on beta is answered in beta's outbox (and every probe file seen on alpha)" 0 "$rc"
pct() { # KIND P — the P-th percentile (nearest rank) of the KIND samples, in ms
    local v
    v=$(awk -v k="$1" '$1 == k && $2 ~ /^[0-9]+$/ {print $2}' <<<"$measured" | sort -n)
    [ -n "$v" ] || { echo "n/a"; return; }
    awk -v p="$2" '{a[NR] = $1} END {r = int((p * NR + 99) / 100); if (r < 1) r = 1; print a[r]}' <<<"$v"
}
echo "SYNC FIGURES (N=$N, load $(cut -d' ' -f1 /proc/loadavg)): message written on beta -> answer in beta's outbox: p50 $(pct msg 50) ms, p99 $(pct msg 99) ms, max $(pct msg 100) ms; Syncthing one-way beta -> alpha (plain file): p50 $(pct st 50) ms, p99 $(pct st 99) ms, max $(pct st 100) ms"
x rm -rf "$B/syncprobe"
answered_ok() {
    local bad
    bad=$(x sh -c "for i in \$(seq 1 $N); do grep -q '\"job_id\"' $B/messaging/outbox/s-\$i.json && ! grep -q '\"status\": *\"error\"' $B/messaging/outbox/s-\$i.json || echo s-\$i; done")
    [ -z "$bad" ] || { sys_log "not answered with a job: $bad ($(x cat "$B/messaging/outbox/s-1.json" | tr '\n' ' '))"; return 1; }
}
sys_check "each of the $N answers names its job (no error)" answered_ok
# Each answer names its job; each job ran on beta and finished (seen on beta's copy).
ran_on_beta() {
    local i jid f
    for i in $(seq 1 "$N"); do
        jid=$(x sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$B/messaging/outbox/s-$i.json" | head -1)
        f=$B/Queues/beech/Jobs/finished_jobs/$jid.json
        x test -f "$f" || return 1
        [ "$(jfield "$f" host)" = beta ] || { sys_log "$jid ran on $(jfield "$f" host)"; return 1; }
    done
}
sys_check "every job finished, on beta" sys_wait_until 180 "jobs finished on beta" ran_on_beta
for c in "$A" "$B"; do
    sys_log "$c: $(x sh -c "cd $c/Queues/beech/Jobs && for d in *_jobs; do echo \"\$d=\$(ls \$d | grep -c json)\"; done; grep -l '\"correlation_id\": *\"s-' failed_jobs/*.json 2>/dev/null | head -3 | xargs -r grep -h '\"error\"'" | tr '\n' ' ')"
done
one_job_each() {
    local n
    n=$(x sh -c "grep -l '\"correlation_id\": *\"s-' $A/Queues/beech/Jobs/*/*.json 2>/dev/null | wc -l")
    [ "$n" -eq "$N" ] || { sys_log "$n job documents for $N messages"; return 1; }
}
# (a state move reaches the other copy as a delete and a create: wait for it to settle)
sys_check "exactly one job per message (none doubled)" sys_wait_until 30 "one job each" one_job_each

# --- sync paused on beta: work stalls, then completes, nothing lost or doubled -------------------
sys_check "pause Syncthing on beta (device alpha)" st_api 8385 key-beta POST "/rest/system/pause?device=$ida"
for i in 1 2 3 4 5; do msg_json "p-$i" 1 | put_b "$B/messaging/inbox/p-$i.json"; done
stalled() { sleep "${SYNC_PAUSE:-60}"; ! x sh -c "ls $A/messaging/inbox/p-*.json $B/messaging/outbox/p-*.json" >/dev/null 2>&1; }
sys_check "while paused, alpha sees none of them and beta gets no answer (${SYNC_PAUSE:-60} s)" stalled
sys_check "resume Syncthing on beta" st_api 8385 key-beta POST "/rest/system/resume?device=$ida"
all_p() { x sh -c "for i in 1 2 3 4 5; do test -f $B/messaging/outbox/p-\$i.json || exit 1; done"; }
sys_check "after resuming, all 5 are answered on beta" sys_wait_until 90 "p answers on beta" all_p
p_done() {
    local n
    n=$(x sh -c "grep -l '\"correlation_id\": *\"p-' $B/Queues/beech/Jobs/finished_jobs/*.json | wc -l")
    [ "$n" -eq 5 ]
}
sys_check "... and their 5 jobs finish on beta" sys_wait_until 90 "p jobs finished" p_done
p_once() {
    local n
    n=$(x sh -c "grep -l '\"correlation_id\": *\"p-' $A/Queues/beech/Jobs/*/*.json | wc -l")
    [ "$n" -eq 5 ] || { sys_log "$n jobs for 5 messages"; return 1; }
}
# (alpha's copy settles after beta's moves reach it, as above)
sys_check "... exactly one job each" sys_wait_until 30 "p one job each" p_once

# --- no conflict copy of anything in the whole run -----------------------------------------------
# Every file several machines would write is one file per machine (events, errors.out, daemon
# logs: `<stem>@<host>.<ext>`; the queue's runtime: Queues/<q>/runtime@<host>.json), so a run
# makes NO conflict copy at all: documents, logs, events, errors, queue runtime alike.
no_conflicts() {
    local all
    # The deliberate conflict below (c-1) is set aside under conflicts/; Syncthing's own
    # partial files are dot-files.
    all=$(x sh -c "find $A $B -name '*.sync-conflict-*' ! -path '*/conflicts/*' ! -name '.syncthing.*' 2>/dev/null" || true)
    [ -z "$all" ] || { sys_log "conflict copies: $(echo "$all" | tr '\n' ' ')"; return 1; }
}
sys_check "no conflict copy of any file (documents, logs, events, errors, queue runtime)" no_conflicts

# --- a real conflict: one inbox message written on both sides while paused -----------------------
x systemctl stop agentstore-orchestrator.service
sys_check "pause again" st_api 8385 key-beta POST "/rest/system/pause?device=$ida"
msg_json c-1 1 | put "$A/messaging/inbox/c-1.json"
sleep 1.1 # a different modification time on each side
msg_json c-1 2 | sed 's/sync c-1/sync c-1 edited on beta/' | put_b "$B/messaging/inbox/c-1.json"
sys_check "resume" st_api 8385 key-beta POST "/rest/system/resume?device=$ida"
copy_on_alpha() { x sh -c "ls $A/messaging/inbox/c-1.sync-conflict-*.json" >/dev/null 2>&1; }
sys_check "Syncthing makes a conflict copy of c-1" sys_wait_until 60 "conflict copy on alpha" copy_on_alpha
copy=$(x sh -c "cd $A/messaging/inbox && ls c-1.sync-conflict-*.json" | head -1)
sys_log "conflict copy: $copy"
sys_check "alpha: orchestratord starts again" x systemctl start agentstore-orchestrator.service
set_aside() { x test -f "$A/conflicts/messaging-inbox/$copy" && ! x test -e "$A/messaging/inbox/$copy"; }
sys_check "the conflict copy is set aside in conflicts/messaging-inbox/" sys_wait_until 30 "set aside" set_aside
reported() { x sh -c "grep -h conflict_set_aside $A/logs/events-*.jsonl | grep -q -F '$copy'"; }
sys_check "... and reported (event conflict_set_aside naming it)" sys_wait_until 30 "reported" reported
c_answer() { x test -f "$B/messaging/outbox/c-1.json"; }
sys_check "c-1 is answered on beta" sys_wait_until 60 "c-1 answer" c_answer
c_once() {
    local n
    n=$(x sh -c "grep -l '\"correlation_id\": *\"c-1\"' $A/Queues/beech/Jobs/*/*.json | wc -l")
    [ "$n" -eq 1 ] || { sys_log "$n jobs for c-1"; return 1; }
}
sys_check "... with one job" sys_wait_until 30 "c-1 job" c_once
gone_on_beta() { ! x test -e "$B/messaging/inbox/$copy"; }
sys_check "the copy leaves beta's inbox too" sys_wait_until 30 "copy gone on beta" gone_on_beta

# --- beta's queue manager killed mid-job: failed after the grace, retried on alpha -------------
msg_json k-1 20 | put_b "$B/messaging/inbox/k-1.json"
k_answer() { x test -f "$B/messaging/outbox/k-1.json"; }
sys_check "k-1 is answered" sys_wait_until 60 "k-1 answer" k_answer
kid=$(x sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$B/messaging/outbox/k-1.json" | head -1)
running_b() { x grep -q '"process_id": *[0-9]' "$B/Queues/beech/Jobs/running_jobs/$kid.json" 2>/dev/null; }
sys_check "k-1's job runs on beta" sys_wait_until 60 "k-1 running" running_b
# (alpha's copy as beta wrote it: the move into running_jobs/ and the running record that
# follows it can reach alpha in two scans)
running_a() { x grep -q '"process_id": *[0-9]' "$A/Queues/beech/Jobs/running_jobs/$kid.json" 2>/dev/null; }
sys_check "... and alpha's copy shows it running" sys_wait_until 30 "running on alpha" running_a
# beta "powered off": its Syncthing first (its network gone), then one last change to the
# running job's file that therefore never leaves beta (as a record written just before a
# power cut), then its queue manager and its worker (in the manager's unit). When beta's
# Syncthing comes back, that change meets alpha's delete of the file (the job failed) and
# Syncthing keeps a modified file over a delete: the running copy comes back on both sides,
# and must not stay (the job is failed; it must not be failed twice nor look running).
sys_kill9 "$m" st-beta.service
as_svc sh -c 'echo >>"$1"' sh "$B/Queues/beech/Jobs/running_jobs/$kid.json"
sys_kill9 "$m" qm-beta.service
killed_at=$(sys_now_ms)
dead() { ! active qm-beta.service && ! active st-beta.service; }
sys_check "beta powered off: queue manager, worker and Syncthing killed" sys_wait_until 10 "beta dead" dead
failed_a() { x grep -q 'Machine beta stopped reporting at' "$A/Queues/beech/Jobs/failed_jobs/$kid.json" 2>/dev/null; }
sys_check "the job is failed with the machine message" sys_wait_until 60 "failed on alpha" failed_a
took=$(($(sys_now_ms) - killed_at))
sys_log "failed $(sys_fmt_ms "$took") after the kill (stale after 3 s, grace 8 s)"
# The grace (8 s) runs from beta's last heartbeat, which is up to one heartbeat (1 s) before
# the kill and written with whole seconds (up to 1 s earlier still): the earliest legitimate
# failure is grace - heartbeat - 1 s = 6 s after the kill (as in tests/machines.rs).
grace_kept() { [ "$took" -ge 6000 ]; }
sys_check "... not before the grace (8 s, less one heartbeat and 1 s of whole-second rounding) had passed" grace_kept
sys_log "error: $(jfield "$A/Queues/beech/Jobs/failed_jobs/$kid.json" error)"
out=$(adm retry "$kid" 2>&1) || true
rid=$(echo "$out" | sed -n "s/^Job queued: \([^ ]*\) (retry of $kid.*/\1/p" | head -1)
sys_expect_match "orchestrator retry queues a new job ($out)" '^[A-Za-z0-9]' "$rid"
sys_check "alpha takes queue beech over: queue-manager@beech starts" x systemctl start queue-manager@beech.service
ran_on_alpha() { x test -f "$A/Queues/beech/Jobs/finished_jobs/$rid.json"; }
sys_check "the retry runs and finishes" sys_wait_until 90 "retry finished" ran_on_alpha
sys_expect_eq "... on alpha" alpha "$(jfield "$A/Queues/beech/Jobs/finished_jobs/$rid.json" host)"
# beta comes back (its Syncthing; its manager stays off: the queue moved to alpha): its copy
# learns the job failed, and the failed document is the one alpha wrote.
# Syncthing (1.19) can come back from a power cut with an earlier REST pause of alpha saved in
# its config.xml and the later resume not ("Connection from … rejected: device is paused" in
# its log, the two copies never meeting): it is resumed once its API answers.
st_back() {
    st_start beta &&
        sys_wait_until 30 "beta's Syncthing API" st_api 8385 key-beta GET /rest/system/ping &&
        st_api 8385 key-beta POST "/rest/system/resume?device=$ida"
}
sys_check "beta's Syncthing comes back (alpha not paused)" st_back
failed_b() { x grep -q 'Machine beta stopped reporting at' "$B/Queues/beech/Jobs/failed_jobs/$kid.json" 2>/dev/null && ! x test -e "$B/Queues/beech/Jobs/running_jobs/$kid.json"; }
# On a failure, what each copy and each Syncthing holds for the job (the check is mute otherwise).
job_state() {
    local c p
    for c in "$A" "$B"; do
        echo "$c: $(x sh -c "cd $c/Queues/beech/Jobs && ls -l --time-style=+%T.%N */$kid* 2>&1" | tr '\n' ' ')"
    done
    for p in "8384 key-alpha" "8385 key-beta"; do
        # shellcheck disable=SC2086 # PORT KEY
        echo "syncthing $p: $(st_api $p GET "/rest/db/status?folder=store" 2>&1 | tr -d ' \n' | cut -c1-700)"
        # shellcheck disable=SC2086
        echo "  running_jobs/$kid.json: $(st_api $p GET "/rest/db/file?folder=store&file=Queues/beech/Jobs/running_jobs/$kid.json" 2>&1 | tr -d ' \n' | cut -c1-1200)"
    done
    echo "beta's Syncthing log:"
    x journalctl -u st-beta.service --no-pager -n 40 2>&1 | tail -40
}
failed_on_beta() { sys_wait_until 60 "failed on beta" failed_b || { job_state; return 1; }; }
sys_check "beta's copy shows the job failed with the machine message, not running" failed_on_beta
kept_a() { x grep -q 'Machine beta stopped reporting at' "$A/Queues/beech/Jobs/failed_jobs/$kid.json" && ! x test -e "$A/Queues/beech/Jobs/finished_jobs/$kid.json" && ! x test -e "$A/Queues/beech/Jobs/running_jobs/$kid.json"; }
sys_check "alpha's failed document is kept (no late result over it, no running copy)" kept_a
came_back() { x sh -c "grep -h stale_copy_removed $A/logs/events-*.jsonl" | grep -F "$kid" | grep -q "stale running copy"; }
sys_check "the running copy Syncthing brought back was removed and reported (event stale_copy_removed)" came_back
sys_check "no conflict copy of any document at the end" no_conflicts

x systemctl stop st-alpha.service st-beta.service queue-manager@beech.service agentstore-orchestrator.service >/dev/null 2>&1 || true
sys_test_end
