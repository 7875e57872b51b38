#!/usr/bin/env bash
# t_share: two containers ("machines") share one host folder standing in for the Dropbox
# store, as the two-machine test of issue 5 needs: distinct hostnames and machine ids, files
# and renames made on one are seen on the other, and the package gives the agentstore user
# the same uid on both (so store files keep their owner across machines).
# sys: no-machine
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016 # scripts run inside the container
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin_no_machine
sys_preflight

store=$(mktemp -d "$SYS_STATE_DIR/store.XXXXXX")
a=share-a
b=share-b
for n in "$a" "$b"; do
    if sys_boot "$n" --bind "$store:/srv/agentstore"; then
        sys_pass "machine $n booted with the shared store at /srv/agentstore ($(sys_fmt_ms "$SYS_LAST_BOOT_MS"))"
    else
        sys_fail "machine $n did not boot"
        sys_test_end
    fi
done

sys_expect_eq "machine a's hostname" "$a" "$(sys_exec "$a" hostname)"
sys_expect_eq "machine b's hostname" "$b" "$(sys_exec "$b" hostname)"
ida=$(sys_exec "$a" cat /etc/machine-id)
idb=$(sys_exec "$b" cat /etc/machine-id)
if [ -n "$ida" ] && [ "$ida" != "$idb" ]; then
    sys_pass "the machines have distinct machine ids"
else
    sys_fail "machine ids not distinct: '$ida' '$idb'"
fi

# An atomic write on a (temp file + rename), read on b.
sys_exec "$a" sh -c 'mkdir -p /srv/agentstore/messaging/inbox &&
    echo "{\"from\": \"$(hostname)\"}" >/srv/agentstore/messaging/inbox/.m1.json.tmp &&
    mv /srv/agentstore/messaging/inbox/.m1.json.tmp /srv/agentstore/messaging/inbox/m1.json'
sys_expect_eq "a file renamed into place on a is read on b" '{"from": "share-a"}' \
    "$(sys_exec "$b" cat /srv/agentstore/messaging/inbox/m1.json 2>&1)"
sys_exec "$b" mv /srv/agentstore/messaging/inbox/m1.json /srv/agentstore/messaging/processed.json
sys_check "a rename on b is seen on a" sys_exec "$a" test -f /srv/agentstore/messaging/processed.json
sys_check "... and the old name is gone on a" sys_exec "$a" test ! -e /srv/agentstore/messaging/inbox/m1.json

if [ -n "${SYS_DEB:-}" ]; then
    for n in "$a" "$b"; do
        sys_check "the package installs on machine $n" sys_install_deb "$n" "$SYS_DEB"
    done
    ua=$(sys_exec "$a" id -u agentstore 2>&1)
    ub=$(sys_exec "$b" id -u agentstore 2>&1)
    sys_expect_eq "the agentstore user has the same uid on both machines" "$ua" "$ub"
fi

sys_stop "$b"
sys_stop "$a"
sys_test_end
