#!/usr/bin/env bash
# t_m0: PRD §12 M0 (schemas, validator, basic CLI) on the installed package and the system
# store /var/lib/agentstore that postinst made.
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

# The six schemas, installed.
for k in user message project prd queue job; do
    sys_check "schema $k installed" x test -s "/usr/share/agentstore/schemas/$k.schema.json"
done
# Test 1: valid files accepted (the whole store: users, queue, config…).
sys_check "M0.1 the validator accepts the valid store" adm validate
# Test 2: invalid files rejected, with an error naming the field.
printf '{"id": "bad", "name": "B", "email": "b@x", "permissions": "superuser"}\n' | put "$AS/users/bad.json"
out=$(adm validate "$AS/users/bad.json" 2>&1) && rc=0 || rc=$?
sys_expect_match "M0.2 an invalid user is rejected (exit $rc)" '[1-9]' "$rc"
sys_expect_match "M0.2 the error names the field" 'permissions' "$out"
printf '{"id": "bad2", "name": ' | put "$AS/users/bad2.json"
out=$(adm validate "$AS/users/bad2.json" 2>&1) && rc=0 || rc=$?
sys_expect_match "M0.2 unparseable JSON is rejected (exit $rc): $(head -1 <<<"$out")" '[1-9]' "$rc"
x rm -f "$AS/users/bad.json" "$AS/users/bad2.json"
# Test 3: errors.out has JSONL entries (each machine writes JSONValidation/errors@<host>.out
# beside the PRD's errors.out; `orchestrator list-errors` merges them).
jsonl() { x sh -c "cat $AS/JSONValidation/errors*.out | tail -n 1 | grep -q '^{.*}\$'"; }
sys_check "M0.3 JSONValidation/errors@<host>.out holds JSON lines" jsonl
sys_log "errors: $(x sh -c "cat $AS/JSONValidation/errors*.out | tail -n 1" 2>&1 | cut -c1-200)"
out=$(adm list-errors 2>&1) || true
sys_expect_match "M0.3 orchestrator list-errors shows the rejection" 'bad' "$out"
# Test 4: help.
out=$(x orchestrator help 2>&1) || true
sys_expect_match "M0.4 orchestrator help lists the commands" 'list-users' "$out"
sys_check "man page installed" x test -s /usr/share/man/man1/orchestrator.1.gz
# Test 5: login writes ~/.orchestrator_config.json (as a researcher, jobuser).
sys_check "M0.5 orchestrator login chenry (as jobuser)" x runuser -u jobuser -- orchestrator login chenry
cfg=$(x cat /home/jobuser/.orchestrator_config.json 2>&1) || true
sys_expect_match "M0.5 ~/.orchestrator_config.json names chenry" '"chenry"' "$cfg"
sys_check "M0.5 orchestrator login chenry (as root)" x orchestrator login chenry
# Test 6/7: list-users, view-user (root: over the system bus, the daemon started on demand).
out=$(x orchestrator list-users 2>&1) || true
sys_expect_match "M0.6 orchestrator list-users" 'chenry.*admin' "$out"
out=$(x orchestrator view-user chenry 2>&1) || true
sys_expect_match "M0.7 orchestrator view-user chenry" 'chenry@example.org' "$out"
out=$(x runuser -u jobuser -- orchestrator view-user chenry 2>&1) || true
sys_expect_match "M0.7 view-user as the researcher himself (jobuser, over D-Bus)" 'chenry@example.org' "$out"
out=$(x orchestrator --format json view-user chenry 2>&1) || true
sys_expect_match "view-user --format json is the document" '"permissions": *"admin"' "$out"
sys_test_end
