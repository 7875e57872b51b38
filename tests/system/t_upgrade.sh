#!/usr/bin/env bash
# t_upgrade: `apt install` of the new package over the previous release while jobs run and
# messages arrive (issue 34), then a downgrade attempt.
#   - the previous release (SYS_PREV_DEB: the tag's package, tests/system/prev-deb.sh) is
#     installed, its orchestrator and queue-manager@poplar run, four jobs are running (20 s
#     each), more are queued, and a writer drops a message every 0.2 s into the inbox;
#   - `apt-get install ./new.deb` meanwhile. The chosen semantics (packaging/README.md): the
#     files are unpacked under the running daemons, then postinst reloads systemd and
#     try-restarts every running agentstore service; a job lives in its own scope, so the
#     restarted queue manager re-adopts it (same worker pid) instead of running it again;
#   - after: the new version is installed, both daemons came back by themselves (new main
#     pids, the new unit's WatchdogSec), every job finished exactly once (one file, one
#     job_started event, the running ones with the worker pid they had before), every message
#     has exactly one answer and one message_answered event, nothing stuck in the inbox;
#   - `apt-get install` of the previous package is refused (version and services unchanged);
#     and `dpkg -i` of an older package whose scripts are this version's (0.1.0's own prerm
#     cannot refuse anything: it predates the check) is refused by the prerms, before anything
#     is unpacked.
# sys: no-machine
# sys: prev-deb
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin_no_machine
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
[ -f "${SYS_PREV_DEB:-}" ] || sys_test_skip "needs the previous release's package (SYS_PREV_DEB; run.sh builds it with prev-deb.sh)"
m=t-upgrade
sys_boot "$m" || sys_die "could not boot $m"
# shellcheck source=store.sh
. "$SYS_LIB_DIR/store.sh"
version() { x dpkg-query -W -f='${Version}' agentstore; }
new_version=$(dpkg-deb -f "$SYS_DEB" Version)
old_version=$(dpkg-deb -f "$SYS_PREV_DEB" Version)
if ! dpkg --compare-versions "$new_version" gt "$old_version"; then
    sys_fail "the package under test ($new_version) is not newer than the previous release ($old_version): bump Cargo.toml's version"
    sys_test_end
fi
sys_copy_in "$m" "$SYS_PREV_DEB" /var/tmp/prev.deb
sys_copy_in "$m" "$SYS_DEB" /var/tmp/new.deb
sys_check "the previous release $old_version installs" sys_install_deb "$m" "$SYS_PREV_DEB"
sys_expect_eq "installed: $old_version" "$old_version" "$(version)"

setup_users
setup_project TestProject /tmp/testproject
setup_queue poplar 4
orch=agentstore-orchestrator.service
qm=queue-manager@poplar.service
as_svc sed -i 's/idle_exit_seconds: .*/idle_exit_seconds: 0/' "$AS/config.yaml"
sys_check "orchestrator ($old_version) runs" x systemctl start $orch
sys_check "queue manager ($old_version) runs" x systemctl start $qm
for i in 1 2 3 4 5 6 7 8; do
    queue_job "up-job-$i" "$(job_json TestProject noop noop "upgrade $i" 300 '{"sleep_seconds": 20}')"
done
running_count() { x sh -c "ls $AS/Queues/poplar/Jobs/running_jobs/ | grep -c '^up-job-.*\.json$'" || true; }
four_running() { [ "$(running_count)" -ge 4 ]; }
sys_check "four jobs running before the upgrade" sys_wait_until 90 "4 running" four_running
declare -A pid_before
for f in $(x sh -c "ls $AS/Queues/poplar/Jobs/running_jobs/ | grep '^up-job-.*\.json$'"); do
    id=${f%.json}
    pid_before[$id]=$(jfield "$(jobf "$id" running)" process_id)
done
sys_log "running before the upgrade: ${!pid_before[*]} (worker pids ${pid_before[*]})"
o_pid=$(x systemctl show -p MainPID --value $orch)
q_pid=$(x systemctl show -p MainPID --value $qm)

