#!/usr/bin/env bash
# t_queue_scope: queue-manager@.service under a real systemd with the `systemd` launcher
# (issue 4, DESIGN §5):
#  - the packaged unit starts (Type=notify) and owns org.agentstore.Queue.<queue>;
#  - each job's worker runs in agentstore-job-<id>.scope with RuntimeMaxSec = the job's
#    timeout and MemoryMax/CPUQuota/TasksMax from the queue's resource_limits;
#  - a claude job (fake-claude) that forks a daemonized (setsid) grandchild is killed whole
#    at its timeout and fails with "Job timeout after 5s (limit: 5s)";
#  - a no-op job finishes in its scope; `journalctl JOB_ID=<id>` has its lines;
#  - a job whose scope systemd refuses (a unit of that name exists) fails saying so, is left
#    nowhere else, and the other unit is left alone;
#  - restarting the manager leaves a running job in its scope and re-adopts it.
# Binaries: the installed package's when $SYS_DEB put them in /usr/bin, else the freshly
# built ones from $AGENTSTORE_BIN_DIR (default target/debug).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
m=$SYS_MACHINE
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin_dir=${AGENTSTORE_BIN_DIR:-$repo/target/debug}
store=/var/lib/agentstore
q=poplar

# --- install ---------------------------------------------------------------------------------
# What the .deb did not bring (run alone, or a package built before this issue) comes from the
# source tree and $bin_dir.
for b in queue-manager agent-worker orchestrator; do
    sys_exec "$m" test -x "/usr/bin/$b" && continue
    [ -x "$bin_dir/$b" ] || sys_die "$bin_dir/$b is missing: cargo build --bins first"
    sys_copy_in "$m" "$bin_dir/$b" "/usr/bin/$b"
done
for u in service path timer; do
    sys_exec "$m" test -f "/usr/lib/systemd/system/queue-manager@.$u" ||
        sys_copy_in "$m" "$repo/systemd/queue-manager@.$u" "/etc/systemd/system/queue-manager@.$u"
done
sys_exec "$m" test -f /usr/share/dbus-1/system.d/org.agentstore.Queue.conf ||
    sys_copy_in "$m" "$repo/dbus/org.agentstore.Queue.conf" /usr/share/dbus-1/system.d/org.agentstore.Queue.conf
sys_copy_in "$m" "$repo/tests/fixtures/fake-claude" /usr/local/bin/fake-claude
sys_exec "$m" mkdir -p /etc/agentstore /etc/systemd/system/queue-manager@$q.service.d
printf 'agent_store_root: "%s"\nqueues_default: "%s"\n' "$store" "$q" |
    sys_exec "$m" sh -c 'cat >/etc/agentstore/config.yaml'
# Let the fake's grandchild pid file through the worker's environment allow-list.
printf '[Service]\nEnvironment=AGENTSTORE_PASS_ENV=FAKE_CLAUDE_PIDFILE FAKE_CLAUDE_PIDFILE=/var/tmp/fork.pid\n' |
    sys_exec "$m" sh -c "cat >/etc/systemd/system/queue-manager@$q.service.d/test.conf"
sys_exec "$m" systemctl daemon-reload
sys_exec "$m" systemctl reload dbus 2>/dev/null || true

# A store whose project belongs to chenry, mapped to the Unix user jobuser.
sys_sh "$m" "id jobuser >/dev/null 2>&1 || useradd --create-home jobuser"
sys_sh "$m" "orchestrator init --root $store >/dev/null"
sys_sh "$m" "orchestrator --root $store add-user chenry --name C --email c@x --permissions admin --unix-user jobuser >/dev/null"
sys_sh "$m" "mkdir -p /home/jobuser/proj/.claude/commands && echo 'Greet \$ARGUMENTS' >/home/jobuser/proj/.claude/commands/greet.md && chown -R jobuser: /home/jobuser"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
sys_sh "$m" "mkdir -p $store/projects/TestProject && cat >$store/projects/TestProject/project.json" <<EOT
{"id": "TestProject", "directory": "/home/jobuser/proj", "create_time": "$now", "update_time": "$now",
 "owner": "chenry", "default_queue": "$q"}
EOT
sys_sh "$m" "mkdir -p /etc/agentstore && printf 'programs:\\n  claude: [/usr/local/bin/fake-claude]\\n' >>/etc/agentstore/config.yaml"
sys_sh "$m" "cat >$store/Queues/$q/queue.json" <<EOT
{"config": {"id": "$q", "worker_count": 2, "claude_cli_path": "/usr/local/bin/fake-claude",
  "rest_interval": 60, "claude_default_args": ["-p"], "max_job_runtime_seconds": 3600,
  "launcher": "systemd",
  "resource_limits": {"memory_max": "256M", "cpu_quota": "50%", "tasks_max": 20}},
 "runtime": {"process_id": null, "active_jobs": 0, "last_update": null, "queued_jobs": 0}}
