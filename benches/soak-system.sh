#!/usr/bin/env bash
# benches/soak-system.sh — the long soak under real systemd, from the .deb: two machines (two
# booted nspawn containers, each its own systemd, D-Bus and journal) whose copies of the store
# are joined by REAL Syncthing, faults on a schedule (issue 34). See benches/soak-system.md for
# what it does, what it reports and how to read it.
#
#   sudo benches/soak-system.sh [--minutes N] [--deb FILE] [--prev-deb FILE] [--out DIR]
#
# Environment: SOAK_REPORT_MINUTES (5), SOAK_FAULT_MINUTES (5: one fault every N minutes,
# cycling through the list), SOAK_PAUSE_SECONDS (180: Syncthing paused; must be under the grace),
# SOAK_LOST_GRACE (240 s: machines.lost_job_grace_seconds), SOAK_SIGSTOP_SECONDS (grace + 30 s:
# how long beta's queue manager stays stopped), SOAK_WORKERS (12 per
# queue), SOAK_MSG_INTERVAL (0.7 s per writer), SOAK_STORE_MB (512: each machine's store is a
# tmpfs of this size, so "disk full" fills that and nothing else), SOAK_GRACE (600 s: an
# unanswered message older than this counts as lost, a job older than its timeout + this as
# stuck), SOAK_FAULTS (the cycle, default "kill9 pause kill9 disk sigstop reboot upgrade"),
# SOAK_APPROVAL_DEADLINE (60 s: an agent job's approval request unanswered this long is denied),
# SOAK_SHARED_QUEUES (0: alpha serves oak, beta beech; 1: both machines run both queues'
# managers, one serving each queue at a time).
# Exit status 0 only when the final report has 0 lost, 0 doubled, 0 run twice, 0 stuck, 0
# answers without their event and 0 approval requests answered twice.
# shellcheck source-path=SCRIPTDIR/../tests/system
# shellcheck disable=SC2016
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
minutes=120
deb=""
prev_deb=${SYS_PREV_DEB:-}
out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --deb) deb=$(realpath -e "$2"); shift 2 ;;
    --prev-deb) prev_deb=$(realpath -e "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '7p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2 ;;
    esac
done
REPORT_MIN=${SOAK_REPORT_MINUTES:-5}
FAULT_MIN=${SOAK_FAULT_MINUTES:-5}
PAUSE_S=${SOAK_PAUSE_SECONDS:-180}
LOST_GRACE=${SOAK_LOST_GRACE:-240}
SIGSTOP_S=${SOAK_SIGSTOP_SECONDS:-$((LOST_GRACE + 30))}
# Across a sync engine a partition longer than the lost-job grace lets each side take the
# other's queue over and start the same queued job (README, "One queue on two machines"):
# by design, not a fault the soak should count. Refuse a schedule that would only measure that.
if [ "$PAUSE_S" -ge "$LOST_GRACE" ]; then
    echo "error: SOAK_PAUSE_SECONDS ($PAUSE_S) must be under SOAK_LOST_GRACE ($LOST_GRACE): a partition" \
        "longer than the lost-job grace runs jobs on both sides by design (README: One queue on two machines)" >&2
    exit 2
fi
WORKERS=${SOAK_WORKERS:-12}
MSG_INTERVAL=${SOAK_MSG_INTERVAL:-0.7}
STORE_MB=${SOAK_STORE_MB:-512}
GRACE=${SOAK_GRACE:-600}
APPROVAL_DEADLINE=${SOAK_APPROVAL_DEADLINE:-60}
SHARED_QUEUES=${SOAK_SHARED_QUEUES:-0}
read -r -a schedule <<<"${SOAK_FAULTS:-kill9 pause kill9 disk sigstop reboot upgrade}"
out=${out:-$repo/target/soak-system/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(realpath "$out")

# shellcheck source=../tests/system/lib.sh
. "$repo/tests/system/lib.sh"
sys_use_wide_rootfs
sys_preflight
if [ -z "$deb" ]; then
    deb=$("$repo/packaging/build-deb.sh" | tail -n1)
fi
[ -f "$deb" ] || sys_die "no package: $deb"
export SYS_TEST=soak
sys_rootfs >/dev/null || sys_die "no rootfs"
log() { printf '[soak %(%H:%M:%S)T] %s\n' -1 "$*" | tee -a "$out/soak.log" >&2; }
for f in "${schedule[@]}"; do
    case "$f" in kill9 | pause | disk | sigstop | reboot | upgrade) ;; *) sys_die "unknown fault '$f' in SOAK_FAULTS" ;; esac
