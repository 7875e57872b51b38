#!/usr/bin/env bash
# benches/soak-system.sh — the long soak under real systemd, from the .deb, two machines'
# copies of the store joined by REAL Syncthing, with faults on a schedule (issue 34). See
# benches/soak-system.md for what it does, what it reports and how to read it.
#
#   sudo benches/soak-system.sh [--minutes N] [--deb FILE] [--prev-deb FILE] [--out DIR]
#
# Environment: SOAK_REPORT_MINUTES (5), SOAK_FAULT_MINUTES (6: one fault every N minutes,
# cycling through the list), SOAK_PAUSE_SECONDS (180: Syncthing partition), SOAK_WORKERS (10
# per queue), SOAK_MSG_INTERVAL (0.5 s per writer), SOAK_STORE_MB (768: alpha's store is a
# tmpfs of this size, so "disk full" fills it and nothing else), SOAK_GRACE (600 s: an
# unanswered message older than this counts as lost, a job older than its timeout + this as
# stuck). Exit status 0 only when the final report has 0 lost, 0 doubled, 0 run twice,
# 0 stuck and 0 answers without their event.
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
    *) sed -n '5,6p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2 ;;
    esac
done
REPORT_MIN=${SOAK_REPORT_MINUTES:-5}
FAULT_MIN=${SOAK_FAULT_MINUTES:-6}
PAUSE_S=${SOAK_PAUSE_SECONDS:-180}
WORKERS=${SOAK_WORKERS:-10}
MSG_INTERVAL=${SOAK_MSG_INTERVAL:-0.5}
STORE_MB=${SOAK_STORE_MB:-768}
GRACE=${SOAK_GRACE:-600}
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
m=soak-system
sys_rootfs >/dev/null || sys_die "no rootfs"
sys_boot "$m" || sys_die "the soak container did not boot"
root=$(sys_root "$m")
# shellcheck source=../tests/system/store.sh
. "$repo/tests/system/store.sh"
A=$AS
B=/srv/beta
export Q=beech
log() { printf '[soak %(%H:%M:%S)T] %s\n' -1 "$*" | tee -a "$out/soak.log" >&2; }

# --- install (the previous release first, when given: the upgrade fault then upgrades) -------
first=$deb
[ -n "$prev_deb" ] && first=$prev_deb
sys_install_deb "$m" "$first" >"$out/install.log" 2>&1 || sys_die "installing $first failed (see $out/install.log)"
sys_copy_in "$m" "$deb" /var/tmp/new.deb
log "installed $(x dpkg-query -W -f='${Version}' agentstore); the upgrade fault installs $(dpkg-deb -f "$deb" Version)"

# Alpha's store on a tmpfs of its own: the disk-full fault fills it, not the host.
uid=$(x id -u agentstore)
gid=$(x id -g agentstore)
if x mount -t tmpfs -o "size=${STORE_MB}m,mode=0750,uid=$uid,gid=$gid" soak-store "$A"; then
    adm init >/dev/null
    disk_fault=1
else
    log "cannot mount a tmpfs for the store: the disk-full fault is left out"
    disk_fault=0
fi

# --- two copies, real Syncthing; alpha: systemd units; beta: transient units ------------------
# shellcheck source=../tests/system/syncthing.sh
. "$repo/tests/system/syncthing.sh"
st_two_copies 60
setup_queue beech "$WORKERS"
setup_queue oak "$WORKERS"
sys_wait_until 120 "queues on beta" x test -f "$B/Queues/oak/queue.json" || sys_die "beta did not receive the queues"
x mkdir -p /etc/systemd/system/queue-manager@oak.service.d
x systemctl start agentstore-orchestrator.service queue-manager@oak.service
x systemd-run --unit ob-beta --uid=agentstore --gid=agentstore -p Restart=on-failure -p RestartSec=2 \
    -p Environment=HOME=/var/tmp -p Environment=AGENTSTORE_HOSTNAME=beta \
    /usr/bin/orchestratord --standby --bus none --idle-exit 0 --root "$B" >/dev/null
# KillMode=process: a kill of beta's queue manager leaves its (direct) workers running, as the
# systemd launcher's scopes do on alpha; the restarted one re-adopts them.
x systemd-run --unit qm-beta -p Restart=on-failure -p RestartSec=2 -p KillMode=process \
    -p Environment=AGENTSTORE_HOSTNAME=beta \
    /usr/bin/queue-manager --queue beech --bus none --launcher direct --idle-exit 0 --root "$B" >/dev/null