# The writer: 100 messages, one every 0.2 s (list-projects, and research-code making 1 s jobs).
x sh -c 'cat >/var/tmp/writer.sh' <<'EOS'
#!/bin/sh
inbox=/var/lib/agentstore/messaging/inbox
i=0
while [ $i -lt 100 ]; do
    id=$(printf 'up-msg-%03d' $i)
    if [ $((i % 4)) = 0 ]; then
        cmd=research-code
        content='{"task": "during the upgrade", "jobtype": "noop", "supporting_data": {"sleep_seconds": 1}}'
    else
        cmd=list-projects
        content='{}'
    fi
    printf '{"correlation_id": "%s", "source": "user", "project": "TestProject", "queue_time": "%s", "processed_time": null, "command": "%s", "content": %s, "status": "queued", "error": null, "user": null}\n' \
        "$id" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$cmd" "$content" >"$inbox/.$id.tmp"
    mv "$inbox/.$id.tmp" "$inbox/$id.json"
    i=$((i + 1))
    sleep 0.2
done
EOS
x systemd-run --unit writer --uid=agentstore --gid=agentstore --property=Type=exec sh /var/tmp/writer.sh >/dev/null
sys_wait_until 30 "the writer under way" x sh -c "ls $AS/messaging/outbox | grep -q up-msg-00" || true

# --- the upgrade, with jobs running and messages arriving --------------------------------------
t0=$(sys_now_ms)
if out=$(x env DEBIAN_FRONTEND=noninteractive apt-get install -y /var/tmp/new.deb 2>&1); then
    sys_pass "apt-get install of $new_version over $old_version ($(sys_fmt_ms $(($(sys_now_ms) - t0))))"
else
    sys_fail "apt-get install of $new_version failed"
    printf '    | %s\n' "${out//$'\n'/$'\n'    | }"
fi
sys_expect_eq "installed: $new_version" "$new_version" "$(version)"
sys_check "the orchestrator came back by itself" sys_wait_until 60 "$orch active" active $orch
sys_check "the queue manager came back by itself" sys_wait_until 60 "$qm active" active $qm
o_new=$(x systemctl show -p MainPID --value $orch)
q_new=$(x systemctl show -p MainPID --value $qm)
if [ "$o_new" != "$o_pid" ] && [ "$o_new" != 0 ]; then
    sys_pass "orchestrator restarted on the new binary (pid $o_pid → $o_new)"
else
    sys_fail "orchestrator not restarted (pid $o_pid → $o_new)"
fi
if [ "$q_new" != "$q_pid" ] && [ "$q_new" != 0 ]; then
    sys_pass "queue manager restarted on the new binary (pid $q_pid → $q_new)"
else
    sys_fail "queue manager not restarted (pid $q_pid → $q_new)"
fi
sys_expect_eq "the new unit is loaded (WatchdogSec=2min)" 2min "$(x systemctl show -p WatchdogUSec --value $qm)"
# The store migrated: 0.1.0 keyed this machine by its host name (machines/t-upgrade/); the new
# daemons key it by machine id and carry the old key in their heartbeats' `formerly`, so the
# jobs whose runtime.host says t-upgrade stay theirs.
key=$(x orchestrator this-machine 2>/dev/null || true)
sys_expect_match "this machine's key is made from its machine id" '^m-[0-9a-f]{16}$' "$key"
migrated() { x sh -c "grep -rqs '\"t-upgrade\"' '$AS/machines/$key/'"; }
sys_check "the new heartbeats are under machines/$key/, formerly t-upgrade (store migrated)" \
    sys_wait_until 60 "migrated heartbeats" migrated

