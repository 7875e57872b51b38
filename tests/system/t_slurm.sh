#!/usr/bin/env bash
# t_slurm: a queue backed by a REAL single-node Slurm (Debian's slurmctld, slurmd, munge 22.05)
# inside the container (issue 14): no-op jobs through `launcher: slurm` with the Slurm job id
# on the job and in the journal, 20 jobs with at most 2 running as Slurm decides (CPUs=2), a
# job killed at its time limit, a job beyond the partition's MaxTime failed at once, cancel-job
# of a pending and a running job, the real Claude Code CLI (against the fake Anthropic API) as
# a Slurm job, slurmd stopped mid-job (node crash: slurmd, its step and the worker killed) →
# failed with Slurm's NODE_FAIL and reason while the queue keeps serving, and kill -9 of the
# manager during a burst → every job submitted exactly once, and a person's approval of an
# agent job run in Slurm as its own account (asked, listed, denied and allowed by its owner).
# Host network (loopback only is used): with nothing but `lo`, glibc's getaddrinfo
# (AI_ADDRCONFIG) resolves no address at all, not even 127.0.0.1, and slurmd cannot start.
# sys: network-host
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

# --- a one-node Slurm: this container, 2 CPUs, partition debug (MaxTime 2 min) --------------
root=$(sys_root "$m")
node=$(x hostname)
cat >"$root/etc/slurm/slurm.conf" <<EOF
ClusterName=agentstore
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=10
MinJobAge=600
KillWait=5
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=2 State=UP
EOF
x sh -c 'mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /etc/munge'
x sh -c 'test -s /etc/munge/munge.key || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }; chown munge: /etc/munge/munge.key; chmod 400 /etc/munge/munge.key'
sys_check "munge starts" x systemctl restart munge
sys_check "slurmctld starts" x systemctl restart slurmctld
sys_check "slurmd starts" x systemctl restart slurmd
node_idle() { x sinfo -h -o %t 2>/dev/null | grep -qx 'idle'; }
sys_check "the node is idle" sys_wait_until 60 "node idle" node_idle

# The real Claude Code CLI against the fake Anthropic endpoint (as t_m5): one reply.
install_claude_env '{"replies": [{"text": "# Slurm research\n\nResearched through Slurm."}],
 "fallback_text": "# Research\n\nFallback answer."}'
setup_users
setup_project TestProject /tmp/testproject
setup_queue poplar 2
command_file jobuser code-researcher 'Research the code of this project: $ARGUMENTS'
# The queue goes to Slurm; the manager looks at its Slurm jobs every second.
slurm_queue() {
    queue_json poplar 2 /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]' | sed 's/"launcher": "systemd"/"launcher": "slurm", "slurm": {"partition": "debug", "poll_seconds": 1}/; s/"resource_limits": {[^}]*}/"resource_limits": {"memory_max": "100M", "cpu_quota": "100%"}/' |
        put "$AS/Queues/poplar/queue.json"
}
slurm_queue
noop() { job_json TestProject noop noop "$1" "${3:-60}" "{\"sleep_seconds\": $2}"; }
sys_check "queue-manager@poplar starts" x systemctl start queue-manager@poplar.service