done

# --- two machines on one private network namespace, each store on a tmpfs of the host ----------
# The namespace has only a loopback: the two Syncthing instances meet there, nothing else is
# reachable. The stores are the host's tmpfs folders bound in, so they survive a reboot of the
# container and "disk full" fills them and not the host.
state=$SYS_STATE_DIR/soak
mkdir -p "$state/ledger"
chmod 1777 "$state/ledger"
netns=agentstore-soak-$(basename "$SYS_STATE_DIR" | tr -dc '[:alnum:]' | tr '[:upper:]' '[:lower:]')
ip netns add "$netns" || sys_die "ip netns add $netns failed"
sys_on_exit "ip netns del $netns"
ip -n "$netns" link set lo up
for n in alpha beta; do
    mkdir -p "$state/store-$n"
    mount -t tmpfs -o "size=${STORE_MB}m,mode=0750" "soak-$n" "$state/store-$n" || sys_die "cannot mount a tmpfs for $n's store"
    # Unmounted (lazily: the containers still hold it) also when the run fails and its
    # state folder is kept.
    sys_on_exit "umount -l $state/store-$n"
done
boot_opts() { # NAME — the options a machine is booted (and rebooted) with
    opts=(--bind "$state/store-$1:/var/lib/agentstore" --bind "$state/ledger:/var/tmp/soak"
        --network "netns:/run/netns/$netns")
    # alpha reads beta's copy too (read-only), for the report's conflict count.
    [ "$1" = alpha ] && opts+=(--bind-ro "$state/store-beta:/srv/beta")
    return 0
}
for n in alpha beta; do
    sys_prepare "soak-$n" || sys_die "cannot prepare $n"
    r=$(sys_root "soak-$n")
    # A machine id of its own that survives a reboot (the store knows a machine by it).
    od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$r/etc/machine-id"
    echo >>"$r/etc/machine-id"
    # 24 h unattended: the container's journal is capped.
    mkdir -p "$r/etc/systemd/journald.conf.d"
    printf '[Journal]\nSystemMaxUse=300M\n' >"$r/etc/systemd/journald.conf.d/soak.conf"
    boot_opts "$n"
    sys_boot "soak-$n" "${opts[@]}" || sys_die "machine $n did not boot"
done
on() { # MACHINE CMD...
    local n=$1
    shift
    sys_exec "soak-$n" "$@"
}
# shellcheck source=../tests/system/store.sh
. "$repo/tests/system/store.sh"
# shellcheck source=../tests/system/syncthing.sh
. "$repo/tests/system/syncthing.sh"

# --- install (the previous release first, when given: the first upgrade fault upgrades) -------
first=$deb
[ -n "$prev_deb" ] && first=$prev_deb
for n in alpha beta; do
    sys_install_deb "soak-$n" "$first" >>"$out/install.log" 2>&1 || sys_die "installing $first on $n failed (see $out/install.log)"
    sys_copy_in "soak-$n" "$deb" /var/tmp/new.deb
done
[ "$(on alpha id -u agentstore)" = "$(on beta id -u agentstore)" ] ||
    sys_die "the agentstore account has different uids on the two machines: the synced files would not match"
log "installed $(on alpha dpkg-query -W -f='${Version}' agentstore) on alpha and beta; the upgrade fault installs $(dpkg-deb -f "$deb" Version)"

# --- the store on alpha; beta's copy comes from Syncthing ----------------------------------------
m=soak-alpha
setup_users
setup_project TestProject /srv/testproject beech
# Agent jobs run the REAL Claude Code CLI (as jobuser, in the job's scope) against a fake
# model endpoint on each machine's loopback (soak-model.service, DESIGN §7); the queues name
# it by absolute path (allowed in root's /etc/agentstore/config.yaml on both machines).
setup_queue beech "$WORKERS" /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]'
setup_queue oak "$WORKERS" /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]'
# Agent jobs (agentshell) ask before their command: a person (the soak-approver script) has
# APPROVAL_DEADLINE seconds to answer, else the deadline denies it.
for q in beech oak; do
    as_svc sh -c "sed -i 's/\"launcher\": \"systemd\",/\"launcher\": \"systemd\", \"approvals\": {\"deadline_seconds\": $APPROVAL_DEADLINE},/' $AS/Queues/$q/queue.json"
    x grep -q '"approvals"' "$AS/Queues/$q/queue.json" || sys_die "queue $q has no approvals setting"