# --- everything finishes once ------------------------------------------------------------------
sys_check "the writer finished" sys_wait_until 120 "writer done" inactive writer.service
all_answered() { [ "$(x sh -c "ls $AS/messaging/outbox $AS/messaging/processed_outbox 2>/dev/null | grep -c '^up-msg-.*\.json$'")" -ge 100 ]; }
sys_check "100 messages answered" sys_wait_until 120 "100 answers" all_answered
sys_expect_eq "nothing left in the inbox" 0 "$(x sh -c "ls $AS/messaging/inbox | grep -c '\.json$'" || true)"
sys_expect_eq "exactly 100 answers (none twice)" 100 "$(x sh -c "ls $AS/messaging/outbox $AS/messaging/processed_outbox 2>/dev/null | grep -c '^up-msg-.*\.json$'")"
ev_count() { x sh -c "cat $AS/logs/events-*.jsonl | grep '\"$1\"' | grep -o '\"$2\":\"$3[^\"]*\"' | sort | uniq -c | awk '{print \$1}' | sort | uniq -c | tr -s ' ' | tr '\n' ';'"; }
sys_expect_eq "one message_answered event per message (100 ids seen once)" " 100 1;" "$(ev_count message_answered correlation_id up-msg-)"
jobs_total=$((8 + 25))
done_jobs() { x sh -c "ls $AS/Queues/poplar/Jobs/finished_jobs | grep -c '\.json$'" || true; }
all_done() { [ "$(done_jobs)" -ge $jobs_total ]; }
sys_check "all $jobs_total jobs finished" sys_wait_until 240 "$jobs_total finished" all_done
sys_expect_eq "no job in another state" "0 0 0" "$(x sh -c "for s in queued running failed; do ls $AS/Queues/poplar/Jobs/\${s}_jobs | grep -c '\.json$'; done | tr '\n' ' ' | sed 's/ \$//'")"
sys_expect_eq "one job_started event per job ($jobs_total jobs started once)" " $jobs_total 1;" "$(x sh -c "cat $AS/logs/events-*.jsonl | grep '\"job_started\"' | grep -o '\"job_id\":\"[^\"]*\"' | sort | uniq -c | awk '{print \$1}' | sort | uniq -c | tr -s ' ' | tr '\n' ';'")"
# Every finished job handled by an orchestrator (the old one before, the new one after): the
# store keeps $old_version's copies of the schemas, and the new daemons must still judge the
# new fields of jobs that finish after the upgrade (a soak saw every completion refused).
handled() { x sh -c "cat $AS/logs/events-*.jsonl | grep '\"job_handled\"' | grep -o '\"job_id\":\"[^\"]*\"' | sort -u | wc -l"; }
all_handled() { [ "$(handled)" -ge $jobs_total ]; }
sys_check "the orchestrator handled all $jobs_total finished jobs (one job_handled each)" sys_wait_until 180 "$jobs_total handled" all_handled
for id in "${!pid_before[@]}"; do
    sys_expect_eq "$id, running across the upgrade, finished on its own worker (pid ${pid_before[$id]})" \
        "${pid_before[$id]}" "$(jfield "$(jobf "$id" finished)" process_id)"
done

# --- a downgrade is refused ----------------------------------------------------------------------
rc=0
out=$(x env DEBIAN_FRONTEND=noninteractive apt-get install -y /var/tmp/prev.deb 2>&1) || rc=$?
if [ "$rc" != 0 ]; then
    sys_pass "apt-get install of $old_version over $new_version is refused (exit $rc)"
else
    sys_fail "the downgrade went through: $out"
fi
sys_log "$(grep -iE 'downgrad|^E:' <<<"$out" | head -3)"
sys_expect_eq "still installed: $new_version" "$new_version" "$(version)"
# dpkg -i of an older package: this version's prerm (upgrade OLD) and the incoming one's
# (failed-upgrade NEW) both refuse. The incoming package is this one repacked as 0.1.9-1, its
# scripts' THIS_VERSION with it: what a downgrade from the next release to this one meets.
x sh -c 'set -e; rm -rf /var/tmp/older && dpkg-deb -R /var/tmp/new.deb /var/tmp/older &&
    sed -i "s/^Version: .*/Version: 0.1.9-1/" /var/tmp/older/DEBIAN/control &&
    sed -i "s/^THIS_VERSION=.*/THIS_VERSION=0.1.9-1/" /var/tmp/older/DEBIAN/prerm &&
    dpkg-deb -b /var/tmp/older /var/tmp/older.deb >/dev/null'
rc=0
out=$(x env DEBIAN_FRONTEND=noninteractive dpkg -i /var/tmp/older.deb 2>&1) || rc=$?
if [ "$rc" != 0 ] && grep -q "refusing to downgrade" <<<"$out"; then
    sys_pass "dpkg -i of 0.1.9-1 over $new_version is refused by prerm, saying why"
else
    sys_fail "dpkg -i of an older package was not refused (exit $rc): $out"
fi
sys_expect_eq "still installed after dpkg -i: $new_version" "$new_version" "$(version)"
sys_expect_eq "dpkg's state is clean (install ok installed)" "install ok installed" "$(x dpkg-query -W -f='${Status}' agentstore)"
sys_check "the orchestrator still runs" active $orch
sys_check "the queue manager still runs" active $qm
message up-after list-projects | put "$AS/messaging/inbox/up-after.json"
sys_check "and answers" sys_wait_until 60 "up-after" x test -f "$AS/messaging/outbox/up-after.json"
sys_test_end