units=(agentstore-orchestrator.service queue-manager@oak.service ob-beta.service qm-beta.service st-alpha.service st-beta.service)

# --- load: two inbox writers, a D-Bus caller, a canceller --------------------------------------
x mkdir -p /var/tmp/soak
x chown agentstore:agentstore /var/tmp/soak
cat >"$root/usr/local/bin/soak-writer" <<'EOF'
#!/bin/bash
# soak-writer SIDE STORE INTERVAL — messages into STORE's inbox forever; ledger of what was written.
side=$1 store=$2 interval=$3 i=0
ledger=/var/tmp/soak/written-$side.log
while :; do
    i=$((i + 1))
    id="soak-$side-$(printf '%07d' $i)"
    r=$((RANDOM % 10))
    q=oak; [ $((i % 2)) = 0 ] && q=beech
    case $r in
    0 | 1 | 2 | 3) cmd=list-projects content='{}' ;;
    4) cmd=research-code content="{\"task\": \"soak\", \"queue\": \"$q\", \"jobtype\": \"noop\", \"timeout\": 5, \"supporting_data\": {\"sleep_seconds\": 30}}" ;;
    *) cmd=research-code content="{\"task\": \"soak\", \"queue\": \"$q\", \"jobtype\": \"noop\", \"supporting_data\": {\"sleep_seconds\": $((RANDOM % 20 + 1))}}" ;;
    esac
    printf '{"correlation_id": "%s", "source": "user", "project": "TestProject", "queue_time": "%s", "processed_time": null, "command": "%s", "content": %s, "status": "queued", "error": null, "user": null}\n' \
        "$id" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$cmd" "$content" >"$store/messaging/inbox/.$id.tmp" &&
        mv "$store/messaging/inbox/.$id.tmp" "$store/messaging/inbox/$id.json" &&
        echo "$id $(date +%s)" >>"$ledger"
    sleep "$interval"
done
EOF
cat >"$root/usr/local/bin/soak-dbus" <<'EOF'
#!/bin/bash
# soak-dbus — Submit list-projects over the system bus every second; ledger of results.
i=0
while :; do
    i=$((i + 1))
    id="soak-dbus-$(printf '%07d' $i)"
    msg="{\"correlation_id\": \"$id\", \"source\": \"user\", \"project\": null, \"queue_time\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"processed_time\": null, \"command\": \"list-projects\", \"content\": {}, \"status\": \"queued\", \"error\": null}"
    if timeout 60 busctl --system call org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1 \
        org.agentstore.Orchestrator1 Submit s "$msg" >/dev/null 2>&1; then
        echo "$id $(date +%s)" >>/var/tmp/soak/dbus-ok-0.log
    else
        echo "$id $(date +%s)" >>/var/tmp/soak/dbus-failed-0.log
    fi
    sleep 1
done
EOF
cat >"$root/usr/local/bin/soak-cancel" <<'EOF'
#!/bin/bash
# soak-cancel — every 30 s, cancel one queued or running job of queue oak (alpha's) over D-Bus.
while :; do
    sleep 30
    f=$(ls /var/lib/agentstore/Queues/oak/Jobs/running_jobs/ /var/lib/agentstore/Queues/oak/Jobs/queued_jobs/ 2>/dev/null | grep '\.json$' | shuf -n1)
    [ -n "$f" ] || continue
    orchestrator cancel-job "${f%.json}" >/dev/null 2>&1 && echo "${f%.json} $(date +%s)" >>/var/tmp/soak/cancelled.log
done
EOF
chmod 0755 "$root/usr/local/bin/soak-writer" "$root/usr/local/bin/soak-dbus" "$root/usr/local/bin/soak-cancel"
cp "$repo/benches/soak-report.py" "$root/usr/local/bin/soak-report"
chmod 0755 "$root/usr/local/bin/soak-report"
x systemd-run --unit soak-writer-alpha --uid=agentstore --gid=agentstore soak-writer alpha "$A" "$MSG_INTERVAL" >/dev/null
x systemd-run --unit soak-writer-beta --uid=agentstore --gid=agentstore soak-writer beta "$B" "$MSG_INTERVAL" >/dev/null
x systemd-run --unit soak-dbus soak-dbus >/dev/null
x systemd-run --unit soak-cancel soak-cancel >/dev/null
log "load running: 2 writers (every ${MSG_INTERVAL}s), D-Bus Submit every 1 s, a cancel every 30 s; $WORKERS workers per queue"