done
# Both machines may hold the orchestrator's lock: whichever has it, the other stands by and
# takes over when it goes silent (a kill -9, the reboot, the partition).
as_svc sed -i -e 's/^\( *idle_exit_seconds:\).*/\1 0/' -e 's/^\( *polling_interval_seconds:\).*/\1 2/' \
    -e 's/^orchestrator:$/orchestrator:\n  standby: [soak-alpha, soak-beta]\n  lock_heartbeat_seconds: 2\n  lock_stale_after_seconds: 20/' \
    "$AS/config.yaml"
as_svc sh -c 'printf "machines:\n  heartbeat_seconds: 2\n  stale_after_seconds: 20\n  lost_job_grace_seconds: %s\n" "$2" >>"$1"' sh "$AS/config.yaml" "$LOST_GRACE"
x grep -q '^  standby: \[soak-alpha, soak-beta\]' "$AS/config.yaml" || sys_die "config.yaml has no orchestrator: section to edit"
m=soak-beta
x sh -c 'for u in jobuser alice mallory; do id $u >/dev/null 2>&1 || useradd --create-home --shell /bin/bash $u; done
    usermod -aG agentstore jobuser; mkdir -p /srv/testproject; chown jobuser: /srv/testproject'
[ "$(on alpha id -u jobuser)" = "$(on beta id -u jobuser)" ] || sys_die "jobuser has different uids on the two machines"
allow_claude /usr/local/bin/claude
claude_bin=$(claude_host_binary) || true
if [ -z "$claude_bin" ] || [ ! -x "$claude_bin" ]; then sys_die "the real Claude Code CLI is not installed on the host (bash .ci/install-claude.sh)"; fi
fake_model=$(fake_anthropic_binary)
[ -x "$fake_model" ] || (cd "$repo" && cargo build --release --locked --example fake_anthropic >>"$out/install.log" 2>&1) || true
[ -x "$fake_model" ] || sys_die "$fake_model is missing: cargo build --release --example fake_anthropic"
for n in alpha beta; do
    r=$(sys_root "soak-$n")
    cp "$claude_bin" "$r/usr/local/bin/claude"
    cp "$fake_model" "$r/usr/local/bin/fake_anthropic"
    # Claude Code's jobs get the text; each agentshell job first asks to run a command (its
    # approval), then gets the text.
    printf '%s' '{"replies": [], "fallback_text": "# Research\n\nSoak answer.", "opening_tool_use": {"name": "run_command", "input": {"command": "touch /srv/testproject/soak-approved.txt"}}}' >"$r/var/tmp/soak-model.json"
    cat >"$r/etc/systemd/system/soak-model.service" <<'EOF2'
[Unit]
Description=the fake model endpoint the soak's Claude Code jobs talk to
[Service]
ExecStart=/usr/local/bin/fake_anthropic --listen 127.0.0.1:18555 --script /var/tmp/soak-model.json
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
EOF2
    mkdir -p "$r/etc/systemd/system/queue-manager@.service.d"
    printf '[Service]\nEnvironment=ANTHROPIC_BASE_URL=http://127.0.0.1:18555 ANTHROPIC_API_KEY=fake CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 AGENTSHELL_BASE_URL=http://127.0.0.1:18555 AGENTSHELL_API_KEY=fake\n' \
        >"$r/etc/systemd/system/queue-manager@.service.d/claude.conf"
    on "$n" systemctl daemon-reload
    on "$n" systemctl enable --now soak-model.service >/dev/null 2>&1 || sys_die "the fake model did not start on $n"
    on "$n" runuser -u jobuser -- sh -c 'mkdir -p ~/.claude/commands && printf "%s\n" "Research the code of this project: \$ARGUMENTS" >~/.claude/commands/code-researcher.md'
