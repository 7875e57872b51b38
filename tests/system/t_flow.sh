#!/usr/bin/env bash
# t_flow: issue 17 on the installed package, system store, systemd launcher, noop jobs:
# priority order under worker_count 1, an --after chain with a failure in the middle, an
# automatic retry after kill -9 of the worker, `retry` by hand, `archive` and the pipeline —
# the store-writing commands (retry, archive) asked of orchestratord over the system bus by
# users who cannot write the store (chenry: agentstore group, reads only; alice: nothing).
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
setup_users
setup_project P /tmp/p
setup_queue poplar 1
ju() { x runuser -u jobuser -- orchestrator "$@"; }    # chenry, admin
al() { x runuser -u alice -- orchestrator "$@"; }      # alice, user role, outside the group
ju login chenry >/dev/null
# alice cannot read the store: orchestratord checks her name over the system bus.
sys_check "alice (outside the agentstore group) logs in through orchestratord" al login alice
submit() { ju research-code --project P --jobtype noop "$@" | sed -n 's/^Job queued: //p' | head -1; }
field_of() { jfield "$(jobf "$1" "$2")" "$3"; } # ID STATE NAME

# 1. Priority: three jobs queued before the manager starts; worker_count 1 starts high,
#    normal, low.
low=$(submit --priority low)
normal=$(submit)
high=$(submit --priority high)
sys_expect_match "the three jobs were queued ($low $normal $high)" '^[^ ]+ [^ ]+ [^ ]+$' "$low $normal $high"
sys_check "list-jobs shows the priorities" sys_sh "$m" "runuser -u jobuser -- orchestrator list-jobs | grep '^$high' | grep -q ' high '"
sys_check "queue-manager@poplar.path starts the queue" x systemctl start queue-manager@poplar.path
for id in $high $normal $low; do
    sys_check "$id finished" sys_wait_until 90 "$id finished" in_state "$id" finished
done
order=$(for id in $low $normal $high; do echo "$(field_of "$id" finished start_time) $id"; done | sort | awk '{print $2}' | tr '\n' ' ')
sys_expect_eq "started high, normal, low" "$high $normal $low " "$order"

# 2. --after: A ← B (fails: 1 s timeout) ← C; C fails naming B, never runs.
a=$(submit)
b=$(submit --after "$a" --timeout 1)
c=$(submit --after "$b")
sys_check "B fails" sys_wait_until 90 "B failed" in_state "$b" failed
sys_check "C fails" sys_wait_until 60 "C failed" in_state "$c" failed
sys_expect_eq "C's error names B" "dependency $b failed" "$(field_of "$c" failed error)"
sys_expect_eq "C never started" null "$(field_of "$c" failed start_time)"
sys_expect_eq "A finished" finished "$(field_of "$a" finished status)"

# 3. retry by hand, by a user who may read but not write the store: done by orchestratord.
sys_check "chenry cannot write the store's queue" sys_sh "$m" "! runuser -u jobuser -- touch $AS/Queues/poplar/Jobs/queued_jobs/x"
out=$(ju retry "$b" 2>&1) || true
sys_expect_match "retry B queues B and C again ($out)" "retry of $b.*retry of $c|retry of $c.*retry of $b" "$(echo "$out" | tr '\n' ' ')"
b2=$(echo "$out" | sed -n "s/^Job queued: \([^ ]*\) (retry of $b,.*/\1/p")
sys_check "B's retry exists" sys_wait_until 30 "B retry" sys_sh "$m" "ls $AS/Queues/poplar/Jobs/*/$b2.json"
f=$(x sh -c "ls $AS/Queues/poplar/Jobs/*/$b2.json | head -1")
sys_expect_eq "B's retry is attempt 2" 2 "$(jfield "$f" attempt)"
sys_expect_eq "... written by the daemon (agentstore)" agentstore "$(x stat -c %U "$f")"
out=$(al retry "$b" 2>&1) && rc=0 || rc=$?
sys_expect_eq "alice may not retry chenry's job (exit 1)" 1 "$rc"
sys_expect_match "... Permission denied ($out)" 'Permission denied|already retried' "$out"

# 4. Automatic retry after kill -9 of the worker (--max-attempts 2).
k=$(submit --max-attempts 2)
sys_check "K runs" sys_wait_until 90 "K running" in_state "$k" running
wpid=$(field_of "$k" running process_id)
x kill -9 "$wpid" || true
sys_check "K fails" sys_wait_until 60 "K failed" in_state "$k" failed
retry_of_k() { x sh -c "grep -l '\"retry_of\": *\"$k\"' $AS/Queues/poplar/Jobs/finished_jobs/*.json"; }
sys_check "K's second attempt finishes" sys_wait_until 90 "K retried" retry_of_k

# 5. archive: refused to alice (not an admin), done for chenry by orchestratord.
out=$(al archive --older-than 0s 2>&1) && rc=0 || rc=$?
sys_expect_eq "alice may not archive (exit 1)" 1 "$rc"
sys_expect_match "... only an admin ($out)" 'Permission denied: only an admin can archive' "$out"
a_handled() { [ "$(field_of "$a" finished handled)" = true ]; }
sys_check "A's completion was handled" sys_wait_until 60 "A handled" a_handled
out=$(ju archive --older-than 0s 2>&1) || true
sys_expect_match "chenry archives the ended jobs ($out)" '[1-9][0-9]* of [0-9]+ ended jobs moved' "$out"
month=$(x date -u +%Y-%m)
sys_check "A is in the archive" x test -f "$AS/Queues/poplar/Jobs/archive/$month/finished_jobs/$a.json"
sys_check "list-jobs --archived shows A" sys_sh "$m" "runuser -u jobuser -- orchestrator list-jobs --archived | grep -q '^$a '"

# 6. The pipeline: four noop steps, each started after the one before ended.
out=$(ju pipeline --project P --task "Make it fast" --jobtype noop 2>&1) || true
mapfile -t steps < <(echo "$out" | sed -n 's/^Job queued: //p')
sys_expect_eq "pipeline queued four steps ($out)" 4 "${#steps[@]}"
prev=""
for s in "${steps[@]}"; do
    sys_check "step $s finished" sys_wait_until 90 "$s finished" in_state "$s" finished
    st=$(field_of "$s" finished start_time)
    if [ -n "$prev" ]; then
        if [[ "$st" > "$prev" || "$st" == "$prev" ]]; then sys_pass "step $s started after the one before ended"; else sys_fail "step $s started $st before $prev"; fi
    fi
    prev=$(field_of "$s" finished finish_time)
done
sys_test_end
