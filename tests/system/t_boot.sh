#!/usr/bin/env bash
# t_boot: the container runs a real systemd as PID 1 with a working system bus and journal —
# what every other system test stands on.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
m=$SYS_MACHINE

state=$(sys_exec "$m" systemctl is-system-running) || true
sys_expect_match "systemd finished booting (running or degraded)" '^(running|degraded)$' "$state"
if [ "$state" = degraded ]; then
    sys_exec "$m" systemctl --failed --no-legend --plain | sed 's/^/    failed unit: /'
fi
sys_expect_eq "PID 1 is systemd" systemd "$(sys_exec "$m" cat /proc/1/comm)"
sys_expect_eq "systemd detects the nspawn container" systemd-nspawn "$(sys_exec "$m" systemd-detect-virt)"
sys_expect_eq "hostname is the container name" "$m" "$(sys_exec "$m" hostname)"

names=$(sys_exec "$m" busctl --system list --no-legend --acquired) || names=""
sys_expect_match "busctl list shows org.freedesktop.systemd1" '(^|[[:space:]])org\.freedesktop\.systemd1[[:space:]]' "$names"
sys_check "busctl call: Peer.Ping on systemd1" \
    sys_exec "$m" busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.DBus.Peer Ping
virt=$(sys_exec "$m" busctl --system get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 \
    org.freedesktop.systemd1.Manager Virtualization) || virt=""
sys_expect_eq "busctl get-property Manager.Virtualization" 's "systemd-nspawn"' "$virt"
has_start_transient_unit() {
    local out
    out=$(sys_exec "$m" busctl --system introspect org.freedesktop.systemd1 /org/freedesktop/systemd1 \
        org.freedesktop.systemd1.Manager)
    grep -q '^\.StartTransientUnit ' <<<"$out"
}
sys_check "busctl introspect: Manager has StartTransientUnit" has_start_transient_unit
sys_check "an unprivileged user can call the system bus" \
    sys_exec_as "$m" nobody busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId

# The journal indexes structured fields: what `journalctl JOB_ID=<id>` will rely on.
id="boot-$RANDOM$RANDOM"
sys_exec "$m" logger --journald <<EOT
MESSAGE=hello from $id
JOB_ID=$id
SYSLOG_IDENTIFIER=agentstore-test
EOT
journal_has_entry() { [ "$(sys_exec "$m" journalctl -q "JOB_ID=$id" -o cat)" = "hello from $id" ]; }
sys_check "journalctl JOB_ID=<id> finds a structured entry" sys_wait_until 15 "journal entry $id" journal_has_entry

if sys_exec "$m" mountpoint -q /mnt/share; then
    f="boot-$RANDOM.txt"
    sys_exec "$m" sh -c "echo from-container >/mnt/share/$f"
    sys_expect_eq "the shared host folder is writable from the container" from-container "$(cat "$SYS_SHARE/$f" 2>/dev/null)"
    rm -f "$SYS_SHARE/$f"
fi

sys_test_end