# --- no-op jobs through Slurm (PRD M4 through the Slurm queue) -------------------------------
queue_job s1 "$(noop 'first' 1)"
sys_check "M4 through Slurm: the job finishes" sys_wait_until 60 "s1 finished" in_state s1 finished
f=$(jobf s1 finished)
sys_expect_eq "its output is the worker's" "No-op job completed successfully" "$(jfield "$f" output)"
sid=$(jfield "$f" slurm_job_id)
sys_expect_match "runtime.slurm_job_id is recorded ($sid)" '^[0-9]+$' "$sid"
sys_expect_eq "Slurm ran it under the job's name, as the job's account" "agentstore-s1 COMPLETED jobuser" "$(x squeue -h -t all -j "$sid" -o '%j %T %u' 2>&1)"
# The batch step's output: a file of the job's account in its own folder, written by Slurm as
# that account (issue 27: the relay; its owner and mode are checked while l4 runs, below).
# Once the job's end is read back and recorded, the account removes it (before, every job's
# output and answers files stayed for ever).
relay=/home/jobuser/.local/state/agentstore/slurm/poplar-s1.out
sys_expect_eq "in a folder of its own (0700)" "jobuser 700" "$(x stat -c '%U %a' "${relay%/*}" 2>&1)"
sys_expect_eq "Slurm was told that file, nothing in the store" "$relay" "$(x scontrol show job "$sid" 2>/dev/null | sed -n 's/^ *StdOut=//p')"
gone() { x test ! -e "$1" -a ! -L "$1"; }
sys_check "the output file is removed once the job's end is recorded" sys_wait_until 15 "poplar-s1.out removed" gone "$relay"
sys_check "the finished job validates" adm validate --kind job "$f"
journal_id() { x journalctl -q -o cat "SLURM_JOB_ID=$sid" | grep -q 'handed to Slurm'; }
sys_check "journalctl SLURM_JOB_ID=$sid finds the submission" sys_wait_until 10 "journal" journal_id
out=$(adm view-job s1 --format json 2>&1 || adm view-job s1 2>&1 || true)
sys_expect_match "view-job shows the Slurm job id" "slurm_job_id.*$sid" "$out"

# --- 20 jobs, at most 2 running (Slurm decides: 2 CPUs) --------------------------------------
for i in $(seq 1 20); do queue_job "b$i" "$(noop "burst $i" 2)"; done
# The most seen running at once, kept in a file: sys_check runs its command in a subshell.
maxf=$(mktemp)
sys_on_exit rm -f "$maxf"
echo 0 >"$maxf"
all20() {
    local n i
    n=$(x squeue -h -t R -o %i 2>/dev/null | wc -l)
    [ "$n" -le "$(cat "$maxf")" ] || echo "$n" >"$maxf"
    for i in $(seq 1 20); do in_state "b$i" finished || return 1; done
}
sys_check "20 jobs all finish" sys_wait_until 180 "20 finished" all20
max=$(cat "$maxf")
if [ "$max" -ge 1 ] && [ "$max" -le 2 ]; then sys_pass "at most 2 ran at once (seen $max)"; else sys_fail "running at once: $max"; fi

# --- the time limit ----------------------------------------------------------------------------
queue_job t1 "$(noop 'too slow' 100 5)"
sys_check "the job over its limit fails" sys_wait_until 90 "t1 failed" in_state t1 failed
sys_expect_match "with the timeout error" '^Job timeout after [0-9]+s \(limit: 5s\)$' "$(jfield "$(jobf t1 failed)" error)"

# --- beyond the partition: MaxTime is 2 min, timeout 300 s needs --time=6 -------------------------
queue_job p1 "$(noop 'too long for debug' 1 300)"
sys_check "a job beyond the partition's MaxTime fails at once" sys_wait_until 15 "p1 failed" in_state p1 failed
sys_expect_match "saying why instead of pending forever" "--time=6.*partition debug's MaxTime is 2 min; it would pend forever" "$(jfield "$(jobf p1 failed)" error)"
sys_expect_eq "it never reached Slurm" "" "$(x squeue -h -t all -n agentstore-p1 -o %i 2>&1)"

# --- the real Claude Code CLI as a Slurm job (PRD M5 through the Slurm queue) -----------------
queue_job cc1 "$(job_json TestProject claude code-researcher 'through Slurm' 110 '{}' /tmp/testproject)"
sys_check "M5 through Slurm: the Claude job finishes" sys_wait_until 110 "cc1 finished" in_state cc1 finished
f=$(jobf cc1 finished)
sys_expect_eq "Claude ran as the job's account in Slurm" "jobuser" "$(x squeue -h -t all -n agentstore-cc1 -o %u 2>&1)"
sys_expect_match "its output is Claude's answer" '"output": *".*Researched through Slurm' "$(x cat "$f" 2>&1)"
sys_expect_eq "exit code 0" 0 "$(jfield "$f" exit_code)"
sys_expect_match "run as Slurm job $(jfield "$f" slurm_job_id)" '^[0-9]+$' "$(jfield "$f" slurm_job_id)"
sys_check "the fake endpoint saw the /code-researcher prompt" x grep -q 'Research the code of this project' /var/tmp/anthropic.jsonl

# --- cancel-job: running and pending ---------------------------------------------------------
# (limit 110 s: --time=2, within the partition's MaxTime; they must outlive the next steps)
queue_job c1 "$(noop 'long 1' 100 110)"
queue_job c2 "$(noop 'long 2' 100 110)"
queue_job c3 "$(noop 'pending' 100 110)"
state_of() { x squeue -h -t all -n "agentstore-$1" -o %T 2>/dev/null; }
c3_pending() { [ "$(state_of c3)" = PENDING ] && [ "$(state_of c1)" = RUNNING ] && [ "$(state_of c2)" = RUNNING ]; }
sys_check "two run, the third pends in Slurm" sys_wait_until 60 "c1 c2 running, c3 pending" c3_pending
rtf=$AS/Queues/poplar/runtime@$(x orchestrator this-machine).json   # this machine's runtime of the queue
q_counts() { [ "$(jfield "$rtf" active_jobs)" = 2 ] && [ "$(jfield "$rtf" queued_jobs)" = 1 ]; }
sys_check "queue.json counts 2 active, 1 queued (pending in Slurm)" sys_wait_until 10 "counts" q_counts
sys_check "cancel-job of the pending job" x orchestrator --root "$AS" cancel-job c3
sys_check "cancel-job of a running job" x orchestrator --root "$AS" cancel-job c1
both_failed() { in_state c1 failed && in_state c3 failed; }
sys_check "both end in failed_jobs" sys_wait_until 30 "c1 c3 failed" both_failed
sys_expect_eq "c1 cancelled" "Job cancelled by root" "$(jfield "$(jobf c1 failed)" error)"
sys_expect_eq "c3 cancelled" "Job cancelled by root" "$(jfield "$(jobf c3 failed)" error)"
sys_expect_eq "scancel reached Slurm" "CANCELLED CANCELLED" "$(state_of c1) $(state_of c3)"

# --- slurmd stopped mid-job -------------------------------------------------------------------
# A node crash: slurmd, the job's slurmstepd and the worker die at once (nothing can report
# the job's end). slurmctld marks the node down after SlurmdTimeout (10 s) and ends the job
# NODE_FAIL (reason NodeDown); squeue keeps it for MinJobAge, where the manager reads it.
sys_check "c2 still running" in_state c2 running
x systemctl kill -s KILL slurmd || true
x pkill -KILL -x slurmd || true
x pkill -KILL -x slurmstepd || true
x pkill -KILL -f 'agent-worker .* -- c2$' || true
sys_check "c2 fails when Slurm gives the node up" sys_wait_until 90 "c2 failed" in_state c2 failed
sys_expect_match "with Slurm's state and reason" 'Slurm ended job [0-9]+ with NODE_FAIL \(reason: NodeDown\); the worker wrote no result' "$(jfield "$(jobf c2 failed)" error)"
sys_check "slurmd starts again" x systemctl start slurmd
x scontrol update nodename="$node" state=resume 2>/dev/null || true
sys_check "the node is back" sys_wait_until 60 "node idle" node_idle
queue_job s2 "$(noop 'after' 1)"
sys_check "the queue keeps serving" sys_wait_until 60 "s2 finished" in_state s2 finished

# --- kill -9 of the manager during a burst: every job submitted exactly once --------------------
for i in $(seq 1 12); do queue_job "k$i" "$(noop "kill $i" 1)"; done
submitted() { [ "$(x squeue -h -t all -o %j 2>/dev/null | grep -c '^agentstore-k')" -ge 3 ]; }
sys_check "submissions under way" sys_wait_until 30 "some submitted" submitted
sys_kill9 "$m" queue-manager@poplar.service
x systemctl restart queue-manager@poplar.service
allk() { local i; for i in $(seq 1 12); do in_state "k$i" finished || return 1; done; }
sys_check "all 12 finish" sys_wait_until 120 "12 finished" allk
# (agentstore-probe-<queue> is the shared-store probe each manager start submits: not a job.)
dups=$(x squeue -h -t all -o %j 2>/dev/null | grep '^agentstore-' | grep -v '^agentstore-probe-' | sort | uniq -d | tr '\n' ' ')
sys_expect_eq "no job was submitted twice" "" "$dups"
sys_expect_eq "each burst job has exactly one Slurm job" 12 "$(x squeue -h -t all -o %j | grep -c '^agentstore-k')"
# --- links planted in the store or the account's folder reach nothing of root (issue 27) ---------
# Before: `sbatch --output=<store>/logs/slurm-poplar-<job>.out` as root appended to whatever a
# link there named, and the probe's `echo ok > <store>/logs/.slurm-probe-…` wrote through a
# logs/ replaced by a link. Now sbatch runs as the job's account with its output in that
# account's folder, and a root manager submits no store probe at all.
x systemctl stop queue-manager@poplar.service
x sh -c 'umask 077; printf "CANARY-SLURM\n" >/root/slurm-canary; mkdir -p /root/slurm-canary-dir'
canary() { x sh -c 'stat -c "%u %a %s %i %Y" /root/slurm-canary; sha256sum /root/slurm-canary; ls -A /root/slurm-canary-dir'; }
before=$(canary)
x ln -sfn /root/slurm-canary "$AS/logs/slurm-poplar-l1.out"
queue_job l1 "$(noop 'output through a planted link' 1)"
sys_check "queue-manager@poplar starts again" x systemctl start queue-manager@poplar.service
sys_check "the job beside the planted output link finishes" sys_wait_until 60 "l1 finished" in_state l1 finished
x rm -f "$AS/logs/slurm-poplar-l1.out"
# logs/ itself a link to a root-only folder.
x systemctl stop queue-manager@poplar.service
x mv "$AS/logs" "$AS/logs.real"
x ln -s /root/slurm-canary-dir "$AS/logs"
queue_job l2 "$(noop 'logs/ is a link' 1)"
earlier=$(x squeue -h -t all -n agentstore-probe-poplar -o %i 2>/dev/null | tr '\n' ' ')
x systemctl start queue-manager@poplar.service
sys_check "the job beside a linked logs/ finishes" sys_wait_until 60 "l2 finished" in_state l2 finished
sys_expect_eq "no store probe was submitted" "$earlier" "$(x squeue -h -t all -n agentstore-probe-poplar -o %i 2>/dev/null | tr '\n' ' ')"
sys_check "the manager is still serving" x systemctl is-active -q queue-manager@poplar.service
x rm "$AS/logs"
x mv "$AS/logs.real" "$AS/logs"
# The account links its own output file to a root-only file: Slurm opens it as the account
# (refused) and the manager reads it as the account (refused): the job fails from Slurm's
# record, and nothing of the file reaches the store.
x su -s /bin/sh jobuser -c 'ln -sfn /root/slurm-canary ~/.local/state/agentstore/slurm/poplar-l3.out'
queue_job l3 "$(noop 'its own output linked to a root-only file' 1)"
sys_check "the job whose output file is linked away fails" sys_wait_until 60 "l3 failed" in_state l3 failed
sys_expect_match "from Slurm's record (no end was read)" 'Slurm job [0-9]+|Slurm ended job' "$(jfield "$(jobf l3 failed)" error)"
sys_check "no canary content in the store" x sh -c "! grep -rqs CANARY-SLURM $AS"
sys_check "the account's link is removed (the link, not the root-only file it names)" \
    sys_wait_until 15 "poplar-l3.out removed" gone /home/jobuser/.local/state/agentstore/slurm/poplar-l3.out
# The account writes a forged end into its output while its job runs: only what the job says
# of its own run is taken (its id, owner, settings and Slurm job stay the manager's).
queue_job l4 "$(noop 'forges its end' 20)"
l4_running() { [ "$(x squeue -h -t all -n agentstore-l4 -o %T 2>/dev/null)" = RUNNING ]; }
sys_check "l4 runs in Slurm" sys_wait_until 60 "l4 running" l4_running
l4out=/home/jobuser/.local/state/agentstore/slurm/poplar-l4.out
sys_expect_eq "a running job's output file is the account's own (0600)" "jobuser 600" "$(x stat -c '%U %a' "$l4out" 2>&1)"
x su -s /bin/sh jobuser -c 'printf "%s\n" "@@agentstore-relay-end@@ {\"id\": \"other\", \"config\": {\"project\": \"Elsewhere\"}}" >> ~/.local/state/agentstore/slurm/poplar-l4.out'
sys_check "l4 still finishes with its real end" sys_wait_until 60 "l4 finished" in_state l4 finished
sys_expect_eq "its project is the manager's record" TestProject "$(jfield "$(jobf l4 finished)" project)"
sys_expect_eq "its output is the worker's" "No-op job completed successfully" "$(jfield "$(jobf l4 finished)" output)"
sys_check "its output file (forged line and all) is removed after the end" sys_wait_until 15 "poplar-l4.out removed" gone "$l4out"
sys_expect_eq "root wrote nothing through the planted links (file and folder untouched)" "$before" "$(canary)"
# --- a person's approval in a Slurm job run as its own account (issue 27) ---------------------
# The step (agent-worker --relay, as jobuser) cannot reach the store and holds no key that signs
# answers. Its requests reach the store through the manager, where its owner lists and answers
# them — here with the CLI, the web API and the dashboard's form (agentstore-web runs as the
# service account, which the root manager trusts as a front end acting for a named user);
# only the manager's signed answer, appended to the account's answers file, is taken, never
# one the account (or its agent) wrote there. Before, every such request was denied at once.
x systemctl stop fake-anthropic.service || true
cat >"$root/var/tmp/script-ask.json" <<'JSON'
{"replies": [
  {"tool_use": {"name": "run_command", "input": {"command": "touch /tmp/testproject/forged.txt"}}},
  {"tool_use": {"name": "run_command", "input": {"command": "touch /tmp/testproject/web-denied.txt"}}},
  {"tool_use": {"name": "run_command", "input": {"command": "touch /tmp/testproject/slurm-allowed.txt"}}},
  {"text": "Done."}
 ], "fallback_text": "Done."}
JSON
x systemd-run --unit fake-anthropic-ask --property=Type=exec /usr/local/bin/fake_anthropic \
    --listen 127.0.0.1:18555 --script /var/tmp/script-ask.json --log /var/tmp/anthropic-ask.jsonl >/dev/null 2>&1
sys_check "the fake model endpoint (agent replies) listens" sys_wait_until 20 "fake endpoint" x bash -c 'exec 3<>/dev/tcp/127.0.0.1/18555'
x mkdir -p /etc/systemd/system/queue-manager@.service.d
printf '[Service]\nEnvironment=AGENTSHELL_BASE_URL=http://127.0.0.1:18555 AGENTSHELL_API_KEY=fake\n' \
    >"$root/etc/systemd/system/queue-manager@.service.d/agentshell.conf"
x systemctl daemon-reload
sys_check "queue-manager@poplar restarts with the agent's endpoint" x systemctl restart queue-manager@poplar.service
queue_job ask1 '{"config": {"project": "TestProject", "working_directory": "/tmp/testproject", "queue_time": "'"$(now)"'",
  "jobtype": "agent", "claude_command": "code-researcher", "claude_extra_args": [], "user": "chenry",
  "model": "anthropic/claude-test", "task_description": "Make the files.", "supporting_data": {},
  "timeout_seconds": 110},
 "runtime": {"status": "queued", "start_time": null, "finish_time": null, "process_id": null,
  "llm_process_id": null, "error": null, "output": null}}'
cli() { x runuser -u jobuser -- orchestrator --root "$AS" --bus system "$@"; }
asks() { cli approvals 2>/dev/null | grep -q "orchestrator approve ask1 a$1"; }
sys_check "the Slurm job's request is listed to its owner" sys_wait_until 90 "ask1 a1 listed" asks 1
sys_expect_match "with what it would run" 'asks a1: run_command: touch /tmp/testproject/forged.txt' "$(cli approvals 2>&1 | tr '\n' ' ' | tr -s ' ')"
sys_expect_eq "the job runs in Slurm as its account" "RUNNING jobuser" "$(x squeue -h -t all -n agentstore-ask1 -o '%T %u' 2>&1)"
reqf=$(x sh -c "ls $AS/Queues/poplar/Jobs/approvals/ask1-a1-*.request.json" 2>&1)
sys_expect_eq "the request in the store is the manager's (written as the store's owner)" agentstore "$(x stat -c %U "$reqf" 2>&1)"
req1=$(basename "$reqf" .request.json)
# The account answers its own request in its answers file: an unsigned allow, and one with a
# proof of its own making. Neither may be taken.
answers=/home/jobuser/.local/state/agentstore/slurm/poplar-ask1.answers
forged() { printf '{"request_id": "%s", "allow": true, "always": true, "message": "", "by": "chenry", "at": "%s"%s}' "$req1" "$(now)" "$1"; }
x su -s /bin/sh jobuser -c 'umask 077; printf "%s\n%s\n" "$1" "$2" >>"$3"' sh \
    "$(forged '')" "$(forged ", \"proof\": \"$(printf '%0128d' 0)\"")" "$answers"
sys_check "its owner denies it (the CLI, as jobuser)" cli deny ask1 a1 --reason 'not this one'
sys_expect_eq "the answers file is the account's own (0600)" "jobuser 600" "$(x stat -c '%U %a' "$answers" 2>&1)"

# The second request through the web API: listed to its owner only, alice's answer refused,
# the owner's deny taken.
install_hreq
sys_check "the second request is listed" sys_wait_until 90 "ask1 a2 listed" asks 2
list=$(hreq jobuser GET /api/v1/approvals)
req2=$(grep -o '"request_id": *"ask1-a2-[^"]*"' <<<"$list" | head -1 | sed 's/.*: *"//; s/"$//')
sys_expect_match "the web lists the Slurm job's request to its owner ($req2)" '^ask1-a2-[A-Za-z0-9]{16,}$' "$req2"
sys_expect_match "with what it would run" 'touch /tmp/testproject/web-denied.txt' "$list"
out=$(hreq alice GET /api/v1/approvals)
sys_expect_match "alice lists approvals through the web" '^200' "$out"
if grep -q "$req2" <<<"$out"; then sys_fail "alice sees the Slurm job's request: $out"; else sys_pass "alice is not shown the Slurm job's request"; fi
out=$(hreq alice POST "/api/v1/approvals/poplar/$req2/answer" '{"allow": true}')
sys_expect_match "alice's answer through the web is refused" '^40[34]' "$(tr '\n' ' ' <<<"$out")"
out=$(hreq jobuser POST "/api/v1/approvals/poplar/$req2/answer" '{"allow": false, "message": "not from the web either"}')
sys_expect_match "the owner's deny through the web API is taken" '^200' "$(tr '\n' ' ' <<<"$out")"

# The third through the dashboard: the job's page shows it waiting, its form allows it.
sys_check "the third request is listed" sys_wait_until 90 "ask1 a3 listed" asks 3
page=$(hreq jobuser GET /jobs/ask1)
req3=$(grep -o 'data-request="ask1-a3-[^"]*"' <<<"$page" | head -1 | sed 's/^data-request="//; s/"$//')
sys_expect_match "the job's page shows the request waiting ($req3)" '^ask1-a3-[A-Za-z0-9]{16,}$' "$req3"
sys_expect_match "with its Allow button" 'touch /tmp/testproject/slurm-allowed.txt.*value="allow"' "$(tr '\n' ' ' <<<"$page")"
out=$(hreq jobuser POST "/approvals/poplar/$req3/answer" 'decision=allow&message=' application/x-www-form-urlencoded)
sys_expect_match "the owner's allow through the dashboard form is taken (redirect)" '^303' "$(tr '\n' ' ' <<<"$out")"

sys_check "the Slurm job finishes" sys_wait_until 110 "ask1 finished" in_state ask1 finished
sys_check "the denied commands did not run (the account's own answers were not taken)" \
    x test ! -e /tmp/testproject/forged.txt -a ! -e /tmp/testproject/web-denied.txt
sys_check "the allowed command ran" x test -e /tmp/testproject/slurm-allowed.txt
sys_expect_eq "as the job's account" jobuser "$(x stat -c %U /tmp/testproject/slurm-allowed.txt 2>&1)"
rec=$(x cat "$(jobf ask1 finished)" | tr -d '\n')
sys_expect_match "the job records chenry's two denies, then the allow" \
    '"approvals": *\[.*"allow": *false.*"by": *"chenry".*"allow": *false.*"by": *"chenry".*"allow": *true.*"by": *"chenry"' "$rec"
sys_check "the answers file (forged lines and all) is removed after the end" sys_wait_until 15 "answers removed" gone "$answers"
sys_check "and the output file" gone "${answers%.answers}.out"
left() { ! x sh -c "ls $AS/Queues/poplar/Jobs/approvals/ | grep -q '^ask1-'"; }
sys_check "no request of the ended job is left in the store" sys_wait_until 10 "approvals of ask1 removed" left
sys_test_end