done
for n in alpha beta; do
    on "$n" systemctl disable --now agentstore-orchestrator.path agentstore-orchestrator.timer >/dev/null 2>&1 || true
    on "$n" systemctl stop agentstore-orchestrator.service >/dev/null 2>&1 || true
done
# Beta's own `orchestrator init` made a store of its own: emptied, it receives alpha's.
on beta find /var/lib/agentstore -mindepth 1 -delete

for n in alpha beta; do
    m=soak-$n
    # Syncthing leaves the disk-fault's filler alone (.stignore is not synced itself).
    as_svc sh -c 'mkdir -p /var/lib/agentstore/.stfolder && printf "/.soak-fill\n" >/var/lib/agentstore/.stignore'
    x sh -c 'mkdir -p /var/tmp/st && chown agentstore:agentstore /var/tmp/st'
    x setpriv --reuid=agentstore --regid=agentstore --init-groups env HOME=/var/tmp/st \
        syncthing generate --home=/var/tmp/st --no-default-folder --skip-port-probing >/dev/null 2>&1 ||
        sys_die "syncthing generate failed on $n"
    declare "id_$n=$(x setpriv --reuid=agentstore --regid=agentstore --init-groups env HOME=/var/tmp/st \
        syncthing serve --home=/var/tmp/st --device-id)"
done
# shellcheck disable=SC2154 # id_alpha, id_beta: declared above
{
    m=soak-alpha
    st_config x alpha 22001 8384 key-alpha "$id_alpha" beta "$id_beta" 22002 "$AS" | x sh -c 'cat >/var/tmp/st/config.xml'
    m=soak-beta
    st_config x beta 22002 8385 key-beta "$id_beta" alpha "$id_alpha" 22001 "$AS" | x sh -c 'cat >/var/tmp/st/config.xml'
}
for n in alpha beta; do
    r=$(sys_root "soak-$n")
    cat >"$r/etc/systemd/system/soak-syncthing.service" <<'EOF'
[Unit]
Description=Syncthing keeping this machine's copy of the store (soak)
[Service]
User=agentstore
Group=agentstore
Environment=HOME=/var/tmp/st STNOUPGRADE=1
ExecStart=/usr/bin/syncthing serve --home=/var/tmp/st --no-browser --no-restart --logflags=3
Restart=on-failure
RestartSec=2
[Install]
WantedBy=multi-user.target
EOF
    on "$n" chown -R agentstore:agentstore /var/tmp/st
    on "$n" systemctl daemon-reload
    on "$n" systemctl enable --now soak-syncthing.service >/dev/null 2>&1 || sys_die "syncthing did not start on $n"
