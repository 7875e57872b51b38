#!/usr/bin/env bash
# t_security: `systemd-analyze verify` on every unit the package installs (templates through
# an instance), and `systemd-analyze security` exposure for each service: orchestratord
# must stay at or below 2.0; queue-manager@ (root, starts jobs as other users) explains its
# score in its unit file.
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

units=$(x dpkg-query -L agentstore | grep -E '^/usr/lib/systemd/(system|user)/[^/]+$' || true)
[ -n "$units" ] || sys_fail "the package installs no units"
for f in $units; do
    u=$(basename "$f")
    user=""
    case "$f" in */user/*) user=--user ;; esac
    case "$u" in *@.*) u="${u%%@*}@verify.${u##*.}" ;; esac
    if [ -n "$user" ]; then
        # --user verification needs a user manager; verify the file's syntax in system mode.
        out=$(x systemd-analyze verify --man=no "$(dirname "$f")/$u" 2>&1) && rc=0 || rc=$?
    else
        out=$(x systemd-analyze verify --man=no "$(dirname "$f")/$u" 2>&1) && rc=0 || rc=$?
    fi
    if [ "$rc" = 0 ] && [ -z "$(grep -v 'Unit agentstore\|Unit queue-manager\|is not executable\|Command .* is not executable' <<<"$out" | grep -v '^$' || true)" ]; then
        sys_pass "systemd-analyze verify ${user:+(user) }$u"
    else
        sys_fail "systemd-analyze verify ${user:+(user) }$u: $out"
    fi
done

# Exposure of each service (as installed; a template through its poplar instance).
score() { x systemd-analyze security --no-pager "$1" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'; }
setup_queue poplar 1
for s in agentstore-orchestrator.service queue-manager@poplar.service; do
    v=$(score "$s")
    sys_log "systemd-analyze security $s: exposure $v"
    echo "EXPOSURE: $s $v"
    sys_expect_match "exposure of $s is reported ($v)" '^[0-9]+\.[0-9]+$' "$v"
done
v=$(score agentstore-orchestrator.service)
le2() { awk -v v="$1" 'BEGIN { exit !(v <= 2.0) }'; }
sys_check "orchestratord exposure $v <= 2.0" le2 "${v:-99}"
v=$(score queue-manager@poplar.service)
if le2 "${v:-99}"; then
    sys_pass "queue-manager@ exposure $v <= 2.0"
else
    sys_check "queue-manager@ exposure $v > 2.0 is explained in its unit file" \
        x grep -qi 'exposure' /usr/lib/systemd/system/queue-manager@.service
fi
sys_test_end