EOT

job_json() { # JOBTYPE TASK TIMEOUT SUPPORTING
    cat <<EOT
{"config": {"project": "TestProject", "working_directory": "/home/jobuser/proj",
  "queue_time": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "jobtype": "$1", "claude_command": "greet",
  "claude_extra_args": [], "task_description": "$2", "supporting_data": $4, "timeout_seconds": $3},
 "runtime": {"status": "queued", "start_time": null, "finish_time": null, "process_id": null,
  "llm_process_id": null, "error": null, "output": null}}
EOT
}
queue_job() { # ID JSON (atomic: temp name, then rename)
    sys_sh "$m" "cat >$store/Queues/$q/Jobs/queued_jobs/.$1.tmp && mv $store/Queues/$q/Jobs/queued_jobs/.$1.tmp $store/Queues/$q/Jobs/queued_jobs/$1.json" <<<"$2"
}
in_state() { sys_exec "$m" test -f "$store/Queues/$q/Jobs/$2_jobs/$1.json"; }
field() { # ID STATE NAME — runtime.NAME of a job file (string or scalar; minbase has no jq)
    sys_exec "$m" sh -c "grep -o '\"$3\": *[^,}]*' $store/Queues/$q/Jobs/$2_jobs/$1.json | head -1" |
        sed 's/^[^:]*: *//; s/^"//; s/"[[:space:]]*$//'
}
prop() { sys_exec "$m" systemctl show -p "$2" --value "$1"; }
unit_gone() {
    local s
    s=$(sys_exec "$m" systemctl show -p ActiveState --value "$1")
    [ "$s" = inactive ] || [ "$s" = failed ]
}
pid_gone() { ! sys_exec "$m" kill -0 "$1" 2>/dev/null; }

# --- the service -----------------------------------------------------------------------------
sys_check "queue-manager@$q.service starts (Type=notify)" sys_exec "$m" systemctl start "queue-manager@$q.service"
sys_expect_eq "the service is active" active "$(sys_exec "$m" systemctl is-active "queue-manager@$q.service" || true)"
names=$(sys_exec "$m" busctl --system list --no-legend --acquired 2>/dev/null || true)
sys_expect_match "it owns org.agentstore.Queue.$q on the system bus" "org\.agentstore\.Queue\.$q" "$names"
wc=$(sys_exec "$m" busctl --system get-property "org.agentstore.Queue.$q" "/org/agentstore/Queue/$q" org.agentstore.Queue1 WorkerCount || true)
sys_expect_eq "WorkerCount over D-Bus" "u 2" "$wc"

# --- a claude job forking a daemonized grandchild, killed whole at its timeout ---------------
sys_exec "$m" rm -f /var/tmp/fork.pid
queue_job fork1 "$(job_json claude 'FORK SLEEP=300' 5 '{}')"
unit=agentstore-job-fork1.scope
if sys_wait_until 20 "fork1 running in $unit" sys_exec "$m" systemctl is-active --quiet "$unit"; then
    sys_pass "the job runs in $unit"
else
    sys_fail "no active $unit"
fi
sys_expect_eq "RuntimeMaxUSec = the job's timeout" 5s "$(prop "$unit" RuntimeMaxUSec)"
sys_expect_eq "MemoryMax from resource_limits" 268435456 "$(prop "$unit" MemoryMax)"
sys_expect_eq "CPUQuotaPerSecUSec from resource_limits" 500ms "$(prop "$unit" CPUQuotaPerSecUSec)"
sys_expect_eq "TasksMax from resource_limits" 20 "$(prop "$unit" TasksMax)"
sys_expect_eq "the job file names its unit" "$unit" "$(field fork1 running unit)"
sys_wait_until 20 "the grandchild's pid file" sys_exec "$m" test -s /var/tmp/fork.pid || true
gpid=$(sys_exec "$m" cat /var/tmp/fork.pid 2>/dev/null || true)
gunit=$(sys_exec "$m" ps -o unit= -p "${gpid:-0}" 2>/dev/null | tr -d ' ' || true)
sys_expect_eq "the setsid grandchild is in the job's scope" "$unit" "$gunit"
guser=$(sys_exec "$m" ps -o user= -p "${gpid:-0}" 2>/dev/null | tr -d ' ' || true)
sys_expect_eq "the agent runs as the project owner's Unix user" jobuser "$guser"
sys_check "the job fails at its timeout" sys_wait_until 30 "fork1 in failed_jobs" in_state fork1 failed
sys_expect_eq "timeout error" "Job timeout after 5s (limit: 5s)" "$(field fork1 failed error)"
sys_check "the grandchild died with the scope" sys_wait_until 10 "grandchild $gpid gone" pid_gone "${gpid:-0}"
sys_check "the scope is gone" sys_wait_until 10 "$unit gone" unit_gone "$unit"