done
st_api_on() { # MACHINE PORT KEY METHOD PATH
    local n=$1
    shift
    on "$n" python3 -c 'import sys, urllib.request as u
r = u.Request("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[4]), method=sys.argv[3], headers={"X-API-Key": sys.argv[2]})
print(u.urlopen(r, timeout=10).read().decode())' "$@"
}
connected() {
    local j
    j=$(st_api_on alpha 8384 key-alpha GET /rest/system/connections 2>/dev/null) || return 1
    python3 -c 'import json, sys; sys.exit(0 if json.loads(sys.argv[1])["connections"][sys.argv[2]]["connected"] else 1)' "$j" "$id_beta"
}
sys_wait_until 120 "the two Syncthing instances connected" connected || sys_die "Syncthing of alpha and beta never connected"
synced() {
    on beta test -f /var/lib/agentstore/Queues/oak/queue.json && on beta test -f /var/lib/agentstore/Queues/beech/queue.json &&
        on beta test -f /var/lib/agentstore/projects/TestProject/project.json &&
        [ "$(on alpha md5sum /var/lib/agentstore/config.yaml | cut -c1-32)" = "$(on beta md5sum /var/lib/agentstore/config.yaml | cut -c1-32)" ]
}
sys_wait_until 180 "beta's copy of the store" synced || sys_die "beta did not receive the store"
log "Syncthing joined the two copies (alpha $id_alpha, beta $id_beta)"

# --- the daemons, as packaged, started at boot (so they also come back after a reboot) --------
# The orchestrator's unit is static (the package starts it on demand): wanted by
# multi-user.target here. Beta's starts once alpha's store lock has reached it, so the two
# do not both take a free lock in the same second (that leaves a conflict copy of the lock).
on alpha systemctl add-wants multi-user.target agentstore-orchestrator.service >/dev/null 2>&1 || true
on beta systemctl add-wants multi-user.target agentstore-orchestrator.service >/dev/null 2>&1 || true
# Which queue managers each machine runs: one queue each, or with SOAK_SHARED_QUEUES=1 both
# queues on both machines (one serves a queue at a time through the sync engine, the other
# takes it over when the server is gone: src/queue/handover.rs).
if [ "$SHARED_QUEUES" = 1 ]; then
    qm_alpha=(queue-manager@oak.service queue-manager@beech.service)
    qm_beta=(queue-manager@oak.service queue-manager@beech.service)
else
    qm_alpha=(queue-manager@oak.service)
    qm_beta=(queue-manager@beech.service)
fi
on alpha systemctl enable "${qm_alpha[@]}" >/dev/null 2>&1 || true
on beta systemctl enable "${qm_beta[@]}" >/dev/null 2>&1 || true
on alpha systemctl start agentstore-orchestrator.service "${qm_alpha[@]}" || sys_die "alpha's daemons did not start"
sys_wait_until 120 "alpha's store lock on beta" on beta test -s /var/lib/agentstore/.orchestrator.lock ||
    sys_die "alpha's store lock never reached beta"
on beta systemctl start agentstore-orchestrator.service "${qm_beta[@]}" || sys_die "beta's daemons did not start"
units_alpha=(agentstore-orchestrator.service "${qm_alpha[@]}" soak-syncthing.service)
units_beta=(agentstore-orchestrator.service "${qm_beta[@]}" soak-syncthing.service)

# --- load: a writer per machine, a D-Bus caller and a canceller on alpha -------------------------
for n in alpha beta; do
    r=$(sys_root "soak-$n")
    cat >"$r/usr/local/bin/soak-writer" <<'EOF'
#!/bin/bash
# soak-writer SIDE INTERVAL — messages into this machine's inbox forever; a ledger line per
# message written (after it is in the inbox). Ids carry the boot, so a reboot repeats none.
side=$1 interval=$2 i=0
store=/var/lib/agentstore
boot=$(cut -c1-8 /proc/sys/kernel/random/boot_id)
ledger=/var/tmp/soak/written-$side.log
while :; do
    i=$((i + 1))
    id="soak-$side-$boot-$(printf '%07d' $i)"
    r=$((RANDOM % 10))
    q=oak; [ $((i % 2)) = 0 ] && q=beech
    case $r in
    0 | 1 | 2) cmd=list-projects content='{}' ;;
    3) cmd=research-code content="{\"task\": \"soak\", \"queue\": \"$q\", \"jobtype\": \"claude\"}" ;;
    5) cmd=research-code content="{\"task\": \"soak approval\", \"queue\": \"$q\", \"jobtype\": \"agent\", \"model\": \"anthropic/claude-soak\"}" ;;
    4) cmd=research-code content="{\"task\": \"soak\", \"queue\": \"$q\", \"jobtype\": \"noop\", \"timeout\": 5, \"supporting_data\": {\"sleep_seconds\": 30}}" ;;
    *) cmd=research-code content="{\"task\": \"soak\", \"queue\": \"$q\", \"jobtype\": \"noop\", \"supporting_data\": {\"sleep_seconds\": $((RANDOM % 20 + 1))}}" ;;
    esac
    printf '{"correlation_id": "%s", "source": "user", "project": "TestProject", "queue_time": "%s", "processed_time": null, "command": "%s", "content": %s, "status": "queued", "error": null, "user": null}\n' \
        "$id" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$cmd" "$content" >"$store/messaging/inbox/.$id.tmp" &&
        mv "$store/messaging/inbox/.$id.tmp" "$store/messaging/inbox/$id.json" &&
        echo "$id $(date +%s)" >>"$ledger"
    rm -f "$store/messaging/inbox/.$id.tmp"
    sleep "$interval"
done
EOF
    cat >"$r/usr/local/bin/soak-dbus" <<'EOF'