# --- faults ---------------------------------------------------------------------------------------
declare -A faults_done
fault_kill9() {
    for u in agentstore-orchestrator.service queue-manager@oak.service ob-beta.service qm-beta.service; do
        x systemctl kill -s KILL --kill-whom=main "$u" >/dev/null 2>&1 || true
    done
    log "fault: kill -9 of every daemon"
}
fault_partition() {
    x systemctl kill -s STOP st-beta.service
    log "fault: Syncthing of beta stopped (partition) for ${PAUSE_S}s"
    sleep "$PAUSE_S"
    x systemctl kill -s CONT st-beta.service
    log "fault: partition over"
}
fault_disk() {
    if [ "$disk_fault" != 1 ]; then return 0; fi
    x sh -c "dd if=/dev/zero of=$A/.soak-fill bs=1M status=none 2>/dev/null; true"
    log "fault: alpha's store full ($(x df -h --output=avail "$A" | tail -1 | tr -d ' ') left) for 60 s"
    sleep 60
    x rm -f "$A/.soak-fill"
    log "fault: disk freed"
}
fault_sigstop() {
    x systemctl kill -s STOP --kill-whom=main qm-beta.service
    log "fault: beta's queue manager SIGSTOPped for 90 s (heartbeat stale after 3 s, lost-job grace 60 s)"
    sleep 90
    x systemctl kill -s CONT --kill-whom=main qm-beta.service
    log "fault: beta's queue manager continued"
}
fault_upgrade() {
    local before after
    before=$(x dpkg-query -W -f='${Version}' agentstore)
    if x env DEBIAN_FRONTEND=noninteractive apt-get install -y --reinstall /var/tmp/new.deb >>"$out/upgrade.log" 2>&1; then
        after=$(x dpkg-query -W -f='${Version}' agentstore)
        log "fault: package $before → $after installed with everything running"
    else
        log "fault: the package install FAILED (see $out/upgrade.log)"
        faults_done[upgrade_failed]=$((${faults_done[upgrade_failed]:-0} + 1))
    fi
}
schedule=(kill9 partition kill9 disk sigstop upgrade)

report() { # LABEL
    local j
    local args=() u
    for u in "${units[@]}"; do args+=(--unit "$u"); done
    j=$(x soak-report --copy "$A" --copy "$B" --ledger /var/tmp/soak --grace "$GRACE" "${args[@]}") || return 0
    echo "$j" >>"$out/samples.jsonl"
    python3 - "$1" "$j" <<'PY' | tee -a "$out/soak.log" >&2
import json, sys
label, j = sys.argv[1], json.loads(sys.argv[2])
m, jb, c = j["messages"], j["jobs"], j["conflicts"]
print(f"[{label}] load {' '.join(j['load'])} | messages written {m['written']} answered {m['answered']} "
      f"lost {m['lost']} doubled {m['doubled']} unrecorded {m['answered_without_event']} "
      f"dbus ok {m['dbus_ok']} failed {m['dbus_failed']} | jobs finished {jb['finished']} "
      f"failed {sum(jb['failed'].values())} running {jb['running']} queued {jb['queued']} "
      f"twice {jb['run_twice']} stuck {jb['stuck']} | conflict copies {c['sync_conflict_copies']} set aside {c['set_aside']}")
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
x systemctl stop soak-writer-alpha soak-writer-beta soak-dbus soak-cancel
log "load stopped; draining (up to $GRACE s) before the final report"
drained() {
    x soak-report --copy "$A" --copy "$B" --ledger /var/tmp/soak --grace 0 | python3 -c '
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j["messages"]["lost"] == 0 and j["jobs"]["running"] == 0 and j["jobs"]["queued"] == 0 else 1)'
}
sys_wait_until "$GRACE" "drained" drained || log "not drained after $GRACE s"
report final
faults=""
for f in "${!faults_done[@]}"; do faults+="$f=${faults_done[$f]} "; done
log "faults injected: ${faults:-none}"
x journalctl --no-pager -o short-iso >"$out/journal.txt" 2>&1 || true
tail -n1 "$out/samples.jsonl" | python3 -c '
import json, sys
j = json.load(sys.stdin)
m, jb = j["messages"], j["jobs"]
bad = m["lost"] + m["doubled"] + m["answered_without_event"] + jb["run_twice"] + jb["stuck"]
print("RESULT:", "PASS" if bad == 0 else "FAIL", json.dumps({"lost": m["lost"], "doubled": m["doubled"],
      "unrecorded": m["answered_without_event"], "run_twice": jb["run_twice"], "stuck": jb["stuck"]}))
sys.exit(0 if bad == 0 else 1)' | tee -a "$out/soak.log"