# --- a no-op job finishes in its scope; its journal lines carry JOB_ID= ----------------------
queue_job noop1 "$(job_json noop 'noop' 60 '{"sleep_seconds": 1}')"
sys_check "a no-op job finishes" sys_wait_until 30 "noop1 in finished_jobs" in_state noop1 finished
sys_expect_eq "its output" "No-op job completed successfully" "$(field noop1 finished output)"
sys_expect_eq "it ran in its scope" agentstore-job-noop1.scope "$(field noop1 finished unit)"
journal=$(sys_exec "$m" journalctl --no-pager -o cat JOB_ID=noop1 2>/dev/null || true)
sys_expect_match "journalctl JOB_ID=noop1 shows the job" "job (started|finished)" "$journal"

logs=$(sys_exec "$m" orchestrator --root "$store" logs noop1 2>&1 || true)
sys_expect_match "orchestrator logs noop1 reads the journal" "job finished" "$logs"

# --- systemd refuses the job's scope (a unit of that name exists): the job fails saying so, ---
# nothing is left in running_jobs/ or running, the other unit is left alone, the queue goes on.
sys_sh "$m" "setsid -f systemd-run --quiet --scope --unit=agentstore-job-taken1 sleep 300 >/dev/null 2>&1 </dev/null"
sys_check "a unit named agentstore-job-taken1.scope runs (not ours)" sys_wait_until 10 "the other scope" sys_exec "$m" systemctl is-active --quiet agentstore-job-taken1.scope
queue_job taken1 "$(job_json noop 'noop' 60 '{"sleep_seconds": 1}')"
sys_check "the job systemd cannot place fails" sys_wait_until 30 "taken1 in failed_jobs" in_state taken1 failed
err=$(field taken1 failed error)
sys_expect_match "its error names the scope systemd refused ($err)" 'Cannot start job: .*agentstore-job-taken1\.scope' "$err"
not_left() { ! in_state taken1 running && ! in_state taken1 queued && ! sys_exec "$m" pgrep -f 'agent-worker.* taken1( |$)' >/dev/null; }
sys_check "... and is not left in running_jobs/ or queued_jobs/, nor its worker running" sys_wait_until 10 "taken1 cleaned up" not_left
sys_expect_eq "the other unit is left alone" active "$(sys_exec "$m" systemctl is-active agentstore-job-taken1.scope || true)"
queue_job after1 "$(job_json noop 'noop' 60 '{"sleep_seconds": 0}')"
sys_check "the queue goes on: the next job finishes" sys_wait_until 30 "after1 in finished_jobs" in_state after1 finished
sys_exec "$m" systemctl stop agentstore-job-taken1.scope || true

# --- cancel over the system bus with the CLI ------------------------------------------------
queue_job cancel1 "$(job_json noop 'noop' 120 '{"sleep_seconds": 100}')"
sys_wait_until 20 "cancel1 running" in_state cancel1 running || true
sys_check "orchestrator cancel-job (system bus)" sys_exec "$m" orchestrator --root "$store" cancel-job cancel1
sys_check "the cancelled job fails" sys_wait_until 20 "cancel1 in failed_jobs" in_state cancel1 failed
sys_expect_eq "cancel error" "Job cancelled by root" "$(field cancel1 failed error)"
sys_check "its scope is gone" sys_wait_until 10 "scope gone" unit_gone agentstore-job-cancel1.scope

# --- restart: a running job survives in its scope and is re-adopted --------------------------
queue_job long1 "$(job_json noop 'noop' 120 '{"sleep_seconds": 8}')"
sys_wait_until 20 "long1 running" in_state long1 running || true
sys_check "the manager restarts" sys_exec "$m" systemctl restart "queue-manager@$q.service"
sys_expect_eq "the job's scope survived the restart" active "$(sys_exec "$m" systemctl is-active agentstore-job-long1.scope || true)"
sys_check "the re-adopted job finishes (not failed)" sys_wait_until 40 "long1 in finished_jobs" in_state long1 finished
log=$(sys_exec "$m" sh -c "cat $store/logs/queue-$q*.log" 2>/dev/null || true)
sys_expect_match "the queue log records the re-adoption" "job long1 re-adopted" "$log"

sys_exec "$m" systemctl stop "queue-manager@$q.service" || true
sys_test_end