#!/bin/bash
# soak-dbus SIDE — Submit a list-projects over this machine's system bus every second. A
# Submit that succeeded is a message like the writers' (its answer is checked); failures are
# counted (the orchestrator of this machine may be the standby then).
side=$1 i=0
boot=$(cut -c1-8 /proc/sys/kernel/random/boot_id)
while :; do
    i=$((i + 1))
    id="soak-dbus-$side-$boot-$(printf '%07d' $i)"
    msg="{\"correlation_id\": \"$id\", \"source\": \"user\", \"project\": null, \"queue_time\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"processed_time\": null, \"command\": \"list-projects\", \"content\": {}, \"status\": \"queued\", \"error\": null}"
    if timeout 60 busctl --system call org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1 \
        org.agentstore.Orchestrator1 Submit s "$msg" >/dev/null 2>&1; then
        echo "$id $(date +%s)" >>/var/tmp/soak/written-dbus-$side.log
    else
        echo "$id $(date +%s)" >>/var/tmp/soak/dbus-failed-$side.log
    fi
    sleep 1
done
EOF
    cat >"$r/usr/local/bin/soak-cancel" <<'EOF'
#!/bin/bash
# soak-cancel — every 30 s, cancel one queued or running job (either queue) over D-Bus.
while :; do
    sleep 30
    f=$(ls /var/lib/agentstore/Queues/*/Jobs/running_jobs/ /var/lib/agentstore/Queues/*/Jobs/queued_jobs/ 2>/dev/null | grep '^soak\|\.json$' | grep '\.json$' | shuf -n1)
    [ -n "$f" ] || continue
    orchestrator cancel-job "${f%.json}" >/dev/null 2>&1 && echo "${f%.json} $(date +%s)" >>/var/tmp/soak/cancelled.log
done
EOF
    cat >"$r/usr/local/bin/soak-approver" <<'EOF'
#!/bin/bash
# soak-approver SIDE — every 5 s, answers the approval requests waiting on this machine's
# queue managers as a person would (`orchestrator approve|deny`): by the request id's hash,
# 3 of 5 allowed, 1 of 5 denied, 1 of 5 left to the deadline. A line per answer given.
side=$1
log=/var/tmp/soak/approvals-$side.log
touch "$log"
while :; do
    sleep 5
    orchestrator approvals --format json 2>/dev/null | python3 -c '
import hashlib, json, sys
try:
    rows = json.load(sys.stdin)
except ValueError:
    rows = []
for r in rows:
    h = int(hashlib.sha1(r["request_id"].encode()).hexdigest(), 16) % 5
    print(r["job_id"], r["request_id"], ["approve", "approve", "approve", "deny", "none"][h])' |
        while read -r job req what; do
            [ "$what" = none ] && continue
            grep -qF " $req " "$log" && continue
            orchestrator "$what" "$job" "$req" >/dev/null 2>&1 && echo "$job $req $what $(date +%s)" >>"$log"
        done
done
EOF
    cp "$repo/benches/soak-report.py" "$r/usr/local/bin/soak-report"
    chmod 0755 "$r/usr/local/bin/soak-writer" "$r/usr/local/bin/soak-dbus" "$r/usr/local/bin/soak-cancel" "$r/usr/local/bin/soak-report" "$r/usr/local/bin/soak-approver"
    svc() { # NAME USER EXEC
        printf '[Unit]\nDescription=soak load: %s\nAfter=agentstore-orchestrator.service\n[Service]\nUser=%s\nExecStart=%s\nRestart=always\nRestartSec=2\n[Install]\nWantedBy=multi-user.target\n' \
            "$1" "$2" "$3" >"$r/etc/systemd/system/$1.service"
    }
    svc soak-writer agentstore "/usr/local/bin/soak-writer $n $MSG_INTERVAL"
    svc soak-dbus root "/usr/local/bin/soak-dbus $n"
    svc soak-cancel root /usr/local/bin/soak-cancel
    svc soak-approver root "/usr/local/bin/soak-approver $n"
    on "$n" systemctl daemon-reload
