#!/usr/bin/env bash
# t_chroot: the package installs into an image that is not running (a chroot, as when an
# image is built: no systemd, no bus) and the first boot of that image has the orchestrator's
# path and timer units enabled and active.
# sys: no-machine
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin_no_machine
[ -n "${SYS_DEB:-}" ] || sys_test_skip "no package given (run.sh --deb FILE, or let run.sh build it)"
sys_preflight

m=chroot-image
sys_prepare "$m"
root=$(sys_root "$m")
cp "$SYS_DEB" "$root/var/tmp/agentstore.deb"
log=$SYS_STATE_DIR/logs/$SYS_TEST.chroot-install.log
if env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    chroot "$root" dpkg -i /var/tmp/agentstore.deb >"$log" 2>&1; then
    sys_pass "dpkg -i in a chroot (no running systemd)"
else
    sys_fail "dpkg -i in a chroot failed:"
    sed 's/^/    | /' "$log"
fi
sys_check "the chroot has the agentstore user" chroot "$root" getent passwd agentstore
for u in agentstore-orchestrator.path agentstore-orchestrator.timer; do
    [ -e "$root/usr/lib/systemd/system/$u" ] || { sys_fail "the package does not ship $u"; continue; }
    sys_check "$u is enabled in the image (wants symlink)" \
        bash -c "ls '$root'/etc/systemd/system/*.wants/'$u' >/dev/null 2>&1"
done

if sys_boot "$m"; then
    sys_pass "the image boots ($(sys_fmt_ms "$SYS_LAST_BOOT_MS"))"
    for u in agentstore-orchestrator.path agentstore-orchestrator.timer; do
        [ -e "$root/usr/lib/systemd/system/$u" ] || continue
        sys_expect_eq "$u is active after the first boot" active "$(sys_exec "$m" systemctl is-active "$u" 2>&1)"
    done
else
    sys_fail "the image with the package did not boot"
fi
sys_stop "$m"
sys_test_end