done
on alpha systemctl enable --now soak-writer.service soak-dbus.service soak-cancel.service soak-approver.service >/dev/null 2>&1
on beta systemctl enable --now soak-writer.service soak-approver.service >/dev/null 2>&1
load_units_alpha=(soak-writer.service soak-dbus.service soak-cancel.service soak-approver.service)
load_units_beta=(soak-writer.service soak-approver.service)
log "load running: a writer per machine (every ${MSG_INTERVAL}s), D-Bus Submit every 1 s and a cancel every 30 s on alpha, an approver on each; $WORKERS workers per queue ($([ "$SHARED_QUEUES" = 1 ] && echo "both queues on both machines" || echo "oak on alpha, beech on beta"))"

# --- faults ---------------------------------------------------------------------------------------
declare -A faults_done
fault_kill9() {
    local n u
    for n in alpha beta; do
        for u in agentstore-orchestrator.service queue-manager@oak.service queue-manager@beech.service; do
            on "$n" systemctl kill -s KILL --kill-whom=main "$u" >/dev/null 2>&1 || true
        done
    done
    log "fault: kill -9 of every daemon on both machines"
}
fault_pause() {
    st_api_on beta 8385 key-beta POST /rest/system/pause >/dev/null || log "pausing beta's Syncthing failed"
    log "fault: beta's Syncthing paused (a partition) for ${PAUSE_S}s"
    sleep "$PAUSE_S"
    st_api_on beta 8385 key-beta POST /rest/system/resume >/dev/null || log "resuming beta's Syncthing failed"
    log "fault: Syncthing resumed"
}
fault_disk() {
    dd if=/dev/zero of="$state/store-alpha/.soak-fill" bs=1M status=none 2>/dev/null || true
    log "fault: alpha's store full ($(df -h --output=avail "$state/store-alpha" | tail -1 | tr -d ' ') left) for 60 s"
    sleep 60
    rm -f "$state/store-alpha/.soak-fill"
    log "fault: disk freed"
}
fault_sigstop() {
    on beta systemctl kill -s STOP --kill-whom=main queue-manager@beech.service
    log "fault: beta's queue manager SIGSTOPped for ${SIGSTOP_S} s (heartbeat stale after 20 s, lost-job grace ${LOST_GRACE} s)"
    sleep "$SIGSTOP_S"
    on beta systemctl kill -s CONT --kill-whom=main queue-manager@beech.service
    log "fault: beta's queue manager continued"
}
fault_reboot() {
    local t0
    t0=$(date +%s)
    boot_opts beta
    if sys_reboot soak-beta "${opts[@]}" >>"$out/reboot.log" 2>&1; then
        if sys_wait_until 120 "beta's daemons after the reboot" on beta systemctl is-active --quiet \
            "${units_beta[@]}"; then
            log "fault: beta rebooted (systemctl reboot); its daemons back after $(($(date +%s) - t0)) s"
        else
            log "fault: beta rebooted but its daemons are not all active after $(($(date +%s) - t0)) s"
            faults_done[reboot_not_back]=$((${faults_done[reboot_not_back]:-0} + 1))
        fi
    else
        log "fault: the reboot of beta FAILED (see $out/reboot.log)"
        faults_done[reboot_failed]=$((${faults_done[reboot_failed]:-0} + 1))
    fi
}
fault_upgrade() {
    local n before after
    for n in alpha beta; do
        before=$(on "$n" dpkg-query -W -f='${Version}' agentstore)
        if on "$n" env DEBIAN_FRONTEND=noninteractive apt-get install -y --reinstall /var/tmp/new.deb >>"$out/upgrade.log" 2>&1; then
            after=$(on "$n" dpkg-query -W -f='${Version}' agentstore)
            log "fault: $n: package $before → $after installed with everything running"
        else
            log "fault: $n: the package install FAILED (see $out/upgrade.log)"
            faults_done[upgrade_failed]=$((${faults_done[upgrade_failed]:-0} + 1))
        fi
    done
}

report() { # LABEL
    local ja jb
    local args_a=() args_b=() u
    for u in "${units_alpha[@]}"; do args_a+=(--unit "$u"); done
    for u in "${units_beta[@]}"; do args_b+=(--unit "$u"); done
    ja=$(on alpha soak-report --copy /var/lib/agentstore --copy /srv/beta --ledger /var/tmp/soak --grace "$GRACE" "${args_a[@]}") || return 0
    jb=$(on beta soak-report --daemons-only "${args_b[@]}" 2>/dev/null) || jb='{"daemons": {}}'
    python3 - "$1" "$ja" "$jb" "$out/samples.jsonl" <<'PY' | tee -a "$out/soak.log" >&2
import json, sys
label, j, jb, samples = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
j["daemons"] = {**{f"alpha {u}": d for u, d in j["daemons"].items()}, **{f"beta {u}": d for u, d in jb["daemons"].items()}}
j["label"] = label
with open(samples, "a") as f:
    f.write(json.dumps(j, sort_keys=True) + "\n")
m, jobs, c = j["messages"], j["jobs"], j["conflicts"]
print(f"[{label}] load {' '.join(j['load'])} | messages written {m['written']} answered {m['answered']} "
      f"lost {m['lost']} doubled {m['doubled']} unrecorded {m['answered_without_event']} "
      f"(dbus ok {m['dbus_ok']} failed {m['dbus_failed']}) | jobs finished {jobs['finished']} "
      f"failed {sum(jobs['failed'].values())} running {jobs['running']} queued {jobs['queued']} "
      f"twice {jobs['run_twice']} stuck {jobs['stuck']} | conflict copies {c['sync_conflict_copies']} set aside {c['set_aside']}")
for u, d in j["daemons"].items():
    print(f"    {u}: pid {d.get('pid')} rss {d.get('rss_kb')} kB fds {d.get('fds')} threads {d.get('threads')} inotify {d.get('inotify_watches')}")
PY
}

t_start=$(date +%s)
t_end=$((t_start + minutes * 60))
next_report=$((t_start + REPORT_MIN * 60))
next_fault=$((t_start + FAULT_MIN * 60))
k=0
log "soak for $minutes min; report every $REPORT_MIN min; a fault every $FAULT_MIN min (${schedule[*]}); output in $out"
report start
while [ "$(date +%s)" -lt "$t_end" ]; do
    now=$(date +%s)
    if [ "$now" -ge "$next_fault" ]; then
        f=${schedule[$((k % ${#schedule[@]}))]}
        k=$((k + 1))
        "fault_$f"
        faults_done[$f]=$((${faults_done[$f]:-0} + 1))
        next_fault=$(($(date +%s) + FAULT_MIN * 60))
    fi
    if [ "$now" -ge "$next_report" ]; then
        report "$(((now - t_start) / 60)) min"
        next_report=$((now + REPORT_MIN * 60))
    fi
    sleep 5
done

# --- drain and the final report -------------------------------------------------------------------
on alpha systemctl stop "${load_units_alpha[@]}"
on beta systemctl stop "${load_units_beta[@]}"
log "load stopped after $((($(date +%s) - t_start) / 60)) min; draining (up to $GRACE s) before the final report"
# Both copies the same: each Syncthing needs nothing more of the other (the report judges
# alpha's copy; beta's events arrive through the engine like everything else).
in_sync() {
    local ja jb
    ja=$(st_api_on alpha 8384 key-alpha GET "/rest/db/completion?folder=store&device=$id_beta") || return 1
    jb=$(st_api_on beta 8385 key-beta GET "/rest/db/completion?folder=store&device=$id_alpha") || return 1
    python3 -c 'import json, sys; sys.exit(0 if all(json.loads(x)["needItems"] == 0 and json.loads(x)["completion"] >= 100 for x in sys.argv[1:]) else 1)' "$ja" "$jb"
}
drained() {
    in_sync || return 1
    on alpha soak-report --copy /var/lib/agentstore --ledger /var/tmp/soak --grace 0 | python3 -c '
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j["messages"]["lost"] == 0 and j["jobs"]["running"] == 0 and j["jobs"]["queued"] == 0 else 1)'
}
sys_wait_until "$GRACE" "drained" drained || log "not drained after $GRACE s"
report final
faults=""
for f in "${!faults_done[@]}"; do faults+="$f=${faults_done[$f]} "; done
log "faults injected: ${faults:-none}"
for n in alpha beta; do
    on "$n" journalctl --no-pager -o short-iso >"$out/journal-$n.txt" 2>&1 || true
done
python3 "$repo/benches/soak-report.py" --summarize "$out/samples.jsonl" | tee -a "$out/soak.log"
